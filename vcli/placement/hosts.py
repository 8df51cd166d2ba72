"""The host inventory: the machines vcli may run replicas on over SSH. Standard library + PyYAML.

The inventory is a YAML file, `$VCLI_HOSTS_FILE`, else `<config dir>/hosts.yaml` (the config
dir is `vcli.properties.config_dir()`: `$VCLI_CONFIG_DIR`, else `~/.config/vcli`):

    hosts:
      gpu1:
        address: 10.0.0.5          # what vcli connects to and what TF_CONFIG carries
        port: 22
        user: ml                   # default: your local user name, as ssh does
        identity_file: ~/.ssh/id_ed25519   # default: ssh-agent and ~/.ssh/id_*
        runtime: process           # process | docker
        workdir: ~/.vcli           # on the host; `~` is expanded there
        python: /opt/venv/bin/python       # interpreter for the process runtime
        gpus: {count: 2, type: NVIDIA_TESLA_T4}   # declared; `vcli hosts check` can detect
        cpus: 16
        memory_gb: 64
        internal_address: 192.168.1.5      # optional: address other hosts use (TF_CONFIG)
        gpu_lease_dir: /tmp/vcli-gpu-leases   # on the host: where every vcli user of it leases GPUs
        detected: {...}            # written by `vcli hosts check`, never needed

Declared values win over detected ones. The host `local` (this machine) is implicit; an
inventory entry named `local` only adds GPU/CPU declarations for it. Host keys are checked
against `~/.ssh/known_hosts` and vcli's own `<config dir>/known_hosts` (`known_hosts()` names
both; `vcli.executors.ssh` reads them).

This module is the inventory's interface; two siblings hold parts of it, and what is public in
them is re-exported here (import this module, not them):

    hostfiles.py   the files: where they are, reading and atomically writing hosts.yaml, its
                   lock, and removing entries as written (`remove_hosts`)
    hostrules.py   the rules a host's settings keep (`validate`)
"""

from __future__ import annotations

import getpass
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Mapping

from vcli.errors import ConfigError, InvalidValueError, NotFoundError
from vcli.placement.hostfiles import (
    KnownHosts,
    hosts_file,
    inventory_lock,
    known_hosts,
    known_hosts_file,
    read_hosts,
    remove_hosts,
    user_known_hosts_file,
    write_hosts,
)
from vcli.placement.hostrules import RUNTIMES, validate

__all__ = [
    "Host",
    "KnownHosts",
    "LOCAL",
    "RUNTIMES",
    "hosts_file",
    "known_hosts",
    "known_hosts_file",
    "user_known_hosts_file",
    "host_from_yaml",
    "validate",
    "inventory_lock",
    "load_inventory",
    "save_inventory",
    "get_host",
    "resolve_hosts",
    "put_host",
    "remove_hosts",
    "local_host",
]

LOCAL = "local"
DEFAULT_WORKDIR = "~/.vcli"


@dataclass(frozen=True, kw_only=True)
class Host:
    """One inventory host. `gpu_count`/`gpu_type`/`cpus`/`memory_gb` are declared values."""

    name: str
    address: str
    port: int = 22
    user: str | None = None
    identity_file: str | None = None
    runtime: str = "process"
    workdir: str = DEFAULT_WORKDIR
    python: str = "python3"
    gpu_count: int | None = None
    gpu_type: str | None = None
    #: Explicit GPU indices (as nvidia-smi numbers them) when not simply 0..count-1.
    gpu_indices: tuple[int, ...] | None = None
    cpus: float | None = None
    memory_gb: float | None = None
    internal_address: str | None = None
    #: The host's GPU lease directory (`vcli.placement.gpulease`); every vcli user of the host must agree.
    #: None: `vcli.placement.gpulease.DEFAULT_DIR` there.
    gpu_lease_dir: str | None = None
    #: What `vcli hosts check` found (gpus: {count, type, indices}, cpus, memory_gb, ...).
    detected: Mapping[str, Any] = field(default_factory=dict)

    # ------------------------------------------------------------------ effective values

    @property
    def login(self) -> str:
        return self.user or getpass.getuser()

    @property
    def tf_address(self) -> str:
        """The address other replicas use to reach this host (TF_CONFIG, CLUSTER_SPEC)."""
        return self.internal_address or self.address

    @property
    def is_local(self) -> bool:
        return self.name == LOCAL

    def gpus(self) -> tuple[tuple[int, ...], str | None]:
        """(GPU indices, accelerator type): declared first, else detected, else none."""
        det = self.detected.get("gpus") if isinstance(self.detected, Mapping) else None
        det = det if isinstance(det, Mapping) else {}
        if self.gpu_indices is not None:
            indices = tuple(self.gpu_indices)
        elif self.gpu_count is not None:
            indices = tuple(range(self.gpu_count))
        elif det.get("indices") is not None:
            indices = tuple(int(i) for i in det["indices"])
        elif det.get("count") is not None:
            indices = tuple(range(int(det["count"])))
        else:
            indices = ()
        gtype = self.gpu_type or (det.get("type") if isinstance(det.get("type"), str) else None)
        return indices, gtype

    def capacity_cpus(self) -> float | None:
        if self.cpus is not None:
            return self.cpus
        v = self.detected.get("cpus") if isinstance(self.detected, Mapping) else None
        return float(v) if v is not None else None

    def capacity_memory_gb(self) -> float | None:
        if self.memory_gb is not None:
            return self.memory_gb
        v = self.detected.get("memory_gb") if isinstance(self.detected, Mapping) else None
        return float(v) if v is not None else None

    # ------------------------------------------------------------------ (de)serialisation

    def to_yaml_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"address": self.address, "port": self.port}
        if self.user:
            out["user"] = self.user
        if self.identity_file:
            out["identity_file"] = self.identity_file
        out["runtime"] = self.runtime
        out["workdir"] = self.workdir
        out["python"] = self.python
        if self.gpu_count is not None or self.gpu_type or self.gpu_indices is not None:
            g: dict[str, Any] = {}
            if self.gpu_count is not None:
                g["count"] = self.gpu_count
            if self.gpu_indices is not None:
                g["indices"] = list(self.gpu_indices)
            if self.gpu_type:
                g["type"] = self.gpu_type
            out["gpus"] = g
        if self.cpus is not None:
            out["cpus"] = self.cpus
        if self.memory_gb is not None:
            out["memory_gb"] = self.memory_gb
        if self.internal_address:
            out["internal_address"] = self.internal_address
        if self.gpu_lease_dir:
            out["gpu_lease_dir"] = self.gpu_lease_dir
        if self.detected:
            out["detected"] = dict(self.detected)
        return out

    def to_resource(self) -> dict[str, Any]:
        """The camelCase view `vcli hosts list --format` projects (declared + effective)."""
        indices, gtype = self.gpus()
        det_gpus = self.detected.get("gpus") if isinstance(self.detected, Mapping) else None
        out: dict[str, Any] = {
            "name": self.name,
            "address": self.address,
            "port": self.port,
            "user": self.login if not self.is_local else None,
            "identityFile": self.identity_file,
            "runtime": self.runtime,
            "workdir": self.workdir,
            "python": self.python,
            "gpus": len(indices),
            "gpuType": gtype or (det_gpus.get("model") if isinstance(det_gpus, Mapping) else None),
            "gpuIndices": ",".join(map(str, indices)) or None,
            "cpus": _num(self.capacity_cpus()),
            "memoryGb": _num(self.capacity_memory_gb()),
        }
        if self.internal_address:
            out["internalAddress"] = self.internal_address
        if self.gpu_lease_dir:
            out["gpuLeaseDir"] = self.gpu_lease_dir
        if self.detected:
            out["detected"] = dict(self.detected)
        if self.is_local:  # no SSH settings: it is this machine
            for key in ("port", "identityFile", "workdir", "python"):
                out.pop(key, None)
        return {k: v for k, v in out.items() if v is not None}


def _num(v: float | None) -> float | int | None:
    if v is None:
        return None
    return int(v) if float(v).is_integer() else round(float(v), 1)


#: The settings an inventory entry may hold (`hosts.<name>.<key>`).
_ENTRY_KEYS = frozenset({"address", "port", "user", "identity_file", "runtime", "workdir", "python", "gpus", "cpus",
                         "memory_gb", "internal_address", "gpu_lease_dir", "detected"})


def host_from_yaml(name: str, data: Mapping[str, Any], *, source: str = "hosts.yaml") -> Host:
    """The validated Host of the inventory entry `hosts.<name>` of `source`, whose settings
    are `data`; an unset setting takes its default.

    Raises ConfigError, one line naming the entry (`<source>: hosts.<name>`) and, where there
    is one, the key: not a mapping, an unknown key, no address (only `local` may go without),
    a malformed `gpus`, a number that is not whole, a value that does not convert, or one that
    breaks `validate`'s rules (named by the entry's key, with how to get rid of the entry)."""
    where = f"{source}: hosts.{name}"
    _check_entry(name, data, where)
    count, gtype, indices = _entry_gpus(data.get("gpus"), f"{where}.gpus")
    try:
        return validate(Host(name=name, **_entry_settings(data, where, count=count, gtype=gtype, indices=indices)))
    except InvalidValueError as e:  # the rules `hosts add` applies, named by the entry's key, not a flag
        key = e.flag.lstrip("-").replace("-", "_")
        raise ConfigError(f"{where}.{key}: {e.message} (correct the file, or `vcli hosts remove {name}`)") from None
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{where}: {e}") from None


def _check_entry(name: str, data: Any, where: str) -> None:
    """Raise ConfigError (naming the entry, `where`) unless `data` is a mapping of known keys
    (`_ENTRY_KEYS`) with an `address`, which only `local` (this machine) may go without."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: expected a mapping of host settings")
    unknown = sorted(set(data) - _ENTRY_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(_ENTRY_KEYS))}")
    if name != LOCAL and not data.get("address"):
        raise ConfigError(f"{where}.address: required")


def _entry_gpus(gpus: Any, at: str) -> tuple[Any, Any, tuple[Any, ...] | None]:
    """(count, type, indices) of an entry's `gpus` setting, which `at` names in errors: a
    mapping of `count`, `type` and `indices` (each optional), a bare count, or None (three
    Nones). Counts and indices are whole numbers (`_whole`); the type is as written.

    Raises ConfigError for an unknown key, a count or index that is not whole, indices that
    are not a list, or an index listed twice."""
    if not isinstance(gpus, Mapping):
        return _whole(gpus, at), None, None
    if unknown := sorted(set(map(str, gpus)) - {"count", "type", "indices"}):
        raise ConfigError(f"{at}: unknown key(s) {', '.join(unknown)}; known: count, indices, type")
    count = _whole(gpus.get("count"), f"{at}.count")
    return count, gpus.get("type"), _gpu_indices(gpus.get("indices"), f"{at}.indices")


def _gpu_indices(listed: Any, at: str) -> tuple[Any, ...] | None:
    """An entry's `gpus.indices` (`at` in errors): None when not given, else a tuple of its
    whole numbers. Raises ConfigError for a value that is not a list, an index that is not
    whole, or one listed twice (`hosts gpus` listed GPU 0 twice, FREE)."""
    if listed is None:
        return None
    if not isinstance(listed, (list, tuple)):
        raise ConfigError(f"{at}: expected a list of GPU indices, found [{listed}]")
    indices = tuple(_whole(i, at) for i in listed)
    if len(set(indices)) != len(indices):
        raise ConfigError(f"{at}: each GPU index once, found {list(indices)}")
    return indices


def _entry_settings(data: Mapping[str, Any], where: str, *, count: Any, gtype: Any,
                    indices: tuple[Any, ...] | None) -> dict[str, Any]:
    """The Host fields but `name` of the entry `data` (`where` in errors), an unset key given
    its default, and the GPUs as `_entry_gpus` read them. Not validated.

    Raises ConfigError for a port that is not whole; TypeError or ValueError for a value that
    does not convert (`cpus: many`), which `host_from_yaml` reports as one line."""
    return {
        "address": str(data.get("address") or "127.0.0.1"),
        "port": _whole(data.get("port", 22), f"{where}.port"),
        "user": data.get("user") or None,
        "identity_file": data.get("identity_file") or None,
        "runtime": str(data.get("runtime", "process")),
        "workdir": str(data.get("workdir") or DEFAULT_WORKDIR),
        "python": str(data.get("python") or "python3"),
        "gpu_count": count,
        "gpu_type": str(gtype) if gtype else None,
        "gpu_indices": indices,
        "cpus": _float_or_none(data.get("cpus")),
        "memory_gb": _float_or_none(data.get("memory_gb")),
        "internal_address": data.get("internal_address") or None,
        "gpu_lease_dir": str(data["gpu_lease_dir"]) if data.get("gpu_lease_dir") else None,
        "detected": dict(data.get("detected") or {}),
    }


def _float_or_none(value: Any) -> float | None:
    """`value` as a float (TypeError or ValueError when it is not a number), None as None."""
    return float(value) if value is not None else None


def _whole(value: Any, where: str) -> Any:
    """An inventory number that must be whole: as given (`true`, 1.9 and 22.7 were cut to 1,
    1 and 22 without a word), or one line naming its key."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    if isinstance(value, str) and re.fullmatch(r"\d{1,9}", value.strip()):
        return int(value)
    raise ConfigError(f"{where}: expected a whole number, found [{value}]")


# ---------------------------------------------------------------------------- the inventory


def load_inventory(path: Path | None = None) -> dict[str, Host]:
    """All hosts of the inventory file (an absent file is an empty inventory)."""
    path = path or hosts_file()
    return {str(n): host_from_yaml(str(n), h or {}, source=str(path))
            for n, h in read_hosts(path, reword=True).items()}


def save_inventory(hosts: Mapping[str, Host], path: Path | None = None) -> None:
    write_hosts({name: h.to_yaml_dict() for name, h in sorted(hosts.items())}, path or hosts_file())


def put_host(host: Host) -> None:
    with inventory_lock():
        inv = load_inventory()
        inv[host.name] = validate(host)
        save_inventory(inv)


def local_host(inventory: Mapping[str, Host] | None = None) -> Host:
    """This machine: GPUs from an inventory entry `local`, else $VCLI_LOCAL_GPUS, else
    `vcli.placement.gpus.detect_local_gpus()` ($VCLI_GPUS or nvidia-smi); CPUs/memory from the OS.

    The accelerator type that placement matches against a pool's `accelerator-type` is only
    a declared one ($VCLI_LOCAL_GPU_TYPE, or the `local` entry's `gpu_type`). The type
    nvidia-smi's GPU names give is only shown (`gpuType` in `hosts list --include-local`):
    a Vertex config written for another GPU still runs on this machine, as it did before the
    type was detected."""
    inv = load_inventory() if inventory is None else inventory
    base = inv.get(LOCAL) or Host(name=LOCAL, address="127.0.0.1")
    base = replace(base, address="127.0.0.1" if not base.internal_address else base.address)
    detected: dict[str, Any] = dict(base.detected)
    if base.gpu_count is None and base.gpu_indices is None:
        declared = os.environ.get("VCLI_LOCAL_GPUS", "").strip()
        indices: tuple[int, ...]
        gtype = None
        if declared:
            from vcli.placement.gpus import parse_declared_gpus

            indices = parse_declared_gpus("VCLI_LOCAL_GPUS", declared)
        else:
            try:
                from vcli.placement.gpus import detect_local_gpus

                indices, gtype = detect_local_gpus()
            except ConfigError:  # $VCLI_GPUS that says nothing usable: the user is told
                raise
            except Exception:  # nvidia-smi's trouble: no GPUs is the safe answer
                indices = ()
        detected["gpus"] = {"count": len(indices), "indices": list(indices)}
        if gtype:  # shown, never a placement constraint (see the docstring)
            detected["gpus"]["model"] = gtype
        gtype = os.environ.get("VCLI_LOCAL_GPU_TYPE")
        if gtype:
            from vcli.spec import ACCELERATOR_TYPES

            if gtype not in ACCELERATOR_TYPES:  # a typo made every GPU job "never fit", the variable unnamed
                raise InvalidValueError("VCLI_LOCAL_GPU_TYPE", f"[{gtype}] is not one of [{', '.join(ACCELERATOR_TYPES)}]")
            detected["gpus"]["type"] = gtype
    detected.setdefault("cpus", os.cpu_count() or 1)
    mem = _local_memory_gb()
    if mem:
        detected.setdefault("memory_gb", mem)
    return replace(base, detected=detected)


def _local_memory_gb() -> float | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 1024 / 1024, 1)
    except (OSError, ValueError, IndexError):
        pass
    return None


def get_host(name: str, inventory: Mapping[str, Host] | None = None) -> Host:
    inv = load_inventory() if inventory is None else inventory
    if name == LOCAL:
        return local_host(inv)
    if name not in inv:
        known = ", ".join(sorted(inv)) or "none"
        raise NotFoundError(
            f"Host [{name}] is not in the inventory ({hosts_file()}; hosts: {known}). "
            f"Add it with `vcli hosts add {name} --address=...`."
        )
    return inv[name]


def resolve_hosts(names: str | Iterable[str] | None, inventory: Mapping[str, Host] | None = None) -> list[Host]:
    """Hosts named by a comma-separated list (None or empty: every inventory host except `local`)."""
    inv = load_inventory() if inventory is None else inventory
    if names is None or (isinstance(names, str) and not names.strip()):
        hosts = [h for n, h in sorted(inv.items()) if n != LOCAL]
        if not hosts:
            raise NotFoundError(
                f"The host inventory ({hosts_file()}) is empty: add hosts with `vcli hosts add NAME --address=...`."
            )
        return hosts
    items = [n.strip() for n in names.split(",")] if isinstance(names, str) else [str(n).strip() for n in names]
    seen: list[str] = []
    for n in items:
        if n and n not in seen:
            seen.append(n)
    return [get_host(n, inv) for n in seen]

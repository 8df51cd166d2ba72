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
"""

from __future__ import annotations

import contextlib
import getpass
import math
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

from vcli.errors import ConfigError, InvalidValueError, NotFoundError

__all__ = [
    "Host",
    "KnownHosts",
    "LOCAL",
    "RUNTIMES",
    "hosts_file",
    "known_hosts",
    "known_hosts_file",
    "user_known_hosts_file",
    "load_inventory",
    "save_inventory",
    "get_host",
    "resolve_hosts",
    "put_host",
    "remove_hosts",
    "local_host",
]

LOCAL = "local"
RUNTIMES = ("process", "docker")
DEFAULT_WORKDIR = "~/.vcli"
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")


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


def host_from_yaml(name: str, data: Mapping[str, Any], *, source: str = "hosts.yaml") -> Host:
    where = f"{source}: hosts.{name}"
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: expected a mapping of host settings")
    known = {"address", "port", "user", "identity_file", "runtime", "workdir", "python", "gpus", "cpus",
             "memory_gb", "internal_address", "gpu_lease_dir", "detected"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    address = data.get("address")
    if name != LOCAL and not address:
        raise ConfigError(f"{where}.address: required")
    gpus = data.get("gpus")
    count = gtype = indices = None
    if isinstance(gpus, Mapping):
        if unknown := sorted(set(map(str, gpus)) - {"count", "type", "indices"}):
            raise ConfigError(f"{where}.gpus: unknown key(s) {', '.join(unknown)}; known: count, indices, type")
        count = _whole(gpus.get("count"), f"{where}.gpus.count")
        gtype = gpus.get("type")
        listed = gpus.get("indices")
        if listed is not None and not isinstance(listed, (list, tuple)):
            raise ConfigError(f"{where}.gpus.indices: expected a list of GPU indices, found [{listed}]")
        indices = tuple(_whole(i, f"{where}.gpus.indices") for i in listed) if listed is not None else None
        if indices is not None and len(set(indices)) != len(indices):  # `hosts gpus` listed GPU 0 twice, FREE
            raise ConfigError(f"{where}.gpus.indices: each GPU index once, found {list(indices)}")
    elif gpus is not None:
        count = _whole(gpus, f"{where}.gpus")
    try:
        return validate(Host(
            name=name,
            address=str(address or "127.0.0.1"),
            port=_whole(data.get("port", 22), f"{where}.port"),
            user=data.get("user") or None,
            identity_file=data.get("identity_file") or None,
            runtime=str(data.get("runtime", "process")),
            workdir=str(data.get("workdir") or DEFAULT_WORKDIR),
            python=str(data.get("python") or "python3"),
            gpu_count=count,
            gpu_type=str(gtype) if gtype else None,
            gpu_indices=indices,
            cpus=float(data["cpus"]) if data.get("cpus") is not None else None,
            memory_gb=float(data["memory_gb"]) if data.get("memory_gb") is not None else None,
            internal_address=data.get("internal_address") or None,
            gpu_lease_dir=str(data["gpu_lease_dir"]) if data.get("gpu_lease_dir") else None,
            detected=dict(data.get("detected") or {}),
        ))
    except InvalidValueError as e:  # the rules `hosts add` applies, named by the entry's key, not a flag
        key = e.flag.lstrip("-").replace("-", "_")
        raise ConfigError(f"{where}.{key}: {e.message} (correct the file, or `vcli hosts remove {name}`)") from None
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{where}: {e}") from None


def _whole(value: Any, where: str) -> Any:
    """An inventory number that must be whole: as given (`true`, 1.9 and 22.7 were cut to 1,
    1 and 22 without a word), or one line naming its key."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    if isinstance(value, str) and re.fullmatch(r"\d{1,9}", value.strip()):
        return int(value)
    raise ConfigError(f"{where}: expected a whole number, found [{value}]")


#: The most GPUs one host may declare (a DGX has 8, a2-megagpu-16g 16); a count of 1e12 was
#: accepted, and `hosts list` then built its indices until memory ran out.
MAX_HOST_GPUS = 256
#: A host name (RFC 1123 labels, 253 characters at most), an IPv4 address, or an IPv6 one
#: (hex digits and colons, optionally bracketed); `host:22`, `http://x/y` and 10,000
#: characters were taken as host names.
_ADDRESS_RE = re.compile(
    r"(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"
    r"|\[?[0-9A-Fa-f:.]{2,45}\]?")


def _is_address(value: str) -> bool:
    """A host name, or an IP address that `ipaddress` reads (`10.0.0.999`, `::::` are not)."""
    import ipaddress

    if not _ADDRESS_RE.fullmatch(value):
        return False
    if ":" in value or re.fullmatch(r"[0-9.]+", value):
        try:
            ipaddress.ip_address(value.strip("[]"))
        except ValueError:
            return False
    return True


def validate(host: Host) -> Host:
    """Raise InvalidValueError for a bad setting; returns the host."""
    if not _NAME_RE.match(host.name):
        raise InvalidValueError("NAME", f"[{host.name}] must be letters, digits, '.', '_' or '-' (max 63)")
    if host.runtime not in RUNTIMES:
        raise InvalidValueError("--runtime", f"[{host.runtime}] is not one of [{', '.join(RUNTIMES)}]")
    if not 0 < host.port < 65536:
        raise InvalidValueError("--port", f"[{host.port}] must be 1-65535")
    if host.gpu_count is not None and not 0 <= host.gpu_count <= MAX_HOST_GPUS:
        raise InvalidValueError("--gpus", f"must be from 0 to {MAX_HOST_GPUS}, received {host.gpu_count}")
    if host.gpu_indices is not None and (len(host.gpu_indices) > MAX_HOST_GPUS
                                         or not all(0 <= i < 10_000 for i in host.gpu_indices)):
        raise InvalidValueError("--gpus", f"at most {MAX_HOST_GPUS} GPU indices, each from 0 to 9999")
    if host.gpu_type is not None:
        from vcli.spec import ACCELERATOR_TYPES

        if host.gpu_type not in ACCELERATOR_TYPES:
            raise InvalidValueError("--gpu-type", f"[{host.gpu_type}] is not one of [{', '.join(ACCELERATOR_TYPES)}]")
    for v, flag in ((host.cpus, "--cpus"), (host.memory_gb, "--memory-gb")):
        if v is not None and not (math.isfinite(v) and v > 0):  # NaN passed `v <= 0`, and printed as invalid JSON
            raise InvalidValueError(flag, f"must be a finite number > 0, received {v}")
    for value, flag in ((host.address, "--address"), (host.internal_address, "--internal-address")):
        if value is not None and not _is_address(value):
            raise InvalidValueError(flag, f"[{value}] is not a host name or IP address (the port is --port)")
    for value, flag in ((host.workdir, "--workdir"), (host.identity_file, "--identity-file"), (host.python, "--python")):
        if value is not None and re.search(r"[\x00-\x1f\x7f]", value):  # a newline forged a row of `hosts list`
            raise InvalidValueError(flag, "must not contain control characters (newlines, tabs, escapes)")
    if host.gpu_lease_dir is not None and (not host.gpu_lease_dir.startswith(("/", "~"))
                                           or any(c in host.gpu_lease_dir for c in "\n\r\0")):
        raise InvalidValueError("--gpu-lease-dir", f"[{host.gpu_lease_dir}] must be an absolute path on the host")
    if host.user and (host.user.startswith("-") or any(c in host.user for c in " @:'\"`$;")
                      or re.search(r"[\x00-\x1f\x7f]", host.user)):
        raise InvalidValueError("--user", f"[{host.user}] is not a user name")
    return host


# ---------------------------------------------------------------------------- files


def hosts_file() -> Path:
    env = os.environ.get("VCLI_HOSTS_FILE")
    if env:
        return Path(env).expanduser()
    from vcli.properties import config_dir

    return config_dir() / "hosts.yaml"


@dataclass(frozen=True)
class KnownHosts:
    """The known_hosts files host keys are checked against.

    `user` is OpenSSH's file (read only); `vcli` is vcli's own, read too, and the only file
    keys accepted with `vcli hosts add --accept-new-host-key` are appended to.
    """

    user: Path
    vcli: Path

    @property
    def files(self) -> tuple[Path, Path]:
        """Every file to read, in the order keys are looked up."""
        return (self.user, self.vcli)


def known_hosts() -> KnownHosts:
    """This user's known_hosts files (see `user_known_hosts_file` and `known_hosts_file`)."""
    return KnownHosts(user=user_known_hosts_file(), vcli=known_hosts_file())


def known_hosts_file() -> Path:
    """vcli's own known_hosts (keys accepted with `vcli hosts add --accept-new-host-key`)."""
    from vcli.properties import config_dir

    return config_dir() / "known_hosts"


def user_known_hosts_file() -> Path:
    """The user's OpenSSH known_hosts (read only): $VCLI_SSH_USER_KNOWN_HOSTS, else ~/.ssh/known_hosts."""
    env = os.environ.get("VCLI_SSH_USER_KNOWN_HOSTS")
    if env:
        return Path(env).expanduser()
    return Path("~/.ssh/known_hosts").expanduser()


def load_inventory(path: Path | None = None) -> dict[str, Host]:
    """All hosts of the inventory file (an absent file is an empty inventory)."""
    from vcli.codec.yamlio import parse_yaml, read_text

    path = path or hosts_file()
    try:
        with open(path, "rb") as f:
            text = read_text(f, str(path), "inventory")
    except FileNotFoundError:
        return {}
    except ConfigError as e:  # larger than a document can be, or not UTF-8
        raise ConfigError(f"The host inventory {str(e).split(']: ', 1)[-1]}") from None
    except OSError as e:  # a directory, no permission, ...
        raise ConfigError(f"The host inventory {path} cannot be read: {e.strerror}.") from None
    # One line for any problem, aliases and duplicate keys checked as in --config documents.
    data = parse_yaml(text, str(path), prefix="The host inventory ") or {}
    if not isinstance(data, Mapping) or not isinstance(data.get("hosts", {}), Mapping):
        raise ConfigError(f"{path}: expected `hosts:` mapping host names to settings")
    if unknown := sorted(set(map(str, data)) - {"hosts"}):  # `hots:` emptied the inventory, silently
        raise ConfigError(f"{path}: unknown key(s) {', '.join(unknown)}; the file holds `hosts:` mapping host names "
                          "to settings")
    return {str(n): host_from_yaml(str(n), h or {}, source=str(path)) for n, h in (data.get("hosts") or {}).items()}


def save_inventory(hosts: Mapping[str, Host], path: Path | None = None) -> None:
    _write_hosts({name: h.to_yaml_dict() for name, h in sorted(hosts.items())}, path or hosts_file())


def _write_hosts(hosts: Mapping[str, Any], path: Path) -> None:
    """Write the inventory file (its `hosts` mapping as given), atomically."""
    import tempfile

    import yaml

    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    body = {"hosts": dict(hosts)}
    # A temporary file of its own: two writers shared `hosts.yaml.tmp`, and one renamed the
    # other's away (a traceback) or over its hosts.
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write("# vcli host inventory: edit freely or use `vcli hosts add|remove`.\n")
            yaml.safe_dump(body, f, sort_keys=False, default_flow_style=False)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def inventory_lock(path: Path | None = None) -> Iterator[None]:
    """Hold the inventory's lock (a `flock` on `<file>.lock` beside it) for a read-modify-write:
    two `hosts add` at once (a provisioning loop, two terminals) each keep their host; without
    it 3 of 40 were lost, one reported added."""
    import fcntl

    path = path or hosts_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as e:
        raise ConfigError(f"The host inventory {path} cannot be written: {e.strerror}.") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def put_host(host: Host) -> None:
    with inventory_lock():
        inv = load_inventory()
        inv[host.name] = validate(host)
        save_inventory(inv)


def remove_hosts(names: Sequence[str]) -> None:
    """Remove the inventory entries `names`, all or none (NotFoundError for the first that is
    not there). The file is edited as written, not validated: an entry that breaks the rules
    (a hand edit, an older vcli's) can be removed, and the others are kept as they are."""
    path = hosts_file()
    with inventory_lock(path):
        raw = _raw_hosts(path)
        missing = [n for n in names if n not in raw]
        if missing:
            raise NotFoundError(f"Host [{missing[0]}] is not in the inventory ({path}); nothing was removed. "
                                "List hosts with `vcli hosts list`.")
        for n in names:
            raw.pop(n, None)
        _write_hosts(raw, path)


def _raw_hosts(path: Path) -> dict[str, Any]:
    """The inventory's `hosts` mapping as written (an absent file: none)."""
    from vcli.codec.yamlio import parse_yaml, read_text

    try:
        with open(path, "rb") as f:
            text = read_text(f, str(path), "inventory")
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise ConfigError(f"The host inventory {path} cannot be read: {e.strerror}.") from None
    data = parse_yaml(text, str(path), prefix="The host inventory ") or {}
    if not isinstance(data, Mapping) or not isinstance(data.get("hosts", {}), Mapping):
        raise ConfigError(f"{path}: expected `hosts:` mapping host names to settings")
    if unknown := sorted(set(map(str, data)) - {"hosts"}):  # `hots:` emptied the inventory, silently
        raise ConfigError(f"{path}: unknown key(s) {', '.join(unknown)}; the file holds `hosts:` mapping host names "
                          "to settings")
    return {str(k): v for k, v in (data.get("hosts") or {}).items()}


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

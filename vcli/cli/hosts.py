"""`vcli hosts add | remove | list | check`: the SSH host inventory (see `vcli.placement.hosts`).

Mounted by `vcli.cli` as `vcli hosts`. Only typer is imported at module level; paramiko is
imported when a command connects. Host names complete from the inventory (`vcli.cli.complete`).
"""

from __future__ import annotations

import sys
from typing import Annotated, Any, List, Optional

import typer

from vcli.cli.complete import host_names
from vcli.cli.gcloud_flags import GcloudCommand, GcloudGroup
from vcli.cli.support import command as _command
from vcli.cli.support import err as _err

hosts_app = typer.Typer(
    cls=GcloudGroup,
    help="Manage the SSH hosts vcli runs replicas on (the inventory) and check them.",
    no_args_is_help=True,
)

_LIST_FORMAT = ("table(name, address, port, user, runtime, gpus, gpuType, cpus, memoryGb, workdir)")
_CHECK_FORMAT = ("table(name, status, os, cpus, memoryGb, diskFreeGb, gpus, gpuType, docker, python)")




def _emit(resources: Any, fmt: Optional[str], default: str, *, is_list: bool = True) -> None:
    from vcli.formats import parse_format, render

    sys.stdout.write(render(resources, parse_format(fmt or default), is_list=is_list))
    sys.stdout.flush()


@hosts_app.command("add", cls=GcloudCommand)
@_command("hosts.add")
def hosts_add(
    name: str = typer.Argument(..., help="Inventory name of the host, e.g. gpu1."),
    address: Optional[str] = typer.Option(None, "--address", help="Host name or IP address (required for a new host)."),
    port: Optional[int] = typer.Option(None, "--port", help="SSH port (default 22)."),
    user: Optional[str] = typer.Option(None, "--user", help="Login user (default: your local user name)."),
    identity_file: Optional[str] = typer.Option(None, "--identity-file", help="Private key (default: ssh-agent, ~/.ssh/id_*)."),
    runtime: Optional[str] = typer.Option(None, "--runtime", help="process (default) | docker."),
    workdir: Optional[str] = typer.Option(None, "--workdir", help="Working directory on the host (default ~/.vcli)."),
    python: Optional[str] = typer.Option(None, "--python", help="Python (or venv python) for the process runtime (default python3)."),
    gpus: Optional[int] = typer.Option(None, "--gpus", help="Number of GPUs to offer (default: detected by `vcli hosts check`)."),
    gpu_type: Optional[str] = typer.Option(None, "--gpu-type", help="Accelerator type of the GPUs, e.g. NVIDIA_TESLA_T4."),
    cpus: Optional[float] = typer.Option(None, "--cpus", help="vCPUs to offer (machine types are matched against it)."),
    memory_gb: Optional[float] = typer.Option(None, "--memory-gb", help="Memory to offer, GB."),
    internal_address: Optional[str] = typer.Option(None, "--internal-address", help="Address other hosts use to reach this one (TF_CONFIG), if not --address."),
    gpu_lease_dir: Optional[str] = typer.Option(None, "--gpu-lease-dir", help="GPU lease directory on the host (default /tmp/vcli-gpu-leases); every vcli user of the host must use the same."),
    accept_new_host_key: bool = typer.Option(False, "--accept-new-host-key", help="Record the host's key in vcli's known_hosts if it is not known yet (never replaces a changed key)."),
    no_connect: bool = typer.Option(False, "--no-connect", help="Only write the inventory; do not connect to verify the host key."),
) -> None:
    """Add a host to the inventory (or change one), after verifying its SSH host key."""
    from dataclasses import replace

    from vcli.errors import ExecutorError, UsageError
    from vcli.placement import hosts as H

    if name == H.LOCAL:
        raise UsageError("`local` is this machine and always available; declare its GPUs with $VCLI_LOCAL_GPUS.")
    inv = H.load_inventory()
    existing = inv.get(name)
    if existing is None and not address:
        raise UsageError("argument --address: Must be specified for a new host.")
    base = existing or H.Host(name=name, address=address or "")
    changes: dict[str, Any] = {}
    for key, value in (("address", address), ("port", port), ("user", user), ("identity_file", identity_file),
                       ("runtime", runtime), ("workdir", workdir), ("python", python), ("gpu_count", gpus),
                       ("gpu_type", gpu_type), ("cpus", cpus), ("memory_gb", memory_gb),
                       ("internal_address", internal_address), ("gpu_lease_dir", gpu_lease_dir)):
        if value is not None:
            changes[key] = value
    if "gpu_count" in changes:
        changes["gpu_indices"] = None
    host = H.validate(replace(base, **changes))
    if no_connect:
        H.put_host(host)
        _err(f"{'Updated' if existing else 'Added'} host [{name}] in {H.hosts_file()} (not connected; its key is checked on first use).")
        return
    from vcli.control.hosts import is_host_key_error, verify_host_key

    try:
        # An entry that exists needs only `--accept-new-host-key`; a new one the whole command again.
        got = verify_host_key(host, accept_new=accept_new_host_key, accept_hint=None if existing else _rerun_hint())
    except ExecutorError as e:
        if is_host_key_error(e):
            raise  # unknown or changed: nothing is written
        H.put_host(host)
        _err(f"WARNING: {e}")
        _err(f"{'Updated' if existing else 'Added'} host [{name}] in {H.hosts_file()}, but could not verify it now.")
        return
    if got is not None:
        key_type, fp, new = got
        if new:
            _err(f"Accepted {key_type} key {fp} for {name} ({host.address}:{host.port}) into {H.known_hosts_file()}.")
        else:
            _err(f"Host key of {name} is already known ({key_type} {fp}).")
    H.put_host(host)
    _err(f"{'Updated' if existing else 'Added'} host [{name}] in {H.hosts_file()}. Check it with `vcli hosts check {name}`.")


def _rerun_hint() -> str:
    """This very command line plus --accept-new-host-key (the host is not recorded yet)."""
    import shlex

    args = [a for a in sys.argv[1:] if a != "--accept-new-host-key"]
    args = args[args.index("hosts"):] if "hosts" in args else ["hosts", *args]
    return shlex.join(["vcli", *args, "--accept-new-host-key"])


@hosts_app.command("remove", cls=GcloudCommand)
@_command("hosts.remove")
def hosts_remove(
    names: Annotated[List[str], typer.Argument(help="Inventory names to remove.", autocompletion=host_names)],
) -> None:
    """Remove hosts from the inventory (their keys stay in known_hosts)."""
    from vcli.placement import hosts as H

    H.remove_hosts(names)  # all or none
    for n in names:
        _err(f"Removed host [{n}].")


@hosts_app.command("list", cls=GcloudCommand)
@_command("hosts.list")
def hosts_list(
    fmt: Optional[str] = typer.Option(None, "--format", help=f"Default: {_LIST_FORMAT}; also json, yaml, value(...), csv(...)."),
    filter_: Optional[str] = typer.Option(None, "--filter", help="e.g. runtime=docker, gpus>0"),
    sort_by: Optional[str] = typer.Option(None, "--sort-by"),
    include_local: bool = typer.Option(False, "--include-local", help="Also show `local` (this machine)."),
) -> None:
    """List the inventory."""
    from vcli.formats import apply_filter, apply_sort
    from vcli.placement import hosts as H

    inv = H.load_inventory()
    rows = [h.to_resource() for n, h in sorted(inv.items()) if n != H.LOCAL]
    if include_local:
        rows.insert(0, H.local_host(inv).to_resource())
    rows = apply_sort(apply_filter(rows, filter_), sort_by)
    if not rows:
        _err(f"Listed 0 items. Add hosts with `vcli hosts add NAME --address=...` ({H.hosts_file()}).")
        if (fmt or "").startswith("json"):
            print("[]")
        return
    _emit(rows, fmt, _LIST_FORMAT)


@hosts_app.command("check", cls=GcloudCommand)
@_command("hosts.check")
def hosts_check(
    names: Annotated[Optional[List[str]], typer.Argument(help="Hosts to check (default: all).", autocompletion=host_names)] = None,
    fmt: Optional[str] = typer.Option(None, "--format", help=f"Default: {_CHECK_FORMAT}."),
    no_reachability: bool = typer.Option(False, "--no-reachability", help="Skip the host-to-host TF port test."),
    save: bool = typer.Option(True, "--save/--no-save", help="Record detected GPUs/CPUs/memory in the inventory."),
) -> None:
    """Connect to hosts; report OS, CPUs, memory, disk, GPUs, Docker, Python and host-to-host reachability."""
    from vcli.control.hosts import check_hosts
    from vcli.errors import ExitCode, VcliError
    from vcli.placement import hosts as H

    inv = H.load_inventory()
    targets = H.resolve_hosts(",".join(names) if names else None, inv)
    if any(h.is_local for h in targets):
        raise VcliError("`local` is this machine; check remote hosts only.")
    rows, problems = check_hosts(targets, reachability=not no_reachability)
    if save:
        _save_detected(inv, rows)
    if not (fmt or "").startswith(("json", "yaml")):
        for row in rows:
            row.pop("gpuDetails", None)
    _emit(rows, fmt, _CHECK_FORMAT)
    for p in problems:
        _err(f"PROBLEM: {p}")
    if problems:
        _err(f"{len(problems)} problem(s) found.")
        bad = any(r.get("status") in _FAILED for r in rows)
        raise typer.Exit(int(ExitCode.EXECUTOR_UNAVAILABLE if bad else ExitCode.INVALID))
    _err(f"All {len(rows)} host(s) OK.")


_FAILED = ("UNREACHABLE", "TIMEOUT", "ERROR")


def _detected(row: dict[str, Any]) -> dict[str, Any]:
    """The inventory's `detected` entry for one reachable `hosts check` row."""
    det: dict[str, Any] = {}
    if "cpus" in row:
        det["cpus"] = row["cpus"]
    if "memoryGb" in row:
        det["memory_gb"] = row["memoryGb"]
    gpus = row.get("gpuDetails") or []
    det["gpus"] = {"count": len(gpus), "indices": [g["index"] for g in gpus]}
    if gpus and gpus[0].get("type"):
        det["gpus"]["type"] = gpus[0]["type"]
    if row.get("docker"):
        det["docker"] = row["docker"]
    return det


def _save_detected(inv: dict, rows: list[dict[str, Any]]) -> None:
    """Record what `hosts check` found on each reachable inventory host; the inventory file
    is written only when something changed."""
    from dataclasses import replace

    from vcli.placement import hosts as H

    found = {row["name"]: _detected(row) for row in rows if row.get("status") not in _FAILED and row["name"] in inv}
    if all(dict(inv[name].detected) == det for name, det in found.items()):
        return
    with H.inventory_lock():  # read again: another `hosts add` may have written it meanwhile
        now = H.load_inventory()
        for name, det in found.items():
            if name in now:
                now[name] = replace(now[name], detected=det)
        H.save_inventory(now)


_GPUS_FORMAT = "table(host, gpu, state, user, job, study, trial, replica, command, pid, since, gpus, reason)"


@hosts_app.command("gpus", cls=GcloudCommand)
@_command("hosts.gpus")
def hosts_gpus(
    names: Annotated[Optional[List[str]], typer.Argument(help="Hosts to show: `local` (this machine, the default) or inventory hosts.", autocompletion=host_names)] = None,
    fmt: Optional[str] = typer.Option(None, "--format", help=f"Default: {_GPUS_FORMAT}; also json, yaml, value(...), csv(...)."),
    filter_: Optional[str] = typer.Option(None, "--filter", help="e.g. state=HELD, user=alice"),
    sort_by: Optional[str] = typer.Option(None, "--sort-by"),
) -> None:
    """Who holds each GPU of a host (host-wide leases), and who waits for one.

    One row per host and GPU index: FREE, HELD (by which job, study, trial and replica, user,
    pid, since when) or BUSY (memory held by a process vcli did not start, by nvidia-smi on
    this machine); then one WAITING row per job or trial that waits for GPUs (oldest first).
    An SSH host's leases are read on the host, in its `gpu_lease_dir`; a host that cannot be
    reached is an error, never shown as free."""
    from vcli.errors import NotFoundError
    from vcli.formats import apply_filter, apply_sort
    from vcli.placement import hosts as H

    wanted = list(dict.fromkeys(names or [H.LOCAL]))
    inventory = H.load_inventory() if any(n != H.LOCAL for n in wanted) else {}
    for n in wanted:
        if n != H.LOCAL and n not in inventory:
            raise NotFoundError(f"Host [{n}] is not in the inventory ({H.hosts_file()}); see `vcli hosts list`.")
    rows: list[dict[str, Any]] = []
    remote = [inventory[n] for n in wanted if n != H.LOCAL]
    executor = None
    try:
        if remote:
            from vcli.control.wiring import ssh_executor

            executor = ssh_executor(remote)
        for n in wanted:
            rows += _local_gpu_rows() if n == H.LOCAL else _remote_gpu_rows(executor, inventory[n])
    finally:
        if executor is not None:
            executor.close()
    indices = [r for r in rows if r["gpu"] is not None]
    rows = apply_sort(apply_filter(rows, filter_), sort_by)
    if not rows:
        _err("Listed 0 items. No GPUs are declared there ($VCLI_LOCAL_GPUS or an inventory host `local` for this "
             "machine, `vcli hosts add NAME --gpus` for an SSH host, or nvidia-smi)." if not indices
             else "Listed 0 items.")
        if (fmt or "").startswith("json"):
            print("[]")
        return
    _emit(rows, fmt, _GPUS_FORMAT)


def _local_gpu_rows() -> list[dict[str, Any]]:
    from vcli import properties
    from vcli.placement import hosts as H
    from vcli.placement.gpus import lease_dir_error, local_leases

    indices, _ = H.local_host().gpus()
    leases = local_leases(properties.gpu_lease_dir())
    try:
        held = leases.probe(indices)
    except OSError as e:  # never shown FREE: nobody can lease them
        raise lease_dir_error(H.LOCAL, leases, e) from None
    return _lease_rows(H.LOCAL, indices, held, leases)


def _remote_gpu_rows(executor: Any, host: Any) -> list[dict[str, Any]]:
    indices, _ = host.gpus()
    if not indices:
        return []
    leases = executor.gpu_leases(host.name)
    held = leases.probe(indices, strict=True)  # an unreachable host is an error, not FREE GPUs
    return _lease_rows(host.name, indices, held, leases)


@hosts_app.command("policy", cls=GcloudCommand)
@_command("hosts.policy")
def hosts_policy(
    name: Annotated[str, typer.Argument(help="The host: `local` (this machine, the default) or an inventory host.",
                                        autocompletion=host_names)] = "local",
    set_: Annotated[Optional[List[str]], typer.Option("--set", help="KEY=VALUE to set (repeatable): max_gpus_per_user, "
                                                      "users.NAME, max_trials_per_study, queue (first-come or fair-share), "
                                                      "gpu_sharing (mps or shared), idle.below_percent, idle.window, "
                                                      "idle.action (warn or stop).")] = None,
    unset: Annotated[Optional[List[str]], typer.Option("--unset", help="KEY to remove (repeatable).")] = None,
    fmt: Optional[str] = typer.Option(None, "--format", help="Default: yaml; also json, value(...)."),
) -> None:
    """Show or set a host's GPU lease policy: per-user GPU limits, trials per study, queue order,
    how GPU shares are shared, and what happens to idle GPUs.

    The policy is `policy.yaml` in the host's lease directory, enforced by every vcli process
    that leases GPUs there. Only root or the owner of the lease directory can set it (`--set`,
    `--unset`; on an SSH host, as its login user there); anyone can show it. A policy file that is not to be trusted
    (another user's, or writable by others) is shown with the reason it is ignored."""
    from vcli import properties
    from vcli.errors import NotFoundError
    from vcli.placement import hosts as H
    from vcli.placement import leasepolicy
    from vcli.placement.gpus import local_leases

    executor = None
    if name != H.LOCAL:
        inventory = H.load_inventory()
        if name not in inventory:
            raise NotFoundError(f"Host [{name}] is not in the inventory ({H.hosts_file()}); see `vcli hosts list`.")
        from vcli.control.wiring import ssh_executor

        executor = ssh_executor([inventory[name]])
    try:
        leases = executor.gpu_leases(name) if executor is not None else local_leases(properties.gpu_lease_dir())
        if set_ or unset:
            try:
                current = leasepolicy.load(leases, fresh=True).as_dict()
            except leasepolicy.LeasePolicyError as e:  # what --set is for: the file is replaced
                _err(f"WARNING: {e}; --set starts from an empty policy.")
                current = {}
            leasepolicy.write(leases, leasepolicy.set_keys(current, set_ or [], unset or []))
        _show_policy(name, leases, fmt)
    finally:
        if executor is not None:
            executor.close()


def _show_policy(host: str, leases: Any, fmt: Optional[str]) -> None:
    from vcli.placement import leasepolicy
    from vcli.placement.gpuinfo import POLICY_FILE

    raw = leases.policy()
    row: dict[str, Any] = {"host": host, "path": raw.get("path") or f"{leases.path}/{POLICY_FILE}"}
    if raw.get("error"):
        row.update(policy={}, ignored=raw["error"])
    else:
        row.update(policy=leasepolicy.parse(str(raw.get("text") or ""), raw.get("path")).as_dict() if raw else {},
                   ignored=None)
    _emit(row, fmt, "yaml", is_list=False)


def _exclude_busy() -> bool:
    from vcli import properties

    return properties.gpu_exclude_busy()


def _lease_rows(host: str, indices: Any, held: Any, leases: Any) -> list[dict[str, Any]]:
    """HELD, BUSY (with the first process nvidia-smi names: pid, user, command, memory) and
    FREE rows for `indices`, then the WAITING rows with why each waits (the host's lease policy)."""
    from vcli.placement import leasepolicy
    from vcli.placement.gpuinfo import busy_reason

    procs = leases.gpu_processes() if _exclude_busy() else {}
    holders = leases.holders()
    rows = []
    for i in indices:
        rec = held.get(i)
        shares = [h for h in holders if h.get("gpu") == i and isinstance(h.get("share"), (int, float)) and h["share"] < 1]
        if shares:  # one row per replica (or program) holding a share of the GPU
            rows += [_gpu_row(host, i, "HELD", {**h, "gpus": h["share"]}, reason=h.get("idle")) for h in shares]
        elif rec is not None:
            restored = rec.get("restored")
            note = (f"its lease file was removed while held; the holder put it back {_ago(restored)}"
                    if isinstance(restored, (int, float)) else rec.get("idle") if isinstance(rec.get("idle"), str)
                    else None)
            rows.append(_gpu_row(host, i, "HELD", rec, reason=note))
        elif procs.get(i):
            first = procs[i][0]
            rows.append(_gpu_row(host, i, "BUSY", {k: first.get(k) for k in ("user", "pid", "command")},
                                 reason=busy_reason(procs[i])))
        else:
            rows.append(_gpu_row(host, i, "FREE", {}))
    policy = leasepolicy.load(leases, fresh=True)
    held_by = leasepolicy.held_by_user(holders) if policy.limits_anything or policy.queue != "first-come" else {}
    return rows + [_gpu_row(host, None, "WAITING", rec, reason=_stale(rec) or _waits_because(policy, rec, held_by))
                   for rec in leases.waiters()]


def _waits_because(policy: Any, waiter: Any, held: Any) -> Optional[str]:
    """What the lease policy says of a waiter: `alice holds 4 of at most 4 GPUs per user (…)`,
    or its place in a fair-share queue."""
    from vcli.placement import leasepolicy

    user = waiter.get("user")
    if leasepolicy.at_limit(policy, user, held):
        return f"{user} holds {held.get(str(user), 0):g} of at most {policy.limit(user):g} GPUs per user ({policy.where()})"
    if policy.queue == "fair-share":
        n = held.get(str(user), 0)
        return f"fair share: {user} holds {n:g} GPU{'' if n == 1 else 's'} here"
    return None


def _ago(when: float) -> str:
    """`3m ago` for a time `when` (epoch seconds)."""
    import time

    from vcli.placement import gpulease

    return f"{gpulease._ago(time.time() - when)} ago"


def _stale(waiter: Any) -> Optional[str]:
    """Why a waiter keeps no place in the queue (it stopped trying: a suspended process), or None."""
    from vcli.placement.gpus import STALE_WAITER_SECONDS

    idle = waiter.get("idle")
    if isinstance(idle, (int, float)) and idle > STALE_WAITER_SECONDS:
        return f"has not tried for {idle:.0f}s (a stopped process?): keeps no place in the queue"
    return None


def _gpu_row(host: str, gpu: Optional[int], state: str, rec: Any, *, reason: Optional[str] = None) -> dict[str, Any]:
    """One stable row of `hosts gpus` (every key always present; null when unknown)."""
    import datetime

    since = rec.get("since")
    when = (datetime.datetime.fromtimestamp(float(since), datetime.UTC).isoformat(timespec="seconds")
            .replace("+00:00", "Z") if isinstance(since, (int, float)) else None)
    return {"host": host, "gpu": gpu, "state": state, "user": rec.get("user"), "job": rec.get("job"),
            "study": rec.get("study"), "trial": rec.get("trial"), "replica": rec.get("replica"),
            "command": rec.get("command"), "pid": rec.get("pid"), "since": when, "gpus": rec.get("gpus"), "reason": reason}

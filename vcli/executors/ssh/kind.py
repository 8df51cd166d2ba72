"""The `ssh` kind: processes or containers on the inventory's SSH hosts, placed by one
scheduler over the hosts' capacity, their GPUs leased on each host itself."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

from vcli.executors.kinds import ExecutorOptions, ExecutorType

if TYPE_CHECKING:
    from vcli.executors import HostHealth
    from vcli.placement.hosts import Host


def ssh_hosts(names: str | Sequence[str] | None) -> list[Host]:
    """The hosts of an ssh run: `--hosts`, else `vcli config set hosts`, else the whole inventory.

    `local` is refused: remote replicas could not reach this machine at 127.0.0.1.
    """
    from vcli import properties
    from vcli.errors import InvalidValueError
    from vcli.placement.hosts import LOCAL, load_inventory, resolve_hosts

    if names is None or (isinstance(names, str) and not names.strip()):
        names = properties.get("hosts") or None
    chosen = resolve_hosts(names, load_inventory())
    if any(h.name == LOCAL for h in chosen):
        raise InvalidValueError(
            "--hosts", "`local` cannot be mixed into an ssh run: remote replicas could not reach "
            "127.0.0.1. Add this machine to the inventory under its network address instead.")
    return chosen


def ssh_executor(hosts: Sequence[Host], health: HostHealth | None = None) -> Any:
    """An SSH executor over `hosts`, with vcli's home and this user's known_hosts files."""
    from vcli.executors.ssh import SSHExecutor
    from vcli.placement.hosts import known_hosts
    from vcli.store import default_home

    return SSHExecutor(hosts, home=default_home(), known_hosts=known_hosts(), health=health)


def _build(options: ExecutorOptions, *, leases: bool = True, job: Mapping[str, Any] | None = None) -> tuple[Any, Any]:
    from vcli import properties
    from vcli.placement import HostCapacity, JobPlacer, Scheduler
    from vcli.placement.gpus import GpuAllocator

    chosen = ssh_hosts(options.hosts)
    # A GPU that something else uses is busy, by the host's own nvidia-smi (its lease server).
    allocator = GpuAllocator({}, nvidia_check=leases and properties.gpu_exclude_busy())
    scheduler = Scheduler([HostCapacity.from_host(h) for h in chosen], gpu_allocator=allocator)
    executor = ssh_executor(chosen, health=scheduler)
    if leases:  # each host's GPUs are leased on the host itself, through the executor's links
        allocator.leases.update({h.name: executor.gpu_leases(h.name) for h in chosen if h.gpus()[0]})
    return executor, JobPlacer(scheduler)


def _for_handles(options: ExecutorOptions) -> Any:
    """Every inventory host (a stored handle may name any of them), no scheduler (nothing is placed)."""
    from vcli.placement.hosts import LOCAL, load_inventory

    return ssh_executor([h for n, h in sorted(load_inventory().items()) if n != LOCAL])


KIND = ExecutorType(name="ssh", summary="processes or containers on SSH hosts", build=_build,
                    for_handles=_for_handles, places_itself=True, gpu_fractions=True,
                    # where the replica ran and keeps its files: host, workdir, jobDir, processGroup or container
                    describe_details=("remote", None))

"""Build what runs a job: the executor and the placer that decides where its replicas go.

The one place that knows which executor needs which data (inventory hosts, vcli's home, the
known_hosts files, the placement scheduler that hears about host health): controllers and the
CLI ask for an `Execution` by `--executor`/`--hosts`, or for `executor_for_handles(name)` to stop
replicas from stored handles, and use only the `Executor` contract and the placer afterwards.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from vcli.executors import Executor, HostHealth, get_executor
from vcli.spec import ExecutorKind

if TYPE_CHECKING:
    from vcli.executors.ray import RayExecutor
    from vcli.executors.slurm import SlurmExecutor
    from vcli.executors.ssh import SSHExecutor
    from vcli.hosts import Host


@dataclass
class Execution:
    """An executor and its placer, for the life of one command."""

    kind: ExecutorKind
    executor: Executor
    #: `placer(replicas, spec=..., job_id=...) -> placements` (see `vcli.control.jobs.Placer`).
    placer: Any
    #: Chosen by vcli from the spec (no --executor, $VCLI_EXECUTOR or configured executor).
    auto: bool = False

    def close(self) -> None:
        self.executor.close()

    def settings(self) -> dict[str, Any]:
        """What the job's record keeps of its executor, for `resume` (`open_execution(job=...)`):
        the slurm executor's partition, account, QOS and shared directory."""
        return {"slurm": self.executor.settings()} if self.kind == ExecutorKind.SLURM else {}  # type: ignore[attr-defined]


def needs_containers(spec: Any) -> bool:
    """Does a pool of this CustomJobSpec name an image and no command? On Vertex such a pool runs
    the image's own entrypoint, which only a container runtime can do."""
    for pool in spec.worker_pool_specs:
        cs = pool.container_spec
        if cs is not None and cs.image_uri and not cs.command and pool.local_package is None and not pool.is_reduction_server:
            return True
    return False


def image_commands(spec: Any) -> list[tuple[int, str]]:
    """(pool index, image) of the pools that name an image AND a command (not a local package
    or a reduction server): on Vertex such a pool runs its command inside the image."""
    out = []
    for i, pool in enumerate(spec.worker_pool_specs):
        cs = pool.container_spec
        if cs is not None and cs.image_uri and cs.command and pool.local_package is None and not pool.is_reduction_server:
            out.append((i, cs.image_uri))
    return out


_DOCKER_ANSWERS: dict[tuple[str, ...], str | None] = {}


def docker_cannot_run(pools: list[tuple[int, str]]) -> str | None:
    """Why this machine's Docker engine cannot run these images now (no SDK, no engine, an
    image neither present nor pullable), or None when it can. Asked once per process."""
    key = tuple(image for _, image in pools)
    if key not in _DOCKER_ANSWERS:
        from vcli.executors.docker import engine

        _DOCKER_ANSWERS[key] = engine.cannot_run_images(key)
    return _DOCKER_ANSWERS[key]


def image_command_notices(kind: ExecutorKind, spec: Any, *, auto: bool) -> list[str]:
    """One line per pool whose image the executor does not run its command in; `auto`: vcli
    chose the executor (then the reason is why Docker could not)."""
    if kind not in (ExecutorKind.LOCAL, ExecutorKind.RAY):
        return []
    pools = image_commands(spec)
    if not pools:
        return []
    reason = docker_cannot_run(pools) if auto else None
    why = (f"the docker executor cannot run it here ({reason.rstrip('.')})" if reason
           else f"the {kind.value} executor runs processes")
    return [f"Note: workerpool{i} runs its command as a process on this host, not inside image [{image}]: {why}. "
            "--executor=docker runs it in the image, as Vertex does." for i, image in pools]


def executor_kind(flag: str | None, spec: Any = None) -> ExecutorKind:
    """`--executor`, else $VCLI_EXECUTOR, else `vcli config set executor`; else docker when a
    pool of `spec` must run as a container (an image and no command) or names an image and a
    command that this machine's Docker engine can run (as on Vertex, where an image pool is a
    container pool); else local (`image_command_notices` then says so)."""
    from vcli import properties
    from vcli.errors import UsageError

    name = flag or os.environ.get("VCLI_EXECUTOR") or properties.get("executor")
    if not name:
        in_images = spec is not None and (needs_containers(spec) or
                                          (image_commands(spec) and docker_cannot_run(image_commands(spec)) is None))
        name = ExecutorKind.DOCKER.value if in_images else ExecutorKind.LOCAL.value
    try:
        kind = ExecutorKind(name)
    except ValueError:
        choices = ", ".join(k.value for k in ExecutorKind)
        raise UsageError(f"argument --executor: invalid choice: '{name}' (choose from {choices})") from None
    if spec is not None:
        _check_gpu_shares(kind, spec)
    return kind


def _check_gpu_shares(kind: ExecutorKind, spec: Any) -> None:
    """A fraction of a GPU only on Ray, and in Ray's steps of 0.0001 (UsageError otherwise)."""
    from vcli.errors import UsageError

    for i, pool in enumerate(spec.worker_pool_specs):
        count = float(pool.machine_spec.accelerator_count or 0)
        if not count or count.is_integer():
            continue
        if kind is not ExecutorKind.RAY:
            # Only Ray accounts for shares of a GPU; elsewhere a replica's GPUs are its own.
            raise UsageError(f"argument --worker-pool-spec: workerpool{i} asks for accelerator-count={count:g}: "
                             f"a fraction of a GPU needs --executor=ray (the {kind.value} executor gives "
                             "each replica whole GPUs)")
        if abs(count * 10_000 - round(count * 10_000)) > 1e-6:  # Ray's own ValueError failed the job
            raise UsageError(f"argument --worker-pool-spec: workerpool{i} asks for accelerator-count={count:g}: "
                             "Ray counts a GPU in steps of 0.0001 (such as 0.25 or 0.0005)")


_LOCAL_PLACERS: dict[bool, Any] = {}


def _local_placer(leases: bool = True) -> Any:
    """This machine's placer: GPU-aware when it declares or has GPUs, else everything here.

    When this machine declares or has GPUs (inventory host `local`, $VCLI_LOCAL_GPUS or
    nvidia-smi), local replicas get specific GPUs from the same scheduler the SSH hosts use,
    leased host-wide (`vcli.placement.gpulease`) unless `leases` is False (what only validates a job).
    """
    if leases not in _LOCAL_PLACERS:
        from vcli.control.jobs import local_placer
        from vcli.hosts import local_host

        if local_host().gpus()[0]:
            from vcli.placement import local_placer as gpu_placer

            _LOCAL_PLACERS[leases] = gpu_placer(leases=leases)
        else:
            _LOCAL_PLACERS[leases] = local_placer
    return _LOCAL_PLACERS[leases]


def ssh_hosts(names: str | Sequence[str] | None) -> list[Host]:
    """The hosts of an ssh run: `--hosts`, else `vcli config set hosts`, else the whole inventory.

    `local` is refused: remote replicas could not reach this machine at 127.0.0.1.
    """
    from vcli import properties
    from vcli.errors import InvalidValueError
    from vcli.hosts import LOCAL, load_inventory, resolve_hosts

    if names is None or (isinstance(names, str) and not names.strip()):
        names = properties.get("hosts") or None
    chosen = resolve_hosts(names, load_inventory())
    if any(h.name == LOCAL for h in chosen):
        raise InvalidValueError(
            "--hosts", "`local` cannot be mixed into an ssh run: remote replicas could not reach "
            "127.0.0.1. Add this machine to the inventory under its network address instead.")
    return chosen


def ssh_executor(hosts: Sequence[Host], health: HostHealth | None = None) -> SSHExecutor:
    """An SSH executor over `hosts`, with vcli's home and this user's known_hosts files."""
    from vcli.executors.ssh import SSHExecutor
    from vcli.hosts import known_hosts
    from vcli.store import default_home

    return SSHExecutor(hosts, home=default_home(), known_hosts=known_hosts(), health=health)


def ray_address(flag: str | None = None) -> str:
    """The Ray cluster of --executor=ray: `--ray-address`, else `vcli config set ray/address`,
    else $RAY_ADDRESS, else `auto` (the cluster this machine is a node of)."""
    from vcli import properties

    return flag or properties.get("ray/address") or os.environ.get("RAY_ADDRESS") or "auto"


def ray_executor(address: str | None = None) -> RayExecutor:
    """A Ray executor connected (lazily, at first use) to `ray_address(address)`."""
    from vcli.executors.ray import RayExecutor
    from vcli.store import default_home

    return RayExecutor(ray_address(address), home=default_home())


def slurm_executor(stored: Mapping[str, Any] | None = None) -> SlurmExecutor:
    """A Slurm executor with the partition, account, QOS and shared directory of
    `--slurm-partition`/`--slurm-account`/`--slurm-qos` ($VCLI_SLURM_PARTITION, ...), else the
    `slurm/...` properties (`vcli config set slurm/partition gpu`), else Slurm's defaults.
    `stored`: a job's own (its record's `slurm`), which win: a resumed job keeps them."""
    from vcli import properties
    from vcli.executors.slurm import SlurmExecutor
    from vcli.store import default_home

    def setting(name: str) -> str | None:
        key = {"shared-dir": "sharedDir"}.get(name, name)
        if stored is not None and key in stored:
            return stored[key]  # type: ignore[no-any-return]
        return os.environ.get(f"VCLI_SLURM_{name.upper().replace('-', '_')}") or properties.get(f"slurm/{name}")

    return SlurmExecutor(partition=setting("partition"), account=setting("account"), qos=setting("qos"),
                         shared_dir=setting("shared-dir"), home=default_home())


def slurm_check_report() -> dict[str, Any]:
    """What `vcli slurm check` prints (`vcli.executors.slurm.check.report`)."""
    from vcli.executors.slurm.check import report

    return report(slurm_executor())


def executor_for_handles(name: str) -> Executor:
    """The executor called `name`, able to poll, stop, read and release stored handles.

    For `cancel` from another terminal: the ssh executor gets every inventory host (a stored
    handle may name any of them) and no scheduler (nothing is placed).
    """
    if name == ExecutorKind.SSH.value:
        from vcli.hosts import load_inventory

        return ssh_executor([h for n, h in sorted(load_inventory().items()) if n != "local"])
    if name == ExecutorKind.RAY.value:
        return ray_executor()  # actors are named and detached: found from any process
    if name == ExecutorKind.SLURM.value:
        return slurm_executor()  # handles name their Slurm job and step: scancel works from anywhere
    return get_executor(name)


def open_execution(kind: ExecutorKind, hosts: str | None = None, ray_address: str | None = None, *,
                   leases: bool = True, job: Mapping[str, Any] | None = None) -> Execution:
    """The executor for `kind` (`--hosts` implies ssh) with its placer.

    `leases=False`: GPUs are placed without host-wide leases (`--validate-only`, `print-env`,
    the half of `create --async` that only submits), on this machine or on SSH hosts.

    `job`: the job's labels (`labels`) and, for a recorded job, its record (`Execution.settings`).

    For ray, the cluster places replicas itself: the placer reserves a placement group per job
    (`vcli.executors.ray.RayPlacer`); `ray_address` is `--ray-address` (None: the defaults).

    For ssh, one placement scheduler over the hosts' capacity places replicas (`JobPlacer`) and
    hears from the executor which hosts died or came back (`HostHealth`).
    """
    if kind == ExecutorKind.SSH or hosts:
        from vcli.placement import HostCapacity, JobPlacer, Scheduler
        from vcli.placement.gpus import GpuAllocator

        chosen = ssh_hosts(hosts)
        from vcli import properties

        # A GPU that something else uses is busy, by the host's own nvidia-smi (its lease server).
        allocator = GpuAllocator({}, nvidia_check=leases and properties.gpu_exclude_busy())
        scheduler = Scheduler([HostCapacity.from_host(h) for h in chosen], gpu_allocator=allocator)
        executor = ssh_executor(chosen, health=scheduler)
        if leases:  # each host's GPUs are leased on the host itself, through the executor's links
            allocator.leases.update({h.name: executor.gpu_leases(h.name) for h in chosen if h.gpus()[0]})
        return Execution(kind=ExecutorKind.SSH, executor=executor, placer=JobPlacer(scheduler))
    if kind == ExecutorKind.RAY:
        executor = ray_executor(ray_address)
        return Execution(kind=kind, executor=executor, placer=executor.placer())
    if kind == ExecutorKind.SLURM:  # one allocation per job or trial (`vcli.executors.slurm`)
        from vcli.executors.slurm import SlurmPlacer

        slurm = slurm_executor((job or {}).get("slurm"))
        return Execution(kind=kind, executor=slurm, placer=SlurmPlacer(slurm, submit=leases, labels=(job or {}).get("labels")))
    return Execution(kind=kind, executor=get_executor(kind.value), placer=_local_placer(leases))


def accelerator_notices(kind: ExecutorKind, spec: Any) -> list[str]:
    """One line per pool that asks for GPUs this machine does not declare or have (local and
    docker executors; the SSH scheduler refuses such jobs itself). Never silently: the replica
    then runs without the accelerator."""
    if kind in (ExecutorKind.SSH, ExecutorKind.RAY, ExecutorKind.SLURM):
        return []  # their placers refuse what cannot fit
    from vcli.hosts import local_host

    indices, gtype = local_host().gpus()
    out = []
    for i, pool in enumerate(spec.worker_pool_specs):
        ms = pool.machine_spec
        if not ms.accelerator_count:
            continue
        wanted = f"{ms.accelerator_count} {ms.accelerator_type or 'accelerator'}"
        if (ms.accelerator_type or "").startswith("TPU"):
            out.append(f"WARNING: workerpool{i} asks for {wanted}, a TPU: vcli runs replicas on this machine's CPUs "
                       "and GPUs only, so its replicas run without a TPU.")
        elif not indices:
            out.append(f"WARNING: workerpool{i} asks for {wanted} but this machine declares no GPUs: its replicas run "
                       "without one (declare GPUs with VCLI_LOCAL_GPUS or an inventory host `local`).")
        elif ms.accelerator_type and gtype and ms.accelerator_type != gtype:
            out.append(f"WARNING: workerpool{i} asks for {ms.accelerator_type}; this machine's GPUs are {gtype}: "
                       "its replicas run on those.")
    return out


def reduction_server_notices(spec: Any) -> list[str]:
    """One line per Reduction Server pool: what it would do on Vertex and what happens here."""
    out = []
    for i, pool in enumerate(spec.worker_pool_specs):
        if pool.is_reduction_server and pool.replica_count:
            out.append(f"Note: workerpool{i} is Vertex's Reduction Server ({pool.container_spec.image_uri}, "
                       f"{pool.replica_count} replica(s)); it is not started here: the workers all-reduce among "
                       f"themselves directly (the same results, without the bandwidth saving), and CLUSTER_SPEC "
                       f"and TF_CONFIG leave workerpool{i} out.")
    return out

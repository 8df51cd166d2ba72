"""Build what runs a job: the executor and the placer that decides where its replicas go.

The automatic choice of a kind (`executor_kind`: an image pool runs in Docker when this
machine can run it) and the notices that depend on the kind's traits live here; what each
kind needs to be built (inventory hosts, a cluster address, Slurm settings) lives in its
`ExecutorType` (`vcli.executors.kinds`). Controllers and the CLI ask for an `Execution` by
`--executor`/`--hosts`, or for `executor_for_handles(name)` to stop replicas from stored
handles, and use only the `Executor` contract and the placer afterwards.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from vcli.executors import Executor
from vcli.executors.kinds import ExecutorOptions, kind_of, kinds
from vcli.spec import ExecutorKind

if TYPE_CHECKING:
    from vcli.executors.ssh import SSHExecutor
    from vcli.placement.hosts import Host


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
        """What the job's record keeps of its executor, for `resume` (`open_execution(job=...)`),
        under the kind's name (the slurm executor's partition, account, QOS and shared
        directory); nothing for kinds with nothing to keep."""
        kept = self.executor.settings()
        return {self.kind.value: kept} if kept else {}


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
    """A fraction of a GPU only on a kind that accounts for them (this machine's leases, Ray):
    below one GPU (a share of one), and on Ray in its steps of 0.0001 (UsageError otherwise)."""
    from vcli.errors import UsageError

    for i, pool in enumerate(spec.worker_pool_specs):
        count = float(pool.machine_spec.accelerator_count or 0)
        if not count or count.is_integer():
            continue
        asks = f"argument --worker-pool-spec: workerpool{i} asks for accelerator-count={count:g}: "
        if not kind_of(kind).gpu_fractions:
            # Elsewhere a replica's GPUs are its own.
            names = sorted(n for n, t in kinds().items() if t.gpu_fractions)
            raise UsageError(f"{asks}a fraction of a GPU needs --executor={', '.join(names[:-1])} or {names[-1]} "
                             f"(the {kind.value} executor gives each replica whole GPUs)")
        step = kind_of(kind).gpu_fraction_step
        if step is not None and abs(count / step - round(count / step)) > 1e-6:  # Ray's own ValueError failed the job
            raise UsageError(f"{asks}the {kind.value} executor counts a GPU in steps of {step:g} (such as 0.25 or "
                             f"{5 * step:g})")
        if step is None and count > 1:
            raise UsageError(f"{asks}a share is of one GPU: ask for less than 1 (such as 0.25) or for whole GPUs")


def ssh_executor(hosts: Sequence[Host]) -> SSHExecutor:
    """An SSH executor over `hosts` (`vcli hosts check`), with vcli's home and this user's
    known_hosts files."""
    from vcli.executors.ssh.kind import ssh_executor as build

    return build(hosts)


def slurm_check_report() -> dict[str, Any]:
    """What `vcli slurm check` prints (`vcli.executors.slurm.check.report`)."""
    from vcli.executors.slurm.check import report
    from vcli.executors.slurm.kind import slurm_executor

    return report(slurm_executor(ExecutorOptions()))


def executor_for_handles(name: str, options: ExecutorOptions | None = None) -> Executor:
    """The executor called `name`, able to poll, stop, read and release stored handles (for
    `cancel` from another terminal); `options.stored`: the job's record of its executor."""
    return kind_of(name).for_handles(options or ExecutorOptions())


def open_execution(kind: ExecutorKind, hosts: str | None = None, *,
                   leases: bool = True, job: Mapping[str, Any] | None = None) -> Execution:
    """The executor for `kind` (`--hosts` implies ssh) with its placer (`ExecutorType.build`).

    `leases=False`: GPUs are placed without host-wide leases (`--validate-only`, `print-env`,
    the half of `create --async` that only submits), on this machine or on SSH hosts.

    `job`: the job's labels (`labels`) and its executor's settings under the kind's name
    (`Execution.settings`): a recorded job's own (built again as it was), or a new job's flags.
    """
    if hosts:
        kind = ExecutorKind.SSH
    options = ExecutorOptions(hosts=hosts, stored=(job or {}).get(kind.value) or {})
    executor, placer = kind_of(kind).build(options, leases=leases, job=job)
    return Execution(kind=kind, executor=executor, placer=placer)

"""Planning a custom job: where each replica runs and exactly how it is launched.

`plan_job` resolves a `CustomJobSpec` into one `ReplicaLaunch` per replica (placement,
reserved addresses, the Vertex environment, output and log paths), held in a `JobPlan`.
`vcli.control.jobs` runs the plan (and re-exports these names, the ones callers know).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence

from vcli import cluster
from vcli.codec import custom_job_spec_to_dict
from vcli.executors import Executor, Placement, ReplicaLaunch
from vcli.placement.types import HERE
from vcli.spec import CustomJobSpec, ReplicaId, ReplicaState, WorkerPoolSpec, is_secret


class Placer(Protocol):
    """Decides where a job's replicas run and holds that capacity until `release(job_id)`.

    Raises `vcli.placement.NoCapacityError` when the job fits, but not now (trials wait), and
    `vcli.placement.PlacementError` when it can never fit.
    """

    def __call__(self, replicas: Sequence[ReplicaId], *, spec: CustomJobSpec | None = None,
                 job_id: str | None = None, holder: Mapping[str, Any] | None = None) -> Sequence[Placement]:
        """`holder` (study, trial, ...) names who holds the placed GPUs, for the host-wide
        leases other vcli processes see (`vcli hosts gpus`, their waiting messages)."""
        ...

    def release(self, job_id: str) -> None: ...

    def hold(self, job_id: str, replicas: Sequence[ReplicaId], spec: CustomJobSpec,
             placements: Sequence[Placement]) -> None:
        """Count a job that already runs at `placements` (a resumed controller's) as placed, so
        that new jobs are not given its GPUs; `release(job_id)` gives them back."""
        ...


#: Everything on this machine, no GPU bookkeeping (hosts without declared GPUs).
local_placer: Placer = HERE


@dataclass(frozen=True, kw_only=True)
class JobPlan:
    job_id: str
    spec: CustomJobSpec
    launches: tuple[ReplicaLaunch, ...]
    base_output_directory: str
    #: The placer that reserved capacity (GPUs) for this job; released when the job ends.
    placer: Placer = local_placer
    #: Plans the same job again, placed anew (a restart: `vcli.control.recovery`).
    replan: Callable[[], JobPlan] | None = None

    def release_placement(self) -> None:
        self.placer.release(self.job_id)


@dataclass(frozen=True, kw_only=True)
class _JobContext:
    """What every replica launch of one job shares (resolved once by `plan_job`)."""

    spec: CustomJobSpec
    job_id: str
    job_dir: Path
    trial_id: str | None
    base: str
    layout: cluster.ClusterLayout
    job_dict: dict[str, Any]
    shm_size: str | None


def plan_job(
    spec: CustomJobSpec,
    *,
    job_id: str,
    job_dir: Path,
    executor: Executor,
    trial_id: str | None = None,
    base_output_directory: str | None = None,
    placer: Placer = local_placer,
    shm_size: str | None = None,
    restore: Mapping[str, tuple[Placement, str]] | None = None,
    holder: Mapping[str, Any] | None = None,
) -> JobPlan:
    """Resolve every replica of `spec` into a launch (addresses reserved now, on their hosts).

    `restore` (task name -> (placement, "host:port")) plans a job that already ran, for a
    controller that resumes it: the placements and addresses are the recorded ones, nothing is
    placed or reserved again. `holder` (e.g. the study and trial) goes into the GPUs' leases.

    Each replica's `output_dir` is `<job_dir>/replicas/<task name>`; `workdir` is the local
    package's source directory (never run in: executors give each replica a private copy, the
    process executor in `<output_dir>/work` from a per-job snapshot in `<job_dir>/package`).
    """
    replicas = cluster.replica_ids(spec)
    if restore is not None:
        placements, addresses = _restored(replicas, restore)
    else:
        placements, addresses = _place(replicas, spec=spec, job_id=job_id, executor=executor, placer=placer,
                                       who={"trial": trial_id, **(holder or {})})
    ctx = _JobContext(
        spec=spec,
        job_id=job_id,
        job_dir=job_dir,
        trial_id=trial_id,
        layout=cluster.ClusterLayout(addresses=addresses, replicas=tuple(replicas)),
        base=base_output_directory or spec.base_output_directory or str(job_dir / "output"),
        job_dict=custom_job_spec_to_dict(spec, vertex_only=True),
        shm_size=shm_size,
    )
    launches = tuple(_launch(ctx, replica, placement) for replica, placement in zip(replicas, placements))

    def replan() -> JobPlan:
        return plan_job(spec, job_id=job_id, job_dir=job_dir, executor=executor, trial_id=trial_id,
                        base_output_directory=ctx.base, placer=placer, shm_size=shm_size, holder=holder)

    return JobPlan(job_id=job_id, spec=spec, launches=launches, base_output_directory=ctx.base, placer=placer,
                   replan=replan)


def _restored(replicas: Sequence[ReplicaId],
              restore: Mapping[str, tuple[Placement, str]]) -> tuple[list[Placement], dict[str, str]]:
    """The recorded placements and addresses; a replica with no record gets none (it never started)."""
    placements = [restore[r.task_name][0] if r.task_name in restore else Placement() for r in replicas]
    addresses = {r.task_name: restore[r.task_name][1] if r.task_name in restore else "" for r in replicas}
    return placements, addresses


def _place(replicas: Sequence[ReplicaId], *, spec: CustomJobSpec, job_id: str, executor: Executor, placer: Placer,
           who: Mapping[str, Any]) -> tuple[list[Placement], dict[str, str]]:
    """Place the replicas and reserve a port for each; the placement is released if a reservation fails.

    `who` names the holder for the GPU leases; its empty entries (no trial) are left out.
    """
    placements = list(placer(replicas, spec=spec, job_id=job_id, holder={k: v for k, v in who.items() if v}))
    try:
        addresses = {r.task_name: f"{p.address}:{executor.reserve_port(p)}" for r, p in zip(replicas, placements)}
    except BaseException:
        placer.release(job_id)
        raise
    return placements, addresses


#: Linux's bound on one argument or NAME=VALUE string of a program it starts (MAX_ARG_STRLEN).
MAX_EXEC_STRING = 131072


def _check_exec_limits(env: Mapping[str, str], argv: Sequence[str]) -> None:
    """Refuse what no replica could start with: one argument, or one variable, of 128 KiB or
    more. CLUSTER_SPEC and TF_CONFIG carry the job's spec, its args, command and env included, so
    140 KB of args passed --validate-only and then failed every start with exit 3 ("Argument
    list too long"), an executor error."""
    from vcli.errors import InvalidValueError

    for name, value in env.items():
        if (size := len(f"{name}={value}".encode())) >= MAX_EXEC_STRING:
            raise InvalidValueError("workerPoolSpecs", f"the replicas' {name} would be {size} bytes, and Linux starts no "
                                    f"program with a variable of {MAX_EXEC_STRING} bytes or more: {name} carries the "
                                    "job's args, command and env, so pass large values in a file")
    for word in argv:
        if (size := len(word.encode())) >= MAX_EXEC_STRING:
            raise InvalidValueError("workerPoolSpecs", f"an argument of {size} bytes is more than Linux passes to a "
                                    f"program ({MAX_EXEC_STRING - 1} bytes at most): pass large values in a file")


def _launch(ctx: _JobContext, replica: ReplicaId, placement: Placement) -> ReplicaLaunch:
    """The launch of one replica at `placement`: its pool's program, the Vertex env, its own paths."""
    pool = ctx.spec.worker_pool_specs[replica.pool_index]
    output_dir = ctx.job_dir / "replicas" / replica.task_name
    metric_file = str(output_dir / "hypertune" / "output.metrics")
    cs, ps, lp = pool.container_spec, pool.python_package_spec, pool.local_package
    env = cluster.replica_env(
        layout=ctx.layout,
        replica=replica,
        job=ctx.job_dict,
        job_id=ctx.job_id,
        trial_id=ctx.trial_id,
        base_output_directory=ctx.base,
        metric_file=metric_file,
        gpu_indices=_gpu_indices(pool, placement),
        user_env=_user_env(pool),
    )
    env.update(placement.gpu_env)  # a share of a GPU: the host's sharing mechanism's limits win
    _check_exec_limits(env, (*(cs.command if cs else ()), *_args(pool)))
    return ReplicaLaunch(
        job_id=ctx.job_id,
        trial_id=ctx.trial_id,
        replica=replica,
        placement=placement,
        image_uri=_image_uri(pool),
        command=tuple(cs.command) if cs else (),
        args=_args(pool),
        env=env,
        workdir=lp.path if lp else None,
        output_dir=str(output_dir),
        log_path=str(output_dir / "replica.log"),
        metric_file=metric_file,
        machine_spec=pool.machine_spec,
        python_module=ps.python_module if ps else None,
        local_package=lp,
        mounts=(ctx.base,),
        shm_size=ctx.shm_size,
        secret_env=tuple(k for k in env if is_secret(k)),
        package_uris=tuple(ps.package_uris) if ps else (),
    )


# Each of these reads one launch setting from whichever program spec the pool has (container,
# python package, local package), so `_launch` stays one flat list of fields.


def _gpu_indices(pool: WorkerPoolSpec, placement: Placement) -> tuple[int, ...] | None:
    """The placed GPUs; None (GPUs left alone) for a CPU pool given none on a host that declares
    none. On a host that declares GPUs, a CPU pool's replica gets () (CUDA_VISIBLE_DEVICES
    empty): it saw every GPU, those leased to other jobs too."""
    wants = placement.gpu_indices or pool.machine_spec.accelerator_count or placement.gpu_host
    return placement.gpu_indices if wants else None


def _user_env(pool: WorkerPoolSpec) -> dict[str, str]:
    """The spec's own env vars: the container's, then the python package's (a later name wins)."""
    cs, ps = pool.container_spec, pool.python_package_spec
    return {e.name: e.value for e in (cs.env if cs else ()) + (ps.env if ps else ())}


def _image_uri(pool: WorkerPoolSpec) -> str | None:
    """The first image the pool names (container, python package, local package); None if none."""
    cs, ps, lp = pool.container_spec, pool.python_package_spec, pool.local_package
    image = (cs.image_uri if cs else "") or (ps.executor_image_uri if ps else "") or (lp.executor_image_uri if lp else "")
    return image or None


def _args(pool: WorkerPoolSpec) -> tuple[str, ...]:
    """The program's args: the container's, else the python package's."""
    cs, ps = pool.container_spec, pool.python_package_spec
    return tuple(cs.args if cs else ps.args if ps else ())


def make_dirs(plan: JobPlan) -> None:
    """Create each replica's metric directory (private) and the job's model/checkpoint/TensorBoard dirs."""
    from vcli.store_tx import makedirs_private

    for launch in plan.launches:
        makedirs_private(os.path.dirname(launch.metric_file))
    for key in ("AIP_MODEL_DIR", "AIP_CHECKPOINT_DIR", "AIP_TENSORBOARD_LOG_DIR"):
        if plan.launches:
            os.makedirs(plan.launches[0].env[key], exist_ok=True)


def replica_address(launch: ReplicaLaunch) -> str:
    """The replica's `host:port` as its CLUSTER_SPEC names it ('' if none)."""
    spec = launch.env.get("CLUSTER_SPEC", "")
    import json

    try:
        data = json.loads(spec)
        return data["cluster"][f"workerpool{launch.replica.pool_index}"][launch.replica.index]
    except (ValueError, KeyError, IndexError):
        return ""


def pending_row(launch: ReplicaLaunch) -> dict[str, Any]:
    """The store's row of a replica about to start (`Store.upsert_replica`'s fields): PENDING,
    where it is placed, its log and metric file."""
    return {"host": launch.placement.host, "address": replica_address(launch), "state": ReplicaState.PENDING.value,
            "log_path": launch.log_path, "metric_file": launch.metric_file,
            "gpus": ",".join(map(str, launch.placement.gpu_indices)) or None}


def with_trial_args(spec: CustomJobSpec, args: Sequence[str]) -> CustomJobSpec:
    """Append hyperparameter args to every pool's containerSpec / pythonPackageSpec args."""
    pools = []
    for pool in spec.worker_pool_specs:
        if pool.container_spec is not None:
            pool = replace(pool, container_spec=replace(pool.container_spec, args=pool.container_spec.args + tuple(args)))
        if pool.python_package_spec is not None:
            pool = replace(
                pool, python_package_spec=replace(pool.python_package_spec, args=pool.python_package_spec.args + tuple(args))
            )
        pools.append(pool)
    return replace(spec, worker_pool_specs=tuple(pools))


def check_packages(spec: CustomJobSpec, where: str = "") -> None:
    """Every packageUris entry is there now: `--validate-only` and create find a missing one
    (a gs:// URI that maps to nothing), not every replica's or trial's start."""
    from vcli.codec.gcs import missing_package
    from vcli.errors import InvalidValueError

    for i, pool in enumerate(spec.worker_pool_specs):
        ps = pool.python_package_spec
        for j, uri in enumerate(ps.package_uris if ps is not None else ()):
            if why := missing_package(uri):
                raise InvalidValueError(f"{where}workerPoolSpecs[{i}].pythonPackageSpec.packageUris[{j}]", why)

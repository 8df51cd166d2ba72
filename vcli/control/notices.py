"""What to tell a user before a job or study launches: what this executor cannot honour
(accelerators, Reduction Servers, an image's command run as a process), gs:// paths mapped
to local folders, unfilled placeholders, and how the executor shares a job's machine out.
Each is one line; none stops the job."""

from __future__ import annotations

from typing import Any

from vcli.control.wiring import docker_cannot_run, image_commands
from vcli.errors import VcliError
from vcli.executors import Executor
from vcli.executors.kinds import kind_of
from vcli.spec import CustomJobSpec, ExecutorKind

__all__ = ["accelerator_notices", "image_command_notices", "launch_notices", "reduction_server_notices"]


def launch_notices(kind: ExecutorKind, spec: CustomJobSpec, *, auto: bool = False,
                   executor: Executor | None = None) -> list[str]:
    """Lines to print before a job or study launches: accelerators and reduction servers this
    executor cannot honour, gs:// paths mapped to local folders, unfilled shell placeholders,
    image pools whose command runs on the host."""
    from vcli import codec

    gcs = codec.gcs_notice(spec)
    return [*accelerator_notices(kind, spec), *reduction_server_notices(spec), *([gcs] if gcs else []),
            *codec.placeholder_notices(spec), *image_command_notices(kind, spec, auto=auto),
            *_shared_out(executor, spec)]


def _shared_out(executor: Executor | None, spec: CustomJobSpec) -> list[str]:
    """The executor's note on how it shares a job's CPUs and memory out (else nothing)."""
    try:
        note = executor.share_notice(spec) if executor is not None else None
    except VcliError:
        return []
    return [note] if note else []


def image_command_notices(kind: ExecutorKind, spec: Any, *, auto: bool) -> list[str]:
    """One line per pool whose image the executor does not run its command in; `auto`: vcli
    chose the executor (then the reason is why Docker could not)."""
    if not kind_of(kind).processes_only:
        return []
    pools = image_commands(spec)
    if not pools:
        return []
    reason = docker_cannot_run(pools) if auto else None
    why = (f"the docker executor cannot run it here ({reason.rstrip('.')})" if reason
           else f"the {kind.value} executor runs processes")
    return [f"Note: workerpool{i} runs its command as a process on this host, not inside image [{image}]: {why}. "
            "--executor=docker runs it in the image, as Vertex does." for i, image in pools]


def accelerator_notices(kind: ExecutorKind, spec: Any) -> list[str]:
    """One line per pool that asks for GPUs this machine does not declare or have (local and
    docker executors; the SSH scheduler refuses such jobs itself). Never silently: the replica
    then runs without the accelerator."""
    if kind_of(kind).places_itself:
        return []  # its placer refuses what cannot fit
    from vcli.placement.hosts import local_host

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

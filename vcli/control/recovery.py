"""How a job recovers: replicas whose handle was never recorded are found again (`found`), and
with `scheduling.restartJobOnWorkerRestart` a replica that fails restarts the whole job.

A controller killed between an executor's `start` and writing the handle down leaves a
replica running that the store calls PENDING; `resume` asks the executor to `find` it and
adopts it, so no replica ever runs twice, and `cancel` finds it to stop it (`unrecorded`).

Vertex restarts every replica of a job whose worker restarted, for trainers that cannot take
a worker leaving and joining (most all-reduce trainers); `disableRetries` turns that off. vcli
counts a replica that exits non-zero as such a restart: the job's other replicas are stopped,
their handles released, the job is placed again (its GPUs may go to another waiter meanwhile,
as on Vertex, where new VMs come up) and every replica starts again with the same job id,
output, checkpoint and log paths, so a trainer that checkpoints resumes from its last one. At
most `MAX_JOB_RESTARTS` times; the next failure fails the job.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Mapping

from vcli.executors import ReplicaHandle, ReplicaLaunch, ReplicaStatus
from vcli.spec import ReplicaState
from vcli.store import now_iso

if TYPE_CHECKING:
    from vcli.control.jobs import JobRun

#: How many times one job is restarted before a failing replica fails it.
MAX_JOB_RESTARTS = 3
#: How often a restarting job whose GPUs went to someone else tries to place itself again.
REPLAN_RETRY_SECONDS = 0.25


def end_time(status: ReplicaStatus) -> str:
    """When an ended replica ended, for the store: its executor's record where there is one (it
    may have ended while no controller watched, long before this poll), never later than now
    (a remote host's clock may be ahead); else now."""
    return now_iso(None if status.end_time is None else min(status.end_time, time.time()))


def restart_allowed(run: JobRun) -> bool:
    """Does this job restart (rather than fail) when a replica exits non-zero now?"""
    sched = run.plan.spec.scheduling
    return (sched is not None and sched.restart_job_on_worker_restart and not sched.disable_retries
            and run.plan.replan is not None and run.restarts < MAX_JOB_RESTARTS)


def restarts_so_far(run: JobRun) -> int:
    """How many times an earlier controller restarted this job (`resume`): each restart is
    noted in every replica's log (`restart_message`), so the chief's log counts them. A resumed
    job restarted 3 more times (5 runs of a trainer, not at most 4)."""
    import re

    from vcli.logs import read_records

    sched = run.plan.spec.scheduling
    if sched is None or not sched.restart_job_on_worker_restart or not run.plan.launches:
        return 0
    launch = run.plan.launches[0]
    found = [int(m.group(1)) for r in read_records(launch.log_path, launch.task_name)
             if r.stream == "vcli" and (m := re.search(r"\(restartJobOnWorkerRestart; restart (\d+) of at most", r.message))]
    return max(found, default=0)


def restart_message(run: JobRun, task_name: str, status: ReplicaStatus) -> str:
    detail = f" ({status.message})" if status.message else ""
    return (f"Restarting job {run.job_id}: replica {task_name} exited with code {status.exit_code}{detail} "
            f"(restartJobOnWorkerRestart; restart {run.restarts} of at most {MAX_JOB_RESTARTS}).")


def restart_job(run: JobRun, old: list[Any]) -> None:
    """The restarting thread: stop and release the replicas of `old`, place the job again,
    record its replicas PENDING and start them all. Stops early when the job is cancelled."""
    from vcli.placement import NoCapacityError

    running = [r.handle for r in old if r.handle is not None and not r.done]
    if running:
        run.executor.stop(running, grace_seconds=run.stop_grace_seconds)
    run.executor.release([r.handle for r in old if r.handle is not None])
    run.plan.release_placement()
    replan = run.plan.replan
    assert replan is not None
    while True:
        if run.cancelled():
            run.restarting = False
            return
        try:
            plan = replan()
            break
        except NoCapacityError:
            time.sleep(REPLAN_RETRY_SECONDS)
    run.adopt_plan(plan)
    run.restarting = False
    run.launch_all()


def found(run: JobRun, launch: ReplicaLaunch) -> ReplicaHandle | None:
    """The replica of `launch` that an earlier controller started without recording its handle,
    adopted and recorded RUNNING now; None if the executor finds none."""
    handle = run.executor.find(launch)
    if handle is not None:
        run.executor.adopt(handle, launch)
        run.store.upsert_replica(run.job_id, launch.task_name, handle=handle.to_json(), state=ReplicaState.RUNNING.value)
    return handle


def unrecorded(executor: Any, launches: Any, rows: Mapping[str, Any]) -> dict[str, ReplicaHandle]:
    """{task name: handle} of the replicas of `launches` whose stored row (`rows`, by task name)
    has neither a handle nor an end, but that `executor` finds started: a controller killed
    between an executor's `start` and writing the handle down (for `resume` to adopt rather
    than start again, for `cancel` to stop rather than leave running)."""
    out: dict[str, ReplicaHandle] = {}
    for launch in launches:
        row = rows.get(launch.task_name)
        if row is not None and not row.handle and not row.state.is_final():
            handle = executor.find(launch)
            if handle is not None:
                out[launch.task_name] = handle
    return out


def leased(run: JobRun, launch: ReplicaLaunch) -> bool:
    """Before a resumed job (`run`) starts the replica of `launch`, which its dead controller
    never started: take the leases of its recorded GPUs (on this machine or its SSH host), waiting (as a new job
    waits: `maxWaitDuration`, a WaitExpiredError fails the job) while another holder took them
    meanwhile; False once the job is cancelled in that wait. `resume` failed the job at once
    there, and stopped the replicas it had re-attached."""
    from vcli.control.waiting import WaitCancelled, lease_unstarted

    try:
        lease_unstarted([launch], run.plan.spec, run.on_progress, cancelled=run.cancelled,
                        remote=run.executor.gpu_leases)
    except WaitCancelled:
        return False
    return True

"""Cancelling a job or study from any process.

Another terminal's `cancel` sets the job's cancel flag and, while the job's controller is
alive (`vcli.control.liveness`), lets it do the stopping. When the controller is gone (killed,
machine rebooted), `stop_orphaned` stops the replicas it left from here, through the
executors named in their stored handles.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from vcli.control.liveness import has_ended
from vcli.enums import JobKind, JobState, ReplicaState, RpcCode, TrialState
from vcli.store import JobRow, Store, now_iso

if TYPE_CHECKING:  # the data model's dataclasses
    from vcli.executors import ReplicaHandle, ReplicaStatus
    from vcli.spec import Trial

#: How long `wait_for_end` waits by default for a live controller to stop a job.
WAIT_SECONDS = 120.0


def request_cancel(store: Store, row: JobRow) -> bool:
    """Set the job's cancel flag (state CANCELLING); False if `row` had already ended.

    A job that ends just now keeps its final state (the store does not overwrite one).
    """
    if has_ended(row):
        return False
    store.request_cancel(row.id)
    return True


def wait_for_end(store: Store, job_id: str, timeout: float = WAIT_SECONDS, interval: float = 0.1) -> JobState | None:
    """The job's final state once its controller has ended it; None if `timeout` passes first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = store.get_job(job_id)
        if row is None:
            return None
        if has_ended(row):
            return JobState(row.state)
        time.sleep(interval)
    return None


def _orphan_outcome(store: Store, job: JobRow) -> tuple[JobState, dict | None]:
    """The final state of an orphaned custom job once its replicas are collected: what `resume`
    would have recorded when every replica had already ended on its own while nobody watched
    (SUCCEEDED if all exited 0, FAILED if one did not), else CANCELLED (a replica was stopped,
    or never started). A study is always CANCELLED."""
    cancelled = (JobState.JOB_STATE_CANCELLED, {"code": RpcCode.CANCELLED, "message": "CANCELED"})
    if job.kind != JobKind.CUSTOM_JOB.value:
        return cancelled
    replicas = store.replicas(job.id)
    states = {r.state for r in replicas}
    if not replicas or not states <= {ReplicaState.SUCCEEDED, ReplicaState.FAILED}:
        return cancelled
    if states == {ReplicaState.SUCCEEDED}:
        return JobState.JOB_STATE_SUCCEEDED, None
    failed = next(r for r in replicas if r.state == ReplicaState.FAILED)
    ended = (f"exited with a non-zero status of {failed.exit_code}" if failed.exit_code is not None
             else "ended without an exit code")
    return JobState.JOB_STATE_FAILED, {"code": RpcCode.INTERNAL, "message": f"The replica {failed.task_name} {ended} "
                                       "while no vcli process watched it."}


def stop_orphaned(store: Store, row: JobRow, *, on_warning: Callable[[str], None], grace_seconds: float = 3.0,
                  cancelled: bool = False) -> None:
    """Stop what a dead controller left of `row` (and of its trial jobs); mark them CANCELLED
    (a custom job whose replicas had all ended on their own: SUCCEEDED or FAILED, as `resume`
    would have recorded; CANCELLED all the same when `cancelled`: the cancel was asked before
    the controller died, and its stop may have ended them).

    Replicas are stopped and released through the executor named in each stored handle. A
    failure to stop one executor's replicas is reported through `on_warning` and the others
    are still stopped: the job is marked CANCELLED either way, as nobody else will.
    """
    for job in [row, *store.child_jobs(row.id)]:
        _record_unrecorded(store, job, row, on_warning)
        _stop_orphaned_job(store, job, on_warning=on_warning, grace_seconds=grace_seconds, cancelled=cancelled)
    _cancel_leftovers(row, on_warning)
    if row.kind == JobKind.HYPERPARAMETER_TUNING_JOB.value:
        _close_open_trials(store, row)


def _cancel_leftovers(row: JobRow, on_warning: Callable[[str], None]) -> None:
    """Cancel what a dead controller of `row` left with its cluster that no replica recorded
    (`Executor.cancel_leftovers`: a Slurm allocation still pending when it died, which would
    otherwise run later and hold nodes for a job that had ended). Only kinds whose settings
    the job's record keeps (`Execution.settings`) can have left anything."""
    from vcli.control.wiring import executor_for_handles
    from vcli.executors.kinds import ExecutorOptions

    name = (row.record or {}).get("executor")
    stored = (row.record or {}).get(name) if isinstance(name, str) else None
    if not isinstance(name, str) or not isinstance(stored, dict):
        return
    study = row.kind == JobKind.HYPERPARAMETER_TUNING_JOB.value
    try:
        executor_for_handles(name, ExecutorOptions(stored=stored)).cancel_leftovers(row.id, study=study)
    except Exception as e:  # the cluster may be gone; the job is marked CANCELLED all the same
        on_warning(f"could not cancel {row.id}'s queued {name} jobs: {e}")


def _record_unrecorded(store: Store, job: JobRow, top: JobRow, on_warning: Callable[[str], None]) -> None:
    """Record RUNNING, with its handle, each replica of `job` (`top`, or a trial job of the study
    `top`) that its dead controller started but never recorded (killed between the executor's
    `start` and the write), found as `resume` finds it: `cancel` then stops it, where it ran on."""
    from vcli.control import recovery
    from vcli.control.runner import plan_stored_custom_job, restore_of

    rows = {r.task_name: r for r in store.replicas(job.id)}
    if job.kind != JobKind.CUSTOM_JOB.value or all(r.handle or r.state.is_final() for r in rows.values()):
        return
    here = os.open(".", getattr(os, "O_PATH", os.O_RDONLY))  # planning enters the job's working directory: come back after
    try:  # a trial job's record holds its spec; how it ran (hosts, cluster) is its study's
        planned = plan_stored_custom_job(store, replace(job, record={**top.record, **job.record}),
                                         restore=restore_of(rows.values()))
        try:
            found = recovery.unrecorded(planned.execution.executor, planned.plan.launches, rows)
        finally:
            planned.close()
    except Exception as e:  # the job is marked CANCELLED all the same
        on_warning(f"could not look for replicas of job {job.id} that started unrecorded: {e}")
        return
    finally:
        os.fchdir(here)
        os.close(here)
    for task, handle in found.items():
        store.upsert_replica(job.id, task, handle=handle.to_json(), state=ReplicaState.RUNNING.value)


def _stop_orphaned_job(store: Store, job: JobRow, *, on_warning: Callable[[str], None], grace_seconds: float,
                       cancelled: bool = False) -> None:
    """Stop and record one job's leftover replicas, executor by executor, then record the job's
    final state (`_orphan_outcome`) unless it already has one."""
    for name, pairs in _unended_replicas(store, job.id).items():
        try:
            _stop_replicas(store, job.id, name, pairs, grace_seconds=grace_seconds)
        except Exception as e:  # report and go on with the other executors
            on_warning(f"could not stop replicas of job {job.id} ({name}): {e}")
    if not has_ended(job):
        state, error = (JobState.JOB_STATE_CANCELLED, {"code": RpcCode.CANCELLED, "message": "CANCELED"}) if cancelled \
            else _orphan_outcome(store, job)
        store.set_state(job.id, state, error=error)


def _unended_replicas(store: Store, job_id: str) -> dict[str, list[tuple[str, ReplicaHandle]]]:
    """The job's replicas with no recorded end, as (task name, handle) by executor name.

    One that never got a handle never started: it is recorded NOT_STARTED here and left out.
    """
    from vcli.executors import ReplicaHandle

    by_executor: dict[str, list[tuple[str, ReplicaHandle]]] = {}
    for replica in store.replicas(job_id):
        if replica.state.is_final():
            continue
        if not replica.handle:
            store.upsert_replica(job_id, replica.task_name, state=ReplicaState.NOT_STARTED.value)
            continue
        handle = ReplicaHandle.from_json(replica.handle)
        by_executor.setdefault(handle.executor, []).append((replica.task_name, handle))
    return by_executor


def _stop_replicas(store: Store, job_id: str, executor_name: str, pairs: list[tuple[str, ReplicaHandle]], *,
                   grace_seconds: float) -> None:
    """Through the executor called `executor_name`: stop those of `pairs` that still run, record
    how each ended, release them all. Raises what the executor raises (it is closed either way)."""
    from vcli.control import recovery
    from vcli.control.wiring import executor_for_handles

    handles = [h for _, h in pairs]
    executor = executor_for_handles(executor_name)
    try:
        # Replicas that ended on their own while nobody watched keep their exit.
        before = {task: executor.poll(h) for task, h in pairs}
        executor.stop([h for task, h in pairs if before[task].running], grace_seconds=grace_seconds)
        for task, h in pairs:
            status = before[task] if not before[task].running else executor.poll(h)
            store.upsert_replica(job_id, task, state=_replica_end(before[task], status).value,
                                 exit_code=status.exit_code, message=status.message, end_time=recovery.end_time(status))
        executor.release(handles)
    finally:
        executor.close()


def _replica_end(before: ReplicaStatus, after: ReplicaStatus) -> ReplicaState:
    """STOPPED if it still ran `before` the stop, or its supervisor says vcli had stopped it (a
    `cancel` killed after its stop: FAILED, "killed by signal SIGKILL"), else how it ended."""
    if before.running or after.stopped:
        return ReplicaState.STOPPED
    return ReplicaState.SUCCEEDED if after.exit_code == 0 else ReplicaState.FAILED


def _close_open_trials(store: Store, study: JobRow) -> None:
    """End every trial of the study that had not ended (`_closed_trial`)."""
    from vcli.codec import iter_parameters, study_spec_from_stored

    specs = {p.parameter_id: p for p in iter_parameters(study_spec_from_stored(study.record["studySpec"]).parameters)}
    for trial in store.trials(study.id):
        if not trial.state.is_final():
            store.save_trial(study.id, _closed_trial(trial), specs)


def _closed_trial(trial: Trial) -> Trial:
    """`trial` ended by the study's cancel: SUCCEEDED with its last measurement if it reported
    one, else INFEASIBLE."""
    if trial.measurements:  # a stopped trial keeps its last measurement (as on Vertex)
        return replace(trial, state=TrialState.SUCCEEDED, end_time=now_iso(), final_measurement=trial.measurements[-1])
    return replace(trial, state=TrialState.INFEASIBLE, end_time=now_iso(),
                   infeasible_reason="Stopped before reporting a measurement: the study was "
                                     "cancelled after its controller had died.")

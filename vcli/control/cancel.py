"""Cancelling a job or study from any process, and knowing whether its controller still runs.

A job is run by one vcli process, its *controller* (the foreground `create`, or the detached
runner of `create --async`). The store records the controller's pid and start time; another
terminal's `cancel` sets the job's cancel flag and, while the controller is alive, lets it do
the stopping. When the controller is gone (killed, machine rebooted), `stop_orphaned` stops the
replicas it left from here, through the executors named in their stored handles.

Linux only: liveness reads /proc/PID/stat, so a reused pid is not mistaken for the controller.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from vcli.enums import JobKind, JobState, ReplicaState, RpcCode, TrialState
from vcli.store import JobRow, Store, now_iso

if TYPE_CHECKING:  # the data model's dataclasses: not imported by `custom-jobs list`, which reads liveness here
    from vcli.executors import ReplicaHandle, ReplicaStatus
    from vcli.spec import Trial

#: How long `wait_for_end` waits by default for a live controller to stop a job.
WAIT_SECONDS = 120.0
#: Replica states with a recorded end: nothing of theirs is left to stop.


def _stat_fields(pid: int) -> list[bytes]:
    """The fields of /proc/PID/stat after the command name (which may itself hold spaces and
    ')'): [0] is the state, [19] the start time; empty if the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return []
    return data[data.rfind(b")") + 2:].split()


def process_start_time(pid: int) -> str | None:
    """The kernel's start time of `pid` (clock ticks since boot, as text); None if it is gone,
    or a zombie: a process killed with `kill -9` stays in the table until its parent reaps it
    (for ever under a parent that never does), but it controls nothing any more."""
    fields = _stat_fields(pid)
    if len(fields) < 20 or fields[0] in (b"Z", b"X"):
        return None
    return fields[19].decode()


def controller_stopped(row: JobRow) -> bool:
    """Is the job's live controller stopped (Ctrl-Z, SIGSTOP, a debugger)? It honours a cancel
    only once it continues."""
    fields = _stat_fields(row.controller_pid) if row.controller_pid else []
    return bool(fields) and fields[0] in (b"T", b"t")


def controller_alive(row: JobRow) -> bool:
    """Is the vcli process that runs this job still there (same pid, same start time)?"""
    if not row.controller_pid:
        return False
    return process_start_time(row.controller_pid) == row.controller_start


def mark_controller(store: Store, job_id: str, pid: int | None = None) -> None:
    """Record `pid` (default: this process) as the job's controller."""
    pid = os.getpid() if pid is None else pid
    store.update_job(job_id, controller_pid=pid, controller_start=process_start_time(pid))


def claim_controller(store: Store, job_id: str) -> None:
    """Make this process the job's controller, atomically; `ControllerConflictError` if a live
    vcli process already is (two controllers never drive the same job)."""
    from vcli.errors import ControllerConflictError

    pid = os.getpid()
    holder = store.claim_controller(job_id, pid, process_start_time(pid),
                                    alive=lambda p, start: process_start_time(p) == start)
    if holder is not None:
        raise ControllerConflictError(f"Job [{job_id}] is being run by vcli process {holder[0]}; stop it first "
                                      f"(`kill {holder[0]}` or `cancel`), or leave it be.")


def give_back(store: Store, row: JobRow) -> None:
    """Undo this process's `claim_controller` of `row` (as read before the claim): a resume that
    ends before it runs anything (a secret its shell lacks, a cluster it cannot reach) leaves
    the record naming the controller that died, not itself."""
    pid = os.getpid()
    store.hand_back_controller(row.id, (row.controller_pid, row.controller_start, row.heartbeat),
                               (pid, process_start_time(pid)))


def has_ended(row: JobRow) -> bool:
    return JobState(row.state).is_final()


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
    if "slurm" in (row.record or {}):
        _cancel_slurm_leftovers(row, on_warning)
    if row.kind == JobKind.HYPERPARAMETER_TUNING_JOB.value:
        _close_open_trials(store, row)


def _cancel_slurm_leftovers(row: JobRow, on_warning: Callable[[str], None]) -> None:
    """scancel the Slurm jobs a dead controller submitted for `row` (or its trials) that no
    replica recorded: an allocation still pending when it died (only its memory knew it),
    which would otherwise run later and hold nodes for a job that had ended."""
    from vcli.control.wiring import slurm_executor

    study = row.kind == JobKind.HYPERPARAMETER_TUNING_JOB.value
    ours = (lambda name: name.startswith(f"vcli-{row.id}-t")) if study else (lambda name: name == f"vcli-{row.id}")
    try:
        slurm_executor(row.record["slurm"]).cancel_leftovers(ours, pending_only=False)
    except Exception as e:  # the cluster may be gone; the job is marked CANCELLED all the same
        on_warning(f"could not cancel {row.id}'s queued Slurm jobs: {e}")


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

"""The custom-job controller: plan replicas, start them, watch them, decide the job's state.

`plan_job` (in `vcli.control.plan`, re-exported here) resolves a `CustomJobSpec` into one
`ReplicaLaunch` per replica (placement, reserved addresses, the Vertex environment, output and
log paths). `JobRun` drives one job without blocking: `start()` then `poll()` until it returns a
final state; the study controller runs many JobRuns side by side this way, and `run_job` is the
blocking wrapper the CLI uses.

Rules (Vertex's): the job SUCCEEDS when the primary replica (workerpool0-0) exits 0; any
replica that exits non-zero FAILS the job and every sibling is stopped at once; a cancel
request (Ctrl-C, or `vcli custom-jobs cancel` from any terminal, seen through the store)
stops everything and ends CANCELLED; `scheduling.timeout` ends the job FAILED. Every state
change is written to the store before anything else hears of it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from vcli.control import failures, interrupts, recovery
from vcli.control.clock import SYSTEM_CLOCK, Clock
from vcli.control.plan import JobPlan, Placer, local_placer, make_dirs, pending_row, plan_job, with_trial_args
from vcli.errors import StoreError, VcliError, stopped_by
from vcli.executors import Executor, ReplicaHandle, ReplicaLaunch, ReplicaStatus
from vcli.spec import JobState, ReplicaState, RpcCode
from vcli.store import Store, now_iso

# The public names; those that moved to `vcli.control.plan` are re-exported for importers.
__all__ = ["STOP_GRACE_SECONDS", "WORKER_DRAIN_SECONDS", "JobPlan", "JobRun", "Placer", "local_placer", "make_dirs",
           "plan_job", "run_job", "with_trial_args"]

#: Seconds between SIGTERM and SIGKILL when vcli stops replicas (TF ignores SIGTERM).
STOP_GRACE_SECONDS = 3.0
#: After the chief succeeds, how long other workers may take to finish on their own.
WORKER_DRAIN_SECONDS = 30.0


@dataclass
class _Replica:
    launch: ReplicaLaunch
    handle: ReplicaHandle | None = None
    exit_code: int | None = None
    done: bool = False


#: How a job ends: its final state and the error recorded with it (None when it succeeded).
_Ending = tuple[JobState, dict[str, Any] | None]


@dataclass
class JobRun:
    """One custom job being run. Non-blocking: call `start()`, then `poll()` until final."""

    store: Store
    executor: Executor
    plan: JobPlan
    timeout_seconds: float | None = None
    on_progress: Callable[[str], None] = lambda msg: None
    #: Say "Stopping N replica(s) of job ID" when stopping (a study's trial job does not: the
    #: study shows the trial STOPPING, with why).
    announce_stop: bool = True
    clock: Clock = SYSTEM_CLOCK
    state: JobState = JobState.JOB_STATE_PENDING
    error: dict[str, Any] | None = None
    #: Why the job could not start (an executor or spec error raised by prepare/start).
    startup_error: BaseException | None = None
    _replicas: list[_Replica] = field(default_factory=list)
    _cancel: threading.Event = field(default_factory=threading.Event)
    _worker: threading.Thread | None = None
    _worker_error: BaseException | None = None
    _final: JobState | None = None
    #: Set once the job's ending is decided: (state, error), and the thread stopping its replicas.
    _ending: _Ending | None = None
    _stopper: threading.Thread | None = None
    _stop_error: BaseException | None = None
    _started_at: float = 0.0
    _chief_done_at: float | None = None
    _last_cancel_check: float = 0.0
    #: Seconds between heartbeats written to the store (`JobRow.heartbeat`).
    heartbeat_seconds: float = 2.0
    #: Beat and ask for cancel requests itself (not a study's trial jobs: `StudyRun._tick` does).
    store_checks: bool = True
    _last_beat: float = float("-inf")
    stop_grace_seconds: float = STOP_GRACE_SECONDS
    #: How often the job restarted (`vcli.control.recovery`), and whether it is doing so now.
    restarts: int = 0
    restarting: bool = False
    resumed: bool = False  # taken over (`attach`): a replica it starts first waits for its GPUs (`recovery.leased`)
    #: Why it FAILED (`vcli.control.failures`); the replica that failed it and how it ended; the
    #: kernel's OOM-kill count when it started (`failures.oom_kills`).
    failure: failures.Failure | None = None
    failed_replica: tuple[ReplicaLaunch, ReplicaStatus] | None = None
    oom_kills: int | None = field(default_factory=failures.oom_kills)

    @property
    def job_id(self) -> str:
        return self.plan.job_id

    @property
    def primary_handle(self) -> ReplicaHandle | None:
        """The handle of workerpool0-0 once it started (whose metric file a trial reads)."""
        first = self._replicas[0] if self._replicas else None
        return first.handle if first is not None else None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Prepare (possibly a long image build) and start every replica, in a background thread."""
        self._started_at = self.clock.now()
        self.adopt_plan(self.plan)
        self._set_state(JobState.JOB_STATE_PENDING)
        self._launch_in_background()

    def adopt_plan(self, plan: JobPlan) -> None:
        """Run `plan` (the job's, or a restart's new one): its replicas, recorded PENDING."""
        self.plan = plan
        replicas = [_Replica(launch=l) for l in plan.launches]
        for r in replicas:
            self.store.upsert_replica(self.job_id, r.launch.task_name, **pending_row(r.launch))
        self._replicas = replicas

    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def attach(self, stored: Mapping[str, Any], *, final: _Ending | None = None, running_for: float = 0.0) -> None:
        """Take over a job a previous controller started (`resume`), instead of `start()`.

        `stored` maps task names to the store's replica rows. Replicas with a handle are
        adopted as they are (never restarted): running ones are watched, ones that ended
        meanwhile report their exit through the executor; replicas that never started are
        started now. `final` is the job's recorded end, if the previous controller recorded
        one. `running_for` is how long the job had been running (its timeout counts it).
        """
        self._started_at = self.clock.now() - running_for
        self.restarts, self.resumed = recovery.restarts_so_far(self), True
        self._replicas = []
        for launch in self.plan.launches:
            self._replicas.append(self._adopt(launch, stored.get(launch.task_name), final))
        if final is not None:
            self.state, self.error = final
            self._final = final[0]
            return
        # Its GPUs are still in use: the placer must not hand them to the next trial.
        self.plan.placer.hold(self.job_id, [launch.replica for launch in self.plan.launches], self.plan.spec,
                              [launch.placement for launch in self.plan.launches])
        if any(r.handle is None for r in self._replicas):
            self._launch_in_background()
        else:
            self._set_state(JobState.JOB_STATE_RUNNING)

    def _adopt(self, launch: ReplicaLaunch, row: Any, final: _Ending | None) -> _Replica:
        """The replica of `launch` as its stored `row` left it (None: no row). One with a handle is
        taken as it is, never restarted: a running one, or a FAILED one (its controller died before
        failing or restarting the job for it), is handed to the executor to poll unless the job has
        ended; another ended one keeps its exit (a chief that succeeded starts the workers' drain).
        One without is `find`-ed (a controller killed before it recorded the handle), else unstarted."""
        r = _Replica(launch=launch)
        if row is None and final is None:  # its controller died before recording it: as `start` records it
            self.store.upsert_replica(self.job_id, launch.task_name, **pending_row(launch))
        if row is None or not row.handle:
            r.handle = recovery.found(self, launch) if final is None else None
            return r
        r.handle = ReplicaHandle.from_json(row.handle)
        if final is None and (row.state == ReplicaState.FAILED or not row.state.is_final()):
            self.executor.adopt(r.handle, launch)
        elif row.state.is_final():
            r.done, r.exit_code = True, row.exit_code
            if row.state == ReplicaState.SUCCEEDED and launch.replica.pool_index == 0:
                self._chief_done_at = self.clock.now()
        return r

    def _launch_in_background(self) -> None:
        """Create the job's directories, then start (in a thread) every replica without a handle."""
        try:
            make_dirs(self.plan)
        except OSError as e:
            raise StoreError(f"Cannot create the job's directories: {e.strerror or e} ({e.filename}).") from e
        self._worker = threading.Thread(target=self.launch_all, name=f"vcli-start-{self.job_id}", daemon=True)
        self._worker.start()

    def launch_all(self) -> None:
        """(The start thread) prepare and start every replica without a handle, in order."""
        try:
            todo = [r for r in self._replicas if r.handle is None]
            launches = self.executor.prepare([r.launch for r in todo], cancelled=self._cancel, progress=self.on_progress)
            for r, launch in zip(todo, launches):
                r.launch = launch
            for r in todo:
                if self._cancel.is_set() or (self.resumed and not recovery.leased(self, r.launch)):
                    return
                handle = self.executor.start(r.launch)
                try:
                    self.store.upsert_replica(
                        self.job_id, r.launch.task_name, handle=handle.to_json(), state=ReplicaState.RUNNING.value,
                        start_time=now_iso(),
                    )
                finally:
                    # Published to poll() only now: a replica that ends at once must have its
                    # RUNNING row before poll() records its end (never after, overwriting it).
                    r.handle = handle
        except BaseException as e:
            self._worker_error = e

    def cancel(self) -> None:
        """Ask the job to stop (idempotent); poll() carries it out and ends CANCELLED."""
        if not self._cancel.is_set():
            self._cancel.set()
            if not self.state.is_final():
                self._set_state(JobState.JOB_STATE_CANCELLING)

    def hurry(self) -> None:
        """Ctrl-C again while stopping: kill every running replica now, not after the grace period."""
        if running := self._running_handles():
            self.executor.stop(running, grace_seconds=0.0)

    # ------------------------------------------------------------------ polling

    def poll(self) -> JobState | None:
        """Advance the job; returns its final state once it has one (and everything stopped).

        Each poll beats, honours a cancel request, then looks for an ending in this order: the
        start thread failed, the timeout passed, a replica exited non-zero, the chief succeeded
        (only once every replica started). The first ending found is carried out by `_finish`.
        """
        if self._final is not None:
            return self._final
        if self._ending is not None:
            return self._finish(*self._ending)
        now = self.clock.now()
        if self.store_checks:
            self._heartbeat(now)
            self._check_cancel_request(now)
        if self._cancel.is_set():
            return self._finish(JobState.JOB_STATE_CANCELLED, {"code": RpcCode.CANCELLED, "message": "CANCELED"})
        # Sampled before the replicas are polled: when False, every replica had its handle then.
        starting = self._worker is not None and self._worker.is_alive()
        ending = self._startup_failure() or self._timed_out(now)
        if ending is None and not self.restarting:
            self._mark_running(starting)
            ending = self._collect_exits(now)
        if ending is None and not starting:
            ending = self._chief_succeeded(now)
        return None if ending is None else self._finish(*ending)

    def _heartbeat(self, now: float) -> None:
        """Write the store's heartbeat, at most once per `heartbeat_seconds`."""
        if now - self._last_beat > self.heartbeat_seconds:
            self._last_beat = now
            self.store.beat(self.job_id)

    def _check_cancel_request(self, now: float) -> None:
        """Every 0.2 s, ask the store whether another process requested a cancel; `cancel()` if so."""
        if now - self._last_cancel_check > 0.2:
            self._last_cancel_check = now
            if self.store.cancel_requested(self.job_id):
                self.cancel()

    def _startup_failure(self) -> _Ending | None:
        """FAILED (code 3) if the start thread raised; the exception becomes `startup_error`."""
        err = self._worker_error
        if err is None:
            return None
        msg = str(err) if isinstance(err, VcliError) else f"{type(err).__name__}: {err}"
        self.startup_error = err
        return JobState.JOB_STATE_FAILED, {"code": RpcCode.INVALID_ARGUMENT, "message": msg}

    def _timed_out(self, now: float) -> _Ending | None:
        """FAILED (code 4) past `scheduling.timeout` plus the executor's `timeout_grace_seconds`
        (a scheduler that enforces it itself, Slurm's --time, reports its own reason)."""
        grace = float(self.executor.timeout_grace_seconds)
        if self.timeout_seconds is not None and now - self._started_at > self.timeout_seconds + grace:
            return (
                JobState.JOB_STATE_FAILED,
                {"code": RpcCode.DEADLINE_EXCEEDED, "message": f"Job exceeded its scheduling.timeout of {self.timeout_seconds:g}s and was stopped."},
            )
        return None

    def _mark_running(self, starting: bool) -> None:
        """PENDING becomes RUNNING once the start thread is done (every replica launched)."""
        if not starting and self.state == JobState.JOB_STATE_PENDING:
            self._set_state(JobState.JOB_STATE_RUNNING)

    def _collect_exits(self, now: float) -> _Ending | None:
        """Record each replica that ended since the last poll, in order; FAILED at the first
        non-zero exit (the replicas after it are left to `_finish`). The chief's success is noted."""
        for r in self._replicas:
            if r.handle is None or r.done:
                continue
            status = self.executor.poll(r.handle)
            if status.running:
                continue
            self._record_exit(r, status)
            if status.exit_code != 0 and recovery.restart_allowed(self):
                self._restart(r, status)
                return None
            if status.exit_code != 0:
                return self._replica_failed(r, status)
            if r.launch.replica.pool_index == 0 and r.launch.replica.index == 0:
                self._chief_done_at = now
        return None

    def _restart(self, r: _Replica, status: ReplicaStatus) -> None:
        """Restart every replica (`vcli.control.recovery`), in the start thread."""
        self.restarts += 1
        message = recovery.restart_message(self, r.launch.task_name, status)
        for other in self._replicas:  # recorded first (resume counts these) before the user sees it
            _log_vcli(other.launch, message)
        self.on_progress(message)
        self.restarting = True
        old, self._chief_done_at = list(self._replicas), None
        self._worker = threading.Thread(target=recovery.restart_job, args=(self, old), name=f"vcli-restart-{self.job_id}",
                                        daemon=True)
        self._worker.start()

    def _record_exit(self, r: _Replica, status: ReplicaStatus) -> None:
        """Mark `r` ended with `status`: SUCCEEDED or FAILED in the store, and a vcli line in its log."""
        r.done = True
        r.exit_code = status.exit_code
        reason = ReplicaState.SUCCEEDED if status.exit_code == 0 else ReplicaState.FAILED
        self.store.upsert_replica(
            self.job_id, r.launch.task_name, state=reason.value, exit_code=status.exit_code,
            message=status.message, end_time=recovery.end_time(status),
        )
        _log_vcli(r.launch, f"Task completed. Exit code ({status.exit_code}). Exit reason ({reason.value})"
                  + (f": {status.message}" if status.message else ""))

    def _replica_failed(self, r: _Replica, status: ReplicaStatus) -> _Ending:
        """FAILED (code 13) because `r` exited non-zero; the message points at its logs."""
        self.failed_replica = (r.launch, status)
        return failures.replica_failed(r.launch.task_name, status, self.job_id)

    def _chief_succeeded(self, now: float) -> _Ending | None:
        """SUCCEEDED once the chief exited 0 and the workers (pool 1) ended too, or had
        `WORKER_DRAIN_SECONDS` to; the rest are then stopped."""
        if self._chief_done_at is None:
            return None
        workers_left = [r for r in self._replicas if not r.done and r.launch.replica.pool_index == 1]
        if not workers_left or now - self._chief_done_at > WORKER_DRAIN_SECONDS:
            return JobState.JOB_STATE_SUCCEEDED, None
        return None

    # ------------------------------------------------------------------ ending

    def abort(self, error: BaseException) -> None:
        """Stop everything because the store failed under the job (e.g. the disk is full).

        Store writes are what failed, so this stops and releases the replicas first, then
        gives up the store's reserved space and records the job FAILED if the store lets it.
        """
        self._cancel.set()
        if self._worker is not None:
            self._worker.join()
        running = self._running_handles()
        if running:
            self.executor.stop(running, grace_seconds=STOP_GRACE_SECONDS)
        self.executor.release(self._started_handles())
        self.plan.release_placement()
        self.store.release_ballast()
        self.error = stopped_by(error, "job")
        self.state = self._final = JobState.JOB_STATE_FAILED
        try:
            self.failure = failures.settle(self, JobState.JOB_STATE_FAILED, self.error)
            self.store.set_state(self.job_id, JobState.JOB_STATE_FAILED.value, error=self.error)
            for r in self._replicas:
                if not r.done:
                    self.store.upsert_replica(self.job_id, r.launch.task_name, state=ReplicaState.STOPPED.value,
                                              end_time=now_iso())
        except StoreError:
            pass  # nothing more can be recorded; `cancel` or `describe` later sees a dead controller

    def _finish(self, state: JobState, error: dict[str, Any] | None) -> JobState | None:
        """End the job as `state`: stop what still runs, release, record. None while stopping.

        The first call decides the ending; the stop itself (SIGTERM, the grace period a
        stubborn replica takes, SIGKILL) runs in a background thread, so that a caller polling
        several jobs (a study) goes on serving the others meanwhile. Later polls finish it.
        """
        if self._ending is None:
            self._ending = (state, error)
            self._stop_in_background()
        state, error = self._ending
        if self._stopping():
            return None
        self._record_stopped()
        self.executor.release(self._started_handles())
        self.plan.release_placement()
        self._record_not_started()
        self.error, self.failure = error, failures.settle(self, state, error)
        self._set_state(state, error=error)
        self._final = state
        return state

    def _stop_in_background(self) -> None:
        """Start the stopping thread if anything runs or may still be starting; else do nothing."""
        self._cancel.set()  # makes a still-running start thread stop launching
        running = self._running_handles()
        if running or self._worker is not None:
            if running and self.announce_stop:
                self.on_progress(f"Stopping {len(running)} replica(s) of job {self.job_id}.")
            self._stopper = threading.Thread(target=self._stop_running, name=f"vcli-stop-{self.job_id}", daemon=True)
            self._stopper.start()

    def _stop_running(self) -> None:
        """The stopping thread: wait for the start thread, then stop every running replica."""
        try:
            if self._worker is not None:
                self._worker.join()
            running = self._running_handles()
            if running:
                self.executor.stop(running, grace_seconds=STOP_GRACE_SECONDS)
        except BaseException as e:  # re-raised by the next poll, in the controller's thread
            self._stop_error = e

    def _stopping(self) -> bool:
        """True while the stopping thread runs; once it has ended, re-raises what it raised."""
        if self._stopper is None:
            return False
        if self._stopper.is_alive():
            return True
        if self._stop_error is not None:
            raise self._stop_error
        return False

    def _record_stopped(self) -> None:
        """Record every replica still running when the job ended as STOPPED, with the exit its
        executor reports now, and say so in its log."""
        for r in self._replicas:
            if r.handle is not None and not r.done:
                r.done = True
                st = self.executor.poll(r.handle)
                self.store.upsert_replica(
                    self.job_id, r.launch.task_name, state=ReplicaState.STOPPED.value, exit_code=st.exit_code, end_time=recovery.end_time(st)
                )
                _log_vcli(r.launch, "Task stopped by vcli.")

    def _record_not_started(self) -> None:
        """Record every replica that never got a handle as NOT_STARTED."""
        for r in self._replicas:
            if r.handle is None:
                self.store.upsert_replica(self.job_id, r.launch.task_name, state=ReplicaState.NOT_STARTED.value)

    def _running_handles(self) -> list[ReplicaHandle]:
        """The handles of the replicas that started and have not been seen to end."""
        return [r.handle for r in self._replicas if r.handle is not None and not r.done]

    def _started_handles(self) -> list[ReplicaHandle]:
        """The handles of every replica that started (what the executor releases)."""
        return [r.handle for r in self._replicas if r.handle is not None]

    def _set_state(self, state: JobState, error: Mapping[str, Any] | None = None) -> None:
        self.state = state
        self.store.set_state(self.job_id, state.value, error=error)


def _log_vcli(launch: ReplicaLaunch, message: str) -> None:
    from vcli.logs import LogWriter

    try:
        w = LogWriter(launch.log_path)
        w.write("vcli", message)
        w.close()
    except OSError:
        pass


def run_job(run: JobRun, *, on_tick: Callable[[], None] = lambda: None, interval: float = 0.1,
            attach: Mapping[str, Any] | None = None) -> JobState:
    """Drive `run` to its end; Ctrl-C (KeyboardInterrupt) cancels it and is re-raised after.

    `attach` (stored replica rows) takes over a job another controller started (`resume`).
    """
    try:
        if attach is None:
            run.start()
        else:
            run.attach(attach, running_for=0.0)
        while True:
            state = run.poll()
            on_tick()
            if state is not None:
                return state
            run.clock.sleep(interval)
    except KeyboardInterrupt:
        with interrupts.deferred() as ctrl_c:  # a Ctrl-C from here on must not stop the wind-down
            run.cancel()
            while run.poll() is None:  # the replicas are stopped in the background: wait for it
                if ctrl_c.again():  # Ctrl-C again: kill now, and still wait for the end
                    run.hurry()
                run.clock.sleep(0.05)
            on_tick()
        raise
    except Exception as e:  # the store failed, or a bug: never a RUNNING job whose replicas nobody watches
        if isinstance(e, StoreError) or not isinstance(e, VcliError):
            run.abort(e)
        raise

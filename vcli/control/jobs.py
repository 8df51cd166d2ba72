"""The custom-job controller: plan replicas, start them, watch them, decide the job's state.

`plan_job` resolves a `CustomJobSpec` into one `ReplicaLaunch` per replica (placement,
reserved addresses, the Vertex environment, output and log paths). `JobRun` drives one job
without blocking: `start()` then `poll()` until it returns a final state; the study controller
runs many JobRuns side by side this way, and `run_job` is the blocking wrapper the CLI uses.

Rules (Vertex's): the job SUCCEEDS when the primary replica (workerpool0-0) exits 0; any
replica that exits non-zero FAILS the job and every sibling is stopped at once; a cancel
request (Ctrl-C, or `vcli custom-jobs cancel` from any terminal, seen through the store)
stops everything and ends CANCELLED; `scheduling.timeout` ends the job FAILED. Every state
change is written to the store before anything else hears of it.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence

from vcli import cluster
from vcli.codec import custom_job_spec_to_dict
from vcli.control.clock import SYSTEM_CLOCK, Clock
from vcli.errors import StoreError, VcliError
from vcli.executors import Executor, Placement, ReplicaHandle, ReplicaLaunch
from vcli.spec import CustomJobSpec, JobState, ReplicaId, ReplicaState, is_secret
from vcli.store import Store, now_iso

#: Seconds between SIGTERM and SIGKILL when vcli stops replicas (TF ignores SIGTERM).
STOP_GRACE_SECONDS = 3.0
#: After the chief succeeds, how long other workers may take to finish on their own.
WORKER_DRAIN_SECONDS = 30.0

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


class _Here:
    """Everything on this machine, no GPU bookkeeping (hosts without declared GPUs)."""

    def __call__(self, replicas: Sequence[ReplicaId], *, spec: CustomJobSpec | None = None,
                 job_id: str | None = None, holder: Mapping[str, Any] | None = None) -> list[Placement]:
        return [Placement() for _ in replicas]

    def release(self, job_id: str) -> None:
        return None

    def hold(self, job_id: str, replicas: Sequence[ReplicaId], spec: CustomJobSpec,
             placements: Sequence[Placement]) -> None:
        return None


local_placer: Placer = _Here()


@dataclass(frozen=True, kw_only=True)
class JobPlan:
    job_id: str
    spec: CustomJobSpec
    launches: tuple[ReplicaLaunch, ...]
    base_output_directory: str
    #: The placer that reserved capacity (GPUs) for this job; released when the job ends.
    placer: Placer = local_placer

    def release_placement(self) -> None:
        self.placer.release(self.job_id)


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
        placements = [restore[r.task_name][0] if r.task_name in restore else Placement() for r in replicas]
        addresses = {r.task_name: restore[r.task_name][1] if r.task_name in restore else "" for r in replicas}
    else:
        who = {"trial": trial_id, **(holder or {})}
        placements = list(placer(replicas, spec=spec, job_id=job_id, holder={k: v for k, v in who.items() if v}))
        try:
            addresses = {
                r.task_name: f"{p.address}:{executor.reserve_port(p)}" for r, p in zip(replicas, placements)
            }
        except BaseException:
            placer.release(job_id)
            raise
    layout = cluster.ClusterLayout(addresses=addresses, replicas=tuple(replicas))
    base = base_output_directory or spec.base_output_directory or str(job_dir / "output")
    job_dict = custom_job_spec_to_dict(spec, vertex_only=True)
    launches = []
    for replica, placement in zip(replicas, placements):
        pool = spec.worker_pool_specs[replica.pool_index]
        output_dir = job_dir / "replicas" / replica.task_name
        metric_file = str(output_dir / "hypertune" / "output.metrics")
        cs, ps, lp = pool.container_spec, pool.python_package_spec, pool.local_package
        user_env = {e.name: e.value for e in (cs.env if cs else ()) + (ps.env if ps else ())}
        env = cluster.replica_env(
            layout=layout,
            replica=replica,
            job=job_dict,
            job_id=job_id,
            trial_id=trial_id,
            base_output_directory=base,
            metric_file=metric_file,
            gpu_indices=placement.gpu_indices if placement.gpu_indices or pool.machine_spec.accelerator_count else None,
            user_env=user_env,
        )
        image = (cs.image_uri if cs else "") or (ps.executor_image_uri if ps else "") or (lp.executor_image_uri if lp else "")
        launches.append(
            ReplicaLaunch(
                job_id=job_id,
                trial_id=trial_id,
                replica=replica,
                placement=placement,
                image_uri=image or None,
                command=tuple(cs.command) if cs else (),
                args=tuple(cs.args if cs else ps.args if ps else ()),
                env=env,
                workdir=lp.path if lp else None,
                output_dir=str(output_dir),
                log_path=str(output_dir / "replica.log"),
                metric_file=metric_file,
                machine_spec=pool.machine_spec,
                python_module=ps.python_module if ps else None,
                local_package=lp,
                mounts=(base,),
                shm_size=shm_size,
                secret_env=tuple(k for k in env if is_secret(k)),
                package_uris=tuple(ps.package_uris) if ps else (),
            )
        )
    return JobPlan(job_id=job_id, spec=spec, launches=tuple(launches), base_output_directory=base, placer=placer)


def make_dirs(plan: JobPlan) -> None:
    from vcli.store import makedirs_private

    for launch in plan.launches:
        makedirs_private(os.path.dirname(launch.metric_file))
    for key in ("AIP_MODEL_DIR", "AIP_CHECKPOINT_DIR", "AIP_TENSORBOARD_LOG_DIR"):
        if plan.launches:
            os.makedirs(plan.launches[0].env[key], exist_ok=True)


_ENDED_REPLICA_STATES = frozenset(
    s.value for s in (ReplicaState.SUCCEEDED, ReplicaState.FAILED, ReplicaState.STOPPED, ReplicaState.NOT_STARTED)
)


@dataclass
class _Replica:
    launch: ReplicaLaunch
    handle: ReplicaHandle | None = None
    exit_code: int | None = None
    done: bool = False


@dataclass
class JobRun:
    """One custom job being run. Non-blocking: call `start()`, then `poll()` until final."""

    store: Store
    executor: Executor
    plan: JobPlan
    timeout_seconds: float | None = None
    on_progress: Callable[[str], None] = lambda msg: None
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
    _ending: tuple[JobState, dict[str, Any] | None] | None = None
    _stopper: threading.Thread | None = None
    _stop_error: BaseException | None = None
    _started_at: float = 0.0
    _chief_done_at: float | None = None
    _last_cancel_check: float = 0.0
    #: Seconds between heartbeats written to the store (`JobRow.heartbeat`).
    heartbeat_seconds: float = 2.0
    _last_beat: float = float("-inf")

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
        self._replicas = [_Replica(launch=l) for l in self.plan.launches]
        for r in self._replicas:
            self.store.upsert_replica(
                self.job_id, r.launch.task_name, host=r.launch.placement.host,
                address=_address(r.launch), state=ReplicaState.PENDING.value, log_path=r.launch.log_path,
                metric_file=r.launch.metric_file, gpus=",".join(map(str, r.launch.placement.gpu_indices)) or None,
            )
        self._set_state(JobState.JOB_STATE_PENDING)
        try:
            make_dirs(self.plan)
        except OSError as e:
            raise StoreError(f"Cannot create the job's directories: {e.strerror or e} ({e.filename}).") from e
        self._worker = threading.Thread(target=self._launch_all, name=f"vcli-start-{self.job_id}", daemon=True)
        self._worker.start()

    def attach(self, stored: Mapping[str, Any], *, final: tuple[JobState, dict[str, Any] | None] | None = None,
               running_for: float = 0.0) -> None:
        """Take over a job a previous controller started (`resume`), instead of `start()`.

        `stored` maps task names to the store's replica rows. Replicas with a handle are
        adopted as they are (never restarted): running ones are watched, ones that ended
        meanwhile report their exit through the executor; replicas that never started are
        started now. `final` is the job's recorded end, if the previous controller recorded
        one. `running_for` is how long the job had been running (its timeout counts it).
        """
        self._started_at = self.clock.now() - running_for
        self._replicas = []
        for launch in self.plan.launches:
            r = _Replica(launch=launch)
            row = stored.get(launch.task_name)
            if row is not None and row.handle:
                r.handle = ReplicaHandle.from_json(row.handle)
                if row.state in _ENDED_REPLICA_STATES:
                    r.done, r.exit_code = True, row.exit_code
                    if row.state == ReplicaState.SUCCEEDED.value and launch.replica.pool_index == 0:
                        self._chief_done_at = self.clock.now()
                elif final is None:
                    self.executor.adopt(r.handle, launch)
            self._replicas.append(r)
        if final is not None:
            self.state, self.error = final
            self._final = final[0]
            return
        # Its GPUs are still in use: the placer must not hand them to the next trial.
        self.plan.placer.hold(self.job_id, [launch.replica for launch in self.plan.launches], self.plan.spec,
                              [launch.placement for launch in self.plan.launches])
        if any(r.handle is None for r in self._replicas):
            try:
                make_dirs(self.plan)
            except OSError as e:
                raise StoreError(f"Cannot create the job's directories: {e.strerror or e} ({e.filename}).") from e
            self._worker = threading.Thread(target=self._launch_all, name=f"vcli-start-{self.job_id}", daemon=True)
            self._worker.start()
        else:
            self._set_state(JobState.JOB_STATE_RUNNING)

    def _launch_all(self) -> None:
        try:
            todo = [r for r in self._replicas if r.handle is None]
            launches = self.executor.prepare([r.launch for r in todo], cancelled=self._cancel, progress=self.on_progress)
            for r, launch in zip(todo, launches):
                r.launch = launch
            for r in todo:
                if self._cancel.is_set():
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

    def poll(self) -> JobState | None:
        """Advance the job; returns its final state once it has one (and everything stopped)."""
        if self._final is not None:
            return self._final
        if self._ending is not None:
            return self._finish(*self._ending)
        now = self.clock.now()
        if now - self._last_beat > self.heartbeat_seconds:
            self._last_beat = now
            self.store.beat(self.job_id)
        if now - self._last_cancel_check > 0.2:
            self._last_cancel_check = now
            if self.store.cancel_requested(self.job_id):
                self.cancel()
        if self._cancel.is_set():
            return self._finish(JobState.JOB_STATE_CANCELLED, {"code": 1, "message": "CANCELED"})
        starting = self._worker is not None and self._worker.is_alive()
        if self._worker_error is not None:
            err = self._worker_error
            msg = str(err) if isinstance(err, VcliError) else f"{type(err).__name__}: {err}"
            self.startup_error = err
            return self._finish(JobState.JOB_STATE_FAILED, {"code": 3, "message": msg})
        if self.timeout_seconds is not None and now - self._started_at > self.timeout_seconds:
            return self._finish(
                JobState.JOB_STATE_FAILED,
                {"code": 4, "message": f"Job exceeded its scheduling.timeout of {self.timeout_seconds:g}s and was stopped."},
            )
        if not starting and self.state == JobState.JOB_STATE_PENDING:
            self._set_state(JobState.JOB_STATE_RUNNING)
        for r in self._replicas:
            if r.handle is None or r.done:
                continue
            status = self.executor.poll(r.handle)
            if status.running:
                continue
            r.done = True
            r.exit_code = status.exit_code
            reason = ReplicaState.SUCCEEDED if status.exit_code == 0 else ReplicaState.FAILED
            self.store.upsert_replica(
                self.job_id, r.launch.task_name, state=reason.value, exit_code=status.exit_code,
                message=status.message, end_time=now_iso(),
            )
            _log_vcli(r.launch, f"Task completed. Exit code ({status.exit_code}). Exit reason ({reason.value})"
                      + (f": {status.message}" if status.message else ""))
            if status.exit_code != 0:
                detail = f" ({status.message})" if status.message else ""
                return self._finish(
                    JobState.JOB_STATE_FAILED,
                    {
                        "code": 13,
                        "message": f"The replica {r.launch.task_name} exited with a non-zero status of "
                        f"{status.exit_code}{detail}. To find out more about why your job exited please check "
                        f"the logs: vcli custom-jobs stream-logs {self.job_id}",
                    },
                )
            if r.launch.replica.pool_index == 0 and r.launch.replica.index == 0:
                self._chief_done_at = now
        if starting:
            return None
        if self._chief_done_at is not None:
            workers_left = [r for r in self._replicas if not r.done and r.launch.replica.pool_index == 1]
            if not workers_left or now - self._chief_done_at > WORKER_DRAIN_SECONDS:
                return self._finish(JobState.JOB_STATE_SUCCEEDED, None)
        return None

    def abort(self, error: BaseException) -> None:
        """Stop everything because the store failed under the job (e.g. the disk is full).

        Store writes are what failed, so this stops and releases the replicas first, then
        gives up the store's reserved space and records the job FAILED if the store lets it.
        """
        self._cancel.set()
        if self._worker is not None:
            self._worker.join()
        running = [r.handle for r in self._replicas if r.handle is not None and not r.done]
        if running:
            self.executor.stop(running, grace_seconds=STOP_GRACE_SECONDS)
        self.executor.release([r.handle for r in self._replicas if r.handle is not None])
        self.plan.release_placement()
        self.store.release_ballast()
        self.error = {"code": 7, "message": f"The job was stopped: {error}"}
        self.state = self._final = JobState.JOB_STATE_FAILED
        try:
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
            self._cancel.set()  # makes a still-running start thread stop launching
            running = [r for r in self._replicas if r.handle is not None and not r.done]
            if running or self._worker is not None:
                if running:
                    self.on_progress(f"Stopping {len(running)} replica(s) of job {self.job_id}.")
                self._stopper = threading.Thread(target=self._stop_running, name=f"vcli-stop-{self.job_id}", daemon=True)
                self._stopper.start()
        state, error = self._ending
        if self._stopper is not None:
            if self._stopper.is_alive():
                return None
            if self._stop_error is not None:
                raise self._stop_error
        if any(r.handle is not None and not r.done for r in self._replicas):
            for r in self._replicas:
                if r.handle is not None and not r.done:
                    r.done = True
                    st = self.executor.poll(r.handle)
                    self.store.upsert_replica(
                        self.job_id, r.launch.task_name, state=ReplicaState.STOPPED.value, exit_code=st.exit_code, end_time=now_iso()
                    )
                    _log_vcli(r.launch, "Task stopped by vcli.")
        self.executor.release([r.handle for r in self._replicas if r.handle is not None])
        self.plan.release_placement()
        for r in self._replicas:
            if r.handle is None:
                self.store.upsert_replica(self.job_id, r.launch.task_name, state=ReplicaState.NOT_STARTED.value)
        self.error = error
        self._set_state(state, error=error)
        self._final = state
        return state

    def _stop_running(self) -> None:
        """The stopping thread: wait for the start thread, then stop every running replica."""
        try:
            if self._worker is not None:
                self._worker.join()
            running = [r.handle for r in self._replicas if r.handle is not None and not r.done]
            if running:
                self.executor.stop(running, grace_seconds=STOP_GRACE_SECONDS)
        except BaseException as e:  # re-raised by the next poll, in the controller's thread
            self._stop_error = e

    def _set_state(self, state: JobState, error: Mapping[str, Any] | None = None) -> None:
        self.state = state
        self.store.set_state(self.job_id, state.value, error=error)


def _address(launch: ReplicaLaunch) -> str:
    spec = launch.env.get("CLUSTER_SPEC", "")
    import json

    try:
        data = json.loads(spec)
        return data["cluster"][f"workerpool{launch.replica.pool_index}"][launch.replica.index]
    except (ValueError, KeyError, IndexError):
        return ""


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
        run.cancel()
        while run.poll() is None:  # the replicas are stopped in the background: wait for it
            run.clock.sleep(0.05)
        on_tick()
        raise
    except StoreError as e:
        run.abort(e)
        raise


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

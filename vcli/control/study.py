"""The hyperparameter-tuning controller: a study of trials, each trial a real custom job.

`StudyRun.run()` fills up to `parallelTrialCount` slots with the suggester's proposals, runs
each as a custom job built from `trialJobSpec` plus `--<parameterId>=<value>` args (with
`task.trial`, CLOUD_ML_TRIAL_ID and per-trial AIP_* directories), reads the chief's metrics
while it runs, and tells the suggester the outcome. It ends when:

- `maxTrialCount` trials have been created and all finished, or the suggester is exhausted
  (grid search): SUCCEEDED if at least one trial SUCCEEDED, else FAILED;
- more than the failure budget of trials failed: FAILED (running trials are stopped);
- a cancel request (Ctrl-C or `hp-tuning-jobs cancel` from any terminal): CANCELLED;
- vcli extensions: the goal value is reached, or the study's wall-clock budget runs out. Both
  stop launching AND the running trials (like Hyperopt SparkTrials' `timeout`); a stopped
  trial with measurements ends SUCCEEDED with its last/best one, else INFEASIBLE.

Automated early stopping (`studySpec.*StoppingSpec`, `vcli.tuning.stopping`): each time a running
trial reports, the rule reviews it; a trial it stops goes STOPPING (SIGTERM, then the grace
period) and ends SUCCEEDED with its selected measurement, as on Vertex. Its slot is free at once.
With several metrics the result is the Pareto front of the SUCCEEDED trials (`optimal_trials`).
Safe search (`studySpec.safety_metrics`): a trial reports its safety metrics beside the
objectives; one that breaks a threshold stays SUCCEEDED, marked `safe: false`, and is never the
best trial nor on the front.
Trials that fail, find no capacity within their maxWaitDuration or finish without the metric are
INFEASIBLE with a reason (Vertex has no FAILED trial state) and a failure class; what counts
towards the failure budget and which failures are retried is `vcli.control.outcomes`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable

from vcli.codec import custom_job_spec_to_dict, iter_parameters
from vcli.codec.trial import trial_args
from vcli.control import interrupts
from vcli.control.active import (
    ActiveTrial,
    default_failure_budget,
    goal_reached,
    restored_placements,
    seconds_since,
    trainer_modules,
)
from vcli.control.clock import SYSTEM_CLOCK, Clock
from vcli.control.jobs import JobPlan, JobRun, Placer, local_placer, plan_job, with_trial_args
from vcli.control.liveness import mark_controller
from vcli.control.outcomes import StudyFailures
from vcli.control.population import PendingTrial, Population, give_up_queued
from vcli.control.strategies import PbtStrategy, SearchStrategy, Strategy
from vcli.control.suggesting import take
from vcli.control.waiting import TrialWait
from vcli.errors import StoreError, VcliError, WaitExpiredError, stopped_by
from vcli.executors import Executor
from vcli.spec import (
    CustomJobSpec,
    FailureClass,
    HyperparameterTuningJobSpec,
    JobKind,
    JobState,
    RpcCode,
    Trial,
    TrialState,
)
from vcli.store import Store, new_id, now_iso, resource_name
from vcli.tuning.events import StudyListener
from vcli.tuning.result import is_safe

__all__ = ["ActiveTrial", "StudyRun", "default_failure_budget"]


@dataclass
class StudyRun:
    """Runs one study to its end, telling `listener` (`vcli.tuning.events`) every trial event,
    the study's end and every status line. What differs between kinds of studies (a
    suggester's search with early stopping, or PBT) is its `strategy`
    (`vcli.control.strategies`)."""

    store: Store
    executor: Executor
    spec: HyperparameterTuningJobSpec
    study_id: str
    display_name: str
    suggester: Any  # a `vcli.tuning.suggesters.Suggester`, or one in a worker process (`Apart`)
    listener: StudyListener = field(default_factory=StudyListener)
    placer: Placer = local_placer
    shm_size: str | None = None
    clock: Clock = SYSTEM_CLOCK
    #: The study's seed (PBT draws its population and explorations from it).
    seed: int = 0
    #: Configurations to run before any suggestion (`--enqueue-trial`), as trials' parameters.
    enqueued: tuple[dict[str, Any], ...] = ()
    trials: dict[str, Trial] = field(default_factory=dict)
    state: JobState = JobState.JOB_STATE_PENDING
    error: dict[str, Any] | None = None
    active: dict[str, ActiveTrial] = field(default_factory=dict)
    exhausted: bool = False
    _stop_launching: str | None = None
    _cancelled: bool = False
    #: Ctrl-Cs noted while the study winds down after the first (`interrupts.deferred`).
    _ctrl_c: interrupts.Deferred = field(default_factory=interrupts.Deferred)
    queued: list[PendingTrial] = field(default_factory=list)
    #: The plan a new trial runs, given its trial and plan (tracking gives the chief its MLflow run).
    prepare_trial: Callable[[Trial, JobPlan], JobPlan] | None = None

    def __post_init__(self) -> None:
        self.param_specs = {p.parameter_id: p for p in iter_parameters(self.spec.study_spec.parameters)}
        self.metrics = self.spec.study_spec.metrics
        self.metric = self.metrics[0]
        # every trial reports its safety metrics too (safe search), in the same measurement
        self.safety_metrics = self.spec.study_spec.safety_metrics
        self.metric_ids = tuple(m.metric_id for m in (*self.metrics, *self.safety_metrics))
        self.base_output = self.spec.trial_job_spec.base_output_directory or str(
            self.store.home / "jobs" / self.study_id / "output"
        )
        self.strategy = self._strategy()
        self.failures = StudyFailures(self.metric, self.metric_ids, self.spec.study_spec.measurement_selection_type,
                                      self.spec.max_trial_count, trainer_modules(self.spec.trial_job_spec),
                                      retries=self.strategy.retries)
        self.parallel = self.strategy.parallel(self)
        self.failure_budget = self.spec.max_failed_trial_count or default_failure_budget(self.spec.max_trial_count)
        sched = self.spec.trial_job_spec.scheduling
        self._wait = TrialWait(sched.wait_limit_seconds if sched else None, self.placer)
        timeout = self.spec.study_timeout_seconds
        self._deadline = self.clock.now() + timeout if timeout else None

    def _strategy(self) -> Strategy:
        if self.spec.study_spec.population_based_training_spec is not None:
            return PbtStrategy(Population(self.spec, self.seed, self.store.home / "jobs" / self.study_id,
                                          self.base_output, on_progress=self.on_progress))
        stopping = None
        if (stop_spec := self.spec.study_spec.automated_stopping_spec) is not None:
            from vcli.tuning.stopping import stopping_rule

            stopping = stopping_rule(stop_spec, self.metric)
            return SearchStrategy(stopping, elapsed=bool(getattr(stop_spec, "use_elapsed_duration", False)))
        return SearchStrategy(stopping)

    def on_progress(self, message: str) -> None:
        """A status line for the listener (also handed to each trial's JobRun)."""
        self.listener.progress(message)

    # ------------------------------------------------------------------ main loop

    def run(self, interval: float = 0.1) -> JobState:
        """Blocking. KeyboardInterrupt cancels the study (every trial stopped) and re-raises."""
        self._set_state(JobState.JOB_STATE_RUNNING)
        self._last_beat = self._last_cancel_check = float("-inf")
        try:
            while (ended := self._tick()) is None:
                self.clock.sleep(interval)
            return ended
        except KeyboardInterrupt:
            with interrupts.deferred() as self._ctrl_c:  # a Ctrl-C from here on must not stop the wind-down
                self._end_cancelled()
            raise
        except Exception as e:  # the store failed, or a bug: never a RUNNING study whose trials nobody watches
            if isinstance(e, StoreError) or not isinstance(e, VcliError):
                self._abort(e)
            raise

    def _tick(self) -> JobState | None:
        """One turn of the loop: the study's final state once it ended, else None."""
        now = self.clock.now()
        if self._cancel_asked(now):
            return self._end_cancelled()
        self._poll_active()
        if self.failures.fatal is not None:
            return self._fail(self.failures.fatal)
        if self.failures.failed > self.failure_budget:
            return self._fail(f"{self.failures.failed} trials failed, more than the budget of {self.failure_budget} (maxFailedTrialCount)."
                              f" Why: vcli hp-tuning-jobs trials {self.study_id} --filter=state=INFEASIBLE")
        if self._deadline is not None and now > self._deadline and self._stop_launching is None:
            self._stop_launching = "the study's time budget ran out"
            self.on_progress(f"Study time budget of {self.spec.study_timeout_seconds:g}s is used up: stopping running trials.")
            self._stop_all(self._stop_launching)
        if self._stop_launching is None:
            try:
                self._launch()
            except VcliError as e:  # e.g. a trial that can never be placed on the hosts
                return self._fail(str(e))
        elif self.queued:  # launching stopped (budget, goal): what waits for capacity never starts
            give_up_queued(self.queued, self.placer)
        if not self.active and not self.queued and self._nothing_left():
            return self._complete()
        return None

    def _nothing_left(self) -> bool:
        """No further trial will start: launching stopped, the search space or maxTrialCount is used up."""
        return self._stop_launching is not None or self.exhausted or self.counted() >= self.spec.max_trial_count

    def counted(self) -> int:
        """The trials that count towards maxTrialCount: all but the retries (`vcli.control.outcomes`)."""
        return sum(1 for t in self.trials.values() if t.retry_of is None)

    def _fail(self, message: str) -> JobState:
        """End the study FAILED (code 9), stopping every running trial first."""
        self._stop_all("the study failed")
        return self._finish(JobState.JOB_STATE_FAILED, {"code": RpcCode.FAILED_PRECONDITION, "message": message})

    def _abort(self, error: Exception) -> None:
        """The store (a full disk) or vcli failed under the study: stop every trial, record FAILED."""
        for active in self.active.values():
            active.run.abort(error)
        self.active.clear()
        self.store.release_ballast()
        self.error = stopped_by(error, "study")
        self.state = JobState.JOB_STATE_FAILED
        try:
            for trial in self.trials.values():
                if not trial.state.is_final():
                    self._save(replace(trial, state=TrialState.INFEASIBLE, end_time=now_iso(),
                                       infeasible_reason=f"Stopped: {error}"))
            self.store.set_state(self.study_id, JobState.JOB_STATE_FAILED.value, error=self.error)
        except StoreError:
            pass

    def _complete(self) -> JobState:
        # a study whose trials all broke a safety threshold ran them: it succeeds without a best trial
        if not self.optimal_trials() and not any(t.safe is False for t in self.trials.values()):
            what = "the metric" if len(self.metrics) == 1 else "every metric of"
            return self._finish(JobState.JOB_STATE_FAILED, {"code": RpcCode.FAILED_PRECONDITION, "message": f"No trial reported {what} "
                                f"[{', '.join(self.metric_ids)}]; every trial is INFEASIBLE (see infeasibleReason)."})
        return self._finish(JobState.JOB_STATE_SUCCEEDED, None)

    def _end_cancelled(self) -> JobState:
        self._cancelled = True
        self._set_state(JobState.JOB_STATE_CANCELLING)
        self._stop_all("the study was cancelled")
        return self._finish(JobState.JOB_STATE_CANCELLED, {"code": RpcCode.CANCELLED, "message": "CANCELED"})

    # ------------------------------------------------------------------ resume

    def resume(self) -> None:
        """Take over a study whose controller died, before `run()`: every stored trial is told
        to the suggester in order (the next suggestions are the ones the study would have made);
        finished trials count towards maxTrialCount and the failure budget; running ones are
        re-attached to their replicas (never restarted) or, if they ended meanwhile, concluded."""
        if self._deadline is not None and (row := self.store.get_job(self.study_id)) is not None:
            from vcli.control.extend import budget_start  # the study's start, or its latest extension

            self._deadline -= seconds_since(budget_start(row))  # the budget counts from there
        for trial in self.store.trials(self.study_id):
            self.trials[trial.id] = trial
            self.suggester.tell(trial)
            if not trial.state.is_final():
                self._reattach(trial)
        self.queued[:0] = self.failures.resumed(self.trials)  # failures counted; retries owed run first

    def _reattach(self, trial: Trial) -> None:
        """A trial that was running when the controller died: follow its replicas again (its
        custom job's placements and addresses as recorded), or run it now if its job was never
        recorded."""
        from vcli.control.secrets import trial_job_spec
        from vcli.store import parse_job_ref

        child = self.store.get_job(parse_job_ref(trial.custom_job or ""))
        if child is None:  # died between recording the trial and its job: run it now
            del self.trials[trial.id]
            self.queued.append(PendingTrial(dict(trial.parameters), trial.lineage))
            return
        spec = trial_job_spec(child, self.spec.trial_job_spec)
        rows = {r.task_name: r for r in self.store.replicas(child.id)}
        plan = plan_job(spec, job_id=child.id, job_dir=self.store.home / "jobs" / child.id, executor=self.executor,
                        trial_id=trial.id, base_output_directory=self.base_output, placer=self.placer,
                        shm_size=self.shm_size, restore=restored_placements(rows.values()))
        run = self._job_run(spec, plan)
        ran = seconds_since(trial.start_time)
        final = (JobState(child.state), child.error) if JobState(child.state).is_final() else None
        run.attach(rows, final=final, running_for=ran)
        active = ActiveTrial.follow(trial, run, plan, self.metric_ids, started=self.clock.now() - ran)
        self.active[trial.id] = active
        if trial.state == TrialState.STOPPING:
            active.stop_reason = trial.stop_reason or "the trial was being stopped when the study's controller died"
            active.stopped_early = trial.early_stopping_rule is not None
            run.cancel()
        self.listener.trial_started(trial)

    def _job_run(self, spec: CustomJobSpec, plan: JobPlan) -> JobRun:
        """The controller of one trial's custom job."""
        timeout = spec.scheduling.timeout_seconds if spec.scheduling else None
        return JobRun(store=self.store, executor=self.executor, plan=plan, timeout_seconds=timeout,
                      on_progress=self.on_progress, clock=self.clock, announce_stop=False, store_checks=False)

    # ------------------------------------------------------------------ trials

    def _launch(self) -> None:
        """Start trials in free slots: queued suggestions first (they wait for capacity)."""
        if not self.exhausted and (initial := self.strategy.initial(self)) is not None:
            self.queued.extend(initial)
            self.exhausted = not self.strategy.suggests  # PBT's trials after these come from exploits only
        while self.queued and self._running() < self.parallel:
            if not self._start_trial(self.queued[0]):
                return  # no capacity now (GPUs busy, a host down): try again on a later tick
            self.queued.pop(0)
        free, remaining = self.parallel - self._running(), self.spec.max_trial_count - self.counted()
        count = min(free, remaining) - len(self.queued)
        if count <= 0 or self.exhausted:
            return
        if (suggestions := take(self.suggester, count, self.clock.now())) is None:
            return  # the suggester's worker is still computing: a later tick starts them
        if not suggestions:
            self.exhausted = True  # the search space is used up (grid search)
            self.on_progress(f"The search space is exhausted after {len(self.trials)} trial(s) (maxTrialCount "
                             f"{self.spec.max_trial_count}): no more trials will start.")
            return
        for i, s in enumerate(suggestions):
            if not self._start_trial(PendingTrial(dict(s.parameters), suggested_by=s.suggested_by)):
                self.queued.extend(PendingTrial(dict(x.parameters), suggested_by=x.suggested_by) for x in suggestions[i:])
                return

    def _running(self) -> int:
        """Trials holding a parallel slot: a trial stopped early gives its slot up at once."""
        return sum(1 for a in self.active.values() if not a.stopped_early)

    def _start_trial(self, pending: PendingTrial) -> bool:
        """Place and start one trial; False (nothing recorded) when capacity is busy now. A trial
        whose wait ran out is recorded INFEASIBLE (True: the next suggestion may start)."""
        trial_id, job_id = str(len(self.trials) + 1), new_id()
        job_spec = with_trial_args(self.spec.trial_job_spec, trial_args(self.param_specs, pending.parameters))
        try:
            plan = self._plan_trial(job_spec, job_id, trial_id)
        except WaitExpiredError as e:  # the trial fails, as a trial job would on Vertex; the failure budget decides
            self.failures.failed += 1
            self._record_end(Trial(id=trial_id, parameters=pending.parameters, state=TrialState.INFEASIBLE,
                                   infeasible_reason=str(e), start_time=self._wait.began, end_time=now_iso(),
                                   lineage=pending.lineage, failure_class=FailureClass.TIMEOUT, retry_of=pending.retry_of))
            return True
        if plan is None:
            return False
        plan = self.strategy.seeded(plan, pending, trial_id)
        job_row = self.store.create_job(
            job_id=job_id, kind=JobKind.CUSTOM_JOB.value, display_name=f"{self.display_name}-trial-{trial_id}",
            record={"jobSpec": custom_job_spec_to_dict(job_spec), "executor": self.executor.name,
                    "outputDirectory": f"{self.base_output}/{trial_id}"},
            state=JobState.JOB_STATE_QUEUED.value, parent_id=self.study_id, trial_id=trial_id)
        trial = Trial(id=trial_id, parameters=pending.parameters, state=TrialState.ACTIVE, lineage=pending.lineage, suggested_by=pending.suggested_by,
                      custom_job=resource_name(JobKind.CUSTOM_JOB.value, job_row.id), start_time=now_iso(), retry_of=pending.retry_of)
        self.trials[trial_id] = trial
        self.suggester.tell(trial)
        self._save(trial)
        if self.prepare_trial is not None:  # waits for the trial's tracking run: the trial starts after it
            plan = self.prepare_trial(trial, plan)
            trial = self.trials[trial_id] = replace(trial, start_time=now_iso())
            self._save(trial)
        run = self._job_run(job_spec, plan)
        self.active[trial_id] = ActiveTrial.follow(trial, run, plan, self.metric_ids, started=self.clock.now())
        mark_controller(self.store, job_row.id)
        run.start()
        self.listener.trial_started(trial)
        return True

    def _plan_trial(self, job_spec: CustomJobSpec, job_id: str, trial_id: str) -> JobPlan | None:
        """Place a trial's replicas; None while capacity is busy (past maxWaitDuration: WaitExpiredError)."""
        from vcli.placement import NoCapacityError

        try:
            plan = plan_job(job_spec, job_id=job_id, job_dir=self.store.home / "jobs" / job_id, executor=self.executor,
                            trial_id=trial_id, base_output_directory=self.base_output, placer=self.placer,
                            shm_size=self.shm_size, holder={"study": self.study_id, "displayName": self.display_name})
        except NoCapacityError as e:
            self._wait.busy(self.clock.now(), bool(self.active), trial_id, e, self.on_progress)
            return None
        self._wait.placed()
        return plan

    def _cancel_asked(self, now: float) -> bool:
        """Beat (every 2 s) and ask for cancel requests (every 0.2 s) for the study and all its
        running trials' jobs at once, one query each; a trial job's cancel stops that trial.
        True when the study itself is to be cancelled."""
        jobs = {a.run.job_id: a.run for a in self.active.values()}
        if now - self._last_beat > 2.0:
            self._last_beat = now
            self.store.beat_all([self.study_id, *jobs])
        if now - self._last_cancel_check <= 0.2:
            return False
        self._last_cancel_check = now
        asked = self.store.cancels_requested([self.study_id, *jobs])
        for job_id in asked - {self.study_id}:  # one trial's job (`custom-jobs cancel` of it)
            jobs[job_id].cancel()
        return self.study_id in asked

    def _poll_active(self) -> None:
        for trial_id, active in list(self.active.items()):
            state = active.run.poll()
            if self.refresh_measurements(active):
                self.listener.trial_measured(active.trial)
                if goal_reached(active.trial, self.metric, self.spec.goal_value) and self._stop_launching is None:
                    self._stop_launching = "the study's goal value was reached"
                    self.on_progress(f"Trial {trial_id} reached the goal value {self.spec.goal_value:g}: stopping the study.")
                    for other_id, other in self.active.items():
                        if other_id != trial_id:
                            self.request_stop(other, self._stop_launching)
                self._review(active)
            if state is None:
                continue
            del self.active[trial_id]
            if self.refresh_measurements(active, drain=True):  # all the log: the last lines hold the metric
                self.listener.trial_measured(active.trial)
            self._conclude(active, state)

    def refresh_measurements(self, active: ActiveTrial, drain: bool = False) -> bool:
        """Read the trial's new reports into its measurements; True if there were any."""
        if not active.read_metrics(self.executor, drain=drain):
            return False
        active.trial = self.strategy.refreshed(active.with_measurements(self.clock.now()))
        self.trials[active.trial.id] = active.trial
        self._save(active.trial)
        return True

    def _review(self, active: ActiveTrial) -> None:
        """Ask the strategy (the early-stopping rule, or PBT) about a running trial that just reported."""
        if active.stop_reason is not None or active.trial.state != TrialState.ACTIVE:
            return
        self.strategy.review(self, active)

    def _conclude(self, active: ActiveTrial, job_state: JobState) -> None:
        final, reason, failure = self.failures.outcome(active, job_state, self._cancelled)
        trial = active.trial
        if final is not None:  # the selected measurement keeps its own elapsed time
            index = next(i for i, m in enumerate(active.reader.measurements) if m is final)
            final = active.trial.measurements[index]
        trial = replace(trial, state=TrialState.INFEASIBLE if reason else TrialState.SUCCEEDED,
                        final_measurement=None if reason else final, infeasible_reason=reason, end_time=active.end_time(),
                        failure_class=failure.cls if failure is not None and reason else None)
        trial = replace(trial, safe=is_safe(trial, self.safety_metrics))
        retry = self.failures.ended(trial, failure, active, self.trials)
        self._record_end(trial)
        if retry is not None and failure is not None:
            self.on_progress(self.failures.retry_line(trial, failure, self.trials))
            self.queued.insert(0, retry)

    def _record_end(self, trial: Trial) -> None:
        self.trials[trial.id] = trial
        self.suggester.tell(trial)
        self._save(trial)
        self.listener.trial_ended(trial)

    def request_stop(self, active: ActiveTrial, reason: str, *, rule: str | None = None) -> None:
        if active.stop_reason is None:
            active.stop_reason = reason
            active.stopped_early = rule is not None
            active.trial = replace(active.trial, state=TrialState.STOPPING, stop_reason=reason, early_stopping_rule=rule)
            self.trials[active.trial.id] = active.trial
            self._save(active.trial)
            self.listener.trial_stopping(active.trial)
            active.run.cancel()

    def _stop_all(self, reason: str) -> None:
        for active in list(self.active.values()):
            self.request_stop(active, reason)
        deadline = self.clock.now() + 120
        while self.active and self.clock.now() < deadline:
            if self._ctrl_c.again():  # Ctrl-C while stopping: kill the trials now, still wait for them
                for active in list(self.active.values()):
                    active.run.hurry()
            self._poll_active()
            self.clock.sleep(0.05)

    # ------------------------------------------------------------------ records

    def optimal_trials(self) -> list[Trial]:
        """Its best trial, or with several metrics the Pareto front (trial order); [] if none yet."""
        if len(self.metrics) == 1:
            best = self.best_trial()
            return [best] if best is not None else []
        from vcli.tuning.pareto import pareto_front

        return pareto_front(list(self.trials.values()), self.metrics)

    def best_trial(self) -> Trial | None:
        """The best SUCCEEDED trial by the first metric (the study's result when it has one
        metric); with PBT, among the trials that trained to maxStepCount."""
        return self.strategy.best(list(self.trials.values()), self.metric)

    def _save(self, trial: Trial) -> None:
        self.store.save_trial(self.study_id, trial, self.param_specs)

    def _set_state(self, state: JobState, error: dict[str, Any] | None = None) -> None:
        self.state = state
        self.store.set_state(self.study_id, state.value, error=error)

    def _finish(self, state: JobState, error: dict[str, Any] | None) -> JobState:
        best = self.best_trial()
        row = self.store.get_job(self.study_id)
        if row is not None:
            record = dict(row.record)
            if len(self.metrics) == 1:
                record["bestTrialId"] = best.id if best else None
            if self._stop_launching:
                record["stopReason"] = self._stop_launching
            self.strategy.record(self, record, best)
            self.store.update_job(self.study_id, record=record)
        self.error = error
        self._set_state(state, error)
        self.listener.study_ended(state, best if len(self.metrics) == 1 else None, self.optimal_trials())
        return state


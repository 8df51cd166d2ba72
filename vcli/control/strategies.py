"""How a study chooses and judges its trials: one strategy per kind of study.

`vcli.control.study.StudyRun` runs the loop every study shares (slots, placement, metrics,
failure budget, cancel, resume) and asks its strategy wherever kinds of studies differ:

- `SearchStrategy` (every algorithm but PBT): the suggester proposes trials, up to
  `parallelTrialCount` at once; the early-stopping rule, if the spec has one, reviews each
  running trial that reports; the result is the best trial (or the Pareto front).
- `PbtStrategy` (Population Based Training, `vcli.control.population`): the whole population
  trains at once and later trials come only from exploits; a member is reviewed at its ready
  steps and may be replaced by a copy of a better one (its checkpoint seeded into the new
  trial); the result is the best trial among those that trained to maxStepCount, and its
  schedule.

A strategy sees the run through `StudyView`, the narrow part of `StudyRun` it may read and
act on; it never reaches into the loop itself.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence

from vcli.control.population import PendingTrial, Population, schedule, seeded, stored_handle
from vcli.spec import MetricSpec, Trial, TrialState
from vcli.tuning.defaults import default_configuration
from vcli.tuning.result import best_trial

if TYPE_CHECKING:
    from vcli.control.active import ActiveTrial
    from vcli.control.jobs import JobPlan
    from vcli.executors import Executor
    from vcli.spec import HyperparameterTuningJobSpec
    from vcli.store import Store
    from vcli.tuning.stopping import StoppingRule

__all__ = ["PbtStrategy", "SearchStrategy", "Strategy", "StudyView"]


class StudyView(Protocol):
    """What a strategy sees of the study it serves (`vcli.control.study.StudyRun`)."""

    spec: HyperparameterTuningJobSpec
    metric: MetricSpec
    store: Store
    executor: Executor
    #: Every trial so far, by id; the running ones (`ActiveTrial`) by id; trials decided but
    #: not started (waiting for capacity), first to start first.
    trials: dict[str, Trial]
    active: dict[str, ActiveTrial]
    queued: list[PendingTrial]
    #: `--enqueue-trial` configurations; True once no further trial will be suggested.
    enqueued: tuple[dict[str, Any], ...]
    exhausted: bool

    def request_stop(self, active: ActiveTrial, reason: str, *, rule: str | None = None) -> None:
        """Stop a running trial (SIGTERM, then its grace period), recording why and by which rule."""
        ...

    def refresh_measurements(self, active: ActiveTrial, drain: bool = False) -> bool:
        """Read the trial's new reports into its measurements; True if there were any."""
        ...

    def on_progress(self, message: str) -> None:
        """A status line for the user."""
        ...

    def optimal_trials(self) -> list[Trial]:
        """The best trial, or the Pareto front; [] if none yet."""
        ...


class Strategy:
    """The hooks `StudyRun` calls; the defaults are a plain search's."""

    #: Short name for records and messages.
    kind = "search"
    #: Does the suggester propose further trials (PBT: no, exploits do)?
    suggests = True
    #: Are INFRASTRUCTURE failures retried (`vcli.control.outcomes`; PBT: no, a member's trial
    #: starts from a staged copy of another's checkpoint)?
    retries = True

    def parallel(self, run: StudyView) -> int:
        """Trials that hold a slot at once."""
        return run.spec.parallel_trial_count

    def initial(self, run: StudyView) -> list[PendingTrial] | None:
        """Trials to queue before anything is suggested, once (None: none of its own)."""
        return None

    def seeded(self, plan: JobPlan, pending: PendingTrial, trial_id: str) -> JobPlan:
        """The plan of a trial about to start (PBT: the donor's checkpoint copied in)."""
        return plan

    def refreshed(self, trial: Trial) -> Trial:
        """A running trial whose measurements were just read."""
        return trial

    def review(self, run: StudyView, active: ActiveTrial) -> None:
        """A running ACTIVE trial reported: stop it, replace it, or let it run."""

    def best(self, trials: Sequence[Trial], metric: MetricSpec) -> Trial | None:
        return best_trial(trials, metric)

    def record(self, run: StudyView, record: dict[str, Any], best: Trial | None) -> None:
        """Add the study's result to its stored record."""
        record["optimalTrialIds"] = [t.id for t in run.optimal_trials()]
        if run.exhausted and len(run.trials) < run.spec.max_trial_count and not record.get("stopReason"):
            record["stopReason"] = (f"the search space was exhausted after {len(run.trials)} trials, "
                                    f"before maxTrialCount ({run.spec.max_trial_count})")

    def schedule(self, run: StudyView, best: Trial | None) -> list[dict[str, Any]] | None:
        """The best trial's hyperparameter schedule (PBT), else None."""
        return None


class SearchStrategy(Strategy):
    """A suggester's search, with the spec's early-stopping rule if it has one."""

    def __init__(self, stopping: StoppingRule | None, elapsed: bool = False) -> None:
        self.stopping = stopping
        #: The rule's x axis is elapsed seconds (`useElapsedDuration`), not steps.
        self.elapsed = elapsed
        self._reach: dict[str, tuple[object, float | None]] = {}
        self._defaults_asked = False

    def initial(self, run: StudyView) -> list[PendingTrial] | None:
        """Trials to run before any suggestion, asked once: a new study's every-parameter
        defaultValue (`vcli.tuning.defaults`, when each active parameter has one), then the
        `--enqueue-trial` configurations no trial has run yet (a resumed study runs the rest)."""
        if self._defaults_asked:
            return None
        self._defaults_asked = True
        fresh = not (run.trials or run.queued)
        defaults = default_configuration(run.spec.study_spec.parameters) if fresh else None
        ran = [dict(t.parameters) for t in run.trials.values()]
        first = [*([defaults] if defaults is not None else []), *(c for c in run.enqueued if c not in ran)]
        return [PendingTrial(dict(c)) for c in first[:max(0, run.spec.max_trial_count - len(run.trials))]] or None

    def reach(self, trial: Trial) -> float | None:
        """How far the trial got on the rule's x axis: its largest step (or elapsed time) of
        any measurement, not its last one's (a final report without a step is step 0)."""
        hit = self._reach.get(trial.id)
        if hit is not None and hit[0] is trial.measurements:
            return hit[1]
        raw = [m.elapsed_seconds if self.elapsed else m.step_count for m in trial.measurements]
        xs = [float(x) for x in raw if x is not None and math.isfinite(x)]
        far = max(xs) if xs else None
        self._reach[trial.id] = (trial.measurements, far)
        return far

    def review(self, run: StudyView, active: ActiveTrial) -> None:
        if self.stopping is None:
            return
        trials = list(run.trials.values())
        # A trial already as far as the trials that ran to their end is finishing: stopping
        # it now would save nothing, only mislabel a complete run as stopped early. Measured
        # on the rule's own axis: steps compared while the rule read seconds (a trainer that
        # counts no steps), or a last report without a step (step 0), turned the rule off.
        full = [x for t in trials if t.state == TrialState.SUCCEEDED and not t.early_stopping_rule
                and (x := self.reach(t)) is not None]
        here = self.reach(active.trial)
        if full and here is not None and here >= max(full):
            return
        reason = self.stopping.review(active.trial, trials)
        if reason:
            run.on_progress(f"Trial {active.trial.id} stopped early: {reason}")
            run.request_stop(active, reason, rule=self.stopping.name)


class PbtStrategy(Strategy):
    """Population Based Training (`vcli.control.population.Population`)."""

    kind = "pbt"
    suggests = False
    retries = False

    def __init__(self, population: Population) -> None:
        self.population = population

    def parallel(self, run: StudyView) -> int:
        return self.population.size  # every member trains at once (queued when capacity is short)

    def initial(self, run: StudyView) -> list[PendingTrial]:
        members = {t.lineage.member for t in run.trials.values() if t.lineage is not None}
        members |= {q.lineage.member for q in run.queued if q.lineage is not None}
        return [p for p in self.population.initial(0) if p.lineage is not None and p.lineage.member not in members]

    def seeded(self, plan: JobPlan, pending: PendingTrial, trial_id: str) -> JobPlan:
        if pending.checkpoint is None:
            return plan
        return seeded(plan, pending.checkpoint, self.population.checkpoint_dir(trial_id))

    def refreshed(self, trial: Trial) -> Trial:
        return self.population.resumed_from(trial)

    def review(self, run: StudyView, active: ActiveTrial) -> None:
        """Exploit and explore when the member is due and in the bottom quantile."""
        pop = self.population
        metric_id = run.metric.metric_id
        if pop.stepless(active.trial):
            active.fail_reason = (f"Population Based Training ranks members by step, but the trial reported "
                                  f"[{metric_id}] without one: report it with a global_step (hypertune) "
                                  f"or `{metric_id}=VALUE step=N` on stdout.")
            run.request_stop(active, active.fail_reason)
            return

        def handle_of(t: Trial) -> Any:
            running = run.active.get(t.id)
            return running.run.primary_handle if running is not None else stored_handle(run.store, t.custom_job)

        def refresh(t: Trial) -> Trial:
            running = run.active.get(t.id)
            if running is not None:
                run.refresh_measurements(running)
            return run.trials[t.id]

        # Every running member, not only the one that reported: a member that ran ahead is
        # judged at a boundary once the others reach it (PbtScheduler.review), and so is one
        # that trained to the end while that judgement waited (its member goes on, if it loses).
        others = [a for a in run.active.values() if a is not active and a.stop_reason is None]
        for member in [active, *others]:
            if member.trial.state != TrialState.ACTIVE or pop.stepless(member.trial):
                continue
            decided = self._review_one(run, member.trial, handle_of, refresh)
            if decided is not None:
                run.request_stop(member, decided, rule="pbt")
        for trial in self._ended_members(run):
            self._review_one(run, trial, handle_of, refresh)

    def _review_one(self, run: StudyView, trial: Trial, handle_of: Callable[[Trial], Any],
                    refresh: Callable[[Trial], Trial]) -> str | None:
        """Queue the replacement of `trial` when the scheduler exploits it; the reason, or None."""
        budget = run.spec.max_trial_count - len(run.trials) - len(run.queued)
        decided = self.population.review(trial, list(run.trials.values()), budget_left=budget, executor=run.executor,
                                         handle_of=handle_of, refresh=refresh)
        if decided is None:
            return None
        replacement, reason = decided
        ended = "" if trial.state == TrialState.ACTIVE else " (it trained to the end; its member goes on)"
        run.on_progress(f"Trial {trial.id} is replaced{ended}: {reason}")
        run.queued.insert(0, replacement)
        return reason

    @staticmethod
    def _ended_members(run: StudyView) -> list[Trial]:
        """The members whose current trial has SUCCEEDED and has no replacement queued."""
        current: dict[int, Trial] = {}
        for t in run.trials.values():
            if t.lineage is not None:
                current[t.lineage.member] = t
        queued = {q.lineage.member for q in run.queued if q.lineage is not None}
        return [t for m, t in sorted(current.items()) if t.state == TrialState.SUCCEEDED and m not in queued]

    def best(self, trials: Sequence[Trial], metric: MetricSpec) -> Trial | None:
        return self.population.best(trials, metric)

    def record(self, run: StudyView, record: dict[str, Any], best: Trial | None) -> None:
        if best is not None:
            record["pbtSchedule"] = schedule(best, run.trials)
        else:
            record["optimalTrialIds"] = [t.id for t in run.optimal_trials()]

    def schedule(self, run: StudyView, best: Trial | None) -> list[dict[str, Any]] | None:
        return schedule(best, run.trials) if best is not None else None

"""A study as MLflow runs: a `StudyListener` (`vcli.tuning.events`) that keeps them up to date.

The study is a parent run (named by `trialJobSpec.experimentRun`, else the display name) in the
experiment of `trialJobSpec.experiment` (else the display name), and each trial a nested child
run `trial-N` (tag `mlflow.parentRunId`), as Ray Tune's MLflowLoggerCallback lays them out:

- child params: the trial's hyperparameters, written as its trainer got them (`--lr=0.01`);
- child metrics: every intermediate measurement as `<metric>` at its step (timestamp: the
  trial's start plus the measurement's elapsed time), and at the end `final/<metric>` (the
  selected final measurement, at its step) and `duration_seconds`;
- child tags: `vcli.state` (ACTIVE, STOPPING, SUCCEEDED, INFEASIBLE), `vcli.stop_reason`,
  `vcli.early_stopping_rule` (`median`, `asha`, ..., `pbt` for a PBT exploit),
  `vcli.infeasible_reason`, `vcli.custom_job`, PBT's `vcli.pbt.member`,
  `vcli.pbt.parent_trial_id`, `vcli.pbt.parent_run_id`, `vcli.pbt.start_step`, and
  `vcli.best=true` on the best trial (`vcli.pareto_optimal=true` with several metrics);
  status FINISHED (SUCCEEDED, stopped early included), FAILED (INFEASIBLE) or KILLED (stopped
  by a cancel before it reported);
- parent: params `algorithm`, `max_trial_count`, `parallel_trial_count`, `metrics`,
  `early_stopping` and `space.<parameter>`; tags `vcli.study_id`, `vcli.state`,
  `vcli.best_trial_id`, `vcli.best_trial_run_id`, `vcli.optimal_trial_ids`; metrics
  `best/<metric>` and trial counts; status as the study ended.

Runs are found again by their tags (`vcli.study_id`, `vcli.trial_id`) and recorded in the
study's record, so `resume` continues the same runs and logs nothing twice.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Mapping, Sequence

from vcli.spec import HyperparameterTuningJobSpec, JobState, Trial
from vcli.tracking.runs import iso_ms
from vcli.tracking.sync import RUN_WAIT_SECONDS, RunState, Syncer
from vcli.tuning.events import StudyListener

__all__ = ["StudyTracker"]

_RUN_STATUS = {JobState.JOB_STATE_SUCCEEDED: "FINISHED", JobState.JOB_STATE_CANCELLED: "KILLED"}


class StudyTracker(StudyListener):
    """Hears a study's events and logs them to MLflow from its own thread (`vcli.tracking.sync`).

    `settings` is the study's recorded `tracking` (uri, experiment, runName, and the ids found
    so far); `persist(settings)` records it again, with the run ids, on the controller's thread;
    `say(line)` prints a status line; `stored` are the trials the store already holds (a
    `resume`), brought up to date first.
    """

    def __init__(self, settings: Mapping[str, Any], *, study_id: str, display_name: str,
                 spec: HyperparameterTuningJobSpec, say: Callable[[str], None],
                 persist: Callable[[dict[str, Any]], None], stored: Sequence[Trial] = ()) -> None:
        from vcli.codec import iter_parameters

        self.settings = dict(settings)
        self.study_id, self.display_name, self.spec = study_id, display_name, spec
        self.params = {p.parameter_id: p for p in iter_parameters(spec.study_spec.parameters)}
        self.metric_ids = [m.metric_id for m in spec.study_spec.metrics]
        self._say, self._persist = say, persist
        self._lock = threading.Lock()
        self._latest: dict[str, Trial] = {t.id: t for t in stored}
        self._dirty: set[str] = set(self._latest)
        self._end: tuple[JobState, Trial | None, list[Trial]] | None = None
        self._unlinked: list[str] = []
        self._persisted: dict[str, Any] = {}
        self.parent = RunState(run_id=self.settings.get("runId"), checked=False)
        self.runs: dict[str, RunState] = {}
        self.experiment_id: str | None = None
        self._searched = False
        self.backend: Any = None
        self.syncer = Syncer(self._step, target=self.target, say=say, what="study")

    @property
    def target(self) -> str:
        from vcli.tracking import display_uri

        return display_uri(str(self.settings["uri"]))

    def open(self) -> None:
        """Import MLflow (on this thread: a second or two) and start syncing."""
        from vcli.tracking.backend import open_backend

        self.backend = open_backend(str(self.settings["uri"]))
        self.syncer.start()
        self.syncer.poke()

    # ------------------------------------------------------------------ the controller's side

    def prepare_trial(self, trial: Trial, plan: Any) -> Any:
        """The plan a new trial runs: its chief gets the trial's run (waited for at most
        `RUN_WAIT_SECONDS`; without it the trial starts unlinked and the end names it)."""
        from vcli.tracking.env import with_tracking_env

        self._update(trial)
        ready = self.syncer.wait(lambda: self._run_id(trial.id) is not None, RUN_WAIT_SECONDS)
        self._deliver()
        if not ready:
            self._unlinked.append(trial.id)
            return with_tracking_env(plan, None)
        return with_tracking_env(plan, {"MLFLOW_TRACKING_URI": str(self.settings["uri"]),
                                        "MLFLOW_EXPERIMENT_NAME": str(self.settings["experiment"]),
                                        "MLFLOW_RUN_ID": str(self._run_id(trial.id))})

    def trial_started(self, trial: Trial) -> None:
        self._update(trial)

    def trial_measured(self, trial: Trial) -> None:
        self._update(trial)

    def trial_stopping(self, trial: Trial) -> None:
        self._update(trial)

    def trial_ended(self, trial: Trial) -> None:
        self._update(trial)

    def study_ended(self, state: JobState, best: Trial | None, optimal: Sequence[Trial]) -> None:
        with self._lock:
            self._end = (state, best, list(optimal))
        self.syncer.poke()
        in_sync = self.syncer.close()
        self._deliver()
        self._summary(in_sync)

    def _update(self, trial: Trial) -> None:
        with self._lock:
            self._latest[trial.id] = trial
            self._dirty.add(trial.id)
        self.syncer.poke()
        self._deliver()

    def _run_id(self, trial_id: str) -> str | None:
        run = self.runs.get(trial_id)
        return run.run_id if run is not None else None

    def _deliver(self) -> None:
        """Record the run ids found or made so far in the study's record (controller thread)."""
        with self._lock:
            ids = {t: r.run_id for t, r in sorted(self.runs.items(), key=lambda kv: int(kv[0])) if r.run_id}
            current = {**self.settings, "experimentId": self.experiment_id, "runId": self.parent.run_id,
                       "trialRuns": ids}
        current = {k: v for k, v in current.items() if v is not None}
        if current != self._persisted:
            self._persisted = current
            self._persist(current)

    def _summary(self, in_sync: bool) -> None:
        if self._unlinked:
            self._say(f"Note: trial(s) {', '.join(self._unlinked)} started before their MLflow run existed (the tracker "
                      "was unreachable): their trainers got no MLFLOW_RUN_ID, so what they logged themselves is not in "
                      "their runs.")
        if in_sync:
            if self.parent.run_id:
                self._say(f"MLflow: experiment [{self.settings['experiment']}], run [{self.settings['runName']}] "
                          f"({self.parent.run_id}) with {len(self.runs)} trial run(s) at {self.target}.")
            return
        with self._lock:
            left = sorted(self._dirty, key=int)
            end_left = self._end is not None and not self.parent.ended
        what = ([f"trial(s) {', '.join(left)}"] if left else []) + (["the study's end"] if end_left else [])
        self._say(f"Note: MLflow tracking at {self.target} is still failing ({self.syncer.down or 'too slow'}); not "
                  f"logged: {', '.join(what) or 'nothing'}. vcli's store has it all: vcli hp-tuning-jobs describe "
                  f"{self.study_id}.")

    # ------------------------------------------------------------------ the syncer's side

    def _step(self) -> None:
        """Bring every changed run up to date (the syncer's thread; raises on a failed request,
        leaving what was not done marked for the next try)."""
        self._ensure_parent()
        with self._lock:
            todo = sorted(self._dirty, key=int)
        for trial_id in todo:
            with self._lock:
                trial = self._latest[trial_id]
                self._dirty.discard(trial_id)
            try:
                self._sync_trial(trial)
            except BaseException:
                with self._lock:
                    self._dirty.add(trial_id)
                raise
        with self._lock:
            end, pending = self._end, bool(self._dirty)
        if end is not None and not pending and not self.parent.ended:
            self._sync_end(*end)

    def _ensure_parent(self) -> None:
        from vcli.tracking import runs as r

        if self.experiment_id is None:
            self.experiment_id = self.backend.experiment_id(str(self.settings["experiment"]))
        if not self._searched:
            found = self.backend.runs_tagged(self.experiment_id, "vcli.study_id", self.study_id)
            parent, children = r.split_found(found)
            with self._lock:
                if parent is not None:
                    self.parent = parent
                for trial_id, state in children.items():
                    self.runs.setdefault(trial_id, state)
            self._searched = True
        if self.parent.run_id is None:
            run_id = self.backend.create_run(
                self.experiment_id, name=str(self.settings["runName"]), start_ms=None,
                tags={**r.SOURCE_TAGS, "vcli.study_id": self.study_id, "vcli.kind": "HyperparameterTuningJob",
                      "vcli.display_name": self.display_name, "mlflow.note.content": r.study_note(self.spec)},
                params=r.study_params(self.spec))
            with self._lock:
                self.parent = RunState(run_id=run_id)

    def _sync_trial(self, trial: Trial) -> None:
        from vcli.tracking import runs as r

        run = self.runs.get(trial.id)
        if run is None or run.run_id is None:
            run_id = self.backend.create_run(
                self.experiment_id, name=f"trial-{trial.id}", start_ms=iso_ms(trial.start_time),
                tags=r.trial_tags(trial, self.study_id, self.parent.run_id, self._parent_run_of(trial)),
                params=r.trial_params(trial, self.params))
            with self._lock:
                self.runs[trial.id] = run = RunState(run_id=run_id)
        assert run.run_id is not None
        if not run.checked:
            for key in self.metric_ids:
                run.steps[key] = self.backend.steps(run.run_id, key)
            run.checked = True
        self._log_measurements(run, trial)
        tags = {k: v for k, v in r.state_tags(trial).items() if run.tags.get(k) != v}
        if tags:
            self.backend.log(run.run_id, tags=tags)
            run.tags.update(tags)
        if trial.state.is_final() and not run.ended:
            self.backend.log(run.run_id, metrics=r.final_metrics(trial))
            self.backend.end(run.run_id, r.trial_status(trial), iso_ms(trial.end_time))
            run.ended = True

    def _parent_run_of(self, trial: Trial) -> str | None:
        """The run of the trial a PBT trial started from (its checkpoint's donor)."""
        parent = trial.lineage.parent_trial_id if trial.lineage is not None else None
        return self._run_id(parent) if parent else None

    def _log_measurements(self, run: RunState, trial: Trial) -> None:
        start = iso_ms(trial.start_time)
        new = []
        for m in trial.measurements:
            stamp = (start + int((m.elapsed_seconds or 0) * 1000)) if start is not None else None
            for key, value in m.metrics.items():
                if m.step_count not in run.steps.setdefault(key, set()):
                    new.append((key, value, stamp if stamp is not None else _now_ms(), m.step_count))
        if new:
            assert run.run_id is not None
            self.backend.log(run.run_id, metrics=new)
            for key, _, _, step in new:
                run.steps[key].add(step)

    def _sync_end(self, state: JobState, best: Trial | None, optimal: list[Trial]) -> None:
        from vcli.tracking import runs as r

        assert self.parent.run_id is not None
        for trial in ([best] if best is not None else optimal):
            child = self._run_id(trial.id)
            tag = "vcli.best" if best is not None else "vcli.pareto_optimal"
            if child:
                self.backend.log(child, tags={tag: "true"})
        with self._lock:
            trials = list(self._latest.values())
        tags, metrics = r.study_end(state, best, optimal, trials, self._run_id)
        self.backend.log(self.parent.run_id, tags=tags, metrics=metrics)
        self.backend.end(self.parent.run_id, _RUN_STATUS.get(state, "FAILED"), None)
        self.parent.ended = True


def _now_ms() -> int:
    import time

    return int(time.time() * 1000)


"""A model-based suggester runs beside the study's controller (`vcli.control.suggesting`): a
slot never waits for it longer than `tuning/suggestion-wait`, a trial records which of its
points were not the model's answer to the study as it stands, and a worker that dies is
replaced without losing or repeating a trial.

The studies here run the real controller on the real clock, their trials as timelines of the
test executor (`tests.fakes.FakeExecutor`), so the only slow part is the suggester."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.contract_replica import replica_command
from tests.fakes import SLOW_ASK_SECONDS, FakeExecutor, FakeWorld
from vcli.control.clock import SystemClock
from vcli.control.study import StudyRun
from vcli.control.suggesting import AHEAD, FALLBACK, Apart, suggestions_for
from vcli.spec import (
    ContainerSpec,
    CustomJobSpec,
    DoubleValueSpec,
    Goal,
    HyperparameterTuningJobSpec,
    JobKind,
    JobState,
    MachineSpec,
    MetricSpec,
    ParameterSpec,
    StudySpec,
    Trial,
    TrialState,
    WorkerPoolSpec,
)
from vcli.store import Store
from vcli.tuning.events import StudyListener
from vcli.tuning.suggesters import BAYESIAN, get_suggester

#: Each trial: 0.3 s, then its metric, then 0.1 s more.
ACTIONS = ("sleep:0.3", "metric:acc=%x@1", "sleep:0.1", "exit:0")


class RealClock(SystemClock):
    """The system clock with the fake world's `advance` (it only sleeps on it)."""

    advance = SystemClock.sleep


class Started(StudyListener):
    """Calls `on_start(trial)` as each trial starts."""

    def __init__(self, on_start=lambda trial: None) -> None:
        self.on_start = on_start

    def trial_started(self, trial: Trial) -> None:
        self.on_start(trial)


@pytest.fixture
def slow(monkeypatch: pytest.MonkeyPatch) -> str:
    """The slow test suggester, registered as a Bayesian backend as any other would be."""
    monkeypatch.setitem(BAYESIAN, "slow", ("tests.fakes", "SlowSuggester"))
    return "slow"


def _study(tmp_path: Path, backend: str, *, max_trials: int, parallel: int, wait: float,
           listener: StudyListener | None = None) -> tuple[StudyRun, Apart, FakeWorld]:
    spec = HyperparameterTuningJobSpec(
        study_spec=StudySpec(metrics=(MetricSpec(metric_id="acc", goal=Goal.MAXIMIZE),),
                             parameters=(ParameterSpec(parameter_id="x", value_spec=DoubleValueSpec(min_value=0.0, max_value=1.0)),)),
        trial_job_spec=CustomJobSpec(worker_pool_specs=(WorkerPoolSpec(
            machine_spec=MachineSpec(machine_type="n1-standard-4"), replica_count=1,
            container_spec=ContainerSpec(image_uri="img", command=replica_command(), args=ACTIONS)),)),
        max_trial_count=max_trials, parallel_trial_count=parallel,
    )
    store = Store(tmp_path / "home")
    row = store.create_job(kind=JobKind.HYPERPARAMETER_TUNING_JOB.value, display_name="s", record={},
                           state=JobState.JOB_STATE_QUEUED.value)
    suggester = suggestions_for(get_suggester(spec.study_spec, seed=7, bayesian_backend=backend), spec.study_spec,
                                seed=7, ahead=parallel, wait=wait)
    assert isinstance(suggester, Apart)
    world = FakeWorld(RealClock())  # type: ignore[arg-type]
    run = StudyRun(store=store, executor=FakeExecutor(world), spec=spec, study_id=row.id, display_name="s",
                   suggester=suggester, clock=RealClock(), listener=listener or StudyListener())
    return run, suggester, world


def _ended_once(run: StudyRun, world: FakeWorld, trials: int) -> list[Trial]:
    """The study's trials, after checking it ran exactly `trials` distinct ones, each once."""
    assert sorted(run.trials, key=int) == [str(i) for i in range(1, trials + 1)]
    assert {t.state for t in run.trials.values()} == {TrialState.SUCCEEDED}
    assert len(world.started) == trials, "a trial was started twice"
    assert len({t.parameters["x"] for t in run.trials.values()}) == trials, "a point was run twice"
    return [run.trials[str(i)] for i in range(1, trials + 1)]


def test_a_slow_suggester_never_leaves_a_slot_waiting_for_it(tmp_path: Path, slow: str) -> None:
    """Each ask takes 2 s, each trial 0.4 s: the first trials take the worker's first answer,
    later ones the points it prepared ahead or random search's, each recorded as such, and the
    study runs exactly maxTrialCount trials."""
    run, suggester, world = _study(tmp_path, slow, max_trials=12, parallel=3, wait=0.2)
    began = time.monotonic()
    try:
        assert run.run() == JobState.JOB_STATE_SUCCEEDED
    finally:
        suggester.close()
    took = time.monotonic() - began
    trials = _ended_once(run, world, 12)
    by = [t.suggested_by for t in trials]
    assert by[:3] == [None, None, None], by  # the first batch: the worker's answer, waited for
    assert set(by) <= {None, AHEAD, FALLBACK} and FALLBACK in by, by
    # The worker answers at most once per SLOW_ASK_SECONDS (3 points each): had slots waited
    # for its answers, 12 trials would have needed 4 of them, 8 s at least.
    assert by.count(None) <= 3 * (1 + took / SLOW_ASK_SECONDS), (by, took)
    stored = {d["id"]: d.get("suggestedBy") for d in run.store.trial_records(run.study_id)}
    assert stored == {t.id: t.suggested_by for t in trials}


def test_a_killed_suggester_worker_is_replaced_and_the_study_goes_on(tmp_path: Path) -> None:
    """SIGKILL of the worker (vcli's GP) after the third trial starts: a new worker is told
    every trial and the study ends with exactly maxTrialCount distinct trials."""
    workers: list[int] = []

    def kill_at_third(trial: Trial) -> None:
        proc = suggester._proc
        if proc is not None and proc.pid not in workers:
            workers.append(proc.pid)
        if trial.id == "3" and proc is not None:
            os.kill(proc.pid, signal.SIGKILL)

    run, suggester, world = _study(tmp_path, "gp", max_trials=10, parallel=2, wait=0.2, listener=Started(kill_at_third))
    try:
        assert run.run() == JobState.JOB_STATE_SUCCEEDED
    finally:
        suggester.close()
    _ended_once(run, world, 10)
    assert len(workers) >= 2, workers  # the killed one, and its replacement


def test_a_closed_study_leaves_no_worker(tmp_path: Path, slow: str) -> None:
    """`close` ends the worker even in the middle of an ask."""
    run, suggester, _ = _study(tmp_path, slow, max_trials=4, parallel=2, wait=0.2)
    assert suggester.take(2, time.monotonic()) is None  # starting: nothing to take yet
    proc = suggester._proc
    assert proc is not None and proc.poll() is None
    suggester.close()
    assert proc.poll() is not None

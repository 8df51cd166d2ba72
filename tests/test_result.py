"""A study's result in one place (`vcli.tuning.result`): the controller, PBT, the live table and
the report agree on the best trial, NaN/inf/missing values never win, ties go to the earliest."""

from __future__ import annotations

import math

from vcli.spec import Goal, JobState, Measurement, MetricSpec, Trial, TrialState
from vcli.tuning.result import best_trial, final_value


def _t(trial_id: str, value: object, state: TrialState = TrialState.SUCCEEDED) -> Trial:
    metrics = {} if value is None else {"acc": value}
    return Trial(id=trial_id, state=state, parameters={},
                 final_measurement=Measurement(step_count=1, metrics=metrics))  # type: ignore[arg-type]


def test_only_finite_values_of_succeeded_trials_count_and_ties_go_to_the_earliest() -> None:
    trials = [_t("1", math.nan), _t("2", 0.7), _t("3", math.inf), _t("4", 0.9, TrialState.INFEASIBLE),
              _t("5", None), _t("6", 0.7), _t("7", "garbage")]
    high = MetricSpec(metric_id="acc", goal=Goal.MAXIMIZE)
    low = MetricSpec(metric_id="acc", goal=Goal.MINIMIZE)
    assert [final_value(t, "acc") for t in trials] == [None, 0.7, None, None, None, 0.7, None]
    assert best_trial(trials, high).id == "2"  # type: ignore[union-attr]
    assert best_trial([*trials, _t("8", 0.1)], low).id == "8"  # type: ignore[union-attr]
    assert best_trial([*trials, _t("8", 0.1)], high).id == "2"  # type: ignore[union-attr]
    assert best_trial(trials[:1], high) is None
    assert Goal.MAXIMIZE.sign == 1.0 and Goal.MINIMIZE.sign == -1.0


def test_the_live_table_and_the_report_agree_with_the_result() -> None:
    from vcli.plots import data
    from vcli.view import StudySnapshot

    trials = [_t("1", math.nan), _t("2", 0.3), _t("3", 0.8), _t("4", 0.8)]
    metric = MetricSpec(metric_id="acc", goal=Goal.MAXIMIZE)
    snap = StudySnapshot(display_name="s", metrics=(metric,), parameter_ids=(), max_trial_count=4,
                         trials={t.id: t for t in trials}, state=JobState.JOB_STATE_RUNNING)
    assert snap.best().id == "3"  # type: ignore[union-attr]
    top = data.best(metric, trials)
    assert top is not None and top.trial.id == "3" and top.value == 0.8

"""More trials for a study that ended: `hp-tuning-jobs extend ID --max-trial-count=N`.

A SUCCEEDED, FAILED or CANCELLED study goes on with its history: same id, every trial kept,
its suggester rebuilt from the store as `resume` rebuilds it (the same seed, the same priors,
every trial told in order), so its next points are those a study created with the larger
maxTrialCount would have proposed after the same trials. `check` decides whether a study can
be extended and what its record becomes; `reopen` records it RUNNING again (its end time, error,
stop reason and cancel request cleared: they are its new end's to set). What runs it is the
resumed study's controller.

Refused, in one line each: a study that has not ended (a study whose controller died is
`resume`d), N not above the trials it has, Population Based Training (its members trained to
maxStepCount: there is nothing to go on with), and a study whose failed trials already exceed the
failure budget it would have (`--max-failed-trial-count` raises it).

The study's time budget (`--study-timeout`) counts again from the latest extension
(`budget_start`).
"""

from __future__ import annotations

from typing import Any, Sequence

from vcli.enums import JobState
from vcli.errors import InvalidValueError, UsageError
from vcli.spec import StudySpec, Trial
from vcli.store import JobRow, Store, now_iso

__all__ = ["budget_start", "check", "failed_trials", "reopen"]


def check(store: Store, row: JobRow, *, max_trial_count: int, parallel_trial_count: int | None = None,
          max_failed_trial_count: int | None = None) -> dict[str, Any]:
    """The record of the ended study `row` extended to `max_trial_count` trials (and the other
    counts, when given); `UsageError` (or `InvalidValueError`) for one that cannot be."""
    from vcli import codec

    if not JobState(row.state).is_final():
        raise UsageError(f"Hyperparameter tuning job [{row.id}] has not ended ({JobState(row.state).value}): extend takes "
                         "a study that SUCCEEDED, FAILED or was CANCELLED; one whose vcli process died is taken over "
                         f"with `vcli hp-tuning-jobs resume {row.id}`.")
    rec = row.record
    study_spec = codec.study_spec_from_stored(rec["studySpec"])
    if study_spec.population_based_training_spec is not None:
        raise UsageError(f"Hyperparameter tuning job [{row.id}] is Population Based Training, whose members trained to "
                         "maxStepCount: there is nothing to extend; create a new study.")
    trials = store.trials(row.id)
    if max_trial_count <= len(trials):
        raise UsageError(f"argument --max-trial-count: the study [{row.id}] has {len(trials)} trial(s); extend it to "
                         f"more than {len(trials)} (received {max_trial_count}).")
    if parallel_trial_count is not None and parallel_trial_count < 1:
        raise InvalidValueError("--parallel-trial-count", f"must be at least 1, received {parallel_trial_count}.")
    _check_budget(row, study_spec, trials, max_trial_count, max_failed_trial_count)
    record = {k: v for k, v in rec.items() if k != "stopReason"}
    record["extensions"] = [*rec.get("extensions", []), {
        "time": now_iso(), "endedAs": JobState(row.state).value,
        "fromMaxTrialCount": rec.get("maxTrialCount"), "maxTrialCount": max_trial_count}]
    record["maxTrialCount"] = max_trial_count
    if parallel_trial_count is not None:
        record["parallelTrialCount"] = parallel_trial_count
    if max_failed_trial_count is not None:
        record["maxFailedTrialCount"] = max_failed_trial_count
    return record


def _check_budget(row: JobRow, study_spec: StudySpec, trials: Sequence[Trial], max_trial_count: int,
                  max_failed_trial_count: int | None) -> None:
    """Refuse a study whose failed trials already exceed the failure budget it would have."""
    from vcli.control.active import default_failure_budget

    if max_failed_trial_count is not None and max_failed_trial_count < 0:
        raise InvalidValueError("--max-failed-trial-count", f"must be 0 or more, received {max_failed_trial_count}.")
    given = max_failed_trial_count if max_failed_trial_count is not None else int(row.record.get("maxFailedTrialCount") or 0)
    budget = given or default_failure_budget(max_trial_count)
    if (failed := failed_trials(study_spec, trials, max_trial_count)) > budget:
        raise UsageError(f"argument --max-failed-trial-count: the study [{row.id}] has {failed} failed trials, more than "
                         f"the failure budget of {budget} it would have (maxFailedTrialCount): give "
                         f"--max-failed-trial-count={failed + 1} or more to extend it.")


def failed_trials(study_spec: StudySpec, trials: Sequence[Trial], max_trial_count: int) -> int:
    """The trials that count against the failure budget, as the resumed study counts them
    (`StudyFailures.resumed`, which `StudyRun.resume` calls)."""
    from vcli.control.outcomes import StudyFailures

    failures = StudyFailures(study_spec.metrics[0], tuple(m.metric_id for m in study_spec.metrics),
                             study_spec.measurement_selection_type, max_trial_count, ())
    failures.resumed({t.id: t for t in trials})
    return failures.failed


def reopen(store: Store, row: JobRow, record: dict[str, Any]) -> None:
    """Record the ended study `row` RUNNING again with its extended `record`: no end time, no
    error, no cancel request (its first start time stays)."""
    store.update_job(row.id, state=JobState.JOB_STATE_RUNNING.value, end_time=None, error=None, cancel_requested=0,
                     record=record)


def budget_start(row: JobRow) -> str | None:
    """When the study's time budget started counting: its latest extension, else its start."""
    extensions = row.record.get("extensions") or []
    return extensions[-1]["time"] if extensions else row.start_time

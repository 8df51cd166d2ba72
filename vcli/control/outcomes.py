"""How a study takes the end of a trial: its outcome (SUCCEEDED, or INFEASIBLE with a reason
and a failure class, `vcli.control.failures`), what counts against the failure budget, which
failures are retried, and the rules that stop a study whose trials all fail the same way.

| failure class | counts against maxFailedTrialCount | what the study does |
|---|---|---|
| USER | yes | nothing more; the first `SameUserError.FIRST` trials failing with the same error line stop the study |
| RESOURCE | no | the suggester takes the trial as a bad point; the first `OutOfMemoryStart.FIRST` trials all RESOURCE stop the study |
| INFRASTRUCTURE | only a trial no longer retried | its parameters run again as a new trial (`retryOf`), at most `MAX_RETRIES` times |
| TIMEOUT | yes | nothing more |

A retry is a new trial (the next id) with the failed one's parameters and `retryOf` naming
it; retries do not count towards maxTrialCount. A PBT member's trial is not retried (it starts
from a staged copy of another trial's checkpoint): its INFRASTRUCTURE failure counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping

from vcli.control.active import SilentTrainers, fatal_failure, missing_metric_reason
from vcli.control.failures import Failure, recorded
from vcli.control.population import PendingTrial
from vcli.logs import printable
from vcli.spec import FailureClass, JobState, Measurement, MeasurementSelectionType, MetricSpec, Trial, TrialState

if TYPE_CHECKING:
    from vcli.control.active import ActiveTrial

__all__ = ["MAX_RETRIES", "OutOfMemoryStart", "SameUserError", "StudyFailures", "retries_done"]

#: How many times a trial's parameters run again after INFRASTRUCTURE failures.
MAX_RETRIES = 3


def retries_done(trial: Trial, trials: Mapping[str, Trial]) -> int:
    """How many retries came before `trial` (the length of its `retryOf` chain)."""
    n, seen = 0, {trial.id}
    while trial.retry_of is not None and trial.retry_of in trials and trial.retry_of not in seen:
        trial = trials[trial.retry_of]
        seen.add(trial.id)
        n += 1
    return n


class SameUserError:
    """Stops a study whose first `FIRST` trials to end all failed with the same USER error
    line (a typo, a missing file, a wrong argument): every trial would, and the failure budget
    would run out one trial at a time."""

    FIRST = 3

    def __init__(self, max_trial_count: int) -> None:
        self.active = max_trial_count > self.FIRST
        self.line: str | None = None
        self.ids: list[str] = []

    def ended(self, trial: Trial, failure: Failure | None) -> str | None:
        """Note one ended trial; the study's failure message once the rule holds, else None."""
        if not self.active:
            return None
        line = failure.last_error if failure is not None and failure.cls == FailureClass.USER else None
        if line is None or (self.line is not None and line != self.line):
            self.active = False
            return None
        self.line = line
        self.ids.append(trial.id)
        if len(self.ids) < self.FIRST:
            return None
        return (f"The first {self.FIRST} trials ({', '.join(self.ids)}) all failed with the same error, so the study "
                f"stops: {line}")


class OutOfMemoryStart:
    """Stops a study whose first `FIRST` trials to end all failed RESOURCE (out of memory or
    disk): no configuration tried fits, and the suggester has no value to learn from.
    RESOURCE failures count against no budget, so without this rule such a study would run
    every one of its trials."""

    FIRST = 10

    def __init__(self, max_trial_count: int) -> None:
        self.active = max_trial_count > self.FIRST
        self.count = 0
        self.cause = ""

    def ended(self, trial: Trial, failure: Failure | None) -> str | None:
        if not self.active:
            return None
        if failure is None or failure.cls != FailureClass.RESOURCE:
            self.active = False
            return None
        self.count += 1
        self.cause = self.cause or failure.cause
        if self.count < self.FIRST:
            return None
        return (f"The first {self.FIRST} trials all failed RESOURCE ({self.cause}), so the study stops: no "
                "configuration tried fits. Make the search space's memory-hungry parameters (batch size, "
                "model width) smaller, or give the trials bigger machines.")


def _failed_job(active: ActiveTrial, job_state: JobState) -> tuple[str, Failure]:
    """(why INFEASIBLE, the failure) of a trial whose custom job failed, or was cancelled by
    someone other than the study: the job's error, the trainer's last error line, and a class
    other than USER with its cause."""
    msg = (active.run.error or {}).get("message", job_state.value)
    said = f" The trainer's last error line: {active.last_error}" if active.last_error else ""
    failure = active.run.failure or recorded(active.run) or Failure(
        FailureClass.USER, "its custom job was cancelled (not by the study)" if job_state == JobState.JOB_STATE_CANCELLED
        else str(msg))
    also = f" ({failure.text(active.last_error)})" if failure.cls != FailureClass.USER else ""
    return f"The trial's custom job ended {job_state.value}: {msg}{said}{also}", failure


@dataclass
class StudyFailures:
    """A study's bookkeeping of failed trials: the count against the failure budget, why the
    whole study must stop (`fatal`), and the retries of INFRASTRUCTURE failures."""

    metric: MetricSpec
    metric_ids: tuple[str, ...]
    selection: MeasurementSelectionType
    max_trial_count: int
    #: The trainers' Python modules (`active.trainer_modules`): a trial that cannot import
    #: one stops the study.
    modules: tuple[str, ...]
    #: Are INFRASTRUCTURE failures retried (not in a PBT study)?
    retries: bool = True
    failed: int = 0
    fatal: str | None = None
    silent: SilentTrainers = field(init=False)
    rules: tuple[SameUserError | OutOfMemoryStart, ...] = field(init=False)

    def __post_init__(self) -> None:
        self.silent = SilentTrainers(self.metric_ids, self.max_trial_count)
        self.rules = (SameUserError(self.max_trial_count), OutOfMemoryStart(self.max_trial_count))

    def outcome(self, active: ActiveTrial, job_state: JobState,
                cancelled: bool) -> tuple[Measurement | None, str | None, Failure | None]:
        """How the trial ends: (its selected measurement, why INFEASIBLE or None, its failure
        or None: a trial stopped by the study before reporting is INFEASIBLE, not failed)."""
        final = active.reader.final(self.metric.goal, self.selection)
        if active.fail_reason is not None:
            return final, active.fail_reason, Failure(FailureClass.USER, active.fail_reason)
        if job_state == JobState.JOB_STATE_SUCCEEDED:
            if final is not None:
                return final, None, None
            reason = missing_metric_reason(self.metric_ids, active.reader)
            return None, reason, Failure(FailureClass.USER, reason.split(" (")[0])
        if active.stop_reason is not None or (job_state == JobState.JOB_STATE_CANCELLED and cancelled):
            if final is None:
                return None, f"Stopped before reporting a measurement: {active.stop_reason or 'the study was cancelled'}.", None
            return final, None, None
        return (None, *_failed_job(active, job_state))

    def ended(self, trial: Trial, failure: Failure | None, active: ActiveTrial,
              trials: Mapping[str, Trial]) -> PendingTrial | None:
        """Note a concluded trial: count it, apply the study's rules; the retry to run first
        when it is one (an INFRASTRUCTURE failure with retries left), else None."""
        retry = self.retry(trial, trials) if failure is not None else None
        if retry is not None:
            return retry  # neither counted nor judged: its retry is
        if failure is not None and self.counts(trial, trials):
            self.failed += 1
            self.fatal = self.fatal or fatal_failure(trial.id, active.last_error, self.modules)
        self.fatal = self.fatal or self.silent.ended(trial, active.reader)
        for rule in self.rules:
            self.fatal = self.fatal or rule.ended(trial, failure)
        return None

    def counts(self, trial: Trial, trials: Mapping[str, Trial]) -> bool:
        """Does this ended trial count against the failure budget (the module docstring)?"""
        if trial.state != TrialState.INFEASIBLE:
            return False
        cls = trial.failure_class
        if cls is None:  # not a failure (stopped by the study), or a failure stored without a class
            return not (trial.infeasible_reason or "").startswith("Stopped")
        if cls == FailureClass.RESOURCE:
            return False
        return cls != FailureClass.INFRASTRUCTURE or self.retry(trial, trials) is None

    def retry(self, trial: Trial, trials: Mapping[str, Trial]) -> PendingTrial | None:
        """The retry of an INFRASTRUCTURE failure that has retries left, else None."""
        if trial.failure_class != FailureClass.INFRASTRUCTURE or not self.retries:
            return None
        if retries_done(trial, trials) >= MAX_RETRIES:
            return None
        return PendingTrial(dict(trial.parameters), trial.lineage, retry_of=trial.id)

    def retry_line(self, trial: Trial, failure: Failure, trials: Mapping[str, Trial]) -> str:
        """The progress line of a retry: the trial, the class, the cause."""
        n = retries_done(trial, trials) + 1
        return (f"Trial {trial.id} failed {failure.cls.value} ({printable(failure.cause)[:200]}): its parameters run "
                f"again as a new trial (retry {n} of {MAX_RETRIES}); it does not count against the failure budget.")

    def resumed(self, trials: Mapping[str, Trial]) -> list[PendingTrial]:
        """Take a resumed study's stored trials: count its failures; the retries it owed but had
        not started (its controller died in between), in trial order."""
        retried = {t.retry_of for t in trials.values() if t.retry_of is not None}
        owed = []
        for t in trials.values():
            if self.counts(t, trials):
                self.failed += 1
            elif t.id not in retried and (retry := self.retry(t, trials)) is not None:
                owed.append(retry)
        return owed

"""What a study tells the world while it runs: the listener interface.

The study controller (`vcli.control.study.StudyRun`) calls a `StudyListener` at each event, in
the order the events happen, on the controller's own thread. The live table and the piped
lines (`vcli.view`) are listeners; an experiment tracker is another. `Listeners` fans one
study's events out to several.

Contract for implementers:
- every method has a no-op default: override only what you need;
- a listener must return quickly (the study loop waits for it) and must not raise: one that
  can fail (a tracker over the network) catches its own errors and reports them itself;
- the `Trial` passed is the study's current record of that trial (frozen: keep it if needed).
"""

from __future__ import annotations

from typing import Sequence

from vcli.spec import JobState, Trial

__all__ = ["Listeners", "StudyListener"]


class StudyListener:
    """Hears one study's events. See the module's docstring for the contract."""

    def trial_started(self, trial: Trial) -> None:
        """A trial was placed and its custom job started (or re-attached by `resume`)."""

    def trial_measured(self, trial: Trial) -> None:
        """A running trial has a new intermediate measurement (`trial.measurements[-1]`)."""

    def trial_stopping(self, trial: Trial) -> None:
        """The study is stopping a running trial; `trial.stop_reason` says why
        (`trial.early_stopping_rule` names the rule, "pbt" for an exploit)."""

    def trial_ended(self, trial: Trial) -> None:
        """A trial reached SUCCEEDED or INFEASIBLE (`trial.infeasible_reason` says why)."""

    def study_ended(self, state: JobState, best: Trial | None, optimal: Sequence[Trial]) -> None:
        """The study ended `state`. `best` is its best trial (None with several metrics or when
        no trial succeeded); `optimal` its result: `[best]`, or the Pareto front."""

    def progress(self, message: str) -> None:
        """A status line for people (waiting for capacity, a trial stopped early)."""


class Listeners(StudyListener):
    """Several listeners heard as one, in the order given."""

    def __init__(self, *listeners: StudyListener) -> None:
        self.listeners = list(listeners)

    def trial_started(self, trial: Trial) -> None:
        for listener in self.listeners:
            listener.trial_started(trial)

    def trial_measured(self, trial: Trial) -> None:
        for listener in self.listeners:
            listener.trial_measured(trial)

    def trial_stopping(self, trial: Trial) -> None:
        for listener in self.listeners:
            listener.trial_stopping(trial)

    def trial_ended(self, trial: Trial) -> None:
        for listener in self.listeners:
            listener.trial_ended(trial)

    def study_ended(self, state: JobState, best: Trial | None, optimal: Sequence[Trial]) -> None:
        for listener in self.listeners:
            listener.study_ended(state, best, optimal)

    def progress(self, message: str) -> None:
        for listener in self.listeners:
            listener.progress(message)

"""The median rule (Vertex's `medianAutomatedStoppingSpec`)."""

from __future__ import annotations

from typing import Sequence

from vcli.spec import MedianAutomatedStoppingSpec, MetricSpec, Trial
from vcli.tuning.stopping.base import RuleType
from vcli.tuning.stopping.curves import Curves, completed, fmt

#: Completed trials that must have reached the running trial's step (Optuna's MedianPruner
#: waits for 5 finished trials; Katib's medianstop for 3).
MEDIAN_MIN_TRIALS = 5
#: Measurements a trial reports before it can be judged (its first report, often taken
#: before any training, is never enough evidence).
MEDIAN_MIN_MEASUREMENTS = 2




class MedianRule:
    """Vertex's median rule: stop a trial whose best value so far is strictly worse than the
    median, over completed trials, of their running averages up to the trial's last step.

    Counted: completed trials (SUCCEEDED, early-stopped ones included) that have a measurement
    at or after the trial's last x, their running average taken over measurements up to x.
    Warm-up: at least MEDIAN_MIN_TRIALS such trials, and MEDIAN_MIN_MEASUREMENTS finite
    measurements of the trial itself. Stateless.

    Trade-off, kept for Vertex parity: on a loss that falls, a running average lags behind
    the value at x, so the median is easier to beat than Optuna's MedianPruner (median of the
    values *at* x); this rule stops fewer trials, later, and keeps more of the good ones
    (bench/README.md, "Early stopping", measures both).
    """

    name = "median"

    def __init__(self, metric: MetricSpec, use_elapsed_duration: bool):
        self.curves = Curves(metric, use_elapsed_duration)

    def review(self, trial: Trial, trials: Sequence[Trial]) -> str | None:
        own = self.curves.points(trial)
        if len(own) < MEDIAN_MIN_MEASUREMENTS:
            return None
        x = own[-1].x
        averages = []
        for other in completed(trials, trial):
            pts = self.curves.points(other)
            if not pts or pts[-1].x < x:
                continue
            k = pts.upto(x)
            if k:
                averages.append(pts.average(k))
        if len(averages) < MEDIAN_MIN_TRIALS:
            return None
        median = _median(averages)
        best = max(p.score for p in own)
        if best >= median:
            return None
        c = self.curves
        return (f"median rule: best {c.metric_id} {fmt(c.value(best))} by {c.unit} {fmt(x)} is worse than the "
                f"median {fmt(c.value(median))} of {len(averages)} trials' running averages at {c.unit} {fmt(x)}")


def _median(values: list[float]) -> float:
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


RULE: RuleType = RuleType(
    name="median", key="medianAutomatedStoppingSpec", spec=MedianAutomatedStoppingSpec,
    flag_keys=("use-elapsed-duration",),
    build=lambda spec, metric: MedianRule(metric, spec.use_elapsed_duration),
    describe=lambda spec: (f"median rule (best so far vs the median of completed trials' running averages, by "
                           f"{RULE.unit(spec)}; from {MEDIAN_MIN_TRIALS} completed trials)"),
)

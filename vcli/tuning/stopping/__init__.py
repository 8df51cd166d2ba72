"""Automated early stopping: the rules behind `StudySpec.automated_stopping_spec`.

A rule sees only the study's trials (no store, no executor, no clock). The study controller
calls `rule.review(trial, trials)` each time the running trial `trial` reports new
intermediate measurements; `trials` is every trial of the study in creation order, `trial`
included with its latest measurements. `review` answers None (keep running) or a one-line
reason; the controller then stops the trial, which ends SUCCEEDED with its selected
measurement (Vertex semantics), so an early-stopped trial stays data for the rules below.

Common ground of every rule:

* The x axis is a measurement's `step_count`, or its `elapsed_seconds` when the spec says
  `use_elapsed_duration` (then every step count of the spec is read as seconds, as Vertex
  overloads them). A measurement without that x, or whose metric value is missing, NaN or
  infinite, is ignored as if it had not been reported.
* Values are compared in the goal's direction: "better" is higher for MAXIMIZE and lower for
  MINIMIZE; reasons print values as reported.
* A trial's "final value" is its `final_measurement`'s value when finite, else its last
  finite measured value. "Completed" means SUCCEEDED (early-stopped trials included);
  INFEASIBLE trials are never a reference for the curve rules.

One module per rule (`median`, `decay_curve`, `convex`, `asha`, `hyperband`), each registering
a `RuleType` (`base`): its `--early-stopping` word, its studySpec key and spec class, its flag
keys, how to build, describe and check it. `RULES` is the registry the codec, the flag, its
help and the controller read; a new rule is one module and one line here.

This package imports nothing heavy: the decay-curve rule imports numpy inside its function.
"""

from __future__ import annotations

from vcli.spec import AutomatedStoppingSpec, MetricSpec, StudySpec
from vcli.tuning.stopping import asha, convex, decay_curve, hyperband, median
from vcli.tuning.stopping.asha import AshaRule
from vcli.tuning.stopping.base import FieldError, RuleType, StoppingRule
from vcli.tuning.stopping.convex import CONVEX_DEFAULT_MIN_MEASUREMENTS, ConvexRule
from vcli.tuning.stopping.decay_curve import DECAY_MIN_FRACTION, DECAY_MIN_TRIALS, DECAY_Z, DecayCurveRule
from vcli.tuning.stopping.hyperband import HyperbandRule
from vcli.tuning.stopping.median import MEDIAN_MIN_MEASUREMENTS, MEDIAN_MIN_TRIALS, MedianRule

__all__ = [
    "CONVEX_DEFAULT_MIN_MEASUREMENTS", "DECAY_MIN_FRACTION", "DECAY_MIN_TRIALS", "DECAY_Z", "MEDIAN_MIN_MEASUREMENTS",
    "MEDIAN_MIN_TRIALS", "RULES", "RULE_NAMES", "AshaRule", "ConvexRule", "DecayCurveRule", "HyperbandRule",
    "MedianRule", "RuleType", "StoppingRule", "check_rule", "describe_rule", "rule_type", "stopping_rule",
]

#: Every rule by its `--early-stopping` word, in the order of the flag's help (Vertex's three first).
RULES: dict[str, RuleType] = {m.RULE.name: m.RULE for m in (median, decay_curve, convex, asha, hyperband)}
RULE_NAMES = tuple(RULES)


def rule_type(spec: AutomatedStoppingSpec) -> RuleType:
    """The registered rule of a stopping spec. Raises ValueError for an unknown spec class."""
    for rule in RULES.values():
        if type(spec) is rule.spec:
            return rule
    raise ValueError(f"unknown automated stopping spec {spec!r}")


def stopping_rule(spec: AutomatedStoppingSpec, metric: MetricSpec) -> StoppingRule:
    """The rule for `spec`, judging trials by `metric` (the study's only metric).

    Raises ValueError for bounds that make no sense (the codec reports the same cases with
    the YAML path first, through `check_rule`).
    """
    return rule_type(spec).build(spec, metric)


def describe_rule(spec: AutomatedStoppingSpec) -> str:
    """One line for logs and `describe`, e.g. "ASHA (reduction factor 3, rungs at steps 1, 3, 9, 27)"."""
    return rule_type(spec).describe(spec)


def check_rule(study: StudySpec, error: FieldError) -> None:
    """The study's stopping spec makes sense: one metric to judge by, the rule's own bounds.
    `error(field, message)` builds the exception; field "" means the spec as a whole."""
    stop = study.automated_stopping_spec
    if stop is None:
        return
    if len(study.metrics) > 1:
        raise error("", f"early stopping judges trials by one metric, but the study has {len(study.metrics)} "
                    f"({', '.join(m.metric_id for m in study.metrics)}); remove the stopping spec or keep one metric")
    rule_type(stop).check(stop, study, error)

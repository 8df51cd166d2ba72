"""Hyperband (vcli's `hyperbandStoppingSpec`): brackets of ASHA."""

from __future__ import annotations

import math
import zlib
from typing import Sequence

from vcli.spec import HyperbandStoppingSpec, MetricSpec, StudySpec, Trial
from vcli.tuning.stopping.asha import AshaRule, check_halving, check_halving_fields
from vcli.tuning.stopping.base import FieldError, RuleType
from vcli.tuning.stopping.curves import fmt


def _bracket_count(min_x: int, eta: int, max_x: int) -> int:
    """Brackets 0..s_max with s_max the largest s where min_x * eta**s <= max_x."""
    s, r = 0, min_x
    while r * eta <= max_x:
        s, r = s + 1, r * eta
    return s + 1


class HyperbandRule:
    """Hyperband (vcli extension) as brackets of ASHA, like Optuna's HyperbandPruner.

    Bracket s (0..s_max, s_max the largest s with min_step_count x eta**s <= max_step_count)
    runs ASHA with its first rung at min_step_count x eta**s; the last bracket may have no
    rung below max_step_count and then never stops a trial (Hyperband's "no early stopping"
    bracket). A trial's bracket follows from its id alone: its number (a non-numeric id: a
    CRC-32 of it) indexes a fixed cycle in which bracket s appears in proportion to
    Hyperband's trial count n_s = ceil((s_max + 1) / (s_max - s + 1) x eta**(s_max - s)),
    spread by smooth weighted round-robin so consecutive trials visit every bracket. Within a
    bracket, only trials of the same bracket compete. State and resume: as `AshaRule`.

    Given the same bracket per trial, the decisions are Optuna's HyperbandPruner's (default
    bootstrap_count 0): same trial budgets, rungs and promotion. Only the assignment differs:
    Optuna hashes the study name with the trial number (random proportions per study), vcli
    cycles (exact proportions, no study name needed to reproduce a run).
    """

    name = "hyperband"

    def __init__(self, metric: MetricSpec, spec: HyperbandStoppingSpec):
        self.eta = spec.reduction_factor
        n = _bracket_count(spec.min_step_count, self.eta, spec.max_step_count)
        self.brackets = [
            AshaRule(metric, spec.use_elapsed_duration, self.eta, spec.min_step_count * self.eta**s,
                     spec.max_step_count, label=f"Hyperband bracket {s}")
            for s in range(n)
        ]
        smax = n - 1
        weights = [math.ceil((smax + 1) / (smax - s + 1) * self.eta ** (smax - s)) for s in range(n)]
        self.cycle = _smooth_round_robin(weights)

    def bracket_of(self, trial_id: str) -> int:
        number = int(trial_id) if trial_id.isdigit() else zlib.crc32(trial_id.encode())
        return self.cycle[number % len(self.cycle)]

    def review(self, trial: Trial, trials: Sequence[Trial]) -> str | None:
        b = self.bracket_of(trial.id)
        peers = [t for t in trials if self.bracket_of(t.id) == b]
        return self.brackets[b].review(trial, trials, peers=peers)


#: The longest bracket cycle built. The weights grow as reduction_factor**s_max (about
#: max_step_count / min_step_count): a max-step-count of 1e7 took 48 s to cycle through, 1e23
#: never ended. A longer cycle is cut to its first CYCLE_MAX entries, which keep the order and,
#: over those entries, the proportions of the smooth round-robin; shorter ones are whole.
CYCLE_MAX = 20_000


def _smooth_round_robin(weights: list[int]) -> list[int]:
    """A cycle of sum(weights) indices (at most CYCLE_MAX), index i appearing weights[i]
    times, evenly spread."""
    current = [0] * len(weights)
    total = sum(weights)
    out = []
    for _ in range(min(total, CYCLE_MAX)):
        for i, w in enumerate(weights):
            current[i] += w
        pick = max(range(len(weights)), key=lambda i: (current[i], -i))
        current[pick] -= total
        out.append(pick)
    return out



def _check(stop: HyperbandStoppingSpec, study: StudySpec, error: FieldError) -> None:
    check_halving_fields(stop, study, error)  # type: ignore[arg-type]
    if not stop.max_step_count:  # unset (proto3's 0): "found [0]" named nothing the user gave
        raise error("maxStepCount", "required: Hyperband builds its brackets from the steps of a full trial")
    if stop.max_step_count < stop.min_step_count * stop.reduction_factor:
        raise error("maxStepCount", f"Hyperband needs maxStepCount (the steps of a full trial) of at least "
                    f"minStepCount x reductionFactor = {stop.min_step_count * stop.reduction_factor}, "
                    f"found [{stop.max_step_count}]")


def _build(spec: HyperbandStoppingSpec, metric: MetricSpec) -> HyperbandRule:
    check_halving(spec.reduction_factor, spec.min_step_count)
    if spec.max_step_count < spec.min_step_count * spec.reduction_factor:
        raise ValueError(f"Hyperband needs max_step_count >= min_step_count x reduction_factor, "
                         f"found {spec.max_step_count}")
    return HyperbandRule(metric, spec)


def _describe(spec: HyperbandStoppingSpec) -> str:
    n = _bracket_count(spec.min_step_count, spec.reduction_factor, spec.max_step_count)
    unit = RULE.unit(spec)
    return (f"Hyperband (reduction factor {spec.reduction_factor}, {n} brackets, first rungs at {unit} "
            f"{', '.join(fmt(spec.min_step_count * spec.reduction_factor**b) for b in range(n))}, "
            f"full trial {spec.max_step_count} {unit})")


RULE = RuleType(
    name="hyperband", key="hyperbandStoppingSpec", spec=HyperbandStoppingSpec,
    flag_keys=("reduction-factor", "min-step-count", "max-step-count", "use-elapsed-duration"),
    build=_build, describe=_describe, check=_check,
)

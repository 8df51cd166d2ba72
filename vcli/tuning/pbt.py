"""Population Based Training (issue #9): the scheduler's decisions, and nothing else.

`PbtScheduler` decides, from the study's trials alone (no processes, no store, no clock, no
I/O), which hyperparameters each population member starts with, when a running member is
exploited, which member it copies and what it continues with. The study controller carries
the decisions out: it stops the exploited trial, copies the donor's checkpoint directory into
a new trial's `AIP_CHECKPOINT_DIR` and starts that trial with `Exploit.parameters` and a
`PbtLineage` (member, parent_trial_id=donor.id, start_step, inherited_parameters).

Vocabulary:

* A *member* is a population slot, `Trial.lineage.member` (0-based). Every trial of a PBT
  study carries a lineage; a member's *current* trial is its latest one in creation order.
* A trial's *latest measurement* is its last reported measurement whose value of the study's
  metric is finite (missing, NaN and infinite values are ignored, as if not reported). Steps
  are absolute: a trial resumed from a checkpoint at step 4 reports steps 5, 6, ...
* *Boundaries* are the multiples of `perturbation_interval_steps`, in absolute steps. A
  trial's *value at boundary b* is its first finite measurement at a step in [b, b +
  interval). A trial is judged at each boundary above its lineage's `start_step` that it has
  a value at, once, in order: with interval 2, a trial that started from a checkpoint at
  step 4 is next judged at its value at 6. A trial that reports sparsely and jumps over a
  boundary's window has no value there and is not judged at it.
* Members are compared at the same boundary, whatever their speed: a member that runs ahead
  is judged once the others reach that boundary too (or end), from the value it had there
  (`PbtScheduler.review`), even when it has trained to maxStepCount meanwhile: in the bottom
  quantile there, its member goes on as a new trial from the donor's checkpoint. Ray Tune's PBT instead ranks members' latest results,
  whatever their steps.

This module imports nothing heavy (the search-space code it uses is pure Python), since the
study controller imports it.
"""

from __future__ import annotations

import math
import random
import zlib
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from vcli.spec import (
    Algorithm,
    ParameterValue,
    PopulationBasedTrainingSpec,
    StudySpec,
    Trial,
    TrialState,
)
from vcli.tuning.space import CATEGORICAL, DISCRETE, DOUBLE, Space

__all__ = ["check_pbt", "Exploit", "PbtScheduler", "quantile_count"]


def check_pbt(spec: StudySpec, error: Callable[[str, str], Exception]) -> None:
    """A PBT study must make sense; raises `error(field, message)` when it does not.

    `field` is the camelCase key inside `populationBasedTrainingSpec` ("quantileFraction"),
    or "" for the study as a whole (the algorithm and the block disagree, or several
    metrics: members are ranked by one). Messages name the valid values.
    """
    pbt = _check_pbt_study(spec, error)
    if pbt is None:
        return
    _check_pbt_ranking(pbt, error)
    _check_pbt_schedule(pbt, error)


def _check_pbt_study(
    spec: StudySpec, error: Callable[[str, str], Exception]
) -> PopulationBasedTrainingSpec | None:
    """The study-wide checks (field ""): the algorithm and the block must agree and the study
    must have one metric. Returns the block, or None for a study that is not PBT at all."""
    pbt = spec.population_based_training_spec
    is_pbt = spec.algorithm == Algorithm.POPULATION_BASED_TRAINING
    if is_pbt and pbt is None:
        raise error("", "algorithm POPULATION_BASED_TRAINING needs a populationBasedTrainingSpec with at least "
                        "maxStepCount (the step every member trains to)")
    if pbt is None:
        return None
    if not is_pbt:
        raise error("", "a populationBasedTrainingSpec needs algorithm POPULATION_BASED_TRAINING, "
                        f"found [{spec.algorithm.value}]")
    if len(spec.metrics) != 1:
        raise error("", f"Population Based Training ranks members by one metric, but the study has "
                        f"{len(spec.metrics)} ({', '.join(m.metric_id for m in spec.metrics)}); keep one metric")
    return pbt


#: The largest population: every member is a trial that runs at once (a process or container
#: each, as replicas, which are capped at 1,000 for the same reason).
MAX_POPULATION = 1000


def _check_pbt_ranking(pbt: PopulationBasedTrainingSpec, error: Callable[[str, str], Exception]) -> None:
    """The fields that rank and resample members: populationSize, quantileFraction and
    resampleProbability; raises `error(field, message)` on the first bad one."""
    if pbt.population_size < 2:
        raise error("populationSize", "must be an integer of at least 2 (members are ranked against each other), "
                                      f"found [{pbt.population_size}]")
    if pbt.population_size > MAX_POPULATION:
        raise error("populationSize", f"must be at most {MAX_POPULATION} (every member is a trial running at once), "
                                      f"found [{pbt.population_size}]")
    if not 0 < pbt.quantile_fraction <= 0.5:
        raise error("quantileFraction", "must be in (0, 0.5] (the bottom and top quantiles must not overlap), "
                                        f"found [{pbt.quantile_fraction}]")
    if not 0 <= pbt.resample_probability <= 1:
        raise error("resampleProbability", f"must be in [0, 1], found [{pbt.resample_probability}]")


def _check_pbt_schedule(pbt: PopulationBasedTrainingSpec, error: Callable[[str, str], Exception]) -> None:
    """The fields that perturb and pace members: perturbationFactors,
    perturbationIntervalSteps and maxStepCount; raises `error(field, message)` on the first bad one."""
    if not pbt.perturbation_factors:
        raise error("perturbationFactors", "must list at least one positive factor, such as [0.8, 1.2]")
    bad = [f for f in pbt.perturbation_factors if not (f > 0 and math.isfinite(f))]
    if bad:
        raise error("perturbationFactors", "every factor must be a positive number, such as [0.8, 1.2]; "
                                           f"found [{', '.join(str(f) for f in bad)}]")
    if pbt.perturbation_interval_steps < 1:
        raise error("perturbationIntervalSteps", f"must be at least 1, found [{pbt.perturbation_interval_steps}]")
    if pbt.max_step_count < pbt.perturbation_interval_steps:
        raise error("maxStepCount", "must be at least perturbationIntervalSteps "
                                    f"({pbt.perturbation_interval_steps}): it is the step every member trains to; "
                                    f"found [{pbt.max_step_count}]")


def quantile_count(ranked: int, quantile_fraction: float) -> int:
    """How many of `ranked` members form the bottom (and the top) quantile: Ray Tune's rule,
    ceil(ranked x fraction), at least 1 and at most ranked // 2 so the two never overlap.
    Population 4 at 0.25: one bottom, one top; 8 at 0.25: two; 3 at 0.5: one."""
    return min(max(1, math.ceil(ranked * quantile_fraction - 1e-9)), ranked // 2)


@dataclass(frozen=True)
class Exploit:
    """The decision to replace a bottom-quantile trial by a copy of a top-quantile one."""

    #: The top-quantile trial whose latest checkpoint the new trial starts from.
    donor: Trial
    #: The new trial's hyperparameters: `inherited` explored (`PbtScheduler.explore`).
    parameters: dict[str, ParameterValue]
    #: The donor's hyperparameters, as inherited before exploring (the lineage records them).
    inherited: dict[str, ParameterValue]
    #: The donor's latest reported step: its checkpoint's step, where the new trial resumes.
    start_step: int
    #: One line for the log and the live table.
    reason: str


class PbtScheduler:
    """The decisions of Population Based Training for one study (see the module docstring).

    Determinism: every random draw comes from a `random.Random` seeded by a string of
    (seed, purpose, key) (SHA-512 seeding, the same on every machine and Python run): member
    m's initial parameters by (seed, m); an exploit's donor and exploration by (seed, trial
    number, boundary). Nothing depends on call history.

    State and replay: the only state is the highest boundary judged per trial, so a trial
    is never judged twice at one boundary (whether it continued or the controller skipped the
    exploit). A member's value at a boundary never changes once reported, so a fresh
    scheduler (a replacement controller) given the same stored trials judges each boundary as
    the original did when the same members had values there; a member that had not reported
    at that boundary then (a silent one, not waited for) may rank there now.
    """

    def __init__(self, study_spec: StudySpec, *, seed: int) -> None:
        pbt = study_spec.population_based_training_spec
        if pbt is None:
            raise ValueError("the study spec has no population_based_training_spec")
        if not study_spec.metrics:
            raise ValueError("the study spec has no metric")
        self.pbt: PopulationBasedTrainingSpec = pbt
        self.space = Space(study_spec.parameters)
        metric = study_spec.metrics[0]
        self.metric_id = metric.metric_id
        #: Multiplies a value so that higher is better.
        self.sign = metric.goal.sign
        self.seed = int(seed)
        self._judged: dict[str, int] = {}  # trial id -> the highest boundary judged

    # ------------------------------------------------------------------ decisions

    def initial_parameters(self, member: int) -> dict[str, ParameterValue]:
        """Member `member`'s first hyperparameters: a random draw over the whole space, as
        RANDOM_SEARCH draws (uniform in each parameter's scale, discrete and categorical
        values uniform, conditional children only when active). Same (seed, member), same
        values."""
        rng = self._rng("initial", member)
        row = self.space.sample_row([rng.random() for _ in range(self.space.dim)])
        return self.space.decode(row)

    def review(self, trial: Trial, trials: Sequence[Trial]) -> Exploit | None:
        """Judge the running trial `trial` (it has just reported, or another member has).

        `trials` is every trial of the study in creation order (`trial` may appear in it with
        older measurements; the given `trial` wins). `trial` is judged only while it is its
        member's current trial and either ACTIVE with its latest step below `max_step_count`,
        or SUCCEEDED at `max_step_count`: a member that ran ahead and trained to the end while
        a judgement waited for the others is still judged at the boundaries below
        `max_step_count` when they get there (the exploit then starts its member's next trial;
        nothing is stopped). It is judged at each boundary it has a value at (module docstring), once per boundary, in
        order, and each judgement compares the members' values AT THAT BOUNDARY, wherever
        they are now (members drift apart: one may start seconds later than another):

        * the ranked population at boundary b: the members' current trials that are not
          INFEASIBLE and have a value at b (`trial` included);
        * the judgement at b waits (None now, judged at a later review) while a member that
          has reported but not reached b yet is still ACTIVE, or while fewer than 2 members
          have a value at b and an ACTIVE member could still reach it. A member that has not
          reported at all is not waited for once 2 members can be ranked (a member queued
          for capacity may start much later). A boundary nobody else can reach any more is
          passed over;
        * with n ranked, the quantiles hold `quantile_count(n, quantileFraction)` members;
          `trial` is exploited when it ranks among the last k and a donor exists: one of the
          top quantile's trials whose latest step is below `max_step_count` (a finished
          member has nothing left to train from), drawn uniformly from (seed, trial number,
          boundary). Equal values are ordered by a draw from (seed, boundary, member):
          members tied at a floor (say, diverged models stuck at 0) take turns at the bottom,
          boundary after boundary, instead of never (or all at once) being exploited.

        Every member is ranked from the same values at b, so at each boundary exactly the
        bottom quantile is exploited, whichever member's review sees it first. The exploit
        starts from the donor's latest checkpoint (`Exploit.start_step` is the donor's latest
        step), with `explore(donor.parameters, key=(trial number, boundary))`.
        """
        lineage = trial.lineage
        latest = self._latest(trial)
        if lineage is None or latest is None or not self._judgeable(trial, latest[0]):
            return None
        current = _current_trials(trial, trials)
        if current.get(lineage.member) is not trial:
            return None  # already replaced by a newer trial of its member
        for boundary in self._due(trial, min(latest[0], self.pbt.max_step_count - 1)):
            ranked = self._ranked(trial, current, boundary)
            if ranked is None:
                return None  # wait for the members still on their way to this boundary
            self._judged[trial.id] = boundary
            exploit = self._judge(trial, ranked, boundary)
            if exploit is not None:
                return exploit
        return None

    def _judgeable(self, trial: Trial, step: int) -> bool:
        """May `trial`, whose latest step is `step`, be judged? While ACTIVE below maxStepCount;
        and once SUCCEEDED at maxStepCount, at the boundaries its judgement still waited on
        when it ended (its member then goes on as a new trial)."""
        if trial.state == TrialState.ACTIVE:
            return step < self.pbt.max_step_count
        return trial.state == TrialState.SUCCEEDED and step >= self.pbt.max_step_count

    def _judge(self, trial: Trial, ranked: list[tuple[float, int, Trial, int, float]], boundary: int) -> Exploit | None:
        """The exploit of `trial` at `boundary` given the population `ranked` there, or None."""
        n = len(ranked)
        if n < 2:
            return None
        k = quantile_count(n, self.pbt.quantile_fraction)
        if [r[2] for r in ranked].index(trial) < n - k:
            return None
        donors = []
        for row in ranked[:k]:
            latest = self._latest(row[2])
            if latest is not None and latest[0] < self.pbt.max_step_count:
                donors.append((row, latest))
        if not donors:
            return None
        key = (_trial_number(trial.id), boundary)
        donor_row, donor_latest = donors[self._rng("donor", *key).randrange(len(donors))]
        own = next(r for r in ranked if r[2] is trial)
        return self._exploit(trial, (own[3], own[4]), n, donor_row, donor_latest, key)

    def explore(self, parameters: Mapping[str, ParameterValue], *, key: Sequence[int]) -> dict[str, ParameterValue]:
        """`parameters` explored, parameter by parameter in spec order (parents first).

        Each active parameter is resampled from the prior (`initial_parameters`' draw) with
        probability `resample_probability`, else perturbed:

        * DOUBLE and INTEGER: multiplied by a factor drawn from `perturbation_factors`, then
          clamped to [min, max]. The factor multiplies the value on every scale, so on a log
          scale it is a fixed shift of log(value) (1.2 moves 1e-4 and 1e-1 alike, by 20 %).
          INTEGER results are rounded, and moved by at least 1 in the factor's direction
          when the factor is not 1, so small integers still move. A value of 0 cannot be
          scaled and is resampled instead.
        * DISCRETE and CATEGORICAL (categorical in the spec's order): the value moves to a
          neighbour, index +1 or -1 at random; at either end it moves inward (clamping would
          leave it unchanged half the time there). A value not in the list is resampled.

        Conditional children follow their parent's new value: children of a branch that is
        no longer active are dropped; children that become active are drawn from the prior.
        Values out of the spec's bounds are clamped. Same (seed, key, parameters), same
        result.
        """
        rng = self._rng("explore", *key)
        p_resample = self.pbt.resample_probability
        out: dict[str, ParameterValue] = {}
        for col, node in enumerate(self.space.nodes):
            if not self.space.is_active(col, out):
                continue
            old = parameters.get(node.parameter_id)
            if old is None or rng.random() < p_resample:
                out[node.parameter_id] = self._prior(col, rng.random())
            else:
                out[node.parameter_id] = self._perturb(col, old, rng)
        return out

    # ------------------------------------------------------------------ helpers

    def _due(self, trial: Trial, step: int) -> list[int]:
        """The boundaries `trial` still has to be judged at, in order: above its lineage's start
        step and its last judged boundary, at most its latest `step`, and where it has a value."""
        interval = self.pbt.perturbation_interval_steps
        assert trial.lineage is not None
        first = max(trial.lineage.start_step, self._judged.get(trial.id, -1)) // interval * interval + interval
        return [b for b in range(first, step // interval * interval + 1, interval) if self._value_at(trial, b)]

    def _ranked(
        self, trial: Trial, current: Mapping[int, Trial], boundary: int
    ) -> list[tuple[float, int, Trial, int, float]] | None:
        """The population at `boundary`, best first: (score, member, trial, step, value) rows
        from each member's value there; None while the judgement must wait (see `review`).
        Ties are ordered by a draw from (seed, boundary, member)."""
        interval = self.pbt.perturbation_interval_steps
        ranked: list[tuple[float, int, Trial, int, float]] = []
        reported_laggard = silent_laggard = False
        for member, t in sorted(current.items()):
            if t.state == TrialState.INFEASIBLE:
                continue
            at = self._value_at(t, boundary)
            if at is not None:
                ranked.append((self.sign * at[1], member, t, at[0], at[1]))
                continue
            latest = self._latest(t)
            start = t.lineage.start_step if t.lineage is not None else 0
            if t.state != TrialState.ACTIVE or start + 1 >= boundary + interval:
                continue  # ended, or started past this boundary's window: it cannot reach it
            if latest is None:
                silent_laggard = True
            elif latest[0] < boundary:
                reported_laggard = True
        if reported_laggard or (len(ranked) < 2 and silent_laggard):
            return None
        ranked.sort(key=lambda r: (-r[0], self._rng("tie", boundary, r[1]).random()))
        return ranked

    def _exploit(
        self, trial: Trial, own: tuple[int, float], n: int, donor_row: tuple[float, int, Trial, int, float],
        donor_latest: tuple[int, float], key: tuple[int, int],
    ) -> Exploit:
        """The decision to replace `trial` (`own` = (step, value) at the boundary, ranked among
        `n`) by the `_ranked` row `donor_row`'s trial, whose latest is `donor_latest`, explored
        with `key`."""
        step, value = own
        _, _, donor, donor_step, donor_value = donor_row
        reason = (
            f"PBT: trial {trial.id} ({self.metric_id} {value:.4g} at step {step}) is in the bottom "
            f"{self.pbt.quantile_fraction * 100:g}% of the {n} members measured at step {key[1]} (population "
            f"{self.pbt.population_size}); exploiting trial {donor.id} ({donor_value:.4g} at step {donor_step}"
            + (f", now at step {donor_latest[0]})" if donor_latest[0] != donor_step else ")")
        )
        return Exploit(
            donor=donor,
            parameters=self.explore(donor.parameters, key=key),
            inherited=dict(donor.parameters),
            start_step=donor_latest[0],
            reason=reason,
        )

    def _rng(self, purpose: str, *key: object) -> random.Random:
        return random.Random(":".join(["vcli-pbt", str(self.seed), purpose, *map(str, key)]))

    def _latest(self, trial: Trial) -> tuple[int, float] | None:
        """(step, value) of the trial's last reported finite measurement."""
        finite = self._finite(trial)
        return finite[-1] if finite else None

    def _value_at(self, trial: Trial, boundary: int) -> tuple[int, float] | None:
        """(step, value) of the trial's first finite measurement in [boundary, boundary +
        interval): its value at that boundary, or None when it has none there."""
        for step, value in self._finite(trial):
            if boundary <= step < boundary + self.pbt.perturbation_interval_steps:
                return step, value
        return None

    def _finite(self, trial: Trial) -> list[tuple[int, float]]:
        """(step, value) of the trial's finite measurements of the metric, in report order."""
        measurements = trial.measurements or ((trial.final_measurement,) if trial.final_measurement else ())
        out = []
        for m in measurements:
            try:
                v = float(m.metrics.get(self.metric_id))  # type: ignore[arg-type]
            except (TypeError, ValueError):
                continue
            if math.isfinite(v):
                out.append((int(m.step_count), v))
        return out

    def _prior(self, col: int, u: float) -> ParameterValue:
        """The prior draw of one parameter from a uniform `u` (as `Space.sample_row`)."""
        node = self.space.nodes[col]
        if node.kind in (CATEGORICAL, DISCRETE):
            return node.values[min(len(node.values) - 1, max(0, math.floor(u * len(node.values))))]
        return self.space.value_of(col, u)

    def _perturb(self, col: int, old: ParameterValue, rng: random.Random) -> ParameterValue:
        node = self.space.nodes[col]
        value = self.space.normalise(col, old)
        if node.kind in (CATEGORICAL, DISCRETE):
            if value not in node.values:
                return self._prior(col, rng.random())
            if len(node.values) == 1:
                return value
            i = node.values.index(value)
            shift = rng.choice((-1, 1))
            j = i + shift if 0 <= i + shift < len(node.values) else i - shift
            return node.values[j]
        factor = rng.choice(self.pbt.perturbation_factors)
        if isinstance(value, str) or value == 0:
            return self._prior(col, rng.random())
        if node.kind == DOUBLE:
            return float(min(node.hi, max(node.lo, value * factor)))
        # INTEGER: clamped before int() (a huge factor made it inf: OverflowError, the controller died)
        scaled = min(float(node.int_hi) + 1.0, max(float(node.int_lo) - 1.0, value * factor))
        moved: float = int(math.floor(scaled + 0.5))  # value + 1 below is a float when value is
        if factor != 1 and moved == value:
            moved = value + (1 if scaled > value else -1)
        return int(min(node.int_hi, max(node.int_lo, moved)))


def _current_trials(trial: Trial, trials: Sequence[Trial]) -> dict[int, Trial]:
    """member -> its latest trial in creation order (`trial` standing for its own id)."""
    current: dict[int, Trial] = {}
    for t in trials:
        if t.lineage is not None:
            current[t.lineage.member] = trial if t.id == trial.id else t
    if trial.lineage is not None and all(t.id != trial.id for t in trials):
        current[trial.lineage.member] = trial
    return current


def _trial_number(trial_id: str) -> int:
    """Vertex trial ids are decimal numbers; any other id is hashed (CRC-32)."""
    return int(trial_id) if trial_id.isdigit() else zlib.crc32(trial_id.encode())

"""ALGORITHM_UNSPECIFIED: Bayesian optimisation.

`GPSuggester` (backend "gp", the default) is vcli's own GP-based optimiser in numpy/scipy:

* every parameter is one column in a warped unit space (see `_space`); categoricals use a
  Hamming-distance kernel part; inactive conditional children hold a fixed marker;
* an initial design of `n_startup` (10) random points: the trials numbered below n_startup
  are random, the rest come from the model (so a batch may mix both);
* a GP with a Matern-5/2 ARD kernel plus noise (floor 1e-8) on standardised, Yeo-Johnson
  warped outputs (MAXIMIZE negated); hyperparameters by MAP (Optuna GPSampler's priors),
  L-BFGS-B from two fixed starts; above `max_fit_points` observations the hyperparameters
  are fitted on a deterministic subset (the best quarter plus a seeded random sample) while
  the posterior uses every observation (150: the fit is O(n^3) per step; at 2,000 trials
  ask(1) took 0.23 s with 200 and 0.17-0.18 s with 150, an A/B on the idle bench machine);
* in a space without categoricals, a quantised objective (at least 10 % of the values
  repeat exactly: plateaus and steps, as
  an accuracy on a few hundred examples or an integer loss; see `_noise_floor`) gets a noise
  floor of the quantisation error's variance, step^2 / 12, and a pessimistic prior mean
  (the worst observed value): without them, once the incumbent's plateau holds a few points, the
  GP is exactly flat there, log EI near it is nil, and the model-guided points went to the
  box's corners (largest variance) instead of refining (issue 24); continuous objectives
  are untouched;
* on a quantised objective (the same repeat test, categoricals included; one metric),
  `_explore`: every fourth trial of the model phase (trial number % 4 == 3) is a Thompson
  draw of the GP, over random points and points near the best tenth of the observations;
  and a log-EI point within 0.02 (unit space) of an observation at the incumbent's level is
  replaced, by a uniform random point or one near a good point (`_near_good`), half and
  half. The GP reads a plateau as flat and stops looking inside it, while TPE and SMAC3,
  sampling near their good points, found the optimum (svm_digits at 60 trials, 40 seeds:
  39 of 40 runs solved, 34 with points near good ones in place of both, TPE and SMAC3 40;
  figures in bench/README);
* log expected improvement, maximised over 2048 Sobol candidates, then a mixed local search
  from the best candidate, 8 roulette-chosen ones and the best observed point: L-BFGS-B
  over the active DOUBLE columns (analytic gradients, preconditioned by the lengthscales)
  alternating with enumeration of the INTEGER/DISCRETE/CATEGORICAL columns;
* pending points (running trials, outstanding suggestions, earlier points of the same
  batch) are kriging-believer fantasies with the incumbent lowered to the smallest fantasy
  mean, which spreads a batch;
* in an ask for several points on a smooth objective (one metric, not quantised, not
  integer-valued), the model-based points after the first search log EI (with the
  fantasies above) only from starts near the incumbent (`_near_incumbent`): the first point
  goes wherever EI is largest, the others refine. A batch spread over the box refined too
  seldom: at q = 4, over 40 seeds, Hartmann6 solved 16 runs against 25 and mixed5's median
  regret at 60 trials was 2.5e-5 against 3.4e-6 (bench/README). An ask while m trials of
  earlier asks still run (a study's slots freeing one at a time) refines too, except at
  trial numbers that are multiples of m + 1 (`_local_slot`: the mix of a batch of m + 1);
* valueless points (INFEASIBLE / non-finite) are
  kriging-believer fantasies too (they only shrink the variance there), so the optimiser
  does not propose them again, and they are never fed as metric values; but a trial that
  failed RESOURCE (out of memory or disk, `vcli.control.failures`) is an observation
  `resource_margin` (1) standard deviation above the worst modelled output, so that log EI
  leaves its region (an implicit constraint; SMAC imputes a crashed run's cost alike), and
  one that failed INFRASTRUCTURE is neither (its retry runs the point again);
* several metrics (a multi-objective study): ParEGO. Each model-based suggestion draws
  its own weights on the simplex, scalarises the observed objective vectors (normalised
  so that the current Pareto front spans [0, 1]) with the augmented Chebyshev function
  (`parego_scalarise`) and fits the GP above to that; the weights vary over trials, so
  the suggestions spread along the front. Valueless then means lacking a finite value of
  any metric;
* safe search (`StudySpec.safety_metrics`): a GP per safety metric and constrained EI,
  log EI against the best safe observation plus the log probability of being safe, with a
  barrier below `desiredMinSafeTrialsFraction` (`_safegp`); the quantised exploration above
  is off (it knows nothing of safety);
* random draws come from numpy.random.default_rng([seed, trial number, purpose]), so a
  suggester rebuilt from the same trials proposes the same points (ParEGO weights too).

`SkoptSuggester` (backend "skopt") rebuilds a scikit-optimize `Optimizer` with a GP from the
history at every ask.
"""

from __future__ import annotations

import math
from typing import Any

from vcli.spec import ParameterValue, StudySpec
from vcli.tuning.space import CATEGORICAL, DOUBLE, SuggesterBase
from vcli.tuning.suggesters._acqsearch import AcqSearch
from vcli.tuning.suggesters._explore import near_good, on_plateau, quantised, thompson_row
from vcli.tuning.suggesters._parego import PAREGO_RHO, parego_scalarise

__all__ = ["GPSuggester", "PAREGO_RHO", "parego_scalarise"]

# purposes of the seeded generators (the third element of the rng key; 9 and 11 are the keys
# the benchmark measured the quantised exploration with, kept so those runs replay)
_RNG_STARTUP, _RNG_ACQ, _RNG_FIT, _RNG_WEIGHTS, _RNG_EXPLORE, _RNG_PLATEAU = 1, 2, 3, 4, 9, 11
_RNG_LOCAL = 21  # the key the benchmark measured the batch's local points with (so those runs replay)


class GPSuggester(AcqSearch, SuggesterBase):
    """vcli's Gaussian-process Bayesian optimiser (see the module docstring)."""

    models = True

    #: on a quantised objective, trial numbers t with t % explore_every == explore_every - 1
    #: are Thompson draws (`_explore.thompson_row`) over random candidates and candidates near
    #: the best `explore_top` fraction of the observations, moved by N(0, explore_sd) in the
    #: unit space; at most `explore_per_ask` such points in one ask (0: no cap)
    explore_every, explore_top, explore_sd, explore_per_ask = 4, 0.1, 0.05, 0
    #: a log-EI point closer than `plateau_radius` (max-norm, unit space) to an observation at
    #: the incumbent's level is replaced: by a uniform random point with probability
    #: `plateau_uniform`, else by `_near_good` (0.05 instead of 0.02: hartmann6_step solved
    #: 10 of 40 runs against 26; near good points only: svm_digits 36 of 40 against 39)
    plateau_radius, plateau_uniform = 0.02, 0.5
    #: the batch's local points (`_near_incumbent`): log-EI local searches from the best 4 of
    #: `local_starts` points N(0, local_sd) around the incumbent on the continuous columns (unit
    #: space). Measured at q = 4 over 40 seeds, Hartmann6 / mixed5 median regret at 60 trials
    #: against q = 1: 0.02: 1.6x / 0.51x; 0.005: 2.0x / 0.42x; 0.01: 2.1x / 1.8x; 0.05: 3.9x /
    #: 1.3x; 0.1: 3.4x / 2.9x; the batch spread over the box (before): 7.7x / 3.8x
    local_sd, local_starts = 0.02, 512
    #: a trial that failed RESOURCE (out of memory) is an observation this far above the worst
    #: modelled output (outputs are standardised: in standard deviations), so that log EI
    #: leaves its region, not only its point (an implicit constraint, as SMAC imputes crashes)
    resource_margin = 1.0

    def __init__(
        self,
        study_spec: StudySpec,
        *,
        seed: int | None = None,
        n_startup: int = 10,
        n_candidates: int = 2048,
        n_local: int = 10,
        max_fit_points: int = 150,
        max_model_points: int = 300,
        min_noise: float = 1e-8,
        warp_outputs: bool = True,
        quantised_noise: bool = True,
        quantised_mean: float | None = 1.0,
        explore_quantised: bool = True,
    ) -> None:
        super().__init__(study_spec, seed=seed)
        import numpy as np

        from vcli.tuning.suggesters import _gp  # noqa: F401  (imports scipy)

        self._np = np
        self.n_startup = n_startup
        self.n_candidates = n_candidates
        self.n_local = n_local
        self.max_fit_points = max_fit_points
        self.max_model_points = max_model_points
        self.min_noise = min_noise
        self.warp_outputs = warp_outputs
        self.quantised_noise = quantised_noise
        self.quantised_mean = quantised_mean
        self.explore_quantised = explore_quantised
        sp = self.space
        self._is_cat = np.array([n.kind == CATEGORICAL for n in sp.nodes], dtype=bool)
        # columns searched by L-BFGS: DOUBLE, and INTEGER with too many values to enumerate
        self._cont_cols = np.array(
            [c for c, n in enumerate(sp.nodes) if n.kind == DOUBLE or sp.choices[c] is None], dtype=int
        )
        self._disc_cols = [c for c, n in enumerate(sp.nodes) if sp.choices[c] is not None]

    # ------------------------------------------------------------------ ask

    def _ask(self, count: int) -> list[dict[str, ParameterValue]]:
        sp = self.space
        if sp.dim == 0:
            return [{} for _ in range(count)]
        multi = self.n_objectives > 1
        obs = self.objective_observations() if multi else self.observations()
        known = self.known_keys()
        # trial numbers below n_startup, less the priors, are random (all until 2 observations exist)
        n_random = count if len(obs) < 2 else max(0, min(count, self.n_startup - self.n_known - self.n_priors))
        out = self._startup(n_random, known)
        if len(out) < n_random or n_random == count:  # all random, or a finite space ran out
            return out
        return out + self._model_phase(obs, range(n_random, count), known, out, multi)

    def _startup(self, n: int, known: set) -> list[dict[str, ParameterValue]]:
        """The first `n` suggestions of this ask, random (fewer when a finite space runs out)."""
        out: list[dict[str, ParameterValue]] = []
        for i in range(n):
            p = self._untried_random(self.rng(i, _RNG_STARTUP), known)
            if p is None:
                break
            known.add(self.space.key(p))
            out.append(p)
        return out

    def _model_phase(self, obs, indices, known: set, batch, multi: bool) -> list[dict[str, ParameterValue]]:
        """The suggestions numbered `indices` in this ask, after the random ones (`batch`):
        Thompson draws in the explore slots (`_explored`), log EI in the others, in order; a
        slot left empty (a finite space ran out) ends the list."""
        valueless = self.objective_valueless() if multi else self.valueless()
        model = None if multi or not self._explores(obs) else self._single_model(obs, valueless)
        slots = {} if model is None else self._explored(obs, model, indices, known)
        model_slots = [i for i in indices if i not in slots]
        if model_slots:
            chosen = self._ask_model(model_slots, obs, valueless, known, batch + list(slots.values()), model)
            slots.update(zip(model_slots, chosen))
        out: list[dict[str, ParameterValue]] = []
        for i in indices:
            if i not in slots:
                break
            out.append(slots[i])
        return out

    def _explores(self, obs) -> bool:
        """Does this ask take points outside log EI (`_explore`): one metric, quantised, no
        safety metric (a Thompson draw or a point off the plateau knows nothing of safety)?"""
        return self.explore_quantised and not self.safety_metrics and quantised([v for _, v in obs])

    def _explored(self, obs, model, slots, known: set) -> dict[int, dict[str, ParameterValue]]:
        """{slot: point} for the suggestions of this ask (indices `slots`) that are Thompson
        draws of `model` (`_single_model`'s); `known` gains their keys."""
        np = self._np
        sp = self.space
        out: dict[int, dict[str, ParameterValue]] = {}
        for i in slots:
            if self.explore_per_ask and len(out) >= self.explore_per_ask:
                break
            if (self.n_known + i) % self.explore_every == self.explore_every - 1:
                rng = self.rng(i, _RNG_EXPLORE)
                gp, X, y = model[0], model[4], model[5]
                x = thompson_row(np, sp, gp, X, y, rng, known, top=self.explore_top, sd=self.explore_sd)
                p = self._untried_random(rng, known) if x is None else sp.decode(x)
                if p is None:  # a finite space ran out
                    break
                known.add(sp.key(p))
                out[i] = p
        return out

    def _single_model(self, obs, valueless):
        """`_model` for one metric over the modelled observations, plus their rows and the
        outputs it was fitted to: (gp, theta, best, best_x, X, y)."""
        np = self._np
        sp = self.space
        obs = self._modelled(obs)
        X = np.array([sp.encode(p) for p, _ in obs], dtype=float)
        V = np.array([sp.encode(p) for p in valueless], dtype=float).reshape(-1, sp.dim)
        y, floor = self._outputs(np.array([v for _, v in obs], dtype=float))
        return (*self._model(X, y, V, floor, self._resource_rows()), X, y)

    def _outputs(self, yraw):
        """(the outputs the GP models for raw values `yraw`, its noise floor)."""
        np = self._np
        y = self._transform(yraw)
        floor = self._noise_floor(yraw, y)
        if floor > self.min_noise and self.quantised_mean is not None:
            # quantised objective: the GP's prior mean at this quantile of y (the worst value
            # by default), so far from the data it expects no better than that (with a
            # categorical it kept runs out of unexplored categories: mixed5_int, 20 seeds, 9
            # stuck against 3 without, p = 0.03 at 60 trials)
            y = y - float(np.quantile(y, self.quantised_mean))
        return y, floor

    def _ask_model(self, slots, obs, valueless, known, batch, model=None) -> list[dict[str, ParameterValue]]:
        """Points from the GP for the suggestions numbered `slots` (indices in this ask, which
        key their generators); `batch` = points already chosen in this ask, treated as pending;
        `model`: `_single_model`'s, when the caller has it (one metric).

        Several objectives: each suggestion gets its own ParEGO scalarisation (weights drawn
        for its trial number) and a GP fitted to it."""
        np = self._np
        sp = self.space
        level = self._incumbent_level(obs)
        modelled = self._modelled(obs)
        X = np.array([sp.encode(p) for p, _ in modelled])
        Y = np.array([v for _, v in modelled], dtype=float)  # (n,) one objective, (n, m) several
        V = np.array([sp.encode(p) for p in valueless], dtype=float).reshape(-1, sp.dim)
        R = self._resource_rows()
        running = self.pending()  # points of earlier asks still without a value
        P = np.array([sp.encode(p) for p in running + batch], dtype=float).reshape(-1, sp.dim)
        local = self._refines(Y, level)
        safety, safe = self._safety(obs)
        out: list[dict[str, ParameterValue]] = []
        for k, i in enumerate(slots):
            if model is None or Y.ndim == 2:
                yraw = Y if Y.ndim == 1 else parego_scalarise(Y, self.rng(i, _RNG_WEIGHTS))
                y, floor = self._outputs(yraw)
                model = self._model(X, y, V, floor, R)
            if safety is not None:
                from vcli.tuning.suggesters._safegp import safe_incumbent

                model = safe_incumbent(model, X, safe)
            x = self._slot_point(i, model, P, known, local=local and self._local_slot(k, i, len(running)), safety=safety)
            if x is None:
                break
            p = sp.decode(x)
            known.add(sp.key(p))
            if level is not None and on_plateau(np, level, x, self.plateau_radius):
                p = self._off_plateau(i, obs, known) or p
            out.append(p)
            P = np.vstack([P, np.array(sp.encode(p))[None, :]])
        return out

    def _refines(self, Y, level) -> bool:
        """Do a batch's points after the first refine near the incumbent (`_near_incumbent`)?
        Only on a smooth objective: one metric (Y of shape (n,)), with continuous columns,
        not quantised (`level` None), not integer-valued. Inside a step there is nothing to
        refine (mixed5_int, 20 seeds, q = 4: 16 runs of 20 solved at 60 trials with local
        points, 17 without, GPSampler 20), and an integer loss's values may not repeat yet."""
        np = self._np
        return Y.ndim == 1 and level is None and len(self._cont_cols) > 0 and not np.all(Y == np.round(Y))

    def _local_slot(self, k: int, i: int, running: int) -> bool:
        """Does suggestion `i` of this ask (its k-th model-based point) refine near the
        incumbent, on a smooth objective? In a batch, every point after its first. A first point
        asked while `running` = m points of earlier asks have no value yet (a study with
        parallelTrialCount m + 1 whose trials end one at a time) does unless its trial number is
        a multiple of m + 1: the mix of a batch of m + 1, one point searching the whole box and
        m refining (4 in flight, 100 seeds, median regret at 60 trials: mixed5
        4.7e-5 -> 1.7e-5, p = 0.03; Hartmann6 6.0e-3 -> 2.2e-3, p = 0.38)."""
        return k > 0 or (running > 0 and (self.n_known + i) % (running + 1) != 0)

    def _slot_point(self, i, model, P, known: set, local: bool, safety=None):
        """The log-EI maximiser (unit-space row) for suggestion `i` under `model`, with the
        pending rows P as kriging-believer fantasies and the incumbent lowered to the best
        fantasy; `local`: searched from starts near the incumbent first (`_near_incumbent`).
        `safety` (`_safegp.SafetyModel`): log EI weighted by the probability of being safe.
        None when a finite space ran out."""
        np = self._np
        from vcli.tuning.suggesters import _gp

        gp, theta, best, best_x = model[:4]
        if len(P):
            fy, _ = gp.predict(P)
            gp = self._believe(gp, P, theta, fy)
            best = None if best is None else min(best, float(np.min(fy)))
        acq: Any = None if best is None else _gp.LogEI(gp, best)
        if safety is not None:
            from vcli.tuning.suggesters._safegp import SafeAcq

            acq = SafeAcq(acq, safety)
        if not len(P):
            return self._optimise_acq(acq, gp.lengthscales, best_x, self.rng(i, _RNG_ACQ), known)
        x = self._near_incumbent(acq, gp.lengthscales, best_x, self.rng(i, _RNG_LOCAL), known) if local else None
        return x if x is not None else self._optimise_acq(acq, gp.lengthscales, best_x, self.rng(i, _RNG_ACQ), known)

    def _incumbent_level(self, obs):
        """The rows of the observations at the best value, on a quantised objective (one
        metric, `_explores`); None otherwise."""
        if not obs or isinstance(obs[0][1], tuple) or not self._explores(obs):
            return None
        best = min(v for _, v in obs)
        return self._np.array([self.space.encode(p) for p, v in obs if v == best], dtype=float)

    def _off_plateau(self, i, obs, known: set) -> dict[str, ParameterValue] | None:
        """The replacement of suggestion `i`'s log-EI point on the incumbent's plateau: a
        uniform random point with probability `plateau_uniform`, else `_near_good`; `known`
        gains its key."""
        rng = self.rng(i, _RNG_PLATEAU)
        if rng.random() < self.plateau_uniform:
            p = self._untried_random(rng, known)
        else:
            p = self._near_good(obs, rng, known)
        if p is not None:
            known.add(self.space.key(p))
        return p

    def _modelled(self, obs):
        """The observations the GP models: all of them up to `max_model_points`; beyond, the
        best quarter (one metric) and the most recent rest, in trial order. An exact GP costs
        O(n^3) per fit and O(n^2) per acquisition step: with 2,000 trials an ask took 1.4 s
        (hartmann6) to 2.0 s (mixed5) here. Deterministic in the history, so replay holds."""
        cap = self.max_model_points
        if len(obs) <= cap:
            return obs
        best: set[int] = set()
        if not isinstance(obs[0][1], tuple):
            best = set(sorted(range(len(obs)), key=lambda i: obs[i][1])[: cap // 4])
        recent = [i for i in range(len(obs)) if i not in best][-(cap - len(best)):]
        return [obs[i] for i in sorted(best | set(recent))]

    def _noise_floor(self, yraw, y):
        """The GP's noise floor for outputs y (= _transform(yraw)): `min_noise`, or, when the
        objective looks quantised (at least 10 % of the values repeat exactly: plateaus with
        steps, e.g. an accuracy on N examples, an integer loss), the variance of uniform
        quantisation error, step^2 / 12, with the step measured in y's units among the best
        quarter of the distinct levels (where the search refines).

        Without it, once a few points lie on the incumbent's plateau the GP is exact there,
        log EI near the incumbent is nil and the acquisition goes to the box's corners, where
        the variance is largest; with it the steps are smoothed into the slope they follow,
        and EI keeps refining downhill from the incumbent plateau."""
        np = self._np
        # not with a categorical: on mixed5_int (20 seeds) the floor alone left 7 runs short at 60
        # trials against 3 without it (GPSampler 1; p = 0.023 against GPSampler)
        if not self.quantised_noise or self._is_cat.any() or not quantised(yraw):
            return self.min_noise
        levels = np.unique(y)
        if len(levels) < 2:
            return self.min_noise
        k = max(2, len(levels) // 4)
        step = float(np.min(np.diff(levels[: k + 1])))
        return max(self.min_noise, step * step / 12.0)

    def _safety(self, obs):
        """(the safety metrics' model, `_safegp.safety_model`, or None; for each modelled
        observation of `obs` (`_modelled`), is it safe?)."""
        np = self._np
        from vcli.tuning.safety import safe_flags
        from vcli.tuning.suggesters._safegp import safety_model

        model = safety_model(self)
        if model is None:
            return None, None
        ids = self.metric_ids if obs and isinstance(obs[0][1], tuple) else (self.metric_id,)
        flags = safe_flags(self._valued(), ids, self.safety_metrics)
        kept = self._modelled([(f, v) for f, (_, v) in zip(flags, obs)])
        return model, np.array([f for f, _ in kept], dtype=bool)

    def _resource_rows(self):
        """The rows of the trials that failed RESOURCE (`resource_failed`), unit space."""
        sp = self.space
        return self._np.array([sp.encode(p) for p in self.resource_failed()], dtype=float).reshape(-1, sp.dim)

    def _model(self, X, y, V, floor=None, R=None):
        """(GP on outputs y with the valueless points V believed, its hyperparameters, the
        incumbent value, the incumbent's row); `floor`: the noise floor (min_noise if None).
        `R`: rows of RESOURCE failures, modelled at `resource_margin` above the worst output."""
        np = self._np
        from vcli.tuning.suggesters import _gp

        floor = self.min_noise if floor is None else floor
        if R is not None and len(R) and len(y):
            X, y = np.vstack([X, R]), np.concatenate([y, np.full(len(R), float(np.max(y)) + self.resource_margin)])
        theta = self._fit(X, y, floor)
        gp = _gp.GP(X, y, self._is_cat, theta, floor)
        gp.floor = floor
        if len(V):  # valueless points: kriging-believer fantasies (variance only)
            gp = self._believe(gp, V, theta)
        return gp, theta, float(np.min(y)), X[int(np.argmin(y))]

    def _believe(self, gp, F, theta, fy=None):
        """`gp` conditioned on fantasies at F valued at its own posterior mean."""
        np = self._np
        from vcli.tuning.suggesters import _gp

        if fy is None:
            fy, _ = gp.predict(F)
        floor = getattr(gp, "floor", self.min_noise)
        out = _gp.GP(np.vstack([gp.X, F]), np.concatenate([gp.y, fy]), self._is_cat, theta, floor)
        out.floor = floor
        return out

    def _transform(self, yraw):
        """Outputs to minimise: standardised, Yeo-Johnson warped, standardised again."""
        np = self._np
        from scipy import stats

        y = yraw - np.mean(yraw)
        sd = float(np.std(y))
        if not sd > 0:
            return np.zeros_like(y)
        if not self.warp_outputs:
            return y / sd
        y = stats.yeojohnson(y / sd)[0]
        y = y - np.mean(y)
        sd = float(np.std(y))
        return y / sd if sd > 0 else y

    def _near_good(self, obs, rng, known: set) -> dict[str, ParameterValue] | None:
        """`_explore.near_good` with `explore_top` and `explore_sd`; after 64 tries that are
        all in `known` (a finite space), a uniform random point."""
        p = near_good(self._np, self.space, obs, rng, known, top=self.explore_top, sd=self.explore_sd)
        return self._untried_random(rng, known) if p is None else p

    def _untried_random(self, rng, known: set) -> dict[str, ParameterValue] | None:
        """A random point; in a finite space one not in `known` (None when all are)."""
        sp = self.space
        for _ in range(64):
            p = sp.decode(sp.sample_unit(rng.random((1, sp.dim)))[0])
            if not sp.is_finite or sp.key(p) not in known:
                return p
        return next((p for p in sp.grid() if sp.key(p) not in known), None)

    def _fit(self, X, y, floor=None):
        np = self._np
        from vcli.tuning.suggesters import _gp

        n = len(y)
        if n > self.max_fit_points:
            order = np.argsort(y, kind="stable")
            n_best = self.max_fit_points // 4
            rest = order[n_best:]
            rng = np.random.default_rng([self.seed, n, _RNG_FIT])
            pick = rng.choice(len(rest), size=self.max_fit_points - n_best, replace=False)
            sel = np.sort(np.concatenate([order[:n_best], rest[pick]]))
            X, y = X[sel], y[sel]
        d = X.shape[1]
        starts = [
            np.zeros(d + 2),  # lengthscales 1, signal variance 1, noise 1
            np.concatenate([np.full(d, math.log(10.0)), [0.0, math.log(1e-3)]]),  # short, quiet
        ]
        return _gp.fit_hyperparameters(X, y, self._is_cat, starts, self.min_noise if floor is None else floor)


# ---------------------------------------------------------------------- skopt backend

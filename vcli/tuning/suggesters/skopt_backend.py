"""scikit-optimize as the Bayesian backend (`--bayesian-backend=skopt`, the `tune` extra).

Moved out of `bayesian.py` (vcli's own GP); shares its ParEGO scalarisation and seeded
generators. scikit-optimize is imported inside the methods that use it.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from vcli.spec import ParameterValue, StudySpec
from vcli.tuning.space import (
    CATEGORICAL,
    DISCRETE,
    INTEGER,
    LINEAR,
    LOG,
    SuggesterBase,
)
from vcli.tuning.suggesters.bayesian import _RNG_WEIGHTS, parego_scalarise


class SkoptSuggester(SuggesterBase):
    """scikit-optimize's `Optimizer` (GP, gp_hedge) rebuilt from the trials at every ask.

    Dimensions: linear/log DOUBLE -> Real (log-uniform prior for log), INTEGER -> Integer,
    DISCRETE -> Integer index over the sorted values, CATEGORICAL -> Categorical; reverse-log
    parameters -> Real on the warped [0,1]. Conditional children are always part of the
    vector (inactive ones get a fixed default when told) and omitted from suggestions.
    Pending trials are told with the constant lie min(observed) (skopt's "cl_min"); batches
    use ask(n_points=count). Valueless trials are not told (skopt has no notion of them).
    Safe search: a trial that broke a safety threshold is told with the worst observed value,
    as a RESOURCE failure is (an implicit constraint; skopt models no second metric).
    `acq_optimizer` is "sampling" when the space has a categorical, else "lbfgs".
    Several metrics: skopt's GP is fitted to a ParEGO scalarisation (`parego_scalarise`)
    whose weights are drawn once per ask (a batch shares them), from the seed and the
    number of known trials, so replay holds.
    """

    models = True

    def __init__(self, study_spec: StudySpec, *, seed: int | None = None, n_initial_points: int = 10) -> None:
        super().__init__(study_spec, seed=seed)
        import skopt  # noqa: F401

        self.n_initial_points = n_initial_points
        self._dims = [self._dimension(c) for c in range(self.space.dim)]

    def _dimension(self, col: int):
        from skopt.space import Categorical, Integer, Real

        n = self.space.nodes[col]
        name = n.parameter_id
        if n.kind == CATEGORICAL:
            return Categorical(list(n.values), name=name)
        if n.kind == DISCRETE:
            return Integer(0, len(n.values) - 1, name=name)
        if n.scale not in (LINEAR, LOG):  # reverse log: warped unit interval
            return Real(0.0, 1.0, name=name)
        if n.kind == INTEGER:
            if n.int_lo == n.int_hi:
                return Categorical([n.int_lo], name=name)
            prior = "log-uniform" if n.scale == LOG else "uniform"
            return Integer(n.int_lo, n.int_hi, prior=prior, name=name)
        lo, hi = n.lo, n.hi
        if lo == hi:
            return Categorical([lo], name=name)
        return Real(lo, hi, prior="log-uniform" if n.scale == LOG else "uniform", name=name)

    def _to_point(self, params: Mapping[str, object]) -> list:
        sp = self.space
        row = sp.encode(params)
        point = []
        for c, n in enumerate(sp.nodes):
            u = row[c]
            if n.kind == CATEGORICAL:
                point.append(n.values[max(0, int(u))])
            elif n.kind == DISCRETE:
                point.append(n.values.index(sp.value_of(c, u)))
            elif n.scale not in (LINEAR, LOG):
                point.append(float(u))
            elif n.kind == INTEGER:
                point.append(int(sp.value_of(c, u)))
            else:
                point.append(float(sp.value_of(c, u)))
        return point

    def _from_point(self, point: Sequence) -> dict[str, ParameterValue]:
        sp = self.space
        row = []
        for c, n in enumerate(sp.nodes):
            v = point[c]
            v = v.item() if hasattr(v, "item") else v
            if n.kind == CATEGORICAL:
                row.append(float(n.values.index(str(v))))
            elif n.kind == DISCRETE:
                ch = sp.choices[c]
                assert ch is not None  # a DISCRETE column always has its choices
                row.append(ch[int(v)])
            elif n.scale not in (LINEAR, LOG):
                row.append(float(v))
            else:
                row.append(sp.encode_value(c, v))
        return sp.decode(row)

    def _ask(self, count: int) -> list[dict[str, ParameterValue]]:
        import warnings

        if self.space.dim == 0:
            return [{} for _ in range(count)]
        opt = self._optimizer()
        xs, ys = self._told()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if xs:
                opt.tell(xs, ys)
            points = opt.ask(n_points=count) if count > 1 else [opt.ask()]
        return self._new_suggestions(points)

    def _optimizer(self):
        """A fresh skopt `Optimizer` over `_dims` (see the class docstring), its random state
        drawn from (seed, number of known trials) so a rebuilt suggester replays it."""
        import numpy as np
        from skopt import Optimizer

        has_cat = any(n.kind == CATEGORICAL for n in self.space.nodes)
        return Optimizer(
            self._dims,
            base_estimator="GP",
            acq_func="gp_hedge",
            acq_optimizer="sampling" if has_cat else "lbfgs",
            n_initial_points=self.n_initial_points,
            random_state=int(np.random.default_rng([self.seed, self.n_known]).integers(2**31 - 1)),
            model_queue_size=1,
        )

    def _told(self) -> tuple[list[list], list[float]]:
        """(points, values to minimise) to tell the optimizer: every observation (ParEGO
        scalarised when there are several metrics), then, once a value exists, every RESOURCE
        failure with the worst value and every pending point with the constant lie min(values)."""
        import numpy as np

        obs: Sequence[tuple[Mapping[str, ParameterValue], object]]  # one value, or one per metric
        if self.n_objectives > 1:  # one ParEGO scalarisation per ask (see the class docstring)
            obs = self.objective_observations()
            weights_rng = np.random.default_rng([self.seed, self.n_known, _RNG_WEIGHTS])
            ys = [float(v) for v in parego_scalarise([v for _, v in obs], weights_rng)] if obs else []
        else:
            obs = self.observations()
            ys = [float(v) for _, v in obs]
        xs = [self._to_point(p) for p, _ in obs]
        ys = self._unsafe_worst(ys)
        if ys and (bad := self.resource_failed()):  # out of memory: as bad as the worst value (an implicit constraint)
            xs, ys = xs + [self._to_point(p) for p in bad], ys + [max(ys)] * len(bad)
        pend = self.pending()
        if pend and ys:
            xs += [self._to_point(p) for p in pend]
            ys += [min(ys)] * len(pend)
        return xs, ys

    def _unsafe_worst(self, ys: list[float]) -> list[float]:
        """Safe search: the values `ys` of the observations with those of unsafe trials
        replaced by the worst value (an implicit constraint, as a RESOURCE failure)."""
        if not ys or not self.safety_metrics:
            return ys
        from vcli.tuning.safety import safe_flags

        ids = self.metric_ids if self.n_objectives > 1 else (self.metric_id,)
        worst = max(ys)
        return [y if ok else worst for y, ok in zip(ys, safe_flags(self._valued(), ids, self.safety_metrics))]

    def _new_suggestions(self, points: Sequence) -> list[dict[str, ParameterValue]]:
        """`points` as parameters, in order; in a finite space, those already known (told,
        outstanding or earlier in `points`) are dropped, since they would only repeat."""
        sp = self.space
        known = self.known_keys()
        out = []
        for pt in points:
            p = self._from_point(pt)
            k = sp.key(p)
            if sp.is_finite and k in known:
                continue
            known.add(k)
            out.append(p)
        return out

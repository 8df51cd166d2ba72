"""RANDOM_SEARCH: independent uniform draws in the warped unit space."""

from __future__ import annotations

from vcli.spec import ParameterValue, StudySpec
from vcli.suggesters._space import SuggesterBase

_MAX_RETRIES = 64


class RandomSearchSuggester(SuggesterBase):
    """Uniform in each parameter's scale: log-uniform for UNIT_LOG_SCALE, reverse-log for
    UNIT_REVERSE_LOG_SCALE; INTEGER/DISCRETE/CATEGORICAL values uniform over their choices.
    Conditional children are drawn only when active. Draw i of a batch uses the generator
    numpy.random.default_rng([seed, n_known + i]) (the trial's number), so replay reproduces
    it. In a fully discrete space, points already tried are avoided, and [] is returned once
    all are tried.
    """

    def __init__(self, study_spec: StudySpec, *, seed: int | None = None) -> None:
        super().__init__(study_spec, seed=seed)
        import numpy  # noqa: F401  (fail early if numpy is missing)

    def _ask(self, count: int) -> list[dict[str, ParameterValue]]:
        out: list[dict[str, ParameterValue]] = []
        known = self.known_keys() if self.space.is_finite else set()
        for i in range(count):
            rng = self.rng(i)  # keyed by the trial number: batching does not change draws
            params = None
            for _ in range(_MAX_RETRIES):
                row = self.space.sample_unit(rng.random((1, self.space.dim)))[0]
                cand = self.space.decode(row)
                if not self.space.is_finite or self.space.key(cand) not in known:
                    params = cand
                    break
            if params is None:  # many collisions: fall back to the first untried grid point
                params = next(
                    (p for p in self.space.grid() if self.space.key(p) not in known), None
                )
                if params is None:  # every point of a finite space has been tried
                    break
            if self.space.is_finite:
                known.add(self.space.key(params))
            out.append(params)
        return out

"""RANDOM_SEARCH: independent uniform draws in the warped unit space."""

from __future__ import annotations

from vcli.spec import ParameterValue
from vcli.tuning.space import SuggesterBase

_MAX_RETRIES = 64


class RandomSearchSuggester(SuggesterBase):
    """Uniform in each parameter's scale: log-uniform for UNIT_LOG_SCALE, reverse-log for
    UNIT_REVERSE_LOG_SCALE; INTEGER/DISCRETE/CATEGORICAL values uniform over their choices.
    Conditional children are drawn only when active. Draw i of a batch takes the stream
    numpy.random.default_rng([seed, n_known + i]) (the trial's number) would give, computed
    in pure Python (`_prng`), so replay reproduces it and no numpy is needed. In a fully
    discrete space, points already tried are avoided, and [] is returned once all are tried.
    Safety metrics (safe search) are ignored: the draws use no values.
    """

    def _ask(self, count: int) -> list[dict[str, ParameterValue]]:
        out: list[dict[str, ParameterValue]] = []
        known = self.known_keys() if self.space.is_finite else set()
        for i in range(count):
            # Keyed by the trial number: batching does not change draws. Retry r reads the
            # r-th block of `dim` floats of that stream, as successive numpy draws did.
            dim = self.space.dim
            stream: list[float] = []
            params = None
            for r in range(_MAX_RETRIES):
                if len(stream) < (r + 1) * dim:
                    stream = self.uniforms(i, max(2 * len(stream), (r + 1) * dim))
                row = self.space.sample_row(stream[r * dim : (r + 1) * dim])
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

"""GRID_SEARCH: the product of the parameter domains, in deterministic order."""

from __future__ import annotations

from vcli.spec import ParameterValue, StudySpec
from vcli.tuning.space import SuggesterBase


class GridSearchSuggester(SuggesterBase):
    """Enumerates every combination of INTEGER / DISCRETE / CATEGORICAL values in spec
    order (the last parameter varies fastest; a conditional child's values are combined only
    under the parent values that activate it). ask(n) returns the first n grid points not
    carried by any known trial or outstanding suggestion: the state comes from the trials
    alone, so a rebuilt suggester continues where the original left off. [] when exhausted.
    Raises ValueError naming the first DOUBLE parameter. Safety metrics (safe search) are
    ignored: the grid uses no values.
    """

    def __init__(self, study_spec: StudySpec, *, seed: int | None = None) -> None:
        super().__init__(study_spec, seed=seed)
        next(iter(self.space.grid()), None)  # validates: raises on a DOUBLE parameter

    def _ask(self, count: int) -> list[dict[str, ParameterValue]]:
        known = self.known_keys()
        out: list[dict[str, ParameterValue]] = []
        for params in self.space.grid():
            if self.space.key(params) in known:
                continue
            out.append(params)
            if len(out) == count:
                break
        return out

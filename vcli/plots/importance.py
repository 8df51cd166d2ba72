"""Hyperparameter importances: a random forest fitted to the finished trials.

scikit-learn's RandomForestRegressor learns the objective from the parameters; each
parameter's importance is its share of the forest's mean decrease in impurity (summed over its
one-hot columns for a categorical), normalised to sum to 1. Log-scale parameters enter in log
space, so a split means the same thing as it does to the suggesters. The forest is seeded:
the same trials give the same bars. scikit-learn (and numpy) are imported here only.
"""

from __future__ import annotations

import math
from typing import Sequence

from vcli.plots.data import Finished, categories, is_categorical, unit
from vcli.spec import ParameterSpec

METHOD = "random forest, mean decrease in impurity (scikit-learn)"
MIN_TRIALS = 4
MIN_PARAMETERS = 2


def importances(params: Sequence[ParameterSpec], done: Sequence[Finished]) -> dict[str, float] | str:
    """{parameter id: importance} (non-negative, summing to 1), or one sentence saying why
    there are none: fewer than MIN_PARAMETERS parameters or MIN_TRIALS finished trials, an
    objective that never changes, or scikit-learn not installed."""
    if len(params) < MIN_PARAMETERS:
        return f"Importances need at least {MIN_PARAMETERS} parameters; this study has {len(params)}."
    if len(done) < MIN_TRIALS:
        return f"Importances need at least {MIN_TRIALS} finished trials; there are {len(done)}."
    if len({f.value for f in done}) < 2:
        return "Importances are left out: the objective has the same value in every finished trial."
    try:
        import numpy as np
        from sklearn.ensemble import RandomForestRegressor
    except ImportError:
        from vcli.errors import MissingExtraError

        return str(MissingExtraError("Computing importances", "plot", "scikit-learn"))
    columns: list[str] = []  # the parameter each feature column belongs to
    rows: list[list[float]] = [[] for _ in done]
    for p in params:
        cats = categories(p)
        for row, f in zip(rows, done):
            value = f.trial.parameters.get(p.parameter_id)
            if is_categorical(p):
                row.extend(1.0 if value is not None and str(value) == c else 0.0 for c in cats)
            else:
                # unit() is the spec range mapped to [0, 1], log where the scale is log; an
                # inactive conditional parameter becomes -1, a value no split confuses with a real one
                x = unit(p, value)
                row.append(-1.0 if math.isnan(x) else x)
        columns.extend([p.parameter_id] * (len(cats) if is_categorical(p) else 1))
    forest = RandomForestRegressor(n_estimators=128, min_samples_leaf=1, random_state=0, n_jobs=1)
    forest.fit(np.asarray(rows, dtype=float), np.asarray([f.value for f in done], dtype=float))
    total = {p.parameter_id: 0.0 for p in params}
    for pid, share in zip(columns, forest.feature_importances_):
        total[pid] += float(share)
    norm = sum(total.values())
    if norm <= 0:
        return "Importances are left out: the forest found no split that explains the objective."
    return {pid: v / norm for pid, v in total.items()}

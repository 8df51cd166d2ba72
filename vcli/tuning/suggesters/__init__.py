"""Suggesters: the search algorithms behind a study (Vertex's `StudySpec.algorithm`).

A suggester sees only the StudySpec and the trials it is told: no store, no executor. All of
its state can be derived from those trials, so a controller resumes a study by building a
fresh suggester and telling it every stored trial (in the original order).

This module imports nothing heavy. RANDOM_SEARCH and GRID_SEARCH are pure Python, so they run
on a base install; the Bayesian and TPE suggesters import numpy/scipy (or skopt) when
constructed, which the `tune` extra brings, so `vcli --help` stays fast either way.
"""

from __future__ import annotations

from typing import Protocol

from vcli.spec import Algorithm, StudySpec, Trial, TrialSuggestion

__all__ = ["BAYESIAN", "BAYESIAN_BACKENDS", "SUGGESTERS", "Suggester", "get_suggester"]


class Suggester(Protocol):
    """Proposes parameter values for new trials and learns from reported trials.

    ``ask(count)``
        Returns up to ``count`` new suggestions; ``count`` is the number of free parallel
        slots. An empty list means the search space is exhausted (grid search, or a fully
        discrete space where every point has been tried); the controller then stops once
        nothing is running. Suggestions in one batch are distinct, and distinct from the
        points of known trials whenever the space allows it.
        Each suggestion carries only the ACTIVE parameters: a conditional child appears only
        when its parent's value is one of its ``parent_values``. Values are plain Python
        types, never numpy scalars: DOUBLE -> float within [min, max]; INTEGER -> int within
        [min, max]; DISCRETE -> float, one of the listed values; CATEGORICAL -> str, one of
        the listed values. Scale types shape the search (UNIT_LOG_SCALE: log-uniform;
        UNIT_REVERSE_LOG_SCALE: dense near the maximum), never the value domain.
        Suggestions handed out but not yet told as trials count as pending points, so two
        ``ask`` calls in a row do not repeat each other.

    ``tell(trial)``
        Reports a trial, in any state:
        - SUCCEEDED with a ``final_measurement`` holding a finite value of
          ``study_spec.metrics[0]``: an observation. The goal (MAXIMIZE / MINIMIZE) is handled
          inside the suggester.
        - INFEASIBLE, or SUCCEEDED without a finite metric (missing, NaN, inf): tried but
          without a value. Never fed to a model as a number; the Bayesian suggester treats
          the point as already explored so it does not propose it again.
        - REQUESTED / ACTIVE / STOPPING: pending (running) points, so that a suggester
          rebuilt from stored trials knows what is in flight and does not duplicate it.
        Telling a trial id that is already known replaces it (e.g. pending -> final); the
        trial keeps its original position in the order.

    Determinism (replay): for a fixed ``seed``, a fresh suggester told the same trials in
    the same order as the original proposes the same next points. Random draws derive only
    from (seed, the number the suggested trial will get = known trials + outstanding
    suggestions + index in the batch); there is no RNG state that depends on call history.
    """

    def ask(self, count: int) -> list[TrialSuggestion]: ...

    def tell(self, trial: Trial) -> None: ...


#: The suggester of each algorithm: (module, class), imported when a study needs it. PBT's
#: population and explorations come from `vcli.tuning.pbt`; a random suggester stands in so
#: that every study has one (it is told the trials, never asked). ALGORITHM_UNSPECIFIED
#: (Vertex's default, Bayesian optimisation) is the Bayesian backend's (`BAYESIAN`).
SUGGESTERS: dict[Algorithm, tuple[str, str]] = {
    Algorithm.GRID_SEARCH: ("vcli.tuning.suggesters.grid_search", "GridSearchSuggester"),
    Algorithm.RANDOM_SEARCH: ("vcli.tuning.suggesters.random_search", "RandomSearchSuggester"),
    Algorithm.TPE: ("vcli.tuning.suggesters.tpe", "TPESuggester"),
    Algorithm.POPULATION_BASED_TRAINING: ("vcli.tuning.suggesters.random_search", "RandomSearchSuggester"),
}
#: `--bayesian-backend` -> (module, class) of the ALGORITHM_UNSPECIFIED suggester.
BAYESIAN: dict[str, tuple[str, str]] = {
    "gp": ("vcli.tuning.suggesters.bayesian", "GPSuggester"),
    "skopt": ("vcli.tuning.suggesters.skopt_backend", "SkoptSuggester"),
}
BAYESIAN_BACKENDS = tuple(BAYESIAN)


def get_suggester(
    study_spec: StudySpec, *, seed: int | None = None, bayesian_backend: str = "gp"
) -> Suggester:
    """The suggester for ``study_spec.algorithm`` (`SUGGESTERS`, `BAYESIAN`).

    ALGORITHM_UNSPECIFIED (Vertex's default, Bayesian optimisation) -> the Bayesian suggester
    with ``bayesian_backend`` "gp" (vcli's own Gaussian process, the default) or "skopt"
    (scikit-optimize's GP Optimizer); GRID_SEARCH -> grid; RANDOM_SEARCH -> random; TPE (a
    vcli extension) -> the Tree-structured Parzen Estimator (`tpe.py`, numpy/scipy).
    ``seed`` None picks a random seed once, at construction. Raises ValueError for a space
    the algorithm cannot handle (e.g. a DOUBLE parameter under GRID_SEARCH), and ImportError
    (its `name` the missing module, e.g. "numpy") for a Bayesian or TPE suggester without the
    `tune` extra.
    """
    import importlib

    algorithm = study_spec.algorithm
    if algorithm == Algorithm.ALGORITHM_UNSPECIFIED:
        where = BAYESIAN.get(bayesian_backend)
        if where is None:
            raise ValueError(f"unknown bayesian backend {bayesian_backend!r}; expected one of {BAYESIAN_BACKENDS}")
    else:
        where = SUGGESTERS.get(algorithm)
        if where is None:
            raise ValueError(f"unsupported algorithm {algorithm!r}")
    module, name = where
    return getattr(importlib.import_module(module), name)(study_spec, seed=seed)

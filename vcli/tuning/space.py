"""Search-space encoding shared by the suggesters, and their common trial bookkeeping.

Every parameter of the (flattened, conditional) search space gets one column of an encoded
vector. Numeric parameters (DOUBLE, INTEGER, DISCRETE) are mapped to a warped unit interval
[0, 1] (linear, log, or reverse-log); a CATEGORICAL parameter's column holds its value index.
An inactive conditional parameter holds a fixed marker (0.5 for numeric columns, -1 for
categorical ones), so that a model sees one consistent vector per configuration.

numpy is imported lazily inside functions: `vcli.tuning.suggesters` must stay cheap to import, and
what RANDOM_SEARCH and GRID_SEARCH use (encode/decode, `sample_row`, `grid`, `uniforms`) is
pure Python, so they run on a base install without the `tune` extra.

One column's pieces (`Node`, its construction, the warping) live in `vcli.tuning.columns`;
the names the suggesters and PBT use are importable from here as well.
"""

from __future__ import annotations

import bisect
import math
import random
from typing import TYPE_CHECKING, ClassVar, Iterator, Mapping, Sequence

from vcli.spec import (
    FailureClass,
    ParameterSpec,
    ParameterValue,
    StudySpec,
    Trial,
    TrialState,
    TrialSuggestion,
)
from vcli.tuning.columns import (
    CATEGORICAL,
    DISCRETE,
    DOUBLE,
    INACTIVE_CATEGORICAL,
    INACTIVE_NUMERIC,
    INTEGER,
    Node,
    ParamKey,
    make_node,
    normalise_value,
    unwarp,
    warp,
)
from vcli.tuning.columns import LINEAR as LINEAR  # re-exported (the module used to define it)
from vcli.tuning.columns import LOG as LOG  # re-exported
from vcli.tuning.columns import REVERSE_LOG as REVERSE_LOG  # re-exported
from vcli.tuning.pareto import metric_values

if TYPE_CHECKING:
    import numpy as np


class Space:
    """The flattened search space of a StudySpec, with encoding to and from unit vectors."""

    def __init__(self, parameters: Sequence[ParameterSpec]) -> None:
        self.nodes: list[Node] = []
        seen: set[str] = set()
        for spec in parameters:
            self._add(spec, None, (), seen)
        self.dim = len(self.nodes)
        self.index = {n.parameter_id: i for i, n in enumerate(self.nodes)}
        self.has_conditionals = any(n.parent is not None for n in self.nodes)
        self.is_finite = all(n.kind != DOUBLE for n in self.nodes)
        # Per column: encoded values of every feasible choice (None for DOUBLE).
        self.choices: list[tuple[float, ...] | None] = []
        for n in self.nodes:
            if n.kind == CATEGORICAL:
                self.choices.append(tuple(float(i) for i in range(len(n.values))))
            elif n.kind == DISCRETE:
                self.choices.append(tuple(warp(v, n) for v in n.values))
            elif n.kind == INTEGER:
                if n.int_hi - n.int_lo <= 4096:
                    self.choices.append(
                        tuple(warp(float(v), n) for v in range(n.int_lo, n.int_hi + 1))
                    )
                else:
                    self.choices.append(None)  # too many: searched as a rounded continuous dim
            else:
                self.choices.append(None)

    def _add(self, spec: ParameterSpec, parent: int | None, parent_values: tuple, seen: set) -> None:
        """Append `spec`'s column, then its conditional children's, depth first (pre-order).

        `parent` is the parent's column (None at the top level) and `parent_values` the raw
        parent values that activate `spec`. Raises ValueError for a parameter id seen before
        or an invalid parameter (`make_node`).
        """
        pid = spec.parameter_id
        if pid in seen:
            raise ValueError(f"parameter {pid!r} is defined more than once")
        seen.add(pid)
        pnode = self.nodes[parent] if parent is not None else None
        pvals = frozenset(normalise_value(pv, pnode) for pv in parent_values) if pnode else frozenset()
        self.nodes.append(make_node(spec, parent, pvals))
        col = len(self.nodes) - 1
        for cond in spec.conditional_parameter_specs:
            self._add(cond.parameter_spec, col, tuple(cond.parent_values), seen)

    # ------------------------------------------------------------------ values

    def normalise(self, col: int, value: object) -> ParameterValue:
        return normalise_value(value, self.nodes[col])

    def value_of(self, col: int, u: float) -> ParameterValue:
        """The feasible parameter value (plain Python type) nearest to encoded `u`."""
        n = self.nodes[col]
        if n.kind == CATEGORICAL:
            i = int(round(u))
            return n.values[min(len(n.values) - 1, max(0, i))]
        if n.kind == DOUBLE:
            return float(unwarp(u, n))
        if n.kind == INTEGER:
            x = unwarp(u, n)
            return int(min(n.int_hi, max(n.int_lo, math.floor(x + 0.5))))
        # DISCRETE: nearest in warped space
        ch = self.choices[col]
        assert ch is not None  # a DISCRETE column always has its choices (None is DOUBLE / large INTEGER)
        j = min(range(len(ch)), key=lambda k: abs(ch[k] - u))
        return float(n.values[j])

    def encode_value(self, col: int, value: ParameterValue) -> float:
        n = self.nodes[col]
        if n.kind == CATEGORICAL:
            s = str(value)
            return float(n.values.index(s)) if s in n.values else 0.0
        v = float(value)
        if n.kind == INTEGER:
            v = float(min(n.int_hi, max(n.int_lo, math.floor(v + 0.5))))
        return warp(min(n.hi, max(n.lo, v)), n)

    def is_active(self, col: int, values: Mapping[str, ParameterValue]) -> bool:
        n = self.nodes[col]
        if n.parent is None:
            return True
        pid = self.nodes[n.parent].parameter_id
        if pid not in values:
            return False
        return values[pid] in n.parent_values

    # ------------------------------------------------------------------ vectors

    def decode(self, row: Sequence[float]) -> dict[str, ParameterValue]:
        """Encoded row -> {parameter_id: value} with only the active parameters."""
        out: dict[str, ParameterValue] = {}
        for col, n in enumerate(self.nodes):
            if self.is_active(col, out):
                out[n.parameter_id] = self.value_of(col, float(row[col]))
        return out

    def encode(self, params: Mapping[str, object]) -> list[float]:
        """{parameter_id: value} -> encoded row (inactive or missing -> markers / defaults)."""
        row: list[float] = []
        active: dict[str, ParameterValue] = {}
        for col, n in enumerate(self.nodes):
            if not self.is_active(col, active):
                row.append(INACTIVE_CATEGORICAL if n.kind == CATEGORICAL else INACTIVE_NUMERIC)
                continue
            raw = params.get(n.parameter_id)
            if raw is None:
                u = 0.0 if n.kind == CATEGORICAL else 0.5
                u = float(self.encode_value(col, self.value_of(col, u)))
            else:
                u = self.encode_value(col, self.normalise(col, raw))
            row.append(u)
            active[n.parameter_id] = self.value_of(col, u)
        return row

    def key(self, params: Mapping[str, object]) -> ParamKey:
        """A hashable identity of a configuration (active parameters, normalised values)."""
        return self.key_of_row(self.encode(params))

    def key_of_row(self, row: Sequence[float]) -> ParamKey:
        return tuple(sorted(self.decode(row).items()))

    def snap(self, X: np.ndarray) -> np.ndarray:
        """Round every column of encoded rows to a feasible value and fix inactive columns."""
        import numpy as np

        X = np.array(X, dtype=float, copy=True)
        for col, n in enumerate(self.nodes):
            x = X[:, col]
            if n.kind == CATEGORICAL:
                X[:, col] = np.clip(np.rint(x), 0, len(n.values) - 1)
            elif n.kind == DOUBLE:
                X[:, col] = np.clip(x, 0.0, 1.0)
            elif self.choices[col] is not None:
                ch = np.asarray(self.choices[col])
                idx = np.clip(np.searchsorted(ch, x), 1, len(ch) - 1) if len(ch) > 1 else np.zeros(len(x), int)
                if len(ch) > 1:
                    left = ch[idx - 1]
                    right = ch[idx]
                    idx = np.where(np.abs(x - left) <= np.abs(right - x), idx - 1, idx)
                X[:, col] = ch[idx]
            else:
                X[:, col] = [self.encode_value(col, self.value_of(col, float(v))) for v in x]
        return self.repair(X)

    def repair(self, X: np.ndarray) -> np.ndarray:
        """Set inactive columns to their markers; activate children with a valid value."""
        import numpy as np

        if not self.has_conditionals:
            return X
        active = np.ones((X.shape[0], self.dim), dtype=bool)
        for col, n in enumerate(self.nodes):
            if n.parent is not None:
                p = n.parent
                pvals = np.array(
                    [self.value_of(p, float(v)) in n.parent_values for v in X[:, p]], dtype=bool
                )
                active[:, col] = active[:, p] & pvals
            if n.kind == CATEGORICAL:
                X[:, col] = np.where(active[:, col], np.maximum(X[:, col], 0.0), INACTIVE_CATEGORICAL)
            else:
                X[:, col] = np.where(active[:, col], X[:, col], INACTIVE_NUMERIC)
        return X

    def active_mask(self, row: Sequence[float]) -> list[bool]:
        vals = self.decode(row)
        return [n.parameter_id in vals for n in self.nodes]

    def sample_unit(self, U: np.ndarray) -> np.ndarray:
        """Map uniform [0,1) rows to feasible encoded rows (discrete choices uniform)."""
        import numpy as np

        X = np.array(U, dtype=float, copy=True)
        for col, n in enumerate(self.nodes):
            u = np.clip(U[:, col], 0.0, 1.0 - 1e-12)
            if n.kind in (CATEGORICAL, DISCRETE):
                k = len(n.values)
                idx = np.floor(u * k).astype(int)
                X[:, col] = idx if n.kind == CATEGORICAL else np.asarray(self.choices[col])[idx]
            else:
                X[:, col] = u
        return self.snap(X)

    def sample_row(self, u: Sequence[float]) -> list[float]:
        """`sample_unit` for one row, in pure Python (RANDOM_SEARCH runs without numpy).

        The same floats, row for row (tests check it against `sample_unit`): the uniforms are
        mapped to choices, rounded to feasible values as `snap` does and repaired for
        inactive conditional columns as `repair` does.
        """
        row: list[float] = []
        for col, n in enumerate(self.nodes):
            x = min(max(float(u[col]), 0.0), 1.0 - 1e-12)
            ch = self.choices[col]
            if n.kind in (CATEGORICAL, DISCRETE):
                assert ch is not None
                x = float(ch[math.floor(x * len(n.values))])
            if n.kind in (CATEGORICAL, DOUBLE):
                row.append(x)  # already feasible: snap leaves it
            elif ch is None:
                row.append(float(self.encode_value(col, self.value_of(col, x))))
            elif len(ch) == 1:
                row.append(ch[0])
            else:  # the nearest choice in warped space, ties to the lower one (as `snap`)
                j = min(max(bisect.bisect_left(ch, x), 1), len(ch) - 1)
                row.append(ch[j - 1] if abs(x - ch[j - 1]) <= abs(ch[j] - x) else ch[j])
        if self.has_conditionals:
            active = [True] * self.dim
            for col, n in enumerate(self.nodes):
                if n.parent is not None:
                    p = n.parent
                    active[col] = active[p] and self.value_of(p, row[p]) in n.parent_values
                if n.kind == CATEGORICAL:
                    row[col] = max(row[col], 0.0) if active[col] else INACTIVE_CATEGORICAL
                elif not active[col]:
                    row[col] = INACTIVE_NUMERIC
        return row

    def grid(self) -> Iterator[dict[str, ParameterValue]]:
        """Every configuration of a finite space, in deterministic (spec) order."""
        for n in self.nodes:
            if n.kind == DOUBLE:
                raise ValueError(
                    f"GRID_SEARCH needs INTEGER, DISCRETE or CATEGORICAL parameters; "
                    f"parameter {n.parameter_id!r} is DOUBLE"
                )
        top = [c for c, n in enumerate(self.nodes) if n.parent is None]
        children: dict[int, list[int]] = {}
        for c, n in enumerate(self.nodes):
            if n.parent is not None:
                children.setdefault(n.parent, []).append(c)

        def domain(col: int) -> Sequence[ParameterValue]:
            n = self.nodes[col]
            if n.kind == INTEGER:  # a range, not a list: an integer range may be 1e8 wide
                return range(n.int_lo, n.int_hi + 1)
            return list(n.values)

        def expand(cols: list[int], acc: dict) -> Iterator[dict]:
            if not cols:
                yield dict(acc)
                return
            col, rest = cols[0], cols[1:]
            for v in domain(col):
                acc[self.nodes[col].parameter_id] = v
                kids = [k for k in children.get(col, []) if v in self.nodes[k].parent_values]
                yield from expand(kids + rest, acc)
                del acc[self.nodes[col].parameter_id]
                # children set by the recursion were removed on the way back
            return

        yield from expand(top, {})


# ---------------------------------------------------------------------- bookkeeping

#: Failure classes whose trials are not `valueless()` points (`SuggesterBase.resource_failed`).
_NOT_VALUELESS = (FailureClass.RESOURCE, FailureClass.INFRASTRUCTURE)


def metric_value(trial: Trial, metric_id: str) -> float | None:
    """The trial's final metric, or None when it has none (infeasible / non-finite)."""
    if trial.state != TrialState.SUCCEEDED or trial.final_measurement is None:
        return None
    raw = trial.final_measurement.metrics.get(metric_id)
    try:
        v = float(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


class SuggesterBase:
    """Trial bookkeeping shared by all suggesters; every bit of state derives from tell() (and `prior`).

    `_outstanding` holds suggestions this instance handed out that no told trial carries yet
    (so that two ask() calls without a tell in between don't repeat themselves). A suggester
    rebuilt from trials has none, which is the same state the original reaches once the
    controller has told it the trials it created from those suggestions.
    """

    #: Does each ask fit a model (seconds under load)? Then a study asks it in a worker
    #: process of its own, ahead of need (`vcli.control.suggesting`).
    models: ClassVar[bool] = False

    def __init__(self, study_spec: StudySpec, *, seed: int | None = None) -> None:
        if not study_spec.metrics:
            raise ValueError("the study spec has no metric")
        self.study_spec = study_spec
        self.space = Space(study_spec.parameters)
        self.metric_id = study_spec.metrics[0].metric_id
        self.sign = -study_spec.metrics[0].goal.sign  # the suggesters minimize
        # every objective of a multi-objective study (one entry for a single metric)
        self.metric_ids = tuple(m.metric_id for m in study_spec.metrics)
        self.signs = tuple(-m.goal.sign for m in study_spec.metrics)
        self.safety_metrics = study_spec.safety_metrics  # safe search: constraints (`vcli.tuning.safety`)
        self.seed = int(seed) if seed is not None else random.SystemRandom().randrange(2**32)
        self._trials: dict[str, Trial] = {}
        self._keys: dict[str, ParamKey] = {}  # trial id -> its key (computed once, at tell)
        self._outstanding: list[tuple[ParamKey, dict[str, ParameterValue]]] = []
        #: Prior observations (`prior`): SUCCEEDED trials of another study, never this one's.
        self._priors: tuple[Trial, ...] = ()

    # ------------------------------------------------------------------ protocol

    def prior(self, observations: Sequence[Trial]) -> None:
        """Prior observations (a warm start), told once before anything is asked: SUCCEEDED
        trials of another study, with parameters of this space. They feed `observations()` and
        `objective_observations()` (so the models), as the oldest values, and count towards a
        model's random start-up; they are no trials of this study: they take no trial number
        (`n_known`, and the random draws keyed on it, leave them out), are neither pending nor
        known points, so random and grid search, which use no values, propose what they would
        without them. A suggester rebuilt with the same priors and trials proposes the same
        points. A prior without a finite value of every metric is left out."""
        self._priors = tuple(t for t in observations
                             if t.state == TrialState.SUCCEEDED and metric_values(t, self.metric_ids) is not None)

    @property
    def n_priors(self) -> int:
        """Prior observations told (`prior`)."""
        return len(self._priors)

    def _valued(self) -> Iterator[Trial]:
        """The priors, then every trial told, in order: what observations are made of."""
        yield from self._priors
        yield from self._trials.values()

    def tell(self, trial: Trial) -> None:
        self._trials[trial.id] = trial  # dict keeps first-insertion order on update
        k = self._keys[trial.id] = self.space.key(trial.parameters)
        for i, (ok, _) in enumerate(self._outstanding):
            if ok == k:
                del self._outstanding[i]
                break

    def ask(self, count: int) -> list[TrialSuggestion]:
        if count <= 0:
            return []
        params = self._ask(int(count))
        for p in params:
            self._outstanding.append((self.space.key(p), p))
        return [TrialSuggestion(parameters=p) for p in params]

    def preview(self, count: int) -> list[dict[str, ParameterValue]]:
        """What `ask(count)` would return now, without handing it out: nothing is added to
        the outstanding suggestions (`hold` adds those the caller takes), so a suggester that
        prepares points ahead of need (`vcli.control.suggesting`) keeps replay's numbering."""
        return self._ask(int(count)) if count > 0 else []

    def hold(self, parameters: Mapping[str, ParameterValue]) -> None:
        """Count `parameters`, taken from a `preview`, as an outstanding suggestion (as `ask`
        counts its own) until a told trial carries them."""
        self._outstanding.append((self.space.key(parameters), dict(parameters)))

    def _ask(self, count: int) -> list[dict[str, ParameterValue]]:  # pragma: no cover
        raise NotImplementedError

    # ------------------------------------------------------------------ views

    @property
    def n_known(self) -> int:
        """Trials told so far plus suggestions not yet told: the replay-stable RNG counter."""
        return len(self._trials) + len(self._outstanding)

    def rng(self, i: int, *purpose: int) -> np.random.Generator:
        """The generator for suggestion i of the current ask, keyed by the number that trial
        will get (n_known + i): the k-th trial gets the same draws whether it was asked
        alone or in a batch, and a rebuilt suggester reproduces them."""
        import numpy as np

        return np.random.default_rng([self.seed, self.n_known + i, *purpose])

    def uniforms(self, i: int, n: int, *purpose: int) -> list[float]:
        """The first `n` floats of `rng(i, *purpose).random()`, without numpy (`_prng`)."""
        from vcli.tuning.suggesters._prng import uniforms

        return uniforms([self.seed, self.n_known + i, *purpose], n)

    def observations(self) -> list[tuple[Mapping[str, ParameterValue], float]]:
        """(parameters, value to MINIMISE) of every prior and trial with a finite final metric."""
        out = []
        for t in self._valued():
            v = metric_value(t, self.metric_id)
            if v is not None:
                out.append((t.parameters, self.sign * v))
        return out

    @property
    def n_objectives(self) -> int:
        return len(self.metric_ids)

    def objective_observations(self) -> list[tuple[Mapping[str, ParameterValue], tuple[float, ...]]]:
        """(parameters, one value to MINIMISE per metric, in `study_spec.metrics` order) of
        every trial with a finite final value of every metric. With one metric this is
        `observations()` with 1-tuples. Priors first, as there."""
        out = []
        for t in self._valued():
            v = metric_values(t, self.metric_ids)
            if v is not None:
                out.append((t.parameters, tuple(s * x for s, x in zip(self.signs, v))))
        return out

    def objective_valueless(self) -> list[Mapping[str, ParameterValue]]:
        """Finished trials without a finite value of every metric: `valueless()` for
        multi-objective models (the same list when there is one metric)."""
        return [
            t.parameters
            for t in self._trials.values()
            if t.state.is_final() and metric_values(t, self.metric_ids) is None and t.failure_class not in _NOT_VALUELESS
        ]

    def resource_failed(self) -> list[Mapping[str, ParameterValue]]:
        """Finished trials that failed RESOURCE (out of memory or disk): bad observations of an
        implicit constraint to the models (the GP's imputed worst value, TPE's bad group)."""
        return [t.parameters for t in self._trials.values()
                if t.state.is_final() and t.failure_class == FailureClass.RESOURCE]

    def pending(self) -> list[Mapping[str, ParameterValue]]:
        """Running trials and outstanding suggestions (points with a value still to come)."""
        out = [t.parameters for t in self._trials.values() if not t.state.is_final()]
        out.extend(p for _, p in self._outstanding)
        return out

    def valueless(self) -> list[Mapping[str, ParameterValue]]:
        """Finished trials without a usable metric (INFEASIBLE, missing or non-finite), but
        those that failed RESOURCE (`resource_failed`) or INFRASTRUCTURE (a lost host says
        nothing of its point, and its retry runs that point again)."""
        return [
            t.parameters
            for t in self._trials.values()
            if t.state.is_final() and metric_value(t, self.metric_id) is None and t.failure_class not in _NOT_VALUELESS
        ]

    def known_keys(self) -> set[ParamKey]:
        keys = set(self._keys.values())
        keys.update(k for k, _ in self._outstanding)
        return keys

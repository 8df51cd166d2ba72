"""One column of the encoded search space (`vcli.tuning.space`): its `Node`, built from a
`ParameterSpec`, and the warping between a parameter's values and the unit interval.

Pure Python (no numpy): RANDOM_SEARCH, GRID_SEARCH and PBT encode and decode on a base install.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from vcli.spec import (
    CategoricalValueSpec,
    DiscreteValueSpec,
    DoubleValueSpec,
    IntegerValueSpec,
    ParameterSpec,
    ParameterValue,
    ScaleType,
)

DOUBLE, INTEGER, DISCRETE, CATEGORICAL = "DOUBLE", "INTEGER", "DISCRETE", "CATEGORICAL"
LINEAR, LOG, REVERSE_LOG = "linear", "log", "reverse_log"

INACTIVE_NUMERIC = 0.5
INACTIVE_CATEGORICAL = -1.0

ParamKey = tuple[tuple[str, ParameterValue], ...]


@dataclass(frozen=True)
class Node:
    """One parameter of the flattened space (pre-order: a parent precedes its children)."""

    parameter_id: str
    kind: str
    scale: str
    lo: float = 0.0  # warping bounds (integers: widened by 0.5 on each side)
    hi: float = 1.0
    int_lo: int = 0  # INTEGER: inclusive bounds
    int_hi: int = 0
    values: tuple = ()  # DISCRETE: sorted floats; CATEGORICAL: strings in spec order
    parent: int | None = None  # column index of the parent
    parent_values: frozenset = frozenset()  # normalised parent values that activate this node


def scale_of(spec: ParameterSpec) -> str:
    """The warping (LINEAR, LOG or REVERSE_LOG) of `spec`'s scale type; unset is LINEAR."""
    if spec.scale_type == ScaleType.UNIT_LOG_SCALE:
        return LOG
    if spec.scale_type == ScaleType.UNIT_REVERSE_LOG_SCALE:
        return REVERSE_LOG
    return LINEAR


def warp(x: float, node: Node) -> float:
    """Value `x` -> its position in [0, 1] on `node`'s scale (0.5 for a one-point range)."""
    lo, hi = node.lo, node.hi
    if hi <= lo:
        return 0.5
    if node.scale == LINEAR:
        u = (x - lo) / (hi - lo)
    elif node.scale == LOG:
        u = (math.log(x) - math.log(lo)) / (math.log(hi) - math.log(lo))
    else:  # reverse log: fine resolution near the top of the range
        u = 1.0 - (math.log(lo + hi - x) - math.log(lo)) / (math.log(hi) - math.log(lo))
    return min(1.0, max(0.0, u))


def unwarp(u: float, node: Node) -> float:
    """The inverse of `warp`: position `u` (clamped to [0, 1]) -> a value in [lo, hi]."""
    lo, hi = node.lo, node.hi
    if hi <= lo:
        return lo
    u = min(1.0, max(0.0, u))
    if node.scale == LINEAR:
        x = lo + u * (hi - lo)
    elif node.scale == LOG:
        x = math.exp(math.log(lo) + u * (math.log(hi) - math.log(lo)))
    else:
        x = lo + hi - math.exp(math.log(lo) + (1.0 - u) * (math.log(hi) - math.log(lo)))
    return min(hi, max(lo, x))


def normalise_value(value: object, node: Node | None) -> ParameterValue:
    """`value` as `node`'s kind holds it (str, rounded int or float); unconvertible values
    become their str, and with no node the value is returned as is."""
    if node is None:
        return value  # type: ignore[return-value]
    if node.kind == CATEGORICAL:
        return str(value)
    if node.kind == INTEGER:
        try:
            return int(math.floor(float(value) + 0.5))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return str(value)
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return str(value)


# ---------------------------------------------------------------------- building nodes


def make_node(spec: ParameterSpec, parent: int | None, parent_values: frozenset) -> Node:
    """The column of `spec` (its conditional children aside), a child of column `parent`
    active for the normalised `parent_values`. Raises ValueError naming the parameter when
    its bounds or values are invalid."""
    pid = spec.parameter_id
    vs = spec.value_spec
    scale = scale_of(spec)
    if isinstance(vs, DoubleValueSpec):
        return _double_node(pid, vs, scale, parent, parent_values)
    if isinstance(vs, IntegerValueSpec):
        return _integer_node(pid, vs, scale, parent, parent_values)
    if isinstance(vs, DiscreteValueSpec):
        return _discrete_node(pid, vs, scale, parent, parent_values)
    if isinstance(vs, CategoricalValueSpec):
        return _categorical_node(pid, vs, parent, parent_values)
    raise ValueError(f"parameter {pid!r}: unsupported value spec {type(vs).__name__}")  # pragma: no cover - closed union


def _double_node(pid: str, vs: DoubleValueSpec, scale: str, parent: int | None, pvals: frozenset) -> Node:
    """A DOUBLE column over [min_value, max_value]; ValueError for bounds `check_bounds` rejects."""
    lo, hi = float(vs.min_value), float(vs.max_value)
    check_bounds(pid, lo, hi, scale)
    return Node(pid, DOUBLE, scale, lo, hi, parent=parent, parent_values=pvals)


def _integer_node(pid: str, vs: IntegerValueSpec, scale: str, parent: int | None, pvals: frozenset) -> Node:
    """An INTEGER column; its warping bounds are widened by 0.5 so each integer gets an equal
    share of [0, 1]. ValueError for max < min, or a log scale below 1."""
    ilo, ihi = int(vs.min_value), int(vs.max_value)
    if ihi < ilo:
        raise ValueError(f"parameter {pid!r}: max_value < min_value")
    if scale != LINEAR and ilo < 1:
        raise ValueError(f"parameter {pid!r}: a log scale needs min_value >= 1")
    return Node(pid, INTEGER, scale, ilo - 0.5, ihi + 0.5, ilo, ihi, parent=parent, parent_values=pvals)


def _discrete_node(pid: str, vs: DiscreteValueSpec, scale: str, parent: int | None, pvals: frozenset) -> Node:
    """A DISCRETE column of the sorted distinct values; ValueError for none, or bad bounds."""
    vals = tuple(sorted({float(v) for v in vs.values}))
    if not vals:
        raise ValueError(f"parameter {pid!r}: no discrete values")
    check_bounds(pid, vals[0], vals[-1], scale)
    return Node(pid, DISCRETE, scale, vals[0], vals[-1], values=vals, parent=parent, parent_values=pvals)


def _categorical_node(pid: str, vs: CategoricalValueSpec, parent: int | None, pvals: frozenset) -> Node:
    """A CATEGORICAL column of the values as strings, in spec order; ValueError for none."""
    vals = tuple(str(v) for v in vs.values)
    if not vals:
        raise ValueError(f"parameter {pid!r}: no categorical values")
    return Node(pid, CATEGORICAL, LINEAR, values=vals, parent=parent, parent_values=pvals)


def check_bounds(pid: str, lo: float, hi: float, scale: str) -> None:
    """ValueError unless [lo, hi] is a finite range, positive on a log scale."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi < lo:
        raise ValueError(f"parameter {pid!r}: invalid bounds [{lo}, {hi}]")
    if scale != LINEAR and lo <= 0:
        raise ValueError(f"parameter {pid!r}: a log scale needs min_value > 0")

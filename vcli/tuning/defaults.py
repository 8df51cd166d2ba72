"""The study's default configuration: every parameter's `defaultValue`, evaluated as trial 1.

Vertex documents `defaultValue` as read by Vizier only; vcli reads it too: when every
parameter that the defaults make active has one (a conditional child counts when its
parent's default is one of its `parentValues`), and each lies in its parameter's range, the
study's first trial runs exactly those values, before the search algorithm proposes anything.
It is the configuration the user already trusts, and one trial buys the study a known
reference point. Otherwise the defaults are not used (and `create` notes them so).
"""

from __future__ import annotations

from typing import Sequence

from vcli.spec import (
    CategoricalValueSpec,
    DiscreteValueSpec,
    DoubleValueSpec,
    IntegerValueSpec,
    ParameterSpec,
    ParameterValue,
)

__all__ = ["default_configuration"]


def default_configuration(parameters: Sequence[ParameterSpec]) -> dict[str, ParameterValue] | None:
    """The parameters' defaults as one trial's parameters (typed as suggestions are: DOUBLE and
    DISCRETE floats, INTEGER ints, CATEGORICAL strings), or None when one that would be active
    has no default or a default outside its range."""
    out: dict[str, ParameterValue] = {}

    def visit(specs: Sequence[ParameterSpec]) -> bool:
        for p in specs:
            value = _default(p)
            if value is None:
                return False
            out[p.parameter_id] = value
            active = [c.parameter_spec for c in p.conditional_parameter_specs if value in c.parent_values]
            if not visit(active):
                return False
        return True

    return out if parameters and visit(parameters) else None


def _default(p: ParameterSpec) -> ParameterValue | None:
    """`p`'s default, typed, or None when it has none or it lies outside the parameter's range."""
    spec = p.value_spec
    value = spec.default_value
    if value is None:
        return None
    if isinstance(spec, DoubleValueSpec):
        return float(value) if spec.min_value <= float(value) <= spec.max_value else None
    if isinstance(spec, IntegerValueSpec):
        return int(value) if spec.min_value <= int(value) <= spec.max_value else None
    if isinstance(spec, DiscreteValueSpec):
        return float(value) if float(value) in spec.values else None
    if isinstance(spec, CategoricalValueSpec):
        return str(value) if str(value) in spec.values else None
    return None

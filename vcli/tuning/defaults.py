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

__all__ = ["default_configuration", "enqueued_configuration"]


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


def enqueued_configuration(parameters: Sequence[ParameterSpec], text: str) -> dict[str, ParameterValue]:
    """`--enqueue-trial`'s `ID=VALUE,ID=VALUE,...` as one trial's parameters: each value of its
    parameter's type and within its range, every parameter that the values make active given,
    no other. Raises ValueError with the reason."""
    given: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, eq, value = part.partition("=")
        if not eq or not key.strip():
            raise ValueError(f"[{part}] is not PARAMETER_ID=VALUE")
        if key.strip() in given:
            raise ValueError(f"[{key.strip()}] is given twice")
        given[key.strip()] = value.strip()
    out: dict[str, ParameterValue] = {}

    def visit(specs: Sequence[ParameterSpec]) -> None:
        for p in specs:
            if p.parameter_id not in given:
                raise ValueError(f"no value for parameter [{p.parameter_id}]")
            value = _typed(p, given[p.parameter_id])
            out[p.parameter_id] = value
            visit([c.parameter_spec for c in p.conditional_parameter_specs if value in c.parent_values])

    visit(parameters)
    extra = sorted(set(given) - set(out))
    if extra:
        raise ValueError(f"[{', '.join(extra)}] is not a parameter of the study, or not active with these values")
    return out


def _typed(p: ParameterSpec, text: str) -> ParameterValue:
    """`text` as a value of `p`, checked against its range; ValueError naming the parameter."""
    spec = p.value_spec
    try:
        if isinstance(spec, IntegerValueSpec):
            value: ParameterValue = int(text)
        elif isinstance(spec, (DoubleValueSpec, DiscreteValueSpec)):
            value = float(text)
        else:
            value = text
    except ValueError:
        raise ValueError(f"[{text}] is not a value of parameter [{p.parameter_id}]") from None
    if isinstance(spec, (DoubleValueSpec, IntegerValueSpec)):
        ok = spec.min_value <= value <= spec.max_value  # type: ignore[operator]
        where = f"[{spec.min_value:g}, {spec.max_value:g}]"
    else:
        ok = value in spec.values
        where = "[" + ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in spec.values) + "]"
    if not ok or (isinstance(value, float) and value != value):
        raise ValueError(f"[{text}] is outside parameter [{p.parameter_id}]'s {where}")
    return value

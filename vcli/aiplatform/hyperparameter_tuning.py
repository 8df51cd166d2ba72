"""`google.cloud.aiplatform.hyperparameter_tuning`: the parameter specs of a tuning job.

Same names and arguments as Vertex's SDK: `DoubleParameterSpec(min, max, scale)`,
`IntegerParameterSpec(min, max, scale)`, `CategoricalParameterSpec(values)`,
`DiscreteParameterSpec(values, scale)`, each with `conditional_parameter_spec` (child id ->
child spec, each child with its `parent_values`). `scale` is `linear`, `log`, `reverse_log` or
`unspecified`. They become the study's `parameters` in Vertex's REST shape (`to_dict`), which
vcli's own codec then checks as it checks a `--config`.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

__all__ = ["CategoricalParameterSpec", "DiscreteParameterSpec", "DoubleParameterSpec", "IntegerParameterSpec"]

_SCALES = {"linear": "UNIT_LINEAR_SCALE", "log": "UNIT_LOG_SCALE", "reverse_log": "UNIT_REVERSE_LOG_SCALE",
           "unspecified": "SCALE_TYPE_UNSPECIFIED", None: None}


class _ParameterSpec:
    """What every parameter spec has: its conditional children and, as a child, the parent's
    values under which it is active."""

    _value_key = ""
    _parent_key: str | None = None

    def __init__(self, conditional_parameter_spec: Mapping[str, _ParameterSpec] | None = None,
                 parent_values: Sequence[Any] | None = None) -> None:
        if conditional_parameter_spec is not None and not (
                isinstance(conditional_parameter_spec, Mapping)
                and all(isinstance(k, str) and isinstance(v, _ParameterSpec) for k, v in conditional_parameter_spec.items())):
            raise TypeError("conditional_parameter_spec must map parameter ids to hyperparameter_tuning specs "
                            f"(DoubleParameterSpec, ...), not {conditional_parameter_spec!r}")
        if parent_values is not None and (isinstance(parent_values, (str, bytes)) or not isinstance(parent_values, Sequence)):
            raise TypeError(f"parent_values must be a list, not {parent_values!r}")
        self.conditional_parameter_spec = dict(conditional_parameter_spec or {})
        self.parent_values = list(parent_values) if parent_values is not None else None

    def _value_spec(self) -> dict[str, Any]:
        raise NotImplementedError

    def _scale(self) -> str | None:
        scale = getattr(self, "scale", None)
        if scale not in _SCALES:
            raise ValueError(f"scale must be one of {sorted(k for k in _SCALES if k)}, not {scale!r}")
        return _SCALES[scale]

    def to_dict(self, parameter_id: str) -> dict[str, Any]:
        """This parameter (and its children) as a Vertex `StudySpec.ParameterSpec` dict."""
        out: dict[str, Any] = {"parameterId": parameter_id, self._value_key: self._value_spec()}
        if (scale := self._scale()) is not None:
            out["scaleType"] = scale
        children = []
        for child_id, child in self.conditional_parameter_spec.items():
            if child.parent_values is None:
                raise ValueError(f"conditional parameter [{child_id}] of [{parameter_id}] needs parent_values")
            if self._parent_key is None:
                raise ValueError(f"[{parameter_id}] is a DOUBLE parameter: it cannot have conditional children")
            # as given: the codec refuses 1.5 or True for an INTEGER parent with the field's path
            # (str(int(1.5)) made the child active at 1)
            children.append({"parameterSpec": child.to_dict(child_id), self._parent_key: {"values": list(child.parent_values)}})
        if children:
            out["conditionalParameterSpecs"] = children
        return out


class DoubleParameterSpec(_ParameterSpec):
    _value_key = "doubleValueSpec"

    def __init__(self, min: float, max: float, scale: str | None = None,  # Vertex's names
                 conditional_parameter_spec: Mapping[str, _ParameterSpec] | None = None,
                 parent_values: Sequence[Any] | None = None) -> None:
        super().__init__(conditional_parameter_spec, parent_values)
        self.min, self.max, self.scale = min, max, scale

    def _value_spec(self) -> dict[str, Any]:
        return {"minValue": self.min, "maxValue": self.max}


class IntegerParameterSpec(_ParameterSpec):
    _value_key = "integerValueSpec"
    _parent_key = "parentIntValues"

    def __init__(self, min: int, max: int, scale: str | None = None,  # Vertex's names
                 conditional_parameter_spec: Mapping[str, _ParameterSpec] | None = None,
                 parent_values: Sequence[Any] | None = None) -> None:
        super().__init__(conditional_parameter_spec, parent_values)
        self.min, self.max, self.scale = min, max, scale

    def _value_spec(self) -> dict[str, Any]:
        # as given: the codec refuses 0.5 with the field's path (str(int(0.5)) ran the study from 0)
        return {"minValue": self.min, "maxValue": self.max}


class CategoricalParameterSpec(_ParameterSpec):
    _value_key = "categoricalValueSpec"
    _parent_key = "parentCategoricalValues"

    def __init__(self, values: Sequence[str], conditional_parameter_spec: Mapping[str, _ParameterSpec] | None = None,
                 parent_values: Sequence[Any] | None = None) -> None:
        super().__init__(conditional_parameter_spec, parent_values)
        self.values = _value_list(values)

    def _value_spec(self) -> dict[str, Any]:
        return {"values": [str(v) for v in self.values]}


class DiscreteParameterSpec(_ParameterSpec):
    _value_key = "discreteValueSpec"
    _parent_key = "parentDiscreteValues"

    def __init__(self, values: Sequence[float], scale: str | None = None,
                 conditional_parameter_spec: Mapping[str, _ParameterSpec] | None = None,
                 parent_values: Sequence[Any] | None = None) -> None:
        super().__init__(conditional_parameter_spec, parent_values)
        self.values, self.scale = _value_list(values), scale

    def _value_spec(self) -> dict[str, Any]:
        # numbers as floats; anything else as given, for the codec to refuse with the field's path
        return {"values": [float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v for v in self.values]}


def _value_list(values: Any) -> list[Any]:
    """A spec's `values` as a list; a string is refused (its characters became the categories)."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise TypeError(f"values must be a list, not {type(values).__name__}: {values!r}")
    return list(values)

"""The trial codec: Vertex `Trial` and `Measurement` resources to and from dicts, and the
`--<parameterId>=<value>` args a trainer receives.

Stored trials (the store's `trials` table) and `describe`'s `trials[]` use these dicts, so
they are Vertex's JSON shape (camelCase, int64 as strings, durations as `1.5s`).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from vcli.spec import (
    DiscreteValueSpec,
    FailureClass,
    IntegerValueSpec,
    Measurement,
    ParameterSpec,
    ParameterValue,
    PbtLineage,
    Trial,
    TrialState,
)


def format_value(spec: ParameterSpec, value: ParameterValue) -> str:
    """A parameter value as the trainer receives it in `--<id>=<value>`.

    INTEGER values are integers (`--num_units=64`), and so are whole DISCRETE values
    (`--batch_size=128`, where Vertex sends `128.0` and breaks `type=int` parsers); other
    numbers use Python's shortest round-trip repr; CATEGORICAL values are passed verbatim.
    """
    if isinstance(spec.value_spec, IntegerValueSpec):
        return str(int(value))
    if isinstance(spec.value_spec, DiscreteValueSpec):
        f = float(value)
        return str(int(f)) if f.is_integer() else repr(f)
    if isinstance(value, float):
        return repr(value)
    return str(value)


def trial_args(specs: Mapping[str, ParameterSpec], parameters: Mapping[str, ParameterValue]) -> list[str]:
    return [f"--{pid}={format_value(specs[pid], v)}" for pid, v in parameters.items()]


def json_value(spec: ParameterSpec, value: ParameterValue) -> ParameterValue:
    if isinstance(spec.value_spec, IntegerValueSpec):
        return int(value)
    if isinstance(spec.value_spec, DiscreteValueSpec):
        return float(value)
    return value


#: proto3's JSON for a double that is not finite (what Vertex prints and `json_format` parses;
#: it refuses Python's "nan" and "inf"). Python's float() reads both spellings back.
_PROTO_JSON = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def measurement_to_dict(m: Measurement) -> dict[str, Any]:
    d: dict[str, Any] = {
        "stepCount": str(m.step_count),
        "metrics": [{"metricId": k, "value": v if math.isfinite(v) else _PROTO_JSON[str(v)]} for k, v in m.metrics.items()],
    }
    if m.elapsed_seconds is not None:
        d["elapsedDuration"] = f"{m.elapsed_seconds:.3f}s"
    return d


def measurement_from_dict(d: Mapping[str, Any]) -> Measurement:
    return Measurement(
        step_count=int(d.get("stepCount", 0)),
        metrics={m["metricId"]: float(m["value"]) for m in d.get("metrics", [])},
        elapsed_seconds=float(d["elapsedDuration"].rstrip("s")) if d.get("elapsedDuration") else None,
    )


def trial_to_dict(t: Trial, specs: Mapping[str, ParameterSpec]) -> dict[str, Any]:
    d: dict[str, Any] = {
        "id": t.id,
        "state": t.state.value,
        "parameters": [{"parameterId": k, "value": json_value(specs[k], v)} for k, v in t.parameters.items()],
    }
    if t.final_measurement is not None:
        d["finalMeasurement"] = measurement_to_dict(t.final_measurement)
    if t.measurements:
        d["measurements"] = [measurement_to_dict(m) for m in t.measurements]
    if t.lineage is not None:
        lin: dict[str, Any] = {"member": t.lineage.member}
        if t.lineage.parent_trial_id is not None:
            lin["parentTrialId"] = t.lineage.parent_trial_id
            lin["startStep"] = str(t.lineage.start_step)
            lin["inheritedParameters"] = [{"parameterId": k, "value": json_value(specs[k], v) if k in specs else v}
                                          for k, v in t.lineage.inherited_parameters.items()]
        d["populationBasedTraining"] = lin
    for key, val in (("startTime", t.start_time), ("endTime", t.end_time), ("infeasibleReason", t.infeasible_reason),
                     ("customJob", t.custom_job), ("stopReason", t.stop_reason), ("earlyStoppingRule", t.early_stopping_rule),
                     ("suggestedBy", t.suggested_by), ("failureClass", t.failure_class), ("retryOf", t.retry_of)):
        if val:
            d[key] = val
    if t.safe is not None:  # safe search: False marks a SUCCEEDED trial that broke a safety threshold
        d["safe"] = t.safe
    return d


def trial_from_dict(d: Mapping[str, Any]) -> Trial:
    return Trial(
        id=d["id"],
        state=TrialState(d["state"]),
        parameters={p["parameterId"]: p["value"] for p in d.get("parameters", [])},
        final_measurement=measurement_from_dict(d["finalMeasurement"]) if d.get("finalMeasurement") else None,
        measurements=tuple(measurement_from_dict(m) for m in d.get("measurements", [])),
        infeasible_reason=d.get("infeasibleReason"),
        custom_job=d.get("customJob"),
        start_time=d.get("startTime"),
        end_time=d.get("endTime"),
        stop_reason=d.get("stopReason"),
        early_stopping_rule=d.get("earlyStoppingRule"),
        lineage=_lineage_from_dict(d.get("populationBasedTraining")),
        suggested_by=d.get("suggestedBy"),
        failure_class=FailureClass(d["failureClass"]) if d.get("failureClass") else None,
        retry_of=d.get("retryOf"),
        safe=d.get("safe"),
    )


def _lineage_from_dict(d: Mapping[str, Any] | None) -> PbtLineage | None:
    if not d:
        return None
    return PbtLineage(member=int(d["member"]), parent_trial_id=d.get("parentTrialId"), start_step=int(d.get("startStep", 0)),
                      inherited_parameters={p["parameterId"]: p["value"] for p in d.get("inheritedParameters", [])})

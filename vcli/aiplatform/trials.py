"""The `Trial` shape of Vertex's SDK (`HyperparameterTuningJob.trials`), read from vcli's store.

Attribute names are the proto's: `id`, `state` (`Trial.State.SUCCEEDED`, ...), `parameters`
(`parameter_id`, `value`), `final_measurement` and `measurements` (`step_count`, `metrics`
with `metric_id` and `value`, `elapsed_duration`), `start_time`, `end_time`, `custom_job`,
`infeasible_reason`; vcli's own fields (`stop_reason`, `early_stopping_rule`, PBT lineage)
are in `to_dict()`, which is exactly what `vcli hp-tuning-jobs describe` shows for the trial.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Mapping

from vcli.enums import TrialState


@dataclass(frozen=True)
class Metric:
    metric_id: str
    value: float


@dataclass(frozen=True)
class Measurement:
    step_count: int
    metrics: list[Metric]
    elapsed_duration: timedelta | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Measurement:
        elapsed = d.get("elapsedDuration")
        return cls(step_count=int(d.get("stepCount", 0)),
                   metrics=[Metric(m["metricId"], float(m["value"])) for m in d.get("metrics", [])],
                   elapsed_duration=timedelta(seconds=float(elapsed.rstrip("s"))) if elapsed else None)


@dataclass(frozen=True)
class Parameter:
    parameter_id: str
    value: Any


def _time(stamp: str | None) -> datetime | None:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")) if stamp else None


@dataclass(frozen=True)
class Trial:
    """One trial, as Vertex's SDK gives it (`google.cloud.aiplatform_v1.types.Trial`)."""

    State = TrialState

    id: str
    state: TrialState
    parameters: list[Parameter]
    final_measurement: Measurement | None
    measurements: list[Measurement]
    start_time: datetime | None
    end_time: datetime | None
    custom_job: str
    infeasible_reason: str
    _record: Mapping[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Trial:
        final = d.get("finalMeasurement")
        return cls(
            id=str(d["id"]), state=TrialState(d["state"]),
            parameters=[Parameter(p["parameterId"], p["value"]) for p in d.get("parameters", [])],
            final_measurement=Measurement.from_dict(final) if final else None,
            measurements=[Measurement.from_dict(m) for m in d.get("measurements", [])],
            start_time=_time(d.get("startTime")), end_time=_time(d.get("endTime")),
            custom_job=d.get("customJob", ""), infeasible_reason=d.get("infeasibleReason", ""), _record=dict(d))

    def to_dict(self) -> dict[str, Any]:
        """The trial as Vertex's REST resource (camelCase), as `describe` prints it."""
        return dict(self._record)

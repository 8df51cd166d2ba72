"""Trial metrics: what a trainer reports, read back as Vertex `Measurement`s.

Two sources, both read while the trial runs:

1. The cloudml-hypertune file (`CLOUD_ML_HP_METRIC_FILE`, chief replica): JSON lines such as
   `{"accuracy": "0.9", "global_step": "3", "timestamp": 1.7e9, "trial": "2", ...}`. The
   library rewrites the whole file with its last 100 reports on every call, so the file is
   re-read in full each time and reports are de-duplicated by (timestamp, step, value);
   tailing it would miss or repeat reports.
2. For trainers not written in Python: a stdout line that is exactly
   `<metricId>=<number>` optionally followed by ` step=<integer>`, e.g. `accuracy=0.93 step=3`
   (leading/trailing spaces allowed, nothing else on the line).

`final_measurement` applies `measurementSelectionType`: LAST (the default) takes the report
with the highest step (latest on ties), BEST the best value for the goal.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field

from vcli.spec import Goal, Measurement, MeasurementSelectionType

HYPERTUNE_DEFAULT_TAG = "training/hptuning/metric"
_STDOUT_METRIC = re.compile(
    r"^\s*([A-Za-z0-9_./-]+)\s*=\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?inf|nan)"
    r"(?:\s+(?:step|global_step)\s*=\s*(\d+))?\s*$"
)


@dataclass
class MetricReader:
    """Accumulates the measurements of one metric from one trial's reports."""

    metric_id: str
    _seen: set[tuple[float, int, float, str]] = field(default_factory=set)
    measurements: list[Measurement] = field(default_factory=list)
    _order: list[float] = field(default_factory=list)

    def feed_hypertune(self, text: str | None) -> bool:
        """Read a whole hypertune file's text; True if a new report was found."""
        if not text:
            return False
        new = False
        for line in text.splitlines():
            line = line.strip()
            if not line:
                continue
            try:
                report = json.loads(line)
            except ValueError:
                continue  # a line being rewritten right now; the next read gets it
            if not isinstance(report, dict):
                continue
            raw = report.get(self.metric_id)
            if raw is None and self.metric_id not in report:
                raw = report.get(HYPERTUNE_DEFAULT_TAG)
            value = _number(raw)
            if value is None:
                continue
            step = _int(report.get("global_step"))
            ts = _number(report.get("timestamp")) or 0.0
            new |= self._add((ts, step, value, "hypertune"), value, step, ts)
        return new

    def feed_stdout_line(self, line: str, timestamp: float) -> bool:
        m = _STDOUT_METRIC.match(line)
        if not m or m.group(1) != self.metric_id:
            return False
        value = float(m.group(2))
        step = int(m.group(3)) if m.group(3) else len(self.measurements) + 1
        return self._add((timestamp, step, value, "stdout"), value, step, timestamp)

    def _add(self, key: tuple[float, int, float, str], value: float, step: int, ts: float) -> bool:
        if key in self._seen:
            return False
        self._seen.add(key)
        self.measurements.append(Measurement(step_count=step, metrics={self.metric_id: value}))
        self._order.append(ts)
        return True

    def final(self, goal: Goal, selection: MeasurementSelectionType) -> Measurement | None:
        finite = [m for m in self.measurements if math.isfinite(m.metrics[self.metric_id])]
        if not finite:
            return None
        if selection == MeasurementSelectionType.BEST_MEASUREMENT:
            sign = 1.0 if goal == Goal.MAXIMIZE else -1.0
            return max(finite, key=lambda m: (sign * m.metrics[self.metric_id], m.step_count))
        # LAST: the latest report; reports come in order, steps break ties between sources.
        return finite[-1]


def _number(raw: object) -> float | None:
    if isinstance(raw, bool) or raw is None:
        return None
    try:
        return float(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def _int(raw: object) -> int:
    try:
        return int(float(raw))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return 0

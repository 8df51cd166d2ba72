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

A study may optimise several metrics (one hypertune report per metric tag, usually with the
same `global_step`): consecutive reports of different metrics at the same step merge into one
measurement holding all of them. The hypertune default tag (`training/hptuning/metric`, what
`report_hyperparameter_tuning_metric` writes without a tag) counts as the study's metric only
when there is exactly one.

`final_measurement` applies `measurementSelectionType`: LAST (the default) takes the latest
report, BEST the best value for the goal. With several metrics "best" has no single order, so
the final measurement is always the latest one holding every metric with a finite value.
"""

from __future__ import annotations

import json
import math
import re
from typing import Sequence

from vcli.spec import Goal, Measurement, MeasurementSelectionType

HYPERTUNE_DEFAULT_TAG = "training/hptuning/metric"
#: The keys cloudml-hypertune writes beside a report's tag.
_HYPERTUNE_KEYS = frozenset(("global_step", "timestamp", "trial", "checkpoint_path"))
#: How many other tags a reader remembers (to name them when the study's metric never came).
_OTHER_TAGS = 5
#: `<metricId>=<number> [step=<n>]`: the id is any run of non-blank characters, as a metricId
#: may be (`acc@1`, `λ`, even `a=b`: the id ends at the `=` before the number); only the
#: study's own ids count, so a broader pattern reads nothing else.
_STDOUT_METRIC = re.compile(
    r"^\s*(\S+?)\s*=\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?inf|nan)"
    r"(?:\s+(?:step|global_step)\s*=\s*(\d+))?\s*$"
)


class MetricReader:
    """Accumulates the measurements of a trial's metrics (`metric_ids`) from its reports."""

    def __init__(self, metric_ids: str | Sequence[str]) -> None:
        self.metric_ids: tuple[str, ...] = (metric_ids,) if isinstance(metric_ids, str) else tuple(metric_ids)
        self.metric_id = self.metric_ids[0]
        self.measurements: list[Measurement] = []
        #: When each of `measurements` was reported (seconds since the epoch, by the report's
        #: own timestamp or its log line's), None if unknown.
        self.times: list[float | None] = []
        self._seen: set[tuple[object, ...]] = set()
        self._counts: dict[str, int] = {}
        #: Tags of hypertune reports that are none of the study's metrics (a misspelt `Score`).
        self.other_tags: list[str] = []

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
            except RecursionError:
                continue  # "[[[[..." nested beyond the parser's depth: no report
            if not isinstance(report, dict):
                continue
            step = _step(report.get("global_step"))
            if step is None:
                continue  # not a step Vertex could store (inf, 1e400, beyond int64): not a measurement
            ts = _number(report.get("timestamp")) or 0.0
            self._note_other_tags(report)
            for metric_id in self.metric_ids:
                raw = report.get(metric_id)
                if raw is None and metric_id not in report and len(self.metric_ids) == 1:
                    raw = report.get(HYPERTUNE_DEFAULT_TAG)
                value = _number(raw)
                if value is not None:
                    new |= self._add((ts, step, value, metric_id, "hypertune"), metric_id, value, step)
        return new

    def _note_other_tags(self, report: dict[str, object]) -> None:
        if len(self.other_tags) >= _OTHER_TAGS:
            return
        for key in report:
            if (key not in _HYPERTUNE_KEYS and key not in self.metric_ids and key != HYPERTUNE_DEFAULT_TAG
                    and key[:64] not in self.other_tags and len(self.other_tags) < _OTHER_TAGS):
                self.other_tags.append(key[:64])

    def feed_stdout_line(self, line: str, timestamp: float) -> bool:
        m = _STDOUT_METRIC.match(line)
        if not m or m.group(1) not in self.metric_ids:
            return False
        metric_id = m.group(1)
        value = float(m.group(2))
        step = _step(m.group(3)) if m.group(3) else self._counts.get(metric_id, 0) + 1
        if step is None:
            return False
        return self._add((timestamp, step, value, metric_id, "stdout"), metric_id, value, step)

    def _add(self, key: tuple[float, int, float, str, str], metric_id: str, value: float, step: int) -> bool:
        # repr: a NaN (value or timestamp) never equals itself, so as a float it made every
        # re-read of the same report a new measurement (one every poll)
        seen = tuple(repr(k) if isinstance(k, float) else k for k in key)
        if seen in self._seen:
            return False
        self._seen.add(seen)
        self._counts[metric_id] = self._counts.get(metric_id, 0) + 1
        last = self.measurements[-1] if self.measurements else None
        if last is not None and last.step_count == step and metric_id not in last.metrics:
            self.measurements[-1] = Measurement(step_count=step, metrics={**last.metrics, metric_id: value})
        else:
            self.measurements.append(Measurement(step_count=step, metrics={metric_id: value}))
            self.times.append(key[0] if math.isfinite(key[0]) and key[0] > 0 else None)
        return True

    def complete(self, m: Measurement) -> bool:
        """True if `m` holds a finite value of every metric."""
        return all(math.isfinite(m.metrics.get(k, math.nan)) for k in self.metric_ids)

    def final(self, goal: Goal, selection: MeasurementSelectionType) -> Measurement | None:
        """The trial's final measurement; `goal` is the first metric's (BEST needs it)."""
        finite = [m for m in self.measurements if self.complete(m)]
        if not finite:
            return None
        if selection == MeasurementSelectionType.BEST_MEASUREMENT and len(self.metric_ids) == 1:
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


#: Vertex's stepCount is an int64.
_INT64_MAX = 2**63 - 1


def _step(raw: object) -> int | None:
    """A report's step: absent or unreadable is 0 (as before); a number that is not finite or
    beyond int64 is None (the report is not a measurement: `inf` crashed the controller, and a
    40-digit step broke the Parquet export)."""
    if raw is None or isinstance(raw, bool):
        return 0
    if isinstance(raw, str) and re.fullmatch(r"\s*[-+]?\d+\s*", raw):
        digits = raw.strip().lstrip("+-")
        value = int(raw) if len(digits) <= 19 else _INT64_MAX + 1
    elif isinstance(raw, int):
        value = raw
    else:
        try:
            number = float(raw)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return 0
        if not math.isfinite(number):
            return None
        value = int(number)
    return value if -_INT64_MAX - 1 <= value <= _INT64_MAX else None

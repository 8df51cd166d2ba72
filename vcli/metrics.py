"""Trial metrics: what a trainer reports, read back as Vertex `Measurement`s.

Two sources, both read while the trial runs:

1. The cloudml-hypertune file (`CLOUD_ML_HP_METRIC_FILE`, chief replica): JSON lines such as
   `{"accuracy": "0.9", "global_step": "3", "timestamp": 1.7e9, "trial": "2", ...}`. The
   library rewrites the whole file with its last 100 reports on every call, so reports are
   de-duplicated by (timestamp, step, value); tailing it would miss or repeat reports. The
   controller reads the file every tick, so the reader parses only what changed: nothing when
   the text is the one it parsed last, only the new lines when the file grew by whole lines
   (a trainer that appends), the whole text when it was rewritten.
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

A trial keeps at most `MEASUREMENT_LIMIT` intermediate measurements: a trainer that reports
every batch (200,000 stdout lines) made every save, `list` and `describe` scale with them (a
minute and 900 MB per `describe`). Past the limit the reader keeps the first quarter of the
limit whole (the early steps the early-stopping rules compare at) and thins the rest evenly
(every 2nd, then every 4th report... is kept), always keeping the latest, the one with the
largest step, the latest complete one and, per metric, the largest and smallest value, so
the final measurement (LAST or BEST), early-stopping reach and the curve's shape are what
they would have been.
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
#: The most intermediate measurements one trial keeps (see the module's docstring).
MEASUREMENT_LIMIT = 1000
#: How many other tags a reader remembers (to name them when the study's metric never came).
_OTHER_TAGS = 5
#: `<metricId>=<number> [step=<n>]`: the id is any run of non-blank characters, as a metricId
#: may be (`acc@1`, `λ`, even `a=b`: the id ends at the `=` before the number); only the
#: study's own ids count, so a broader pattern reads nothing else.
#: Numbers are ASCII (`score=١٢` read as 12 before); values that are not finite in any usual
#: spelling (`nan`, `NaN`, `inf`, `-Infinity`: Python's, proto3's and Java's, Go's `+Inf`);
#: steps may be negative, as hypertune's `global_step` may.
_STDOUT_METRIC = re.compile(
    r"^\s*(\S+?)\s*=\s*([-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|(?i:[-+]?inf(?:inity)?|[-+]?nan))"
    r"(?:\s+(?:step|global_step)\s*=\s*([-+]?[0-9]+))?\s*$"
)


class MetricReader:
    """Accumulates the measurements of a trial's metrics (`metric_ids`) from its reports."""

    def __init__(self, metric_ids: str | Sequence[str], limit: int = MEASUREMENT_LIMIT) -> None:
        self.metric_ids: tuple[str, ...] = (metric_ids,) if isinstance(metric_ids, str) else tuple(metric_ids)
        self.metric_id = self.metric_ids[0]
        self.measurements: list[Measurement] = []
        #: When each of `measurements` was reported (seconds since the epoch, by the report's
        #: own timestamp or its log line's), None if unknown.
        self.times: list[float | None] = []
        #: The trial's elapsed seconds at each of `measurements`: None until the controller
        #: stamps it (`ActiveTrial.with_measurements`); thinned with them.
        self.elapsed: list[float | None] = []
        #: Each measurement's place among all the trial's measurements (thinning keeps a stride).
        self._ordinals: list[int] = []
        self._appended = 0
        self._stride = 1
        self._limit = max(8, limit)
        #: Ordinals thinning keeps (see `_protect`), by role.
        self._kept: dict[str, tuple[tuple[float, ...], int]] = {}
        #: Reports already read: hypertune's by their (timestamp, step, value, tag), pruned to
        #: what its file still holds; stdout's only at the latest line time (lines come once).
        self._seen: set[tuple[object, ...]] = set()
        self._stdout_seen: set[tuple[object, ...]] = set()
        self._stdout_time: float | None = None
        #: Each metric's largest step so far: a stdout line without `step=` is one past it (it was
        #: the count of reports + 1, which repeated a step after a stepped line: two measurements
        #: at step 8 after steps 1, 2 and 9).
        self._top_step: dict[str, int] = {}
        #: Tags of hypertune reports that are none of the study's metrics (a misspelt `Score`).
        self.other_tags: list[str] = []
        #: The hypertune text parsed last, and how many lines were parsed in all.
        self._last_text = ""
        self.parsed_lines = 0

    def feed_hypertune(self, text: str | None) -> bool:
        """Read a whole hypertune file's text; True if a new report was found. Text parsed
        before is not parsed again (see the module's docstring; `parsed_lines` counts)."""
        if not text:
            return False
        last = self._last_text
        if text == last:
            return False
        whole = not (last and last.endswith("\n") and text.startswith(last))
        self._last_text = text
        new = False
        oldest = math.inf
        for line in (text if whole else text[len(last):]).splitlines():
            self.parsed_lines += 1
            report = _hypertune_report(line)
            if report is None:
                continue
            step = _step(report.get("global_step"))
            if step is None:
                continue  # not a step Vertex could store (inf, 1e400, beyond int64): not a measurement
            ts = _number(report.get("timestamp")) or 0.0
            oldest = min(oldest, ts) if ts == ts else oldest
            self._note_other_tags(report)
            new |= self._add_hypertune_report(report, ts, step)
        # The library keeps its last 100 reports and drops the oldest first: a report older
        # than the oldest in the file never comes back (a file read mid-rewrite lacks its tail).
        if whole and oldest != math.inf and len(self._seen) > 1000:
            self._seen = {k for k in self._seen if not isinstance(k[0], float) or k[0] >= oldest}
        return new

    def _add_hypertune_report(self, report: dict[str, object], ts: float, step: int) -> bool:
        """Add each of the study's metrics that `report` (one hypertune line, at time `ts` and
        step `step`) holds a number for; True if any of them was new. With a single metric, the
        hypertune default tag stands for it when the report lacks the metric's own key."""
        new = False
        for metric_id in self.metric_ids:
            raw = report.get(metric_id)
            if raw is None and metric_id not in report and len(self.metric_ids) == 1:
                raw = report.get(HYPERTUNE_DEFAULT_TAG)
            value = _number(raw)
            if value is not None:
                new |= self._add(self._seen, (ts, step, value, metric_id), metric_id, value, step)
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
        step = _step(m.group(3)) if m.group(3) else self._next_step(metric_id)
        if step is None:
            return False
        if timestamp != self._stdout_time:  # a line is read once: repeats can only share its time
            self._stdout_seen, self._stdout_time = set(), timestamp
        return self._add(self._stdout_seen, (timestamp, step, value, metric_id), metric_id, value, step)

    def _next_step(self, metric_id: str) -> int | None:
        """The step of a stdout report without `step=`: one past the metric's largest step, or the
        latest measurement's if that lacks this metric and is later (`acc=0.9` then `loss=0.3`,
        both without steps, are one measurement); None past int64, as a `step=` beyond it."""
        step = self._top_step.get(metric_id, 0) + 1
        if step > _INT64_MAX:
            return None
        last = self.measurements[-1] if self.measurements else None
        if last is not None and metric_id not in last.metrics and last.step_count >= step:
            return last.step_count
        return step

    def _add(self, seen: set[tuple[object, ...]], key: tuple[float, int, float, str], metric_id: str,
             value: float, step: int) -> bool:
        # repr of the value: a NaN never equals itself, so as a float it made every re-read
        # of the same report a new measurement (one every poll)
        mark = (key[0] if math.isfinite(key[0]) else repr(key[0]), step, repr(value), metric_id)
        if mark in seen:
            return False
        seen.add(mark)
        self._top_step[metric_id] = max(self._top_step.get(metric_id, step), step)
        last = self.measurements[-1] if self.measurements else None
        if last is not None and last.step_count == step and metric_id not in last.metrics:
            self.measurements[-1] = Measurement(step_count=step, metrics={**last.metrics, metric_id: value})
        else:
            self.measurements.append(Measurement(step_count=step, metrics={metric_id: value}))
            self.times.append(key[0] if math.isfinite(key[0]) and key[0] > 0 else None)
            self.elapsed.append(None)
            self._ordinals.append(self._appended)
            self._appended += 1
        self._protect(self.measurements[-1], self._ordinals[-1])
        self._drop_previous_unless_kept()
        if len(self.measurements) > self._limit:
            self._thin()
        return True

    def _protect(self, m: Measurement, ordinal: int) -> None:
        """Note what `m` is best at: a rank (larger wins; later wins ties) per role."""
        ranks: dict[str, tuple[float, ...]] = {"step": (float(m.step_count),)}
        if self.complete(m):
            ranks["complete"] = (float(ordinal),)
        for k, v in m.metrics.items():
            if math.isfinite(v):
                ranks[f"max:{k}"] = (v, float(m.step_count))
                ranks[f"min:{k}"] = (-v, float(m.step_count))
        for role, rank in ranks.items():
            held = self._kept.get(role)
            if held is None or rank >= held[0]:
                self._kept[role] = (rank, ordinal)

    def _keeps(self, ordinal: int) -> bool:
        # The first quarter of the limit stays whole: early-stopping rules compare trials at
        # their first steps (ASHA's rungs 1, 3, 9...; the median rule's early running averages),
        # where a stride of 128 left a finished trial with no value before step 129.
        return (ordinal < self._limit // 4 or ordinal % self._stride == 0
                or any(o == ordinal for _, o in self._kept.values()))

    def _drop_previous_unless_kept(self) -> None:
        """After a new measurement: the one before it goes if neither the stride nor a role keeps it."""
        if len(self._ordinals) > 1 and not self._keeps(self._ordinals[-2]):
            for column in (self.measurements, self.times, self.elapsed, self._ordinals):
                del column[-2]

    def _thin(self) -> None:
        """Over the limit: keep every (2 × stride)th measurement, the latest and the kept roles."""
        self._stride *= 2
        last = self._ordinals[-1]
        rows = [i for i, o in enumerate(self._ordinals) if o == last or self._keeps(o)]
        self.measurements = [self.measurements[i] for i in rows]
        self.times = [self.times[i] for i in rows]
        self.elapsed = [self.elapsed[i] for i in rows]
        self._ordinals = [self._ordinals[i] for i in rows]

    def complete(self, m: Measurement) -> bool:
        """True if `m` holds a finite value of every metric."""
        return all(math.isfinite(m.metrics.get(k, math.nan)) for k in self.metric_ids)

    def final(self, goal: Goal, selection: MeasurementSelectionType) -> Measurement | None:
        """The trial's final measurement; `goal` is the first metric's (BEST needs it)."""
        finite = [m for m in self.measurements if self.complete(m)]
        if not finite:
            return None
        if selection == MeasurementSelectionType.BEST_MEASUREMENT and len(self.metric_ids) == 1:
            return max(finite, key=lambda m: (goal.sign * m.metrics[self.metric_id], m.step_count))
        # LAST: the latest report; reports come in order, steps break ties between sources.
        return finite[-1]


def _hypertune_report(line: str) -> dict[str, object] | None:
    """One line of a hypertune file as its report (a JSON object), or None when the line is
    blank, is not (yet) JSON, or is JSON but not an object."""
    line = line.strip()
    if not line:
        return None
    try:
        report = json.loads(line)
    except ValueError:
        return None  # a line being rewritten right now; the next read gets it
    except RecursionError:
        return None  # "[[[[..." nested beyond the parser's depth: no report
    return report if isinstance(report, dict) else None


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

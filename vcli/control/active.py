"""One running trial as the study controller follows it: its custom job, where its metrics come
from, and when each measurement was first seen."""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field, replace
from typing import Iterable

from vcli.control.jobs import JobPlan, JobRun
from vcli.executors import Executor, Placement
from vcli.logs import Follower, printable
from vcli.metrics import MetricReader
from vcli.spec import CustomJobSpec, Measurement, MetricSpec, Trial
from vcli.store import ReplicaRow, iso_seconds, now_iso

__all__ = ["ActiveTrial", "SilentTrainers", "default_failure_budget", "goal_reached", "fatal_failure", "missing_metric_reason", "restored_placements",
           "seconds_since", "trainer_modules", "unimportable_module"]


@dataclass
class ActiveTrial:
    trial: Trial
    run: JobRun
    reader: MetricReader
    follower: Follower
    chief_log: str
    started: float
    stop_reason: str | None = None
    #: Stopped by the early-stopping rule (or a PBT exploit): it no longer holds a parallel slot.
    stopped_early: bool = False
    #: Set when the study stops the trial as INFEASIBLE (e.g. PBT and a report without a step).
    fail_reason: str | None = None
    #: The elapsed seconds recorded for measurements before a `resume`, by `_recorded_key`, in
    #: order (a report repeated with the same step and value has one time each).
    recorded: dict[tuple[object, ...], list[float]] = field(default_factory=dict)
    #: The chief's latest non-empty stderr line (why a failed trial failed, in its own words).
    last_error: str | None = None

    @classmethod
    def follow(cls, trial: Trial, run: JobRun, plan: JobPlan, metric_ids: tuple[str, ...], started: float) -> ActiveTrial:
        """Follow `trial`'s chief: its metric file and its stdout (for `metric=value` lines)."""
        chief = plan.launches[0]
        return cls(trial=trial, run=run, reader=MetricReader(metric_ids),
                   follower=Follower([(chief.task_name, chief.log_path)]), chief_log=chief.log_path,
                   started=started, recorded=_recorded_times(trial.measurements))

    def read_metrics(self, executor: Executor, *, drain: bool = False) -> bool:
        """Feed the chief's new reports to the reader; True if a measurement changed. A poll
        reads at most 4 MiB of the log; `drain` (the trial ended) reads all of it: a trainer
        that printed more in its last tenth of a second lost the metric lines after it."""
        chief = self.run.plan.launches[0]
        handle = self.run.primary_handle
        text = executor.read_file(handle, chief.metric_file) if handle is not None else None
        new = self.reader.feed_hypertune(text)
        for batch in (self.follower.drain() if drain else [self.follower.poll()]):
            for rec in batch:
                if rec.stream == "stdout":
                    new |= self.reader.feed_stdout_line(rec.message, rec.timestamp)
                elif rec.stream == "stderr" and rec.message.strip():
                    self.last_error = printable(rec.message.strip()[:300])  # shown in tables and reasons
        return new

    def with_measurements(self, now: float) -> Trial:
        """The trial with the reader's measurements, each stamped with its elapsed time: when
        it was reported (the report's own time), else when it was first seen (metrics are
        re-read every tick). The report's time is taken only between the previous
        measurement's and the moment seen: reports made while no controller ran were all
        stamped with the time `resume` read them, and a trainer's clock may be off."""
        seen = round(now - self.started, 3)
        wall_start = time.time() - (now - self.started)
        r = self.reader
        first = len(r.elapsed)
        while first and r.elapsed[first - 1] is None:  # the new ones are the last ones
            first -= 1
        for i in range(first, len(r.elapsed)):
            floor = r.elapsed[i - 1] if i else 0.0
            assert floor is not None  # those before `first` are set, and this loop sets each before the next
            times = self.recorded.get(_recorded_key(r.measurements[i]))  # re-read after a resume
            recorded = max(floor, times.pop(0)) if times else None  # never before the one before it
            by_report = None if r.times[i] is None else round(r.times[i] - wall_start, 3)  # type: ignore[operator]
            r.elapsed[i] = (recorded if recorded is not None
                            else by_report if by_report is not None and floor <= by_report < seen else seen)
        ms = tuple(replace(m, elapsed_seconds=e) for m, e in zip(r.measurements, r.elapsed))
        return replace(self.trial, measurements=ms)

    def end_time(self) -> str:
        """When the trial's replicas ended, as their executors recorded it (a trial that ended
        while no controller ran was stamped with the time `resume` saw it), else now."""
        ends = [r.end_time for r in self.run.store.replicas(self.run.job_id)]
        done = [e for e in ends if e]  # every one of them once all replicas have ended
        return max(done) if ends and len(done) == len(ends) else now_iso()


def _recorded_times(measurements: Iterable[Measurement]) -> dict[tuple[object, ...], list[float]]:
    out: dict[tuple[object, ...], list[float]] = {}
    for m in measurements:
        out.setdefault(_recorded_key(m), []).append(m.elapsed_seconds or 0.0)
    return out


def _recorded_key(m: Measurement) -> tuple[object, ...]:
    """A measurement as re-read from the same reports: its step and its values."""
    return (m.step_count, *sorted((k, repr(v)) for k, v in m.metrics.items()))


def default_failure_budget(max_trial_count: int) -> int:
    """Failures tolerated when maxFailedTrialCount is 0: max(3, 10% of maxTrialCount), at most maxTrialCount."""
    return min(max_trial_count, max(3, math.ceil(max_trial_count / 10)))


def restored_placements(rows: Iterable[ReplicaRow]) -> dict[str, tuple[Placement, str]]:
    """The placements and addresses replicas were recorded with, by task name (for
    `plan_job(restore=...)`: a re-attached replica is never placed again)."""
    return {r.task_name: (Placement(host=r.host, address=(r.address or ":").rsplit(":", 1)[0],
                                    gpu_indices=tuple(int(g) for g in (r.gpus or "").split(",") if g)),
                          r.address or "") for r in rows}


def seconds_since(iso: str | None) -> float:
    """Seconds from an ISO time in the store to now (0 if unknown)."""
    at = iso_seconds(iso)
    return 0.0 if at is None else max(0.0, time.time() - at)


def trainer_modules(spec: CustomJobSpec) -> tuple[str, ...]:
    """The Python modules a trial job's pools run (`pythonModule`, autopackaging's module)."""
    out = []
    for pool in spec.worker_pool_specs:
        for module in (pool.python_package_spec.python_module if pool.python_package_spec else None,
                       pool.local_package.python_module if pool.local_package else None):
            if module:
                out.append(module)
    return tuple(dict.fromkeys(out))


#: How Python says a module is missing: `python -m x.y` ("No module named x.y") and an import
#: of it or of its package ("ModuleNotFoundError: No module named 'x'").
_NO_MODULE = re.compile(r"No module named '?([\w.]+)'?")


def unimportable_module(last_error: str | None, modules: tuple[str, ...]) -> str | None:
    """The module of `modules` that `last_error` (a trainer's last stderr line) says cannot be
    found, it or its package; None otherwise (a module the trainer itself imports is not
    the job's: a missing dependency may depend on the trial's parameters)."""
    m = _NO_MODULE.search(last_error or "")
    if m is None:
        return None
    missing = m.group(1)
    for module in modules:
        if module == missing or module.startswith(missing + "."):
            return module
    return None


def fatal_failure(trial_id: str, last_error: str | None, modules: tuple[str, ...]) -> str | None:
    """Why the whole study must stop after this failed trial (its trainer's module cannot be
    imported: every trial would fail the same way), or None."""
    missing = unimportable_module(last_error, modules)
    if missing is None:
        return None
    return (f"Trial {trial_id}'s trainer could not import its module [{missing}] ({last_error}); every trial "
            "would fail the same way, so the study stops. Check pythonModule and the package "
            "(local-package-path, packageUris).")


def _reported_instead(reader: MetricReader) -> str:
    """"; it reported [Score] instead": the tags a trial reported that are none of the study's."""
    return f"; it reported [{', '.join(printable(t) for t in reader.other_tags)}] instead" if reader.other_tags else ""


def _reported_but_unusable(metric_ids: tuple[str, ...], reader: MetricReader) -> str:
    """Every metric was reported: only as values that are not finite, or never all at one step."""
    reported = [m.metrics[k] for m in reader.measurements for k in metric_ids if k in m.metrics]
    if not any(math.isfinite(v) for v in reported):
        values = sorted({repr(v) for v in reported})
        return (f"The trial reported the metric [{', '.join(metric_ids)}] only as values that are not finite numbers "
                f"({', '.join(values)}).")
    return (f"The trial reported the metrics [{', '.join(metric_ids)}] but never all of them at one step: a "
            "multi-objective trial must report every metric with the same step (the same `global_step`, or "
            "`step=` on stdout).")


def missing_metric_reason(metric_ids: tuple[str, ...], reader: MetricReader) -> str:
    """Why a trial that exited 0 is INFEASIBLE: the metrics it never reported, or reported
    only as NaN or infinity (it said "without reporting" of a trial that printed score=nan)."""
    missing = [k for k in metric_ids if not any(k in m.metrics for m in reader.measurements)]
    if not missing:
        return _reported_but_unusable(metric_ids, reader)
    names = ", ".join(missing or metric_ids)
    return (f"The trial finished without reporting the metric [{names}] (report it with "
            f"cloudml-hypertune, or print a line `{(missing or metric_ids)[0]}=VALUE`){_reported_instead(reader)}"
            + ("." if len(metric_ids) == 1 else "; a multi-objective trial must report every metric at one step."))


class SilentTrainers:
    """Stops a study whose trainers never report its metric: when the first `FIRST` trials to
    end all finished without reporting any of the study's metrics, every trial would, and
    the failure budget would run out one trial at a time (a missing cloudml-hypertune, a
    misspelt tag). `ended` then gives the one line the study fails with: the cause, and the
    fix (the tag the trainers did report, when it is close to the metric's id)."""

    FIRST = 3

    def __init__(self, metric_ids: tuple[str, ...], max_trial_count: int) -> None:
        self.metric_ids = metric_ids
        self.active = max_trial_count > self.FIRST
        self.silent = 0
        self.tags: list[str] = []

    def ended(self, trial: Trial, reader: MetricReader) -> str | None:
        """Note one ended trial; the study's failure message once the rule holds, else None."""
        if not self.active:
            return None
        if any(k in m.metrics for m in reader.measurements for k in self.metric_ids) or not (
                trial.infeasible_reason or "").startswith("The trial finished without reporting"):
            self.active = False  # a trial reported, or ended some other way: the trainers are not all silent
            return None
        self.silent += 1
        self.tags += [t for t in reader.other_tags if t not in self.tags]
        if self.silent < self.FIRST:
            return None
        return silent_reason(self.silent, self.metric_ids, self.tags)


def silent_reason(count: int, metric_ids: tuple[str, ...], tags: list[str]) -> str:
    """Why a study of silent trainers stops (`SilentTrainers`), with the fix."""
    import difflib

    names = ", ".join(metric_ids)
    head = f"The first {count} trials finished without reporting the metric [{names}], so the study stops:"
    close = [t for t in tags for m in metric_ids if t.lower() == m.lower() or difflib.get_close_matches(t, [m], cutoff=0.75)]
    if close:
        return (f"{head} they reported [{printable(close[0])}] instead. The metricId and the trainer's tag must be "
                "the same: rename one of them.")
    instead = f" they reported [{', '.join(printable(t) for t in tags)}] instead." if tags else " they reported nothing."
    return (f"{head}{instead} Report it with cloudml-hypertune (installed where the trainer runs) as "
            f"hyperparameter_metric_tag='{metric_ids[0]}', or print a line `{metric_ids[0]}=VALUE`.")


def goal_reached(trial: Trial, metric: MetricSpec, goal: float | None) -> bool:
    """Whether the trial's latest measurement reached the study's goal value (a vcli extension)."""
    if goal is None or not trial.measurements:
        return False
    value = trial.measurements[-1].metrics.get(metric.metric_id)
    if value is None or not math.isfinite(value):
        return False
    return metric.goal.sign * (value - goal) >= 0

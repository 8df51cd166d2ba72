"""What every command prints: resources in `--format`, list output, replica logs, exit codes.

Data goes to stdout, status to stderr (`vcli.cli.support.err`). Rendering is `vcli.formats`;
this module only decides where it goes. Nothing heavy is imported at module level.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any, Optional

from vcli.cli.support import err, shown
from vcli.enums import JobKind, JobState


def emit(resources: Any, fmt: Optional[str], *, is_list: bool, default: str = "yaml") -> None:
    """Print one resource (or a list) in `--format` (default YAML) on stdout, its names in this
    invocation's --project/--region (`support.shown`)."""
    from vcli.cli.support import state
    from vcli.formats import flatten, parse_format, render

    if state.get("flatten"):
        resources, is_list = flatten(resources if is_list else [resources], state["flatten"]), True
    sys.stdout.write(render(shown(resources), parse_format(fmt or default), is_list=is_list))
    sys.stdout.flush()


#: `list` on a terminal without --format: one line per resource (gcloud's YAML, which it
#: prints everywhere, runs to thousands of lines for a few studies). Piped, `list` prints
#: gcloud's YAML, so scripts see what gcloud gives them.
TERMINAL_LIST_FORMATS = {
    "customJob": "table(name.basename():label=ID, displayName, state, createTime.date('%Y-%m-%d %H:%M'):label=CREATED)",
    "hyperparameterTuningJob": "table(name.basename():label=ID, displayName, state, trials.len():label=TRIALS:align=right, "
                               "bestTrialId:label=BEST_TRIAL:align=right, createTime.date('%Y-%m-%d %H:%M'):label=CREATED)",
}


def list_format(fmt: Optional[str], kind: str) -> Optional[str]:
    """`fmt`, or on a terminal with no --format (and no --flatten) the compact table for `kind`."""
    from vcli.cli.support import state

    if fmt is None and not state.get("flatten") and sys.stdout.isatty():
        return TERMINAL_LIST_FORMATS[kind]
    return fmt


def selected(resources: list[dict[str, Any]], filter_: Optional[str], sort_by: Optional[str],
             limit: Optional[int]) -> list[dict[str, Any]]:
    """The resources --filter keeps, in --sort-by's order, the first --limit of them."""
    from vcli.errors import UsageError
    from vcli.formats import apply_filter, apply_sort

    resources = apply_sort(apply_filter(resources, filter_), sort_by)
    if limit is not None:
        if limit < 1:
            raise UsageError("argument --limit: Value must be greater than or equal to 1; received: " + str(limit))
        resources = resources[:limit]
    return resources


def list_output(resources: list[dict[str, Any]], fmt: Optional[str], filter_: Optional[str],
                sort_by: Optional[str], limit: Optional[int]) -> None:
    """`list`: --filter, --sort-by and --limit, then the resources; `Listed 0 items.` when none."""
    resources = selected(resources, filter_, sort_by, limit)
    if not resources:
        err("Listed 0 items.")
        if (fmt or "").startswith("json"):
            print("[]")
        return
    emit(resources, fmt, is_list=True)


def trials_read(fmt: Optional[str], filter_: Optional[str], sort_by: Optional[str]) -> str:
    """How much of a study's trials a `list` prints, filters or sorts by: "none" when a
    projection format (value, csv, table, get) and the expressions name neither `trials` nor
    `optimalTrialIds`, "count" when they name only `trials.len()`, else "all" (YAML and JSON
    print every resource whole; `--flatten` reads the trials too). Reading a 10,000-trial
    study's trials to print its name took seconds."""
    import re

    from vcli.cli.support import state
    from vcli.formats import parse_format

    if not fmt or state.get("flatten") or parse_format(fmt).kind not in ("value", "csv", "table", "get"):
        return "all"
    text = " ".join(x for x in (fmt, filter_, sort_by) if x)
    rest = re.sub(r"\btrials\.len\(\)", "", text)
    if re.search(r"trials|optimalTrialIds", rest, re.IGNORECASE):
        return "all"
    return "count" if rest != text else "none"


def check_page_size(page_size: Optional[int]) -> None:
    """`--page-size` as gcloud: at least 1 (vcli lists every job at once, but -5 was taken)."""
    from vcli.errors import UsageError

    if page_size is not None and page_size < 1:
        raise UsageError(f"argument --page-size: Value must be greater than or equal to 1; received: {page_size}")


def check_format(fmt: Optional[str]) -> None:
    """Reject a bad --format before anything runs (not after a whole job)."""
    if fmt:
        from vcli.formats import parse_format

        parse_format(fmt)


def ran_seconds(row: Any, measured: float) -> float:
    """How long the job or study ran: from its recorded start to its recorded end (a resumed
    one printed the time since the resume: "in 3.3s" of a study that ran a minute; a study
    whose tracker was slow to answer after its end, "in 15.0s" of one recorded as 6.9 s), else
    `measured` (this process's own count)."""
    from vcli.store import iso_seconds

    start = iso_seconds(getattr(row, "start_time", None) or getattr(row, "create_time", None))
    end = iso_seconds(getattr(row, "end_time", None))
    return measured if start is None or end is None else max(0.0, end - start)


def exit_code_for(state: JobState) -> int:
    """The process exit code for a job's final state (see `vcli.errors.ExitCode`)."""
    from vcli.errors import ExitCode

    return int({JobState.JOB_STATE_SUCCEEDED: ExitCode.OK,
                JobState.JOB_STATE_CANCELLED: ExitCode.CANCELLED}.get(state, ExitCode.JOB_FAILED))


@contextmanager
def failure_recorded(store: Any, job_id: str) -> Iterator[None]:
    """A detached runner's error that ends it before its job or study ended (it cannot even be
    planned: a GPU lease directory nobody can use, ...) is recorded as the job's FAILED state
    with the error's line: the job was left QUEUED with its controller gone, and neither
    `describe` nor the SDK's `wait()` learnt why."""
    from vcli.enums import RpcCode
    from vcli.errors import StoreError, VcliError

    try:
        yield
    except VcliError as e:
        try:
            row = store.get_job(job_id)
            if row is not None and not JobState(row.state).is_final():
                store.set_state(job_id, JobState.JOB_STATE_FAILED,
                                error={"code": RpcCode.FAILED_PRECONDITION, "message": str(e)})
        except StoreError:
            pass
        raise


def warn_orphaned(resources: list[dict[str, Any]], group: str) -> None:
    """Say, on stderr, which of these jobs have lost their controller and what to do."""
    for r in resources:
        ctl = r.get("controller")
        if ctl and not ctl.get("alive"):
            job_id = str(r.get("name", "")).rsplit("/", 1)[-1]
            err(f"WARNING: [{job_id}] is {r.get('state')} but the vcli process that ran it (pid {ctl.get('pid')}) is "
                f"gone: `vcli {group} resume {job_id}` takes it over, `vcli {group} cancel {job_id}` stops it.")


def get_row(store: Any, ref: str, kind: JobKind) -> Any:
    """The stored job named by `ref` (an id or a resource name) of `kind`; NotFoundError if none
    (`vcli.resources.stored_job`, which the Python SDK's `get` shares)."""
    from vcli.resources import stored_job

    return stored_job(store, ref, kind)


def print_cancel(store: Any, row: Any, what: str, *, wait: bool) -> None:
    """`cancel`: flag the job; wait for its live controller to end it, or stop what a dead one left."""
    from vcli.control import cancel, liveness

    was_cancelling = row.cancel_requested or row.state == JobState.JOB_STATE_CANCELLING
    if not cancel.request_cancel(store, row):
        err(f"{what} [{shown(row.name)}] has already ended ({row.state}); nothing to cancel.")
        return
    err(f"Request to cancel {what} [{shown(row.name)}] has been sent.")
    if liveness.controller_alive(row):
        if liveness.controller_stopped(row):  # it waited 2 minutes, stopped nothing, and exited 0
            from vcli.errors import ControllerConflictError

            pid = row.controller_pid
            raise ControllerConflictError(f"The vcli process that runs {what} [{shown(row.name)}] (pid {pid}) is stopped "
                                          f"(Ctrl-Z or SIGSTOP): the cancel takes effect when it continues (`fg` in its "
                                          f"terminal, or `kill -CONT {pid}`).")
        if not wait:
            return
        state = cancel.wait_for_end(store, row.id)
        err(f"{what} [{shown(row.name)}] is now {state.value}." if state else f"{what} [{shown(row.name)}] is still stopping; check with describe.")
        return
    cancel.stop_orphaned(store, row, on_warning=lambda msg: err(f"WARNING: {msg}"), cancelled=was_cancelling)
    now = store.get_job(row.id)
    state = now.state if now is not None else JobState.JOB_STATE_CANCELLED.value
    why = " (its replicas had all ended on their own)" if state != JobState.JOB_STATE_CANCELLED.value else ""
    err(f"{what} [{shown(row.name)}] is now {state}{why}.")


def finish_cancel(store: Any, row: Any, what: str) -> int:
    """`resume` of a job whose controller died while cancelling it (CANCELLING: Ctrl-C or
    `cancel` came first): finish the cancel, as `cancel` of an orphaned job does, rather than
    run on (a study went on to start new trials, a trainer the user stopped ran to its end).
    Says so; the exit code of the final state."""
    from vcli.control import cancel

    err(f"{what} [{shown(row.name)}] was being cancelled when its vcli process died: "
        "finishing the cancel, not resuming it.")
    cancel.stop_orphaned(store, row, on_warning=lambda msg: err(f"WARNING: {msg}"), cancelled=True)
    err(f"{what} [{shown(row.name)}] is now {JobState.JOB_STATE_CANCELLED.value}.")
    return exit_code_for(JobState.JOB_STATE_CANCELLED)


class LogPrinter:
    """Prints new replica log lines as `[task] line`; on a terminal the `[task]` is coloured.

    Off a terminal the lines are plain text, written as they are (rich is not involved).
    """

    COLOURS = ("cyan", "magenta", "green", "yellow", "blue", "red")

    def __init__(self, stream: IO[str]) -> None:
        from vcli.logs import Follower

        self.follower = Follower([])
        self.stream = stream
        self._console: Any = None
        if stream.isatty():
            from rich.console import Console

            self._console = Console(file=stream, highlight=False, markup=False, emoji=False, soft_wrap=True)
        self._colour: dict[str, str] = {}

    def add(self, task: str, path: str) -> None:
        self.follower.add(task, path)

    def flush(self) -> None:
        for rec in (r for batch in self.follower.drain() for r in batch):
            body = f"vcli: {rec.message}" if rec.stream == "vcli" else rec.message
            if self._console is None:
                self.stream.write(f"[{rec.task_name}] {body}\n")
                continue
            from rich.text import Text

            colour = self._colour.setdefault(rec.task_name, self.COLOURS[len(self._colour) % len(self.COLOURS)])
            self._console.print(Text.assemble((f"[{rec.task_name}]", colour), " ", body))
        self.stream.flush()


def trial_outcomes(store: Any, study_id: str) -> Callable[[], list[Any]]:
    """For a study's `stream-logs`: a function giving, each time it is called, a log record
    (`vcli.logs.LogRecord`, task `trial-N`) for each trial that ended since the last call:
    `trial N SUCCEEDED: metric=value (params)`, or INFEASIBLE with its reason (severity ERROR)."""
    from vcli.logs import LogRecord
    from vcli.store import iso_seconds
    from vcli.view.table import fmt_value

    seen: set[str] = set()

    def new() -> list[Any]:
        out = []
        for t in store.ended_trials(study_id, seen):
            seen.add(t["id"])
            params = " ".join(f"{p['parameterId']}={fmt_value(p['value'])}" for p in t.get("parameters", []))
            if t["state"] == "SUCCEEDED":
                final = (t.get("finalMeasurement") or {}).get("metrics") or []
                said = " ".join(f"{m['metricId']}={fmt_value(m.get('value'))}" for m in final)
                stream, message = "vcli", f"trial {t['id']} SUCCEEDED: {said} ({params})"
            else:  # severity ERROR, as a trainer's stderr
                failed = f" {t['failureClass']}" if t.get("failureClass") else ""
                stream, message = "stderr", f"trial {t['id']} INFEASIBLE{failed}: {t.get('infeasibleReason', '')} ({params})"
            out.append(LogRecord(timestamp=iso_seconds(t.get("endTime")) or time.time(), stream=stream,
                                 task_name=f"trial-{t['id']}", message=message))
        return out

    return new


def stream_logs(store: Any, job_ids: Callable[[], list[tuple[str, str]]], parent_id: str,
                task_name: Optional[str], interval: float = 0.2, *, group: str = "custom-jobs",
                outcomes: Callable[[], list[Any]] | None = None) -> None:
    """`stream-logs`: severity, time, task and message of every record until the job ends, or
    until the vcli process that ran it is found gone (it cannot end then without `resume` or
    `cancel`: the logs so far are printed, then the WARNING `list` and `describe` give).

    `job_ids()` gives (task prefix, job id) pairs and is asked again on every round, so the
    trials a study starts later are followed too; `outcomes()`, if given, records of its own
    (a study's trials as they end: `trial_outcomes`), printed after each round's logs.
    """
    from datetime import datetime

    from vcli.control.liveness import controller_alive
    from vcli.logs import Follower

    follower = Follower([])
    orphaned: list[Any] = []

    def done() -> bool:
        row = store.get_job(parent_id)
        if row is None or JobState(row.state).is_final():
            return True
        if row.controller_pid and not controller_alive(row):
            orphaned.append(row)
            return True
        return False

    while True:
        finished = done()
        for prefix, jid in job_ids():
            for r in store.replicas(jid):
                if task_name and r.task_name != task_name:
                    continue
                follower.add(f"{prefix}{r.task_name}", r.log_path)
        records = [r for batch in follower.drain() for r in batch]
        if outcomes is not None and not task_name:
            # After the logs drained this round: a trial is recorded ended once its log's last line is written.
            records += outcomes()
        for rec in records:
            ts = datetime.fromtimestamp(rec.timestamp).astimezone().strftime("%Y-%m-%d %H:%M:%S %z")
            sys.stdout.write(f"{rec.severity}\t{ts}\t{rec.task_name}\t{rec.message}\n")
        sys.stdout.flush()
        if finished:
            if orphaned:
                row = orphaned[0]
                warn_orphaned([{"name": row.id, "state": row.state.value,
                                "controller": {"pid": row.controller_pid, "alive": False}}], group)
            return
        time.sleep(interval)


@dataclass(frozen=True)
class ResourceKind:
    """One of the two resource kinds (`custom-jobs`, `hp-tuning-jobs`): the one implementation
    of `list`, `describe`, `cancel` and `stream-logs` for both."""

    kind: JobKind
    #: The command group, as messages name it.
    group: str
    #: What `cancel`'s lines call one (gcloud's words).
    what: str
    #: gcloud's collection name for `list`'s default table.
    collection: str

    def resource(self, store: Any, row: Any, trials: str = "all") -> dict[str, Any]:
        """The Vertex REST resource of a stored row (`trials`: see `hp_tuning_job_resource`)."""
        from vcli import resources

        if self.kind is JobKind.CUSTOM_JOB:
            return resources.custom_job_resource(store, row)
        return resources.hp_tuning_job_resource(store, row, trials)

    def list(self, fmt: Optional[str], filter_: Optional[str], sort_by: Optional[str], limit: Optional[int],
             page_size: Optional[int], uri: bool, *, include_trial_jobs: bool = False) -> None:
        check_page_size(page_size)
        from vcli.store import Store

        store = Store()
        fmt = "value(name)" if uri else list_format(fmt, self.collection)
        trials = trials_read(fmt, filter_, sort_by)
        found = [self.resource(store, r, trials) for r in store.list_jobs(self.kind, include_trial_jobs=include_trial_jobs)]
        warn_orphaned(found, self.group)
        list_output(found, fmt, filter_, sort_by, limit)

    def describe(self, ref: str, fmt: Optional[str]) -> None:
        from vcli.store import Store

        store = Store()
        resource = self.resource(store, get_row(store, ref, self.kind))
        warn_orphaned([resource], self.group)
        emit(resource, fmt, is_list=False)

    def cancel(self, ref: str, *, wait: bool) -> None:
        from vcli.store import Store

        store = Store()
        print_cancel(store, get_row(store, ref, self.kind), self.what, wait=wait)

    def stream_logs(self, ref: str, task_name: Optional[str]) -> None:
        """A job's own replicas; a study's every trial's (`trial-N/workerpool0-0`), those it
        starts later included."""
        from vcli.store import Store

        store = Store()
        row = get_row(store, ref, self.kind)
        if self.kind is JobKind.CUSTOM_JOB:
            stream_logs(store, lambda: [("", row.id)], row.id, task_name, group=self.group)
        else:
            stream_logs(store, lambda: [(f"trial-{c.trial_id}/", c.id) for c in store.child_jobs(row.id)], row.id,
                        task_name, group=self.group, outcomes=trial_outcomes(store, row.id))


CUSTOM_JOBS = ResourceKind(JobKind.CUSTOM_JOB, "custom-jobs", "CustomJob", "customJob")
STUDIES = ResourceKind(JobKind.HYPERPARAMETER_TUNING_JOB, "hp-tuning-jobs", "hyperparameter tuning job",
                       "hyperparameterTuningJob")

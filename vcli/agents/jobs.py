"""What `vcli mcp`'s tools do, in plain Python: each returns a JSON-able dict, or raises a
`VcliError` whose text is vcli's one-line message.

Reading (list, describe, logs, best trials) reads the store as `describe` does
(`vcli.resources`). What owns a process runs the CLI itself as a child, `python -m vcli ...`,
waited for to its end: `create --async` (it records the job, hands it to a detached runner in
a session of its own and exits, so the server never waits on a job and is no job's parent),
`cancel` (it waits for the job's controller to end the job) and `hosts gpus`. The child's
stdin is the config given or nothing, never the server's own (the MCP stream).
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from vcli.enums import JobKind
from vcli.errors import ExitCode, NotFoundError, UsageError, VcliError

#: How long a `python -m vcli` child may take (a create that packages a trainer, a cancel that
#: waits for the job's controller, 120 s at most, to stop its replicas).
CLI_SECONDS = 600.0
#: The most log lines one `job_logs` call returns, and the most bytes it reads of one log.
MAX_LOG_LINES = 5000
MAX_LOG_BYTES = 16 * 1024 * 1024
#: What `trials` of `describe_hp_tuning_job` takes.
TRIAL_DETAIL = ("count", "all", "none")

_KINDS = (JobKind.CUSTOM_JOB, JobKind.HYPERPARAMETER_TUNING_JOB)


class CommandError(VcliError):
    """A `python -m vcli` child that exited non-zero: its ERROR line's message and exit code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        try:
            self.exit_code = ExitCode(code)
        except ValueError:
            self.exit_code = ExitCode.INTERNAL


# --------------------------------------------------------------------------- the CLI as a child


def error_line(stderr: str, code: int) -> str:
    """The message of the last `ERROR: (vcli.GROUP.COMMAND) message` line of a child's stderr,
    else its last line, else its exit code."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    for line in reversed(lines):
        if m := re.match(r"ERROR: \(vcli\.[^)]*\) (.*)", line):
            return m.group(1)
    return lines[-1] if lines else f"vcli exited with code {code}."


def run_cli(argv: Sequence[str], *, stdin: str | None = None, timeout: float = CLI_SECONDS) -> tuple[str, str]:
    """`python -m vcli ARGV` in this process's directory and environment, to its end: (stdout,
    stderr). A non-zero exit is a `CommandError` with vcli's ERROR line; past `timeout` the
    child is killed (and waited for) and that is one too."""
    feed: dict[str, Any] = {"input": stdin} if stdin is not None else {"stdin": subprocess.DEVNULL}
    try:
        done = subprocess.run([sys.executable, "-m", "vcli", *argv], capture_output=True, text=True, timeout=timeout,
                              **feed)
    except subprocess.TimeoutExpired:
        raise CommandError(f"`vcli {' '.join(argv[:2])}` did not finish within {timeout:.0f} s.",
                           ExitCode.INTERNAL) from None
    if done.returncode != 0:
        raise CommandError(error_line(done.stderr, done.returncode), done.returncode)
    return done.stdout, done.stderr


def notices(stderr: str) -> list[str]:
    """The `Note:` and `WARNING:` lines a create printed (settings without effect here, GPUs
    this machine lacks, ...)."""
    return [line for line in stderr.splitlines() if line.startswith(("Note:", "WARNING:"))]


# --------------------------------------------------------------------------- summaries


_JOB_KEYS = ("name", "displayName", "state", "createTime", "startTime", "endTime", "error", "failureClass", "labels",
             "hyperparameterTuningJob", "trialId", "outputDirectory")
_STUDY_KEYS = ("name", "displayName", "state", "maxTrialCount", "parallelTrialCount", "createTime", "startTime",
               "endTime", "error", "labels", "bestTrialId", "optimalTrialIds", "stopReason", "outputDirectory")


def _id(resource: dict[str, Any]) -> str:
    return str(resource["name"]).rsplit("/", 1)[-1]


def summary(resource: dict[str, Any], keys: Sequence[str]) -> dict[str, Any]:
    """The id and `keys` of a resource (those set), and its controller when that is gone (the
    job is stuck until `resume` or `cancel`)."""
    out = {"id": _id(resource), **{k: resource[k] for k in keys if resource.get(k) not in (None, "", {}, [])}}
    controller = resource.get("controller")
    if controller and not controller.get("alive"):
        out["controller"] = controller
    return out


@contextmanager
def _store() -> Iterator[Any]:
    from vcli.store import Store

    store = Store()
    try:
        yield store
    finally:
        store.close()


def _selected(resources: list[dict[str, Any]], filter_: str | None, limit: int | None) -> list[dict[str, Any]]:
    """`list`'s --filter and --limit (`vcli.cli.output.selected`), over resources newest first."""
    from vcli.cli.output import selected

    return selected(sorted(resources, key=lambda r: str(r.get("createTime") or ""), reverse=True), filter_, None, limit)


# --------------------------------------------------------------------------- custom jobs


def list_custom_jobs(filter_: str | None = None, limit: int | None = 50, include_trial_jobs: bool = False) -> dict[str, Any]:
    from vcli.resources import custom_job_resource

    with _store() as store:
        found = [custom_job_resource(store, r) for r in store.list_jobs(JobKind.CUSTOM_JOB, include_trial_jobs=include_trial_jobs)]
    return {"customJobs": [summary(r, _JOB_KEYS) for r in _selected(found, filter_, limit)]}


def describe_custom_job(job_id: str) -> dict[str, Any]:
    from vcli.resources import custom_job_resource, stored_job

    with _store() as store:
        return custom_job_resource(store, stored_job(store, job_id, JobKind.CUSTOM_JOB))


def create_custom_job(display_name: str, config_yaml: str | None = None, worker_pool_specs: Sequence[str] = (),
                      args: Sequence[str] = (), executor: str | None = None, *, validate_only: bool = False) -> dict[str, Any]:
    """`custom-jobs create --async`: the job recorded and handed to its detached runner; with
    `validate_only`, `--validate-only`: the job checked and resolved, nothing recorded."""
    how = "--validate-only" if validate_only else "--async"
    argv = ["custom-jobs", "create", how, "--format=json", f"--display-name={display_name}"]
    argv += ["--config=-"] if config_yaml is not None else []
    argv += [f"--worker-pool-spec={spec}" for spec in worker_pool_specs]
    argv += [f"--args={arg}" for arg in args]
    argv += [f"--executor={executor}"] if executor else []
    out, err = run_cli(argv, stdin=config_yaml)
    if validate_only:
        return {"valid": True, "customJob": json.loads(out), "notices": notices(err)}
    return {**summary(json.loads(out), _JOB_KEYS), "notices": notices(err)}


def _cancel(kind: JobKind, group: str, job_id: str, wait: bool) -> dict[str, Any]:
    """`GROUP cancel ID [--async]` of the job `job_id` names (looked up here first, so the
    child gets a stored id, never a flag); its state afterwards and what the command said."""
    from vcli.resources import stored_job

    with _store() as store:
        row = stored_job(store, job_id, kind)
    _, err = run_cli([group, "cancel", row.id, *([] if wait else ["--async"])])
    with _store() as store:
        after = store.get_job(row.id)
    return {"id": row.id, "state": after.state.value if after is not None else None,
            "messages": [line for line in err.splitlines() if line.strip()]}


def cancel_custom_job(job_id: str, wait: bool = True) -> dict[str, Any]:
    return _cancel(JobKind.CUSTOM_JOB, "custom-jobs", job_id, wait)


# --------------------------------------------------------------------------- logs


def tail_lines(path: str, count: int) -> list[str]:
    """The last `count` complete ("\\n"-terminated) lines of a file, read from its end (at most
    `MAX_LOG_BYTES`); none for a missing file."""
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return []
    with f:
        end = f.seek(0, 2)
        pos, data = end, b""
        while pos > 0 and data.count(b"\n") <= count and end - pos < MAX_LOG_BYTES:
            step = min(64 * 1024, pos)
            pos -= step
            f.seek(pos)
            data = f.read(step) + data
    lines = data.split(b"\n")[:-1]  # what follows the last "\n" is a record still being written
    if pos > 0 and lines:
        lines = lines[1:]  # cut where the read began
    return [line.decode("utf-8", errors="replace") for line in lines[-count:]]


def _job_or_study(store: Any, ref: str) -> Any:
    """The stored custom job or study `ref` names (`vcli.resources.stored_job` for its kind)."""
    from vcli.resources import stored_job
    from vcli.store import parse_job_ref

    found = store.get_job(parse_job_ref(ref))
    if found is None or found.kind not in _KINDS:
        raise NotFoundError(f"No custom job or hyperparameter tuning job [{ref}] was found. List them with "
                            "`vcli custom-jobs list` or `vcli hp-tuning-jobs list`.")
    return stored_job(store, ref, JobKind(found.kind))


def job_logs(job_id: str, lines: int = 100, task_name: str | None = None) -> dict[str, Any]:
    """The last `lines` log records of a custom job's replicas, or of every trial of a study,
    as `stream-logs` prints them."""
    from datetime import datetime

    from vcli.logs import parse_line

    if not 1 <= lines <= MAX_LOG_LINES:
        raise UsageError(f"lines must be from 1 to {MAX_LOG_LINES}, not {lines}.")
    with _store() as store:
        row = _job_or_study(store, job_id)
        jobs = ([("", row.id)] if row.kind == JobKind.CUSTOM_JOB
                else [(f"trial-{c.trial_id}/", c.id) for c in store.child_jobs(row.id)])
        records = []
        for prefix, jid in jobs:
            for replica in store.replicas(jid):
                task = f"{prefix}{replica.task_name}"
                if task_name in (None, replica.task_name, task):
                    records += [r for r in (parse_line(t, task) for t in tail_lines(replica.log_path, lines)) if r]
    records.sort(key=lambda r: r.timestamp)
    shown = [f"{r.severity}\t{datetime.fromtimestamp(r.timestamp).astimezone().isoformat(timespec='seconds')}\t"
             f"{r.task_name}\t{r.message}" for r in records[-lines:]]
    return {"id": row.id, "state": row.state.value, "ended": row.state.is_final(), "lines": shown}


# --------------------------------------------------------------------------- studies


def _study_resource(store: Any, row: Any, trials: str) -> dict[str, Any]:
    """The study's resource; with trials="count", `trialCount` and `trialStates` (how many
    trials are in each state) instead of the trials themselves."""
    from vcli.resources import hp_tuning_job_resource

    resource = hp_tuning_job_resource(store, row, "all" if trials == "all" else "none")
    if trials == "count":
        states = store.trial_states(row.id)
        resource["trialCount"] = sum(states.values())
        resource["trialStates"] = states
    return resource


def list_hp_tuning_jobs(filter_: str | None = None, limit: int | None = 50) -> dict[str, Any]:
    detail = "all" if filter_ and re.search(r"trials|optimalTrialIds", filter_, re.IGNORECASE) else "count"
    with _store() as store:
        found = [_study_resource(store, r, detail) for r in store.list_jobs(JobKind.HYPERPARAMETER_TUNING_JOB)]
        chosen = _selected(found, filter_, limit)
        if detail == "all":  # the filter read the trials; the summary counts them
            for r in chosen:
                r.update(trialCount=len(r["trials"]), trialStates=store.trial_states(_id(r)))
    keys = (*_STUDY_KEYS, "trialCount", "trialStates")
    return {"hyperparameterTuningJobs": [summary(r, keys) for r in chosen]}


def describe_hp_tuning_job(study_id: str, trials: str = "count") -> dict[str, Any]:
    from vcli.resources import stored_job

    if trials not in TRIAL_DETAIL:
        raise UsageError(f"trials must be one of {', '.join(TRIAL_DETAIL)}, not [{trials}].")
    with _store() as store:
        return _study_resource(store, stored_job(store, study_id, JobKind.HYPERPARAMETER_TUNING_JOB), trials)


def create_hp_tuning_job(config_yaml: str, display_name: str | None = None, max_trial_count: int | None = None,
                         parallel_trial_count: int | None = None, algorithm: str | None = None, seed: int | None = None,
                         executor: str | None = None, *, validate_only: bool = False) -> dict[str, Any]:
    """`hp-tuning-jobs create --config=- --async`: the study recorded and handed to its
    detached runner; with `validate_only`, `--validate-only`: checked, nothing recorded."""
    given = {"display-name": display_name, "max-trial-count": max_trial_count,
             "parallel-trial-count": parallel_trial_count, "algorithm": algorithm, "seed": seed, "executor": executor}
    argv = ["hp-tuning-jobs", "create", "--validate-only" if validate_only else "--async", "--format=json", "--config=-"]
    argv += [f"--{flag}={value}" for flag, value in given.items() if value is not None]
    out, err = run_cli(argv, stdin=config_yaml)
    resource = json.loads(out)
    if validate_only:
        return {"valid": True, "hyperparameterTuningJob": resource, "notices": notices(err)}
    resource.pop("trials", None)
    return {**summary(resource, _STUDY_KEYS), "notices": notices(err)}


def cancel_hp_tuning_job(study_id: str, wait: bool = True) -> dict[str, Any]:
    return _cancel(JobKind.HYPERPARAMETER_TUNING_JOB, "hp-tuning-jobs", study_id, wait)


def _metric_value(trial: dict[str, Any], metric_id: str) -> float | None:
    for m in (trial.get("finalMeasurement") or {}).get("metrics") or []:
        value = m.get("value")
        if m.get("metricId") == metric_id and isinstance(value, (int, float)) and math.isfinite(value):
            return float(value)
    return None


def best_trials(study_id: str, n: int = 5) -> dict[str, Any]:
    """The `n` best SUCCEEDED trials of a study by its metric's final value (its goal's way
    up); for a study of several metrics, its Pareto-optimal trials (up to `n`)."""
    from vcli.resources import optimal_trial_ids, stored_job

    if n < 1:
        raise UsageError(f"n must be at least 1, not {n}.")
    with _store() as store:
        row = stored_job(store, study_id, JobKind.HYPERPARAMETER_TUNING_JOB)
        records = store.trial_records(row.id)
    metrics = (row.record.get("studySpec") or {}).get("metrics") or []
    if len(metrics) > 1:
        front = set(optimal_trial_ids(records, metrics))
        chosen = [t for t in records if t["id"] in front]
    else:
        chosen = _ranked(records, metrics[0] if metrics else {})
    keep = ("id", "state", "parameters", "finalMeasurement", "startTime", "endTime")
    return {"id": row.id, "state": row.state.value, "metrics": metrics, "bestTrialId": row.record.get("bestTrialId"),
            "trials": [{k: t[k] for k in keep if k in t} for t in chosen[:n]]}


def _ranked(records: list[dict[str, Any]], metric: dict[str, Any]) -> list[dict[str, Any]]:
    """The SUCCEEDED trials with a finite final value of `metric`, best first."""
    scored = [(v, t) for t in records if t.get("state") == "SUCCEEDED"
              and (v := _metric_value(t, str(metric.get("metricId", "")))) is not None]
    return [t for _, t in sorted(scored, key=lambda p: p[0], reverse=metric.get("goal") != "MINIMIZE")]


# --------------------------------------------------------------------------- hosts


def hosts_gpus(hosts: Sequence[str] = ()) -> dict[str, Any]:
    """`hosts gpus [HOST...] --format=json`: who holds each GPU, and who waits for one."""
    for host in hosts:
        if not host or host.startswith("-"):
            raise UsageError(f"[{host}] is not a host name (`local`, or one of `vcli hosts list`).")
    out, _ = run_cli(["hosts", "gpus", *hosts, "--format=json"])
    return {"gpus": json.loads(out) if out.strip() else []}

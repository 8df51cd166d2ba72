"""The `vcli` command line: gcloud's `ai custom-jobs` / `ai hp-tuning-jobs` surface, run locally.

Each command parses its flags, calls the controllers, and renders the result. This module is
the only one that exits the process. Errors are one line, `ERROR: (vcli.GROUP.COMMAND) ...`, on
stderr with a distinct exit code (see `vcli.errors.ExitCode`); `--verbosity=debug` adds the
traceback. Status messages go to stderr, data to stdout.

Start-up matters (`vcli --help` runs in shells and completions): vcli's modules are imported
inside the commands, and nothing here imports TensorFlow, Docker, paramiko or skopt.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any, Callable, List, Optional

import typer

from vcli import __version__
from vcli.cli.support import command, err
from vcli.cli.support import state as _state

app = typer.Typer(
    name="vcli",
    help="Vertex AI training (custom-jobs, hp-tuning-jobs) on the machines you already have.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)
custom_jobs = typer.Typer(help="Create and manage custom training jobs.", no_args_is_help=True)
hp_tuning_jobs = typer.Typer(help="Create and manage hyperparameter tuning jobs.", no_args_is_help=True)
config_app = typer.Typer(help="View and set vcli properties (like `gcloud config`).", no_args_is_help=True)
app.add_typer(custom_jobs, name="custom-jobs")
app.add_typer(hp_tuning_jobs, name="hp-tuning-jobs")
app.add_typer(config_app, name="config")

from vcli.cli.hosts import hosts_app  # noqa: E402  (imports only typer)

app.add_typer(hosts_app, name="hosts")

def _version(value: bool) -> None:
    if value:
        print(f"vcli {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    verbosity: str = typer.Option(
        "warning", "--verbosity", help="debug|info|warning|error|critical|none; debug shows tracebacks."
    ),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    _state["verbosity"] = verbosity




def _interrupt_on_signals() -> None:
    """SIGTERM/SIGHUP to a foreground vcli act like Ctrl-C: cancel, clean up, exit."""

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, handler)


# =========================================================================== helpers


def _store() -> Any:
    from vcli.store import Store

    return Store()


def _emit(resources: Any, fmt: Optional[str], *, is_list: bool, default: str = "yaml") -> None:
    from vcli.formats import parse_format, render

    text = render(resources, parse_format(fmt or default), is_list=is_list)
    sys.stdout.write(text)
    sys.stdout.flush()


def _list_output(resources: list[dict[str, Any]], fmt: Optional[str], filter_: Optional[str], sort_by: Optional[str], limit: Optional[int]) -> None:
    from vcli.errors import UsageError
    from vcli.formats import apply_filter, apply_sort

    resources = apply_sort(apply_filter(resources, filter_), sort_by)
    if limit is not None:
        if limit < 1:
            raise UsageError("argument --limit: Value must be greater than or equal to 1; received: " + str(limit))
        resources = resources[:limit]
    if not resources:
        err("Listed 0 items.")
        if (fmt or "").startswith("json"):
            print("[]")
        return
    _emit(resources, fmt, is_list=True)


def _check_format(fmt: Optional[str]) -> None:
    """Reject a bad --format before anything runs (not after a whole job)."""
    if fmt:
        from vcli.formats import parse_format

        parse_format(fmt)


def _proc_start_time(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        return data[data.rfind(b")") + 2:].split()[19].decode()
    except (OSError, IndexError):
        return None


def controller_alive(row: Any) -> bool:
    """Is the vcli process that runs this job still there (same pid, same start time)?"""
    if not row.controller_pid:
        return False
    return _proc_start_time(row.controller_pid) == row.controller_start


def _mark_controller(store: Any, job_id: str) -> None:
    store.update_job(job_id, controller_pid=os.getpid(), controller_start=_proc_start_time(os.getpid()))


class LogPrinter:
    """Prints new replica log lines as `[task] line` (colour on a terminal)."""

    COLOURS = ("cyan", "magenta", "green", "yellow", "blue", "red")

    def __init__(self, stream: Any, prefix_trial: bool = False) -> None:
        from vcli.logs import Follower

        self.follower = Follower([])
        self.stream = stream
        self.tty = stream.isatty()
        self.prefix_trial = prefix_trial
        self._colour: dict[str, str] = {}

    def add(self, task: str, path: str) -> None:
        self.follower.add(task, path)

    def flush(self) -> None:
        for rec in self.follower.poll():
            if rec.stream == "vcli":
                line = f"[{rec.task_name}] vcli: {rec.message}"
            else:
                line = f"[{rec.task_name}] {rec.message}"
            if self.tty:
                colour = self._colour.setdefault(rec.task_name, self.COLOURS[len(self._colour) % len(self.COLOURS)])
                codes = {"cyan": 36, "magenta": 35, "green": 32, "yellow": 33, "blue": 34, "red": 31}
                line = f"\033[{codes[colour]}m[{rec.task_name}]\033[0m {line.split('] ', 1)[1]}"
            self.stream.write(line + "\n")
        self.stream.flush()


# =========================================================================== custom-jobs


def _build_custom_job_spec(
    worker_pool_spec: Optional[List[str]],
    config: Optional[str],
    args: Optional[List[str]],
    command_: Optional[List[str]],
    python_package_uris: Optional[str],
    service_account: Optional[str],
    network: Optional[str],
) -> Any:
    from dataclasses import replace

    from vcli import codec as cfg
    from vcli.errors import UsageError
    from vcli.spec import CustomJobSpec

    if not worker_pool_spec and not config:
        raise UsageError("At least one of (--config | --worker-pool-spec) must be specified.")
    spec = cfg.load_custom_job_spec(config) if config else CustomJobSpec(worker_pool_specs=())
    if worker_pool_spec:
        pools = cfg.worker_pools_from_flags([cfg.parse_worker_pool_spec(v) for v in worker_pool_spec])
        spec = replace(spec, worker_pool_specs=pools)
    if not spec.worker_pool_specs:
        raise UsageError("argument --config: the file defines no workerPoolSpecs; add them or give --worker-pool-spec.")
    joined_args = None if args is None else [a for v in args for a in cfg.split_arg_list(v)]
    joined_cmd = None if command_ is None else [a for v in command_ for a in cfg.split_arg_list(v)]
    uris = cfg.split_arg_list(python_package_uris) if python_package_uris else None
    spec = cfg.apply_args_and_command(spec, args=joined_args, command=joined_cmd, python_package_uris=uris)
    if service_account:
        spec = replace(spec, service_account=service_account)
    if network:
        spec = replace(spec, network=network)
    return spec


_WPS_HELP = (
    "A worker pool, repeatable (pool i = workerpool{i}): machine-type=...,replica-count=N,"
    "[accelerator-type=...,accelerator-count=N],(container-image-uri=...|executor-image-uri=...,python-module=...|"
    "local-package-path=...,python-module=...|script=...,[requirements=a;b],[extra-packages=...],[extra-dirs=...],"
    "[output-image-uri=...]). An empty value is a placeholder pool."
)


@custom_jobs.command("create")
@command("custom-jobs.create")
def cj_create(
    display_name: Optional[str] = typer.Option(None, "--display-name", help="Display name of the custom job to create."),
    worker_pool_spec: Optional[List[str]] = typer.Option(None, "--worker-pool-spec", help=_WPS_HELP),
    config: Optional[str] = typer.Option(None, "--config", help="CustomJobSpec YAML or JSON (`-` = stdin); flags override it."),
    args: Optional[List[str]] = typer.Option(None, "--args", help="Comma-separated args for every replica."),
    command_: Optional[List[str]] = typer.Option(None, "--command", help="Comma-separated command for container pools."),
    python_package_uris: Optional[str] = typer.Option(None, "--python-package-uris", help="Recorded for gcloud compatibility."),
    labels: Optional[str] = typer.Option(None, "--labels", help="KEY=VALUE,..."),
    service_account: Optional[str] = typer.Option(None, "--service-account", help="Recorded in jobSpec."),
    network: Optional[str] = typer.Option(None, "--network", help="Recorded in jobSpec."),
    region: Optional[str] = typer.Option(None, "--region", help="Accepted for gcloud compatibility; jobs run locally."),
    executor: Optional[str] = typer.Option(None, "--executor", help="local (default) | docker | ssh; default from `vcli config set executor`."),
    hosts: Optional[str] = typer.Option(None, "--hosts", help="Comma-separated inventory hosts to place replicas on (ssh executor)."),
    shm_size: Optional[str] = typer.Option(None, "--shm-size", help="vcli: /dev/shm size for containers, e.g. 2g (NCCL)."),
    validate_only: bool = typer.Option(False, "--validate-only", help="Check and print the resolved job; launch nothing."),
    async_: bool = typer.Option(False, "--async", help="Return once the job is submitted; it runs in a background vcli process."),
    fmt: Optional[str] = typer.Option(None, "--format", help="json|yaml|value(...)|table(...)|csv(...)|none"),
) -> None:
    """Create a custom job and run it in the foreground, streaming its replicas' logs.

    With --async, a detached vcli process runs the job (as gcloud's create returns at once);
    follow it with stream-logs, stop it with cancel."""
    from vcli import codec as cfg
    from vcli.errors import ExitCode, UsageError
    from vcli.control.jobs import JobRun, plan_job, run_job
    from vcli.spec import JobState
    from vcli.store import Store, new_id, resource_name

    _check_format(fmt)
    if not display_name:
        raise UsageError("argument --display-name: Must be specified.")
    spec = _build_custom_job_spec(worker_pool_spec, config, args, command_, python_package_uris, service_account, network)
    label_map = cfg.parse_labels(labels)
    from vcli.control.wiring import executor_kind, open_execution

    execution = open_execution(executor_kind(executor), hosts)
    ex, ex_name = execution.executor, execution.kind.value
    store = Store()
    job_id = new_id()
    job_dir = store.home / "jobs" / job_id
    plan = plan_job(spec, job_id=job_id, job_dir=job_dir, executor=ex, shm_size=shm_size, placer=execution.placer)
    record = {
        "jobSpec": cfg.custom_job_spec_to_dict(spec),
        "labels": label_map,
        "executor": ex_name,
        "outputDirectory": plan.base_output_directory,
        "hosts": hosts,
        "shmSize": shm_size,
    }
    ex.check(plan.launches)
    if validate_only:
        resource = {"displayName": display_name, "jobSpec": record["jobSpec"], "labels": label_map or None,
                    "replicas": [{"taskName": l.task_name, "command": list(l.argv) or None, "imageUri": l.image_uri} for l in plan.launches]}
        resource = {k: v for k, v in resource.items() if v is not None}
        err("The job is valid; nothing was launched (--validate-only).")
        _emit(resource, fmt, is_list=False)
        return
    store.create_job(kind="customJob", display_name=display_name, record=record, state="JOB_STATE_QUEUED", job_id=job_id)
    name = resource_name("customJob", job_id)
    if async_:
        _spawn_runner(store, job_id, ["custom-jobs", "run-job", job_id])
        err(f"CustomJob [{name}] is submitted successfully.\n\nYour job is still active. You may view the status of "
            f"your job with the command\n\n  $ vcli custom-jobs describe {job_id}\n\nor continue streaming the logs "
            f"with the command\n\n  $ vcli custom-jobs stream-logs {job_id}")
        if fmt:
            from vcli.resources import custom_job_resource

            _emit(custom_job_resource(store, store.get_job(job_id)), fmt, is_list=False)
        return
    _mark_controller(store, job_id)
    err(f"CustomJob [{name}] is submitted successfully.")
    err(f"Running {len(plan.launches)} replica(s) with the {ex_name} executor; Ctrl-C cancels the job.")
    err(f"  describe:    vcli custom-jobs describe {job_id}")
    err(f"  stream logs: vcli custom-jobs stream-logs {job_id}")
    _interrupt_on_signals()
    out = sys.stderr if fmt else sys.stdout
    printer = LogPrinter(out)
    for l in plan.launches:
        printer.add(l.task_name, l.log_path)
    timeout = spec.scheduling.timeout_seconds if spec.scheduling else None
    run = JobRun(store=store, executor=ex, plan=plan, timeout_seconds=timeout, on_progress=err)
    started = time.monotonic()
    try:
        state = run_job(run, on_tick=printer.flush)
    except KeyboardInterrupt:
        printer.flush()
        err(f"CustomJob [{name}] was cancelled (interrupted).")
        raise typer.Exit(int(ExitCode.INTERRUPTED)) from None
    printer.flush()
    final = store.get_job(job_id)
    took = time.monotonic() - started
    if state == JobState.JOB_STATE_SUCCEEDED:
        err(f"CustomJob [{name}] finished: {state.value} in {took:.1f}s.")
    else:
        msg = (final.error or {}).get("message", "")
        err(f"CustomJob [{name}] finished: {state.value} in {took:.1f}s." + (f" {msg}" if msg else ""))
    if fmt:
        from vcli.resources import custom_job_resource

        _emit(custom_job_resource(store, final), fmt, is_list=False)
    from vcli.errors import VcliError

    if isinstance(run.startup_error, VcliError):
        raise typer.Exit(int(run.startup_error.exit_code))
    raise typer.Exit(_exit_for_state(state))


def _spawn_runner(store: Any, job_id: str, argv: list[str]) -> None:
    """Start a detached vcli process that runs a stored job (for --async)."""
    import subprocess

    log = store.job_dir(job_id) / "controller.log"
    with open(log, "ab", buffering=0) as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "vcli", *argv],
            stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True, close_fds=True,
        )
    # The runner records itself as the controller; until then the spawner stands in, so a
    # `cancel` in between waits for the runner instead of finding no controller.
    store.update_job(job_id, controller_pid=proc.pid, controller_start=_proc_start_time(proc.pid))


@custom_jobs.command("run-job", hidden=True)
@command("custom-jobs.run-job")
def cj_run_job(job: str = typer.Argument(...)) -> None:
    """Run a stored custom job to its end (the background half of `create --async`)."""
    from vcli import codec as cfg
    from vcli.control.jobs import JobRun, plan_job, run_job

    store = _store()
    row = _get_row(store, job, "customJob")
    _mark_controller(store, row.id)
    if store.cancel_requested(row.id):
        store.set_state(row.id, "JOB_STATE_CANCELLED", error={"code": 1, "message": "CANCELED"})
        return
    rec = row.record
    spec = cfg.custom_job_spec_from_stored(rec["jobSpec"])
    from vcli.control.wiring import executor_kind, open_execution

    execution = open_execution(executor_kind(rec.get("executor") or "local"), rec.get("hosts"))
    ex = execution.executor
    plan = plan_job(spec, job_id=row.id, job_dir=store.home / "jobs" / row.id, executor=ex,
                    shm_size=rec.get("shmSize"), placer=execution.placer, base_output_directory=rec.get("outputDirectory"))
    _interrupt_on_signals()
    timeout = spec.scheduling.timeout_seconds if spec.scheduling else None
    run = JobRun(store=store, executor=ex, plan=plan, timeout_seconds=timeout, on_progress=err)
    try:
        state = run_job(run)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    err(f"CustomJob [{row.name}] finished: {state.value}.")
    raise typer.Exit(_exit_for_state(state))


def _exit_for_state(state: Any) -> int:
    from vcli.errors import ExitCode
    from vcli.spec import JobState

    return int(
        {
            JobState.JOB_STATE_SUCCEEDED: ExitCode.OK,
            JobState.JOB_STATE_CANCELLED: ExitCode.CANCELLED,
        }.get(state, ExitCode.JOB_FAILED)
    )


@custom_jobs.command("print-env")
@command("custom-jobs.print-env")
def cj_print_env(
    worker_pool_spec: Optional[List[str]] = typer.Option(None, "--worker-pool-spec", help=_WPS_HELP),
    config: Optional[str] = typer.Option(None, "--config", help="CustomJobSpec YAML or JSON (`-` = stdin)."),
    args: Optional[List[str]] = typer.Option(None, "--args"),
    command_: Optional[List[str]] = typer.Option(None, "--command"),
    display_name: Optional[str] = typer.Option(None, "--display-name", help="Ignored; accepted so a create line can be reused."),
    trial_id: Optional[str] = typer.Option(None, "--trial-id", help="Show the environment of this hp-tuning trial."),
    executor: Optional[str] = typer.Option(None, "--executor"),
    fmt: Optional[str] = typer.Option(None, "--format", help="yaml (default) | json | value(...)"),
) -> None:
    """Show what every replica of a job would get: address, command and Vertex environment."""
    import json

    from vcli.errors import VcliError

    from vcli.control.jobs import plan_job
    from vcli.store import Store

    spec = _build_custom_job_spec(worker_pool_spec, config, args, command_, None, None, None)
    from vcli.control.wiring import executor_kind, open_execution

    execution = open_execution(executor_kind(executor))
    ex = execution.executor
    store = Store()
    plan = plan_job(spec, job_id="JOB_ID", job_dir=store.home / "jobs" / "JOB_ID", executor=ex, trial_id=trial_id,
                    placer=execution.placer)
    out = []
    for l in plan.launches:
        env = dict(l.env)
        for key in ("CLUSTER_SPEC", "TF_CONFIG"):
            if key in env:
                env[key] = json.loads(env[key])
        try:
            argv = ex.command_for(l)
        except VcliError:  # an image-only pool on a process executor: show what is known
            argv = list(l.argv)
        out.append({"taskName": l.task_name, "address": env.get("CLUSTER_SPEC", {}).get("cluster", {}).get(f"workerpool{l.replica.pool_index}", [""])[l.replica.index], "command": argv, "env": env})
    _emit(out, fmt, is_list=True)


@custom_jobs.command("list")
@command("custom-jobs.list")
def cj_list(
    fmt: Optional[str] = typer.Option(None, "--format"),
    filter_: Optional[str] = typer.Option(None, "--filter", help="e.g. state=JOB_STATE_RUNNING, displayName~^exp"),
    sort_by: Optional[str] = typer.Option(None, "--sort-by", help="e.g. ~createTime"),
    limit: Optional[int] = typer.Option(None, "--limit"),
    region: Optional[str] = typer.Option(None, "--region", help="Accepted for gcloud compatibility."),
    include_trials: bool = typer.Option(False, "--include-trial-jobs", help="Also list the custom jobs of tuning trials."),
) -> None:
    """List custom jobs (YAML documents by default, as gcloud)."""
    from vcli.resources import custom_job_resource

    store = _store()
    rows = store.list_jobs("customJob", include_trial_jobs=include_trials)
    _list_output([custom_job_resource(store, r) for r in rows], fmt, filter_, sort_by, limit)


def _get_row(store: Any, ref: str, kind: str) -> Any:
    from vcli.errors import NotFoundError
    from vcli.store import parse_job_ref

    job_id = parse_job_ref(ref)
    row = store.get_job(job_id)
    if row is None or row.kind != kind:
        what = "CustomJob" if kind == "customJob" else "HyperparameterTuningJob"
        raise NotFoundError(f"{what} [{ref}] was not found. List jobs with `vcli {'custom-jobs' if kind == 'customJob' else 'hp-tuning-jobs'} list`.")
    return row


@custom_jobs.command("describe")
@command("custom-jobs.describe")
def cj_describe(
    job: str = typer.Argument(..., help="ID or resource name of the custom job."),
    fmt: Optional[str] = typer.Option(None, "--format"),
    region: Optional[str] = typer.Option(None, "--region"),
) -> None:
    """Show a custom job as the Vertex REST resource."""
    from vcli.resources import custom_job_resource

    store = _store()
    _emit(custom_job_resource(store, _get_row(store, job, "customJob")), fmt, is_list=False)


def _cancel(store: Any, row: Any, what: str, wait: bool) -> None:
    from vcli.executors import ReplicaHandle, get_executor

    if row.state in ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED"):
        err(f"{what} [{row.name}] has already ended ({row.state}); nothing to cancel.")
        return
    store.request_cancel(row.id)
    err(f"Request to cancel {what} [{row.name}] has been sent.")
    if controller_alive(row):
        if not wait:
            return
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            cur = store.get_job(row.id)
            if cur.state in ("JOB_STATE_CANCELLED", "JOB_STATE_FAILED", "JOB_STATE_SUCCEEDED"):
                err(f"{what} [{row.name}] is now {cur.state}.")
                return
            time.sleep(0.1)
        err(f"{what} [{row.name}] is still stopping; check with describe.")
        return
    # The controlling vcli process is gone: stop whatever it left, from here.
    jobs = [row] + store.child_jobs(row.id)
    for j in jobs:
        handles = [ReplicaHandle.from_json(r.handle) for r in store.replicas(j.id) if r.handle]
        by_executor: dict[str, list[Any]] = {}
        for h in handles:
            by_executor.setdefault(h.executor, []).append(h)
        for name, hs in by_executor.items():
            try:
                ex = get_executor(name)
                ex.stop(hs, grace_seconds=3.0)
                ex.release(hs)
            except Exception as e:  # noqa: BLE001 - report and go on with the others
                err(f"WARNING: could not stop replicas of job {j.id} ({name}): {e}")
        if j.state not in ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED"):
            store.set_state(j.id, "JOB_STATE_CANCELLED", error={"code": 1, "message": "CANCELED"})
    err(f"{what} [{row.name}] is now JOB_STATE_CANCELLED.")


@custom_jobs.command("cancel")
@command("custom-jobs.cancel")
def cj_cancel(
    job: str = typer.Argument(..., help="ID or resource name of the custom job."),
    no_wait: bool = typer.Option(False, "--async", help="Return once the request is recorded."),
    region: Optional[str] = typer.Option(None, "--region"),
) -> None:
    """Cancel a running custom job (from any terminal); a finished job is left as it is."""
    store = _store()
    _cancel(store, _get_row(store, job, "customJob"), "CustomJob", wait=not no_wait)


def _stream_logs(store: Any, job_ids: Callable[[], list[tuple[str, str]]], parent_id: str, task_name: Optional[str]) -> None:
    from datetime import datetime

    from vcli.logs import Follower

    follower = Follower([])

    def done() -> bool:
        row = store.get_job(parent_id)
        return row is None or row.state in ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED")

    while True:
        finished = done()
        for prefix, jid in job_ids():
            for r in store.replicas(jid):
                if task_name and r.task_name != task_name:
                    continue
                follower.add(f"{prefix}{r.task_name}", r.log_path)
        for rec in follower.poll():
            ts = datetime.fromtimestamp(rec.timestamp).astimezone().strftime("%Y-%m-%d %H:%M:%S %z")
            sys.stdout.write(f"{rec.severity}\t{ts}\t{rec.task_name}\t{rec.message}\n")
        sys.stdout.flush()
        if finished:
            return
        time.sleep(0.2)


@custom_jobs.command("stream-logs")
@command("custom-jobs.stream-logs")
def cj_stream_logs(
    job: str = typer.Argument(..., help="ID or resource name of the custom job."),
    task_name: Optional[str] = typer.Option(None, "--task-name", help="Only this replica, e.g. workerpool0-0."),
    polling_interval: int = typer.Option(1, "--polling-interval", help="Accepted for gcloud compatibility; logs are followed live."),
    region: Optional[str] = typer.Option(None, "--region"),
) -> None:
    """Print a job's logs (severity, time, task, message) and follow them until the job ends."""
    store = _store()
    row = _get_row(store, job, "customJob")
    _stream_logs(store, lambda: [("", row.id)], row.id, task_name)


# =========================================================================== hp-tuning-jobs


@hp_tuning_jobs.command("create")
@command("hp-tuning-jobs.create")
def hp_create(
    display_name: Optional[str] = typer.Option(None, "--display-name", help="Display name of the study (overrides the file's displayName)."),
    config: Optional[str] = typer.Option(None, "--config", help="HyperparameterTuningJob YAML or JSON (`-` = stdin)."),
    max_trial_count: Optional[int] = typer.Option(None, "--max-trial-count", help="Overrides maxTrialCount (default 1)."),
    parallel_trial_count: Optional[int] = typer.Option(None, "--parallel-trial-count", help="Overrides parallelTrialCount (default 1)."),
    max_failed_trial_count: Optional[int] = typer.Option(None, "--max-failed-trial-count", help="vcli: overrides maxFailedTrialCount (0 = max(3, 10% of trials))."),
    algorithm: Optional[str] = typer.Option(None, "--algorithm", help="algorithm-unspecified (Bayesian) | grid-search | random-search"),
    parameter_spec: Optional[List[str]] = typer.Option(None, "--parameter-spec", help="vcli: parameter-id=ID,type=double|integer|categorical|discrete,min=,max=,values=a;b,scale=linear|log|reverse-log[,parent=ID,parent-values=a;b]"),
    metric: Optional[List[str]] = typer.Option(None, "--metric", help="vcli: metric-id=ID,goal=maximize|minimize"),
    worker_pool_spec: Optional[List[str]] = typer.Option(None, "--worker-pool-spec", help="vcli: the trial job's pools, as for custom-jobs create."),
    args: Optional[List[str]] = typer.Option(None, "--args", help="vcli: static args for every trial replica (before the hyperparameters)."),
    command_: Optional[List[str]] = typer.Option(None, "--command", help="vcli: command for the trial job's container pools."),
    measurement_selection: Optional[str] = typer.Option(None, "--measurement-selection", help="vcli: last | best"),
    seed: Optional[int] = typer.Option(None, "--seed", help="vcli: makes the suggestions reproducible."),
    study_timeout: Optional[str] = typer.Option(None, "--study-timeout", help="vcli: wall-clock budget, e.g. 30m; running trials are stopped when it ends."),
    goal_value: Optional[float] = typer.Option(None, "--goal-value", help="vcli: end the study once a trial's metric reaches this value."),
    bayesian_backend: str = typer.Option("gp", "--bayesian-backend", help="vcli: gp (vcli's GP) | skopt (scikit-optimize)."),
    labels: Optional[str] = typer.Option(None, "--labels", help="KEY=VALUE,..."),
    region: Optional[str] = typer.Option(None, "--region", help="Accepted for gcloud compatibility."),
    executor: Optional[str] = typer.Option(None, "--executor", help="local (default) | docker | ssh."),
    hosts: Optional[str] = typer.Option(None, "--hosts", help="Comma-separated inventory hosts for the trials (ssh)."),
    shm_size: Optional[str] = typer.Option(None, "--shm-size", help="vcli: /dev/shm size for containers."),
    validate_only: bool = typer.Option(False, "--validate-only", help="Check and print the resolved study; launch nothing."),
    fmt: Optional[str] = typer.Option(None, "--format", help="json|yaml|value(...)|table(...)|csv(...)|none"),
) -> None:
    """Run a hyperparameter tuning study in the foreground with a live table of trials."""
    from dataclasses import replace

    from vcli import codec as cfg
    from vcli.errors import ExitCode, InvalidValueError, UsageError
    from vcli.resources import hp_tuning_job_resource
    from vcli.spec import MeasurementSelectionType
    from vcli.store import Store, new_id

    _check_format(fmt)
    doc, source = cfg.hp_tuning_document(
        config=config, parameter_specs=parameter_spec, metrics=metric, worker_pool_specs=worker_pool_spec, algorithm=algorithm
    )
    spec, file_name, file_labels = cfg.hp_tuning_job_from_document(doc, source)
    name_ = display_name or file_name
    if not name_:
        raise UsageError("argument --display-name: Must be specified.")
    for flag, value in (("--max-trial-count", max_trial_count), ("--parallel-trial-count", parallel_trial_count)):
        if value is not None and value < 1:
            raise InvalidValueError(flag, f"Value must be greater than or equal to 1; received: {value}.")
    if max_failed_trial_count is not None and max_failed_trial_count < 0:
        raise InvalidValueError("--max-failed-trial-count", f"Value must not be negative; received: {max_failed_trial_count}.")
    if args is not None or command_ is not None:
        joined = None if args is None else [a for v in args for a in cfg.split_arg_list(v)]
        cmd = None if command_ is None else [a for v in command_ for a in cfg.split_arg_list(v)]
        spec = replace(spec, trial_job_spec=cfg.apply_args_and_command(spec.trial_job_spec, args=joined, command=cmd))
    if measurement_selection is not None:
        choices = {"last": MeasurementSelectionType.LAST_MEASUREMENT, "best": MeasurementSelectionType.BEST_MEASUREMENT}
        if measurement_selection not in choices:
            raise UsageError(f"argument --measurement-selection: Invalid choice: '{measurement_selection}'. Valid choices are [best, last].")
        spec = replace(spec, study_spec=replace(spec.study_spec, measurement_selection_type=choices[measurement_selection]))
    spec = replace(
        spec,
        max_trial_count=max_trial_count if max_trial_count is not None else spec.max_trial_count,
        parallel_trial_count=parallel_trial_count if parallel_trial_count is not None else spec.parallel_trial_count,
        max_failed_trial_count=max_failed_trial_count if max_failed_trial_count is not None else spec.max_failed_trial_count,
        study_timeout_seconds=cfg.parse_duration(study_timeout, "--study-timeout") if study_timeout else None,
        goal_value=goal_value,
    )
    if spec.parallel_trial_count > spec.max_trial_count:
        err(f"WARNING: parallelTrialCount ({spec.parallel_trial_count}) is greater than maxTrialCount "
            f"({spec.max_trial_count}); running at most {spec.max_trial_count} trials at once.")
        spec = replace(spec, parallel_trial_count=spec.max_trial_count)
    if bayesian_backend not in ("gp", "skopt"):
        raise UsageError(f"argument --bayesian-backend: Invalid choice: '{bayesian_backend}'. Valid choices are [gp, skopt].")
    label_map = {**file_labels, **cfg.parse_labels(labels)}
    if seed is None:
        import secrets

        seed = secrets.randbelow(2**31)
    from vcli.control.wiring import executor_kind, open_execution

    execution = open_execution(executor_kind(executor), hosts)
    ex, ex_name = execution.executor, execution.kind.value
    store = Store()
    study_id = new_id()
    record = {
        "studySpec": cfg.study_spec_to_dict(spec.study_spec),
        "trialJobSpec": cfg.custom_job_spec_to_dict(spec.trial_job_spec),
        "maxTrialCount": spec.max_trial_count,
        "parallelTrialCount": spec.parallel_trial_count,
        "maxFailedTrialCount": spec.max_failed_trial_count,
        "labels": label_map,
        "seed": seed,
        "executor": ex_name,
        "bayesianBackend": bayesian_backend,
        "studyTimeout": f"{spec.study_timeout_seconds:g}s" if spec.study_timeout_seconds else None,
        "goalValue": goal_value,
        "outputDirectory": spec.trial_job_spec.base_output_directory or str(store.home / "jobs" / study_id / "output"),
    }
    from vcli.suggesters import get_suggester

    try:
        suggester = get_suggester(spec.study_spec, seed=seed, bayesian_backend=bayesian_backend)
    except ValueError as e:
        raise InvalidValueError("--config", str(e)) from None
    except ImportError as e:
        raise UsageError(f"the {spec.study_spec.algorithm.value} suggester needs an optional package ({e.name}): pip install 'vcli[tune]'") from None
    if validate_only:
        from vcli.control.jobs import plan_job
        plan = plan_job(spec.trial_job_spec, job_id="TRIAL_JOB_ID", job_dir=store.home / "jobs" / "validate-only",
                        executor=ex, trial_id="1", placer=execution.placer)
        ex.check(plan.launches)
        err("The study is valid; nothing was launched (--validate-only).")
        _emit({"displayName": name_, **{k: v for k, v in record.items() if v is not None}}, fmt, is_list=False)
        return
    store.create_job(kind="hyperparameterTuningJob", display_name=name_, record=record, state="JOB_STATE_QUEUED", job_id=study_id)
    _mark_controller(store, study_id)
    err(f"Hyperparameter tuning job [{study_id}] submitted successfully.")
    err(f"  {spec.max_trial_count} trial(s), up to {spec.parallel_trial_count} at once, {spec.study_spec.algorithm.value}, "
        f"seed {seed}, {ex_name} executor; Ctrl-C cancels the study.")
    err(f"  describe: vcli hp-tuning-jobs describe {study_id}")
    _interrupt_on_signals()
    from vcli.control.study import StudyRun
    from vcli.view import make_study_view

    out = sys.stderr if fmt else sys.stdout
    metric_spec = spec.study_spec.metrics[0]
    from vcli.codec import iter_parameters

    view = make_study_view(out, name_, metric_spec.metric_id, metric_spec.goal, iter_parameters(spec.study_spec.parameters), spec.max_trial_count)
    run = StudyRun(
        store=store, executor=ex, spec=spec, study_id=study_id, display_name=name_, suggester=suggester,
        on_event=view.event, on_progress=view.message, placer=execution.placer, shm_size=shm_size,
    )
    started = time.monotonic()
    try:
        state = run.run()
    except KeyboardInterrupt:
        view.close("JOB_STATE_CANCELLED")
        err(f"Hyperparameter tuning job [{study_id}] was cancelled (interrupted); every trial was stopped.")
        raise typer.Exit(int(ExitCode.INTERRUPTED)) from None
    view.close(state.value)
    took = time.monotonic() - started
    best = run.best_trial()
    msg = (run.error or {}).get("message", "")
    err(f"Hyperparameter tuning job [{study_id}] finished: {state.value} in {took:.1f}s." + (f" {msg}" if msg and state.value != "JOB_STATE_SUCCEEDED" else ""))
    if best is not None and best.final_measurement is not None:
        from vcli.codec.trial import trial_args

        value = best.final_measurement.metrics[metric_spec.metric_id]
        err(f"Best trial: {best.id} {metric_spec.metric_id}={value:.6g} (step {best.final_measurement.step_count}) "
            f"with {' '.join(trial_args(run.param_specs, best.parameters))}")
    if fmt:
        _emit(hp_tuning_job_resource(store, store.get_job(study_id)), fmt, is_list=False)
    raise typer.Exit(_exit_for_state(state))


@hp_tuning_jobs.command("list")
@command("hp-tuning-jobs.list")
def hp_list(
    fmt: Optional[str] = typer.Option(None, "--format"),
    filter_: Optional[str] = typer.Option(None, "--filter"),
    sort_by: Optional[str] = typer.Option(None, "--sort-by"),
    limit: Optional[int] = typer.Option(None, "--limit"),
    region: Optional[str] = typer.Option(None, "--region"),
) -> None:
    """List hyperparameter tuning jobs."""
    from vcli.resources import hp_tuning_job_resource

    store = _store()
    rows = store.list_jobs("hyperparameterTuningJob")
    _list_output([hp_tuning_job_resource(store, r) for r in rows], fmt, filter_, sort_by, limit)


@hp_tuning_jobs.command("describe")
@command("hp-tuning-jobs.describe")
def hp_describe(
    job: str = typer.Argument(..., help="ID or resource name of the tuning job."),
    fmt: Optional[str] = typer.Option(None, "--format"),
    region: Optional[str] = typer.Option(None, "--region"),
) -> None:
    """Show a study: its spec, every trial (parameters, measurements, state) and the best trial."""
    from vcli.resources import hp_tuning_job_resource

    store = _store()
    _emit(hp_tuning_job_resource(store, _get_row(store, job, "hyperparameterTuningJob")), fmt, is_list=False)


@hp_tuning_jobs.command("cancel")
@command("hp-tuning-jobs.cancel")
def hp_cancel(
    job: str = typer.Argument(..., help="ID or resource name of the tuning job."),
    no_wait: bool = typer.Option(False, "--async", help="Return once the request is recorded."),
    region: Optional[str] = typer.Option(None, "--region"),
) -> None:
    """Cancel a running study from any terminal: every trial is stopped."""
    store = _store()
    _cancel(store, _get_row(store, job, "hyperparameterTuningJob"), "hyperparameter tuning job", wait=not no_wait)


@hp_tuning_jobs.command("stream-logs")
@command("hp-tuning-jobs.stream-logs")
def hp_stream_logs(
    job: str = typer.Argument(..., help="ID or resource name of the tuning job."),
    task_name: Optional[str] = typer.Option(None, "--task-name", help="Only this replica of each trial, e.g. workerpool0-0."),
    polling_interval: int = typer.Option(1, "--polling-interval", help="Accepted for gcloud compatibility."),
    region: Optional[str] = typer.Option(None, "--region"),
) -> None:
    """Print the logs of every trial (task names `trial-N/workerpool0-0`) until the study ends."""
    store = _store()
    row = _get_row(store, job, "hyperparameterTuningJob")
    _stream_logs(store, lambda: [(f"trial-{c.trial_id}/", c.id) for c in store.child_jobs(row.id)], row.id, task_name)


# =========================================================================== config


@config_app.command("set")
@command("config.set")
def config_set(prop: str = typer.Argument(...), value: str = typer.Argument(...)) -> None:
    """Set a property (executor, hosts, python)."""
    from vcli import properties

    properties.set_(prop, value)
    err(f"Updated property [{prop}].")


@config_app.command("get")
@command("config.get")
def config_get(prop: str = typer.Argument(...)) -> None:
    """Print a property's value."""
    from vcli import properties

    value = properties.get(prop, check=True)
    if value is None:
        err("(unset)")
    else:
        print(value)


@config_app.command("unset")
@command("config.unset")
def config_unset(prop: str = typer.Argument(...)) -> None:
    from vcli import properties

    properties.unset(prop)
    err(f"Unset property [{prop}].")


@config_app.command("list")
@command("config.list")
def config_list() -> None:
    """Print every property that is set."""
    from vcli import properties

    for k, v in sorted(properties.load().items()):
        print(f"{k} = {v}")


def run() -> None:
    app()


if __name__ == "__main__":
    run()

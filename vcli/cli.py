"""The `vcli` command line: gcloud's `ai custom-jobs` / `ai hp-tuning-jobs` surface, run locally.

Each command parses its flags, calls the controllers, and renders the result. This module is
the only one that exits the process. Errors are one line, `ERROR: (vcli.GROUP.COMMAND) ...`, on
stderr with a distinct exit code (see `vcli.errors.ExitCode`); `--verbosity=debug` adds the
traceback. Status messages go to stderr, data to stdout.

Start-up matters (`vcli --help` runs in shells and completions): vcli's modules are imported
inside the commands, and nothing here imports TensorFlow, Docker, paramiko or skopt.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
import time
from typing import Any, Callable, List, Optional, TypeVar

import typer

from vcli import __version__

F = TypeVar("F", bound=Callable[..., Any])

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

_state: dict[str, Any] = {"verbosity": "warning"}


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


def err(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def command(path: str) -> Callable[[F], F]:
    """Turn VcliErrors into one gcloud-style line and an exit code; Ctrl-C into 130."""

    def deco(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            from vcli.errors import ExitCode, VcliError

            try:
                return fn(*args, **kwargs)
            except VcliError as e:
                if _state["verbosity"] == "debug":
                    import traceback

                    traceback.print_exc()
                err(f"ERROR: (vcli.{path}) {e}")
                raise typer.Exit(int(e.exit_code)) from None
            except KeyboardInterrupt:
                err(f"ERROR: (vcli.{path}) Interrupted.")
                raise typer.Exit(int(ExitCode.INTERRUPTED)) from None

        return wrapper  # type: ignore[return-value]

    return deco


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


def _executor_name(flag: Optional[str]) -> str:
    from vcli import properties

    return flag or os.environ.get("VCLI_EXECUTOR") or properties.get("executor") or "local"


def _make_executor(name: str, hosts: Optional[str] = None) -> Any:
    from vcli.executors import get_executor

    if name == "ssh" or hosts:
        from vcli.executors import get_executor as ge

        return ge("ssh", hosts=hosts)
    return get_executor(name)


def _placer(ex: Any) -> Any:
    """The executor's placement (ssh: the host scheduler) or everything on this machine."""
    from vcli.jobs import local_placer

    return getattr(ex, "placer", None) or local_placer


def _check_runnable(ex: Any, plan: Any) -> None:
    """What --validate-only can check without launching: every replica has something to run."""
    from vcli.executors import process_argv

    if ex.name == "local":
        for launch in plan.launches:
            process_argv(launch, ex.python)


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

    from vcli import config as cfg
    from vcli.errors import UsageError
    from vcli.spec import CustomJobSpec

    if not worker_pool_spec and not config:
        raise UsageError("Exactly one of (--config | --worker-pool-spec) must be specified.")
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
    fmt: Optional[str] = typer.Option(None, "--format", help="json|yaml|value(...)|table(...)|csv(...)|none"),
) -> None:
    """Create a custom job and run it in the foreground, streaming its replicas' logs."""
    from vcli import config as cfg
    from vcli.errors import ExitCode, UsageError
    from vcli.jobs import JobRun, plan_job, run_job
    from vcli.spec import JobState
    from vcli.store import Store, new_id, resource_name

    if not display_name:
        raise UsageError("argument --display-name: Must be specified.")
    spec = _build_custom_job_spec(worker_pool_spec, config, args, command_, python_package_uris, service_account, network)
    label_map = cfg.parse_labels(labels)
    ex_name = _executor_name(executor)
    ex = _make_executor(ex_name, hosts)
    store = Store()
    job_id = new_id()
    job_dir = store.home / "jobs" / job_id
    plan = plan_job(spec, job_id=job_id, job_dir=job_dir, executor=ex, shm_size=shm_size, placer=_placer(ex))
    record = {
        "jobSpec": cfg.custom_job_spec_to_dict(spec),
        "labels": label_map,
        "executor": ex_name,
        "outputDirectory": plan.base_output_directory,
    }
    if validate_only:
        _check_runnable(ex, plan)
        resource = {"displayName": display_name, "jobSpec": record["jobSpec"], "labels": label_map or None,
                    "replicas": [{"taskName": l.task_name, "command": list(l.argv) or None, "imageUri": l.image_uri} for l in plan.launches]}
        resource = {k: v for k, v in resource.items() if v is not None}
        err("The job is valid; nothing was launched (--validate-only).")
        _emit(resource, fmt, is_list=False)
        return
    row = store.create_job(kind="customJob", display_name=display_name, record=record, state="JOB_STATE_QUEUED", job_id=job_id)
    _mark_controller(store, job_id)
    name = resource_name("customJob", job_id)
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
    if getattr(run, "startup_error", None) is not None:
        from vcli.errors import VcliError

        e = run.startup_error
        if isinstance(e, VcliError):
            raise typer.Exit(int(e.exit_code))
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

    from vcli.jobs import plan_job
    from vcli.store import Store

    spec = _build_custom_job_spec(worker_pool_spec, config, args, command_, None, None, None)
    ex = _make_executor(_executor_name(executor))
    store = Store()
    plan = plan_job(spec, job_id="JOB_ID", job_dir=store.home / "jobs" / "JOB_ID", executor=ex, trial_id=trial_id, placer=_placer(ex))
    out = []
    for l in plan.launches:
        env = dict(l.env)
        for key in ("CLUSTER_SPEC", "TF_CONFIG"):
            if key in env:
                env[key] = json.loads(env[key])
        from vcli.executors import process_argv

        try:
            argv = process_argv(l, getattr(ex, "python", "python3")) if ex.name != "docker" else list(l.argv)
        except Exception:  # noqa: BLE001 - an image-only pool: show what is known
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
        err(f"(unset)")
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

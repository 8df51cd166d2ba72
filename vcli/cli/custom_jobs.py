"""`vcli custom-jobs create | list | describe | cancel | stream-logs | print-env`.

Each command turns flags into a spec (`custom_job_spec_from_flags`), hands it to
`vcli.control.runner` / `vcli.control.cancel`, and prints what happened.
"""

from __future__ import annotations

import sys
import time
from typing import Annotated, Any, List, Optional, Sequence

import typer

from vcli.cli import options as o
from vcli.cli.gcloud_flags import GcloudCommand, GcloudGroup, note_no_effect
from vcli.cli.output import (
    CUSTOM_JOBS,
    LogPrinter,
    check_format,
    emit,
    exit_code_for,
    failure_recorded,
    finish_cancel,
    get_row,
    ran_seconds,
)
from vcli.cli.support import command, err, interrupt_on_signals, interrupted_code, shown
from vcli.enums import JobKind, JobState, RpcCode

app = typer.Typer(cls=GcloudGroup, help="Create and manage custom training jobs.", no_args_is_help=True)


def custom_job_spec_from_flags(
    worker_pool_spec: Optional[List[str]],
    config: Optional[str],
    args: Optional[List[str]],
    command_: Optional[List[str]],
    python_package_uris: Optional[str] = None,
    service_account: Optional[str] = None,
    network: Optional[str] = None,
    no_effect: Optional[List[str]] = None,
) -> Any:
    """The CustomJobSpec of --config (if any) with the flags applied over it; the config's
    fields that change nothing locally are appended to `no_effect`."""
    from dataclasses import replace

    from vcli import codec
    from vcli.errors import UsageError
    from vcli.spec import CustomJobSpec

    if not worker_pool_spec and not config:
        raise UsageError("At least one of (--config | --worker-pool-spec) must be specified.")
    spec = codec.load_custom_job_spec(config, no_effect) if config else CustomJobSpec(worker_pool_specs=())
    if worker_pool_spec:
        pools = codec.worker_pools_from_flags([codec.parse_worker_pool_spec(v) for v in worker_pool_spec])
        spec = replace(spec, worker_pool_specs=pools)
    if not spec.worker_pool_specs:
        raise UsageError("argument --config: the file defines no workerPoolSpecs; add them or give --worker-pool-spec.")
    joined_args = None if args is None else [a for v in args for a in codec.split_arg_list(v)]
    joined_cmd = None if command_ is None else [a for v in command_ for a in codec.split_arg_list(v)]
    uris = codec.split_arg_list(python_package_uris) if python_package_uris else None
    spec = codec.apply_args_and_command(spec, args=joined_args, command=joined_cmd, python_package_uris=uris)
    if service_account:
        spec = replace(spec, service_account=service_account)
    if network:
        spec = replace(spec, network=network)
    return spec


def with_cloud_settings(spec: Any, **settings: Any) -> Any:
    """`spec` (a CustomJobSpec) with the cloud-only settings given (`service_account`, `network`,
    `persistent_resource_id`, `enable_web_access`, `enable_dashboard_access`) recorded in the
    jobSpec fields Vertex keeps them in; they change nothing on a local run (the notice of
    `vcli.cli.gcloud_flags` says so)."""
    from dataclasses import replace

    given = {name: value for name, value in settings.items() if value}
    return replace(spec, **given) if given else spec


def _submitted_message(name: str, job_id: str) -> str:
    """gcloud's create message, line for line (the `describe` hint is its 6th line, the
    `stream-logs` one its 10th), with vcli's commands: notebooks scrape these lines."""
    return (f"CustomJob [{name}] is submitted successfully.\n\nYour job is still active. You may view the status of "
            f"your job with the command\n\n  $ vcli custom-jobs describe {job_id}\n\nor continue streaming the logs "
            f"with the command\n\n  $ vcli custom-jobs stream-logs {job_id}")


@app.command("create", cls=GcloudCommand)
@command("custom-jobs.create")
def create(
    display_name: Annotated[Optional[str], typer.Option("--display-name", help="Display name of the custom job to create.")] = None,
    worker_pool_spec: o.WorkerPoolSpec = None,
    config: o.Config = None,
    args: o.Args = None,
    command_: o.Command = None,
    python_package_uris: Annotated[Optional[str], typer.Option("--python-package-uris", help="Python packages (local paths or gs:// URIs under storage/gcs-root, comma-separated) installed for python-module pools, as on Vertex.")] = None,
    labels: o.Labels = None,
    service_account: o.ServiceAccount = None,
    network: o.Network = None,
    persistent_resource_id: o.PersistentResourceId = None,
    enable_web_access: o.EnableWebAccess = False,
    enable_dashboard_access: o.EnableDashboardAccess = False,
    kms_key: o.KmsKey = None,
    kms_keyring: o.KmsKeyring = None,
    kms_location: o.KmsLocation = None,
    kms_project: o.KmsProject = None,
    region: o.Region = None,
    executor: o.Executor = None,
    hosts: o.Hosts = None,
    ray_address: o.RayAddress = None,
    slurm_partition: o.SlurmPartition = None,
    slurm_account: o.SlurmAccount = None,
    slurm_qos: o.SlurmQos = None,
    shm_size: o.ShmSize = None,
    tracking_uri: o.TrackingUri = None,
    validate_only: o.ValidateOnly = False,
    async_: Annotated[bool, typer.Option("--async", help="Return once the job is submitted; it runs in a background vcli process.")] = False,
    fmt: o.Format = None,
) -> None:
    """Create a custom job and run it in the foreground, streaming its replicas' logs.

    With --async, a detached vcli process runs the job (as gcloud's create returns at once);
    follow it with stream-logs, stop it with cancel."""
    from vcli import codec, tracking
    from vcli.control import runner
    from vcli.control.waiting import WaitCancelled
    from vcli.errors import UsageError

    check_format(fmt)
    executor_settings = o.executor_settings(ray_address, slurm_partition, slurm_account, slurm_qos)
    if not display_name:
        raise UsageError("argument --display-name: Must be specified.")
    codec.check_display_name(display_name)
    no_effect: list[str] = []
    spec = custom_job_spec_from_flags(worker_pool_spec, config, args, command_, python_package_uris, service_account, network,
                                      no_effect)
    spec = with_cloud_settings(spec, persistent_resource_id=persistent_resource_id, enable_web_access=enable_web_access,
                               enable_dashboard_access=enable_dashboard_access)
    label_map = codec.parse_labels(labels)
    tracked = tracking.settings(tracking_uri, display_name=display_name, experiment=spec.experiment,
                                experiment_run=spec.experiment_run)
    kms = o.kms_key_name(kms_key, kms_keyring, kms_location, kms_project)
    # Only a job that runs here takes (and waits for) host-wide GPU leases; --async's runner does.
    runs_here = not (validate_only or async_)
    if runs_here:
        interrupt_on_signals()  # a job queued while it waits for GPUs ends CANCELLED on SIGTERM too
    try:
        job = runner.plan_custom_job(spec, executor=o.executor_flag(executor), hosts=hosts, shm_size=shm_size,
                                     labels=label_map, ready=not validate_only, leases=runs_here,
                                     executor_settings=executor_settings,
                                     on_wait=err if runs_here else None, display_name=display_name if runs_here else None)
    except WaitCancelled:
        err("The job was cancelled while it waited for GPUs.")
        raise typer.Exit(exit_code_for(JobState.JOB_STATE_CANCELLED)) from None
    except KeyboardInterrupt:
        err("The job was cancelled (interrupted) before it started.")
        raise typer.Exit(interrupted_code()) from None
    if tracked:
        job.record["tracking"] = tracked
    note_no_effect(tracking.effective_no_effect(no_effect, tracked), "[--config] ")  # once the job is known to be valid
    if kms:
        job.record["encryptionSpec"] = {"kmsKeyName": kms}  # recorded as on Vertex; nothing is encrypted here
    try:
        # A submitted job's notices follow gcloud's lines, which scripts scrape by position.
        from vcli.control.notices import launch_notices

        notices = launch_notices(job.execution.kind, job.spec, auto=job.execution.auto, executor=job.execution.executor)
        if validate_only:
            for notice in notices:
                err(notice)
            if (notice := tracking.cannot_start_notice(tracked)) is not None:
                err(notice)
            _print_validated(display_name, job, fmt)
        elif async_:
            row = runner.submit_custom_job(job, display_name)
            runner.spawn_runner(job.store, job.job_id, ["custom-jobs", "run-job", job.job_id],
                                secrets=runner.secret_values(job.spec))
            err(_submitted_message(shown(row.name), job.job_id))
            for notice in notices:
                err(notice)
            if fmt:
                _emit_job(job.store, job.job_id, fmt)
        else:
            raise typer.Exit(_run_in_foreground(job, display_name, fmt, notices=notices))
    finally:
        job.close()


def _print_validated(display_name: str, job: Any, fmt: Optional[str]) -> None:
    """The resolved job (each replica's full argv, as print-env shows it), then whether the
    executor could run it now: readiness is reported, it does not make a valid job invalid."""
    from vcli.errors import ExecutorError, MissingExtraError

    ex = job.execution.executor
    resource = {
        "displayName": display_name,
        "executor": job.execution.kind.value,
        "jobSpec": job.record["jobSpec"],
        "labels": job.record["labels"] or None,
        "encryptionSpec": job.record.get("encryptionSpec"),
        "replicas": [{"taskName": l.task_name, "command": ex.command_for(l) or None, "imageUri": l.image_uri}
                     for l in job.plan.launches],
    }
    err("The job is valid; nothing was launched (--validate-only).")
    try:
        ex.ready(job.plan.launches)
    except (ExecutorError, MissingExtraError) as e:
        err(f"WARNING: the {job.execution.kind.value} executor cannot run it now (exit code {int(e.exit_code)} at create): {e}")
    emit({k: v for k, v in resource.items() if v is not None}, fmt, is_list=False)


def _emit_job(store: Any, job_id: str, fmt: Optional[str]) -> None:
    from vcli.resources import custom_job_resource

    emit(custom_job_resource(store, store.get_job(job_id)), fmt, is_list=False)


def _run_in_foreground(job: Any, display_name: str, fmt: Optional[str], *, resumed: bool = False,
                       notices: Sequence[str] = ()) -> int:
    """Submit (or take over, `resumed`) and run `job` here, its replicas' logs on stdout (stderr
    with --format); the exit code."""
    from vcli.control import runner
    from vcli.control.liveness import claim_controller
    from vcli.errors import VcliError

    if resumed:
        claim_controller(job.store, job.job_id)
        name = shown(job.store.get_job(job.job_id).name)
        err(f"CustomJob [{name}] is resumed: running replicas are re-attached, not restarted.")
    else:
        row = runner.submit_custom_job(job, display_name)
        claim_controller(job.store, job.job_id)
        name = shown(row.name)
        err(_submitted_message(name, job.job_id))  # gcloud's lines, in gcloud's order: scripts scrape them
    for notice in notices:
        err(notice)
    err(f"Running {len(job.plan.launches)} replica(s) with the {job.execution.kind.value} executor; Ctrl-C cancels the job.")
    interrupt_on_signals()
    printer = LogPrinter(sys.stderr if fmt else sys.stdout)
    for launch in job.plan.launches:
        printer.add(launch.task_name, launch.log_path)
    started = time.monotonic()
    try:
        outcome = runner.run_custom_job(job, on_progress=err, on_tick=printer.flush)
    except KeyboardInterrupt:
        printer.flush()
        err(f"CustomJob [{name}] was cancelled (interrupted).")
        return interrupted_code()
    printer.flush()
    final = job.store.get_job(job.job_id)
    msg = "" if outcome.state == JobState.JOB_STATE_SUCCEEDED else (final.error or {}).get("message", "")
    msg = "" if msg == "CANCELED" else msg  # Vertex's error text of a cancelled job says nothing the state does not
    took = ran_seconds(final, time.monotonic() - started)
    err(f"CustomJob [{name}] finished: {outcome.state.value} in {took:.1f}s." + (f" {msg}" if msg else ""))
    if fmt:
        _emit_job(job.store, job.job_id, fmt)
    if isinstance(outcome.startup_error, VcliError):
        return int(outcome.startup_error.exit_code)
    return exit_code_for(outcome.state)


def secrets_from_stdin() -> dict[str, str]:
    """The secret values `create --async` pipes to its runner (empty when run by hand)."""
    import json

    if sys.stdin is None or sys.stdin.isatty():
        return {}
    try:
        data = json.loads(sys.stdin.read() or "{}")
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


@app.command("resume", cls=GcloudCommand)
@command("custom-jobs.resume")
def resume(job: o.CustomJobRef, fmt: o.Format = None) -> None:
    """Take over a job whose vcli process died (killed, crashed, machine asleep).

    Replicas that still run are re-attached, not restarted; replicas that ended meanwhile
    report their exit; the job then ends as it would have. Refused while its controller lives."""
    from vcli.control import runner
    from vcli.control.liveness import claim_controller, give_back, has_ended
    from vcli.control.waiting import WaitCancelled
    from vcli.errors import WaitExpiredError
    from vcli.store import Store

    check_format(fmt)
    store = Store()
    row = get_row(store, job, JobKind.CUSTOM_JOB)
    if has_ended(row):
        err(f"CustomJob [{shown(row.name)}] has already ended ({row.state}); nothing to resume.")
        raise typer.Exit(exit_code_for(JobState(row.state)))  # a script's `resume || ...` sees how it ended
    claim_controller(store, row.id)
    if row.cancel_requested or row.state == JobState.JOB_STATE_CANCELLING.value:
        raise typer.Exit(finish_cancel(store, row, "CustomJob"))
    interrupt_on_signals()  # a queued job's wait ends as create's does on Ctrl-C, SIGTERM, SIGHUP (even if ignored)
    try:
        planned = runner.plan_resumed_custom_job(store, row, on_wait=err)
    except WaitCancelled:
        raise typer.Exit(_cancelled_while_waiting(store, row)) from None
    except (KeyboardInterrupt, WaitExpiredError) as e:
        if row.state != JobState.JOB_STATE_QUEUED.value:  # it had started: left for another resume
            give_back(store, row)
            raise
        raise typer.Exit(_queued_wait_ended(store, row, e)) from None
    except BaseException:
        give_back(store, row)
        raise
    from vcli.control.notices import accelerator_notices

    for notice in accelerator_notices(planned.execution.kind, planned.spec):  # this shell may declare no GPUs
        err(notice)
    try:
        raise typer.Exit(_run_in_foreground(planned, row.display_name, fmt, resumed=True))
    finally:
        planned.close()


def _queued_wait_ended(store: Any, row: Any, error: BaseException) -> int:
    """A queued job whose resumed wait for GPUs ended (Ctrl-C, SIGTERM, SIGHUP, maxWaitDuration):
    recorded CANCELLED or FAILED as `create` records it, said; the exit code. It was left QUEUED
    with its controller gone, and a later resume ran the job `resume` had said failed."""
    from vcli.control.waiting import end_queued

    raise_ = end_queued(store, row.id, error)
    if isinstance(raise_, KeyboardInterrupt):
        err(f"CustomJob [{shown(row.name)}] was cancelled (interrupted) while it waited for GPUs.")
        return interrupted_code()
    err(f"ERROR: (vcli.custom-jobs.resume) {raise_}")
    return exit_code_for(JobState.JOB_STATE_FAILED)


def _cancelled_while_waiting(store: Any, row: Any) -> int:
    """Record a stored job that `cancel` reached while it waited for GPUs as CANCELLED, say so;
    the exit code."""
    store.set_state(row.id, JobState.JOB_STATE_CANCELLED, error={"code": RpcCode.CANCELLED, "message": "CANCELED"})
    err(f"CustomJob [{shown(row.name)}] was cancelled while it waited for GPUs.")
    return exit_code_for(JobState.JOB_STATE_CANCELLED)


@app.command("run-job", hidden=True, cls=GcloudCommand)
@command("custom-jobs.run-job")
def run_job(job: Annotated[str, typer.Argument()]) -> None:
    """Run a stored custom job to its end (the background half of `create --async`)."""
    from vcli.control import runner
    from vcli.control.liveness import claim_controller
    from vcli.control.waiting import WaitCancelled
    from vcli.store import Store

    store = Store()
    row = get_row(store, job, JobKind.CUSTOM_JOB)
    claim_controller(store, row.id)
    if store.cancel_requested(row.id):
        store.set_state(row.id, JobState.JOB_STATE_CANCELLED, error={"code": RpcCode.CANCELLED, "message": "CANCELED"})
        return
    interrupt_on_signals()  # SIGTERM in the wait for GPUs ended the runner silently, its job QUEUED for good
    try:
        with failure_recorded(store, row.id):
            planned = runner.plan_stored_custom_job(store, row, secrets=secrets_from_stdin(), on_wait=err)
    except WaitCancelled:
        raise typer.Exit(_cancelled_while_waiting(store, row)) from None
    except KeyboardInterrupt as e:
        raise typer.Exit(_queued_wait_ended(store, row, e)) from None
    try:
        try:
            outcome = runner.run_custom_job(planned, on_progress=err)
        except KeyboardInterrupt:
            raise typer.Exit(interrupted_code()) from None
    finally:
        planned.close()
    err(f"CustomJob [{row.name}] finished: {outcome.state.value}.")
    raise typer.Exit(exit_code_for(outcome.state))


@app.command("print-env", cls=GcloudCommand)
@command("custom-jobs.print-env")
def print_env(
    worker_pool_spec: o.WorkerPoolSpec = None,
    config: Annotated[Optional[str], typer.Option("--config", help="CustomJobSpec YAML or JSON (`-` = stdin).")] = None,
    args: o.Args = None,
    command_: o.Command = None,
    display_name: Annotated[Optional[str], typer.Option("--display-name", help="Ignored; accepted so a create line can be reused.")] = None,
    trial_id: Annotated[Optional[str], typer.Option("--trial-id", help="Show the environment of this hp-tuning trial.")] = None,
    executor: o.Executor = None,
    fmt: Annotated[Optional[str], typer.Option("--format", help="yaml (default) | json | value(...)")] = None,
) -> None:
    """Show what every replica of a job would get: address, command and Vertex environment."""
    import json

    from vcli.control.jobs import plan_job
    from vcli.control.wiring import executor_kind, open_execution
    from vcli.errors import InvalidValueError, VcliError
    from vcli.store import Store

    if trial_id is not None and not (trial_id.isascii() and trial_id.isdigit() and 0 < int(trial_id[:19] or 0)):
        # a trial's id is its number: `../../etc` put AIP_MODEL_DIR outside the job's directory
        raise InvalidValueError("--trial-id", f"[{trial_id}] must be a trial number such as 3.")
    spec = custom_job_spec_from_flags(worker_pool_spec, config, args, command_)
    execution = open_execution(executor_kind(o.executor_flag(executor), spec), leases=False)
    try:
        ex = execution.executor
        plan = plan_job(spec, job_id="JOB_ID", job_dir=Store().home / "jobs" / "JOB_ID", executor=ex, trial_id=trial_id,
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
            address = env.get("CLUSTER_SPEC", {}).get("cluster", {}).get(f"workerpool{l.replica.pool_index}", [""])[l.replica.index]
            out.append({"taskName": l.task_name, "address": address, "command": argv, "env": env})
    finally:
        execution.close()
    emit(out, fmt, is_list=True)


@app.command("list", cls=GcloudCommand)
@command("custom-jobs.list")
def list_(
    fmt: o.Format = None,
    filter_: o.Filter = None,
    sort_by: o.SortBy = None,
    limit: o.Limit = None,
    region: o.Region = None,
    include_trials: Annotated[bool, typer.Option("--include-trial-jobs", help="Also list the custom jobs of tuning trials.")] = False,
    page_size: o.PageSize = None,
    uri: o.Uri = False,
) -> None:
    """List custom jobs (YAML documents by default, as gcloud)."""
    CUSTOM_JOBS.list(fmt, filter_, sort_by, limit, page_size, uri, include_trial_jobs=include_trials)


@app.command("describe", cls=GcloudCommand)
@command("custom-jobs.describe")
def describe(job: o.CustomJobRef, fmt: o.Format = None, region: o.Region = None) -> None:
    """Show a custom job as the Vertex REST resource."""
    CUSTOM_JOBS.describe(job, fmt)


@app.command("cancel", cls=GcloudCommand)
@command("custom-jobs.cancel")
def cancel(job: o.CustomJobRef, no_wait: o.NoWait = False, region: o.Region = None) -> None:
    """Cancel a running custom job (from any terminal); a finished job is left as it is."""
    CUSTOM_JOBS.cancel(job, wait=not no_wait)


@app.command("stream-logs", cls=GcloudCommand)
@command("custom-jobs.stream-logs")
def stream_logs_(
    job: o.CustomJobRef,
    task_name: o.TaskName = None,
    polling_interval: o.PollingInterval = 1,
    region: o.Region = None,
    allow_multiline_logs: o.AllowMultilineLogs = False,
) -> None:
    """Print a job's logs (severity, time, task, message) and follow them until the job ends."""
    CUSTOM_JOBS.stream_logs(job, task_name)

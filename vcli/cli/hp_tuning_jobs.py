"""`vcli hp-tuning-jobs create | list | describe | export | tensorboard | cancel | stream-logs | resume | extend`.

`create` turns --config and the study flags into a spec (`study_from_flags`), plans it with
`vcli.control.runner`, and runs it here with a live table of trials (`vcli.view`, through
`vcli.cli.study_runs`, which `resume` and `extend` share).
"""

from __future__ import annotations

import errno
import os
import sys
from dataclasses import replace
from typing import Annotated, Any, List, Optional, Sequence

import typer

from vcli.cli import options as o
from vcli.cli.choices import AlgorithmFlag, BayesianBackend, MeasurementSelection
from vcli.cli.gcloud_flags import GcloudCommand, GcloudGroup, note_no_effect
from vcli.cli.output import (
    STUDIES,
    check_format,
    emit,
    exit_code_for,
    failure_recorded,
    finish_cancel,
    get_row,
)
from vcli.cli.study_runs import emit_study, run_in_foreground, submit_async
from vcli.cli.support import command, err
from vcli.enums import JobKind, JobState, RpcCode

#: `--early-stopping`'s help: the words and keys of the rules' registry
#: (`vcli.tuning.stopping.RULES`), spelled out so that `vcli --help` never imports the data
#: model; tests/test_registries.py fails when they differ.
_EARLY_STOPPING_HELP = (
    "vcli: stop unpromising trials early: none|median|decay-curve|convex|asha|hyperband[,KEY=VALUE...] (keys: "
    "reduction-factor, min-step-count, max-step-count, min-measurement-count, learning-rate-parameter-name, "
    "use-elapsed-duration).")

app = typer.Typer(cls=GcloudGroup, help="Create and manage hyperparameter tuning jobs.", no_args_is_help=True)


@app.command("create", cls=GcloudCommand)
@command("hp-tuning-jobs.create")
def create(
    display_name: Annotated[Optional[str], typer.Option("--display-name", help="Display name of the study (overrides the file's displayName).")] = None,
    config: Annotated[Optional[str], typer.Option("--config", help="HyperparameterTuningJob YAML or JSON (`-` = stdin).")] = None,
    max_trial_count: Annotated[Optional[int], typer.Option("--max-trial-count", help="Overrides maxTrialCount (default 1).")] = None,
    parallel_trial_count: Annotated[Optional[int], typer.Option("--parallel-trial-count", help="Overrides parallelTrialCount (default 1).")] = None,
    max_failed_trial_count: Annotated[Optional[int], typer.Option("--max-failed-trial-count", help="vcli: overrides maxFailedTrialCount (0 = max(3, 10% of trials)).")] = None,
    algorithm: Annotated[Optional[AlgorithmFlag], typer.Option("--algorithm", help="The search algorithm; algorithm-unspecified is Bayesian optimisation.")] = None,
    parameter_spec: Annotated[Optional[List[str]], typer.Option("--parameter-spec", help="vcli: parameter-id=ID,type=double|integer|categorical|discrete,min=,max=,values=a;b,scale=linear|log|reverse-log[,parent=ID,parent-values=a;b]")] = None,
    metric: Annotated[Optional[List[str]], typer.Option("--metric", help="vcli: metric-id=ID,goal=maximize|minimize[,safety-threshold=X[,min-safe-fraction=F]] (a safety metric: safe search)")] = None,
    enqueue_trial: Annotated[Optional[List[str]], typer.Option("--enqueue-trial", help="vcli: PARAMETER_ID=VALUE,... run before any suggestion (repeatable, in order).")] = None,
    warm_start_from: Annotated[Optional[str], typer.Option("--warm-start-from", help="vcli: prior observations for the suggester, no trials: a vcli study (ID), a CSV of `export`, or an Optuna storage URL#STUDY (sqlite:///optuna.db#my-study).")] = None,
    worker_pool_spec: Annotated[Optional[List[str]], typer.Option("--worker-pool-spec", help="vcli: the trial job's pools, as for custom-jobs create.")] = None,
    args: Annotated[Optional[List[str]], typer.Option("--args", help="vcli: static args for every trial replica (before the hyperparameters).")] = None,
    command_: Annotated[Optional[List[str]], typer.Option("--command", help="vcli: command for the trial job's container pools.")] = None,
    measurement_selection: Annotated[Optional[MeasurementSelection], typer.Option("--measurement-selection", help="vcli: which measurement of a trial counts.")] = None,
    seed: Annotated[Optional[int], typer.Option("--seed", help="vcli: makes the suggestions reproducible.")] = None,
    study_timeout: Annotated[Optional[str], typer.Option("--study-timeout", help="vcli: wall-clock budget, e.g. 30m; running trials are stopped when it ends.")] = None,
    goal_value: Annotated[Optional[float], typer.Option("--goal-value", help="vcli: end the study once a trial's metric reaches this value.")] = None,
    early_stopping: Annotated[Optional[str], typer.Option("--early-stopping", help=_EARLY_STOPPING_HELP)] = None,
    bayesian_backend: Annotated[BayesianBackend, typer.Option("--bayesian-backend", help="vcli: gp (vcli's GP) | skopt (scikit-optimize).")] = BayesianBackend.GP,
    labels: o.Labels = None,
    service_account: o.ServiceAccount = None,
    network: o.Network = None,
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
    validate_only: Annotated[bool, typer.Option("--validate-only", help="Check and print the resolved study; launch nothing.")] = False,
    print_vertex: Annotated[bool, typer.Option("--print-vertex", help="vcli: print the Vertex HyperparameterTuningJob YAML of --config (a Katib Experiment converted) and exit; launch nothing.")] = False,
    async_: Annotated[bool, typer.Option("--async", help="Return once the study is submitted; it runs in a background vcli process.")] = False,
    fmt: o.Format = None,
) -> None:
    """Run a hyperparameter tuning study in the foreground with a live table of trials.

    With --async, a detached vcli process runs the study (as gcloud's create returns at once);
    follow it with describe or stream-logs, stop it with cancel."""
    from vcli import codec, tracking
    from vcli.cli.custom_jobs import with_cloud_settings
    from vcli.codec.study_flags import StudyFlags, study_request
    from vcli.control import runner

    check_format(fmt)
    executor_settings = o.executor_settings(ray_address, slurm_partition, slurm_account, slurm_qos)
    loaded, katib = _read_config(config)
    doc, source = codec.hp_tuning_document(
        config=config, parameter_specs=parameter_spec, metrics=metric, worker_pool_specs=worker_pool_spec,
        algorithm=algorithm.value if algorithm is not None else None, early_stopping=early_stopping, loaded=loaded,
    )
    goal_value, seed = _katib_defaults(katib, goal_value, seed)
    request = study_request(doc, source, StudyFlags(
        display_name, max_trial_count, parallel_trial_count, max_failed_trial_count, args, command_,
        measurement_selection.spec_value() if measurement_selection is not None else None, study_timeout, goal_value,
        algorithm_flag=algorithm is not None, early_stopping_flag=early_stopping is not None,
        metric_flag=bool(metric), parameter_flag=bool(parameter_spec), worker_pool_flag=bool(worker_pool_spec)))
    for notice in request.notices + _katib_notes(katib):
        err(notice)
    if print_vertex:
        raise typer.Exit(_print_vertex(doc, katib))
    enqueued = _enqueued(request.spec, enqueue_trial or [])
    # gcloud puts these in trialJobSpec; they change nothing locally (the notice says so).
    spec = replace(request.spec, trial_job_spec=with_cloud_settings(
        request.spec.trial_job_spec, service_account=service_account, network=network, enable_web_access=enable_web_access,
        enable_dashboard_access=enable_dashboard_access))
    tracked = tracking.settings(tracking_uri, display_name=request.display_name, experiment=spec.trial_job_spec.experiment,
                                experiment_run=spec.trial_job_spec.experiment_run)
    warm = _warm_start(warm_start_from, spec)
    # Only a study that runs here takes host-wide GPU leases; --async's runner does.
    study = runner.plan_study(spec, display_name=request.display_name, labels={**request.labels, **codec.parse_labels(labels)},
                              seed=seed, bayesian_backend=bayesian_backend.value, executor=o.executor_flag(executor),
                              hosts=hosts, shm_size=shm_size, leases=not (validate_only or async_),
                              executor_settings=executor_settings, warm_start=warm)
    if tracked:
        study.record["tracking"] = tracked
    if enqueued:
        study.record["enqueuedTrials"] = enqueued
    note_no_effect(tracking.effective_no_effect(request.no_effect, tracked), "[--config] ")  # once the study is valid
    kms = o.kms_key_name(kms_key, kms_keyring, kms_location, kms_project) or (doc.get("encryptionSpec") or {}).get("kmsKeyName")
    if kms:
        study.record["encryptionSpec"] = {"kmsKeyName": kms}  # recorded as on Vertex; nothing is encrypted here
    try:
        # A submitted study's notices follow gcloud's lines, which scripts scrape by position.
        from vcli.control.notices import launch_notices

        notices = launch_notices(study.execution.kind, study.spec.trial_job_spec, auto=study.execution.auto,
                                 executor=study.execution.executor) + ([warm.line(spec.study_spec.algorithm)] if warm else [])
        if validate_only:
            for notice in notices:
                err(notice)
            if (notice := tracking.cannot_start_notice(tracked)) is not None:
                err(notice)
            not_now = runner.check_study(study)
            err("The study is valid; nothing was launched (--validate-only).")
            if not_now:
                err(f"WARNING: the {study.execution.kind.value} executor cannot run it now (exit code {int(not_now.exit_code)} "
                    f"at create): {not_now}")
            emit({"displayName": study.display_name, **{k: v for k, v in study.record.items() if v is not None}}, fmt, is_list=False)
        elif async_:
            submit_async(study, fmt, notices)
        else:
            raise typer.Exit(run_in_foreground(study, fmt, notices=notices))
    finally:
        study.close()


def _read_config(config: Optional[str]) -> tuple[Any, Any]:
    """--config's (document, source) read once, and its Katib conversion (`vcli.codec.katib`;
    None for a Vertex document); (None, None) without --config."""
    if not config:
        return None, None
    from vcli.codec.katib import read_config

    return read_config(config)


def _katib_defaults(katib: Any, goal_value: Optional[float], seed: Optional[int]) -> tuple[Optional[float], Optional[int]]:
    """--goal-value and --seed, else a Katib Experiment's objective.goal and random_state."""
    if katib is None:
        return goal_value, seed
    return (katib.goal_value if goal_value is None else goal_value), (katib.seed if seed is None else seed)


def _katib_notes(katib: Any) -> list[str]:
    """The one `Note:` line of a Katib Experiment's fields that vcli does not honour (none at
    --verbosity=error or quieter, as gcloud's notes)."""
    from vcli.cli.support import state

    note = katib.note() if katib is not None else None
    return [note] if note and state["verbosity"] not in ("error", "critical", "none") else []


def _print_vertex(doc: Any, katib: Any) -> int:
    """--print-vertex: the study's HyperparameterTuningJob document as YAML on stdout (with the
    flags a Katib Experiment needs beside it as a comment); 0."""
    from vcli.codec import to_yaml

    flags = katib.flags() if katib is not None else []
    if flags:
        print(f"# with: vcli hp-tuning-jobs create --config=THIS_FILE {' '.join(flags)}")
    sys.stdout.write(to_yaml(doc))
    return 0


def _warm_start(source: Optional[str], spec: Any) -> Any:
    """`--warm-start-from`'s prior observations (`vcli.control.warmstart`), or None."""
    if source is None:
        return None
    from vcli.control.warmstart import take
    from vcli.store import Store

    return take(source, spec.study_spec, Store)


def _enqueued(spec: Any, given: Sequence[str]) -> list[dict[str, Any]]:
    """`--enqueue-trial`'s configurations, checked against the study's parameters (one line
    naming the flag otherwise)."""
    from vcli.errors import InvalidValueError, UsageError
    from vcli.tuning.defaults import enqueued_configuration

    if given and spec.study_spec.population_based_training_spec is not None:
        raise UsageError("argument --enqueue-trial: Population Based Training starts its own population; "
                         "enqueued trials are for the other algorithms.")
    try:
        return [enqueued_configuration(spec.study_spec.parameters, text) for text in given]
    except ValueError as e:
        raise InvalidValueError("--enqueue-trial", f"{e}.") from None


@app.command("run-study", hidden=True, cls=GcloudCommand)
@command("hp-tuning-jobs.run-study")
def run_study(job: Annotated[str, typer.Argument()]) -> None:
    """Run a submitted study to its end (the background half of `create --async`); its table
    goes to the study's controller.log as plain lines."""
    from vcli.cli.custom_jobs import secrets_from_stdin
    from vcli.control import runner
    from vcli.control.liveness import claim_controller
    from vcli.store import Store

    store = Store()
    row = get_row(store, job, JobKind.HYPERPARAMETER_TUNING_JOB)
    claim_controller(store, row.id)
    if store.cancel_requested(row.id):
        store.set_state(row.id, JobState.JOB_STATE_CANCELLED, error={"code": RpcCode.CANCELLED, "message": "CANCELED"})
        return
    with failure_recorded(store, row.id):
        study = runner.plan_stored_study(store, row, secrets=secrets_from_stdin())
        try:
            raise typer.Exit(run_in_foreground(study, None, background=True))
        finally:
            study.close()


@app.command("resume", cls=GcloudCommand)
@command("hp-tuning-jobs.resume")
def resume(job: o.StudyRef, fmt: o.Format = None) -> None:
    """Take over a study whose vcli process died: running trials are re-attached (not
    restarted), finished ones kept, and the study goes on to maxTrialCount."""
    from vcli.control import runner
    from vcli.control.liveness import claim_controller, give_back, has_ended
    from vcli.store import Store

    check_format(fmt)
    store = Store()
    row = get_row(store, job, JobKind.HYPERPARAMETER_TUNING_JOB)
    if has_ended(row):
        err(f"Hyperparameter tuning job [{row.id}] has already ended ({row.state}); nothing to resume "
            f"(`vcli hp-tuning-jobs extend {row.id} --max-trial-count=N` gives it more trials).")
        raise typer.Exit(exit_code_for(JobState(row.state)))  # a script's `resume || ...` sees how it ended
    claim_controller(store, row.id)
    if row.cancel_requested or row.state == JobState.JOB_STATE_CANCELLING.value:
        raise typer.Exit(finish_cancel(store, row, "Hyperparameter tuning job"))
    try:
        study = runner.plan_stored_study(store, row)
    except BaseException:
        give_back(store, row)
        raise
    from vcli.control.notices import accelerator_notices

    for notice in accelerator_notices(study.execution.kind, study.spec.trial_job_spec):  # this shell may declare no GPUs
        err(notice)
    try:
        raise typer.Exit(run_in_foreground(study, fmt, resumed=True))
    finally:
        study.close()


@app.command("extend", cls=GcloudCommand)
@command("hp-tuning-jobs.extend")
def extend(
    job: o.StudyRef,
    max_trial_count: Annotated[int, typer.Option("--max-trial-count", help="vcli: the study's new maxTrialCount, more than the trials it has.")],
    parallel_trial_count: Annotated[Optional[int], typer.Option("--parallel-trial-count", help="vcli: a new parallelTrialCount.")] = None,
    max_failed_trial_count: Annotated[Optional[int], typer.Option("--max-failed-trial-count", help="vcli: a new maxFailedTrialCount (0 = max(3, 10% of trials)).")] = None,
    async_: Annotated[bool, typer.Option("--async", help="Return once the study is extended; it runs in a background vcli process.")] = False,
    fmt: o.Format = None,
    region: o.Region = None,
) -> None:
    """vcli: give a study that ended (SUCCEEDED, FAILED or CANCELLED) more trials: same id, its
    trials kept and its suggester rebuilt from them, as `resume` rebuilds it; it runs here with
    its live table (or, with --async, in the background) to its new maxTrialCount."""
    from vcli.control import extend as extension
    from vcli.control import runner
    from vcli.control.liveness import claim_controller, give_back
    from vcli.control.notices import accelerator_notices
    from vcli.store import Store

    check_format(fmt)
    store = Store()
    before = get_row(store, job, JobKind.HYPERPARAMETER_TUNING_JOB)

    def extended(row: Any) -> dict[str, Any]:
        return extension.check(store, row, max_trial_count=max_trial_count, parallel_trial_count=parallel_trial_count,
                               max_failed_trial_count=max_failed_trial_count)

    extended(before)  # refused before it is claimed
    claim_controller(store, before.id)
    try:
        row = get_row(store, before.id, JobKind.HYPERPARAMETER_TUNING_JOB)  # as it is, now this process holds it
        record = extended(row)
        study = runner.plan_stored_study(store, replace(row, record=record))
    except BaseException:
        give_back(store, before)
        raise
    kept = len(store.trials(row.id))
    line = (f"Hyperparameter tuning job [{row.id}] is extended from {row.record.get('maxTrialCount')} to {max_trial_count} "
            f"trials ({JobState(row.state).value} before): its {kept} trial(s) kept, its suggester goes on from them.")

    def begin() -> str:  # where the study is claimed: a Ctrl-C from here on cancels the extended study
        extension.reopen(store, row, record)
        return line

    try:
        if not async_:
            for notice in accelerator_notices(study.execution.kind, study.spec.trial_job_spec):
                err(notice)
            raise typer.Exit(run_in_foreground(study, fmt, resumed=True, begin=begin))
        extension.reopen(store, row, record)
        runner.spawn_runner(store, row.id, ["hp-tuning-jobs", "run-study", row.id],
                            secrets=runner.secret_values(study.spec.trial_job_spec))
        err(f"{line} It runs in a background vcli process.\n\nFollow its trials with the command\n\n"
            f"  $ vcli hp-tuning-jobs stream-logs {row.id}")
        if fmt:
            emit_study(store, row.id, fmt)
    finally:
        study.close()


@app.command("list", cls=GcloudCommand)
@command("hp-tuning-jobs.list")
def list_(
    fmt: o.Format = None,
    filter_: o.Filter = None,
    sort_by: o.SortBy = None,
    limit: o.Limit = None,
    region: o.Region = None,
    page_size: o.PageSize = None,
    uri: o.Uri = False,
) -> None:
    """List hyperparameter tuning jobs."""
    STUDIES.list(fmt, filter_, sort_by, limit, page_size, uri)


@app.command("describe", cls=GcloudCommand)
@command("hp-tuning-jobs.describe")
def describe(job: o.StudyRef, fmt: o.Format = None, region: o.Region = None) -> None:
    """Show a study: its spec, every trial (parameters, measurements, state) and the best trial."""
    STUDIES.describe(job, fmt)


@app.command("trials", cls=GcloudCommand)
@command("hp-tuning-jobs.trials")
def trials(
    job: o.StudyRef,
    fmt: o.Format = None,
    filter_: o.Filter = None,
    sort_by: o.SortBy = None,
    limit: o.Limit = None,
    region: o.Region = None,
) -> None:
    """List a study's trials: a table of every trial (state, parameters, metrics), or with
    --format Vertex's Trial resources, as `describe` shows them. --filter, --sort-by and
    --limit work on those resources, as in `list` (the best 10 of a study that maximises:
    `--sort-by=~finalMeasurement.metrics[0].value --limit=10`)."""
    from vcli.cli.output import list_output, selected
    from vcli.store import Store

    store = Store()
    row = get_row(store, job, JobKind.HYPERPARAMETER_TUNING_JOB)
    records = store.trial_records(row.id)
    if fmt is not None:
        list_output(records, fmt, filter_, sort_by, limit)
        return
    chosen = [str(r["id"]) for r in selected(records, filter_, sort_by, limit)]
    if not chosen:
        err("Listed 0 items.")
        return
    _print_trial_table(store, row, chosen)


def _print_trial_table(store: Any, row: Any, order: list[str]) -> None:
    """The live table's rows for these trials, in this order, on stdout (colour on a terminal)."""
    from rich.console import Console

    from vcli import codec
    from vcli.view.table import StudySnapshot, study_table

    spec = codec.study_spec_from_stored(row.record["studySpec"])
    snap = StudySnapshot(row.display_name, spec.metrics, [p.parameter_id for p in codec.iter_parameters(spec.parameters)],
                         int(row.record.get("maxTrialCount") or 0), {t.id: t for t in store.trials(row.id)},
                         state=JobState(row.state))
    console = Console(file=sys.stdout, width=None if sys.stdout.isatty() else 160)
    console.print(study_table(snap, width=console.width, order=order))


@app.command("export", cls=GcloudCommand)
@command("hp-tuning-jobs.export")
def export(
    job: o.StudyRef,
    to: Annotated[str, typer.Option("--to", help="vcli: trials.csv, trials.parquet, or an Optuna storage URL (sqlite:///optuna.db).")],
    region: o.Region = None,
) -> None:
    """vcli: write a study's trials to a CSV or Parquet table (one row per trial), or into an
    Optuna storage as an Optuna study (for optuna-dashboard or `optuna.load_study`)."""
    from vcli import codec
    from vcli.errors import InvalidValueError, UsageError
    from vcli.plots import export as ex
    from vcli.store import Store

    store = Store()
    row = get_row(store, job, JobKind.HYPERPARAMETER_TUNING_JOB)
    spec = codec.study_spec_from_stored(row.record["studySpec"])
    params = codec.iter_parameters(spec.parameters)
    trials = store.trials(row.id)
    if "://" in to:
        name = ex.to_optuna(to, f"{row.display_name}-{row.id}", spec, {p.parameter_id: p for p in params}, trials)
        err(f"Exported {len(trials)} trial(s) of [{row.id}] to the Optuna study [{name}] at {ex.shown_url(to)}.")
        return
    columns, rows = ex.table(spec, params, trials)
    if not to.lower().endswith((".csv", ".parquet")):  # as `plot` takes `.PNG`
        raise UsageError(f"argument --to: [{to}] is neither a .csv or .parquet file nor a storage URL such as sqlite:///optuna.db")
    try:
        (ex.write_csv if to.lower().endswith(".csv") else ex.write_parquet)(to, columns, rows)
    except OSError as e:  # no such directory, a file in the way, no permission, a full disk
        raise InvalidValueError("--to", f"cannot write [{to}]: {e.strerror or e}") from None
    err(f"Exported {len(trials)} trial(s) of [{row.id}] to {to}.")


@app.command("plot", cls=GcloudCommand)
@command("hp-tuning-jobs.plot")
def plot(
    job: o.StudyRef,
    output: Annotated[Optional[str], typer.Option("--output", help="vcli: report.html (the default is <study id>.html here), or name.svg / name.png for one file per figure (name-history.png, ...).")] = None,
    region: o.Region = None,
) -> None:
    """vcli: draw a study's report: optimisation history, parallel coordinates, slices,
    intermediate values, importances and the Pareto front, as one self-contained HTML page
    (no network needed to view it) or as SVG/PNG files. Needs `pip install 'vcli[plot]'`."""
    from vcli import codec, plots
    from vcli.plots.cache import FigureCache, Slot, last_change
    from vcli.store import Store

    store = Store()
    row = get_row(store, job, JobKind.HYPERPARAMETER_TUNING_JOB)
    spec = codec.study_spec_from_stored(row.record["studySpec"])
    version = store.trials_version(row.id)
    trials = store.trials(row.id)
    # The figure cache (shared with the dashboard) only when no trial changed while they were read.
    slot = (Slot(FigureCache(store.home), row.id, last_change(JobState(row.state).value, row.update_time, version))
            if store.trials_version(row.id) == version else None)
    title = f"{row.display_name} ({row.id})" if row.display_name else row.id
    target = output or f"{row.id}.html"
    _check_report_target(target, row.id, trials)
    from vcli.view.progress import Steps

    try:
        with Steps(f"Drawing the report of {row.id}", err) as step:
            written = plots.write_report(target, title, spec, codec.iter_parameters(spec.parameters), trials,
                                         progress=step, slot=slot)
        for path in written:
            err(f"Wrote {path}.")
    except OSError as e:  # no such directory, a file in the way, no permission, a full disk
        from vcli.errors import InvalidValueError

        raise InvalidValueError("--output", f"cannot write [{e.filename or target}]: {e.strerror or e}") from None
    if not written:  # an .svg/.png report of a study with nothing to draw wrote nothing, exit 0
        from vcli.errors import InvalidValueError

        raise InvalidValueError("--output", f"nothing to draw for [{row.id}] as {os.path.splitext(target)[1]}: no trial "
                                            f"has a measurement yet ({len(trials)} trial(s)); an .html report shows "
                                            "the study as it is")


def _check_report_target(target: str, study_id: str, trials: list[Any]) -> None:
    """Refuse, before anything is drawn, a report that cannot be written: its directory is
    missing or a file, or it is one file per figure of a study with nothing to draw."""
    from vcli.errors import InvalidValueError
    from vcli.plots import OUTPUT_EXTENSIONS

    stem, ext = os.path.splitext(os.path.basename(target))
    if ext.lower() not in OUTPUT_EXTENSIONS or not stem:
        return  # `write_report` names what is wrong with the name itself
    parent = os.path.dirname(os.path.abspath(target))
    if not os.path.isdir(parent):
        why = "Not a directory" if os.path.exists(parent) else "No such file or directory"
        raise InvalidValueError("--output", f"cannot write [{target}]: {why}")
    if ext.lower() != ".html" and not any(t.measurements or t.final_measurement for t in trials):
        raise InvalidValueError("--output", f"nothing to draw for [{study_id}] as {ext.lower()}: no trial has a measurement yet "
                                            f"({len(trials)} trial(s)); an .html report shows the study as it is")


@app.command("tensorboard", cls=GcloudCommand)
@command("hp-tuning-jobs.tensorboard")
def tensorboard(
    job: o.StudyRef,
    port: Annotated[int, typer.Option("--port", help="vcli: TensorBoard's port (0: any free port).")] = 6006,
    host: Annotated[str, typer.Option("--host", help="vcli: the address TensorBoard binds (it has no authentication).")] = "127.0.0.1",
    region: o.Region = None,
) -> None:
    """vcli: serve TensorBoard over every trial's AIP_TENSORBOARD_LOG_DIR, one run per trial named
    by its id and parameters, each a session of the HPARAMS dashboard. Runs in the foreground
    until Ctrl-C."""
    import os

    from vcli import codec
    from vcli.codec.gcs import local_path
    from vcli.errors import InvalidValueError
    from vcli.plots import tensorboard as tb
    from vcli.store import Store

    if not 0 <= port <= 65535:  # TensorBoard's own traceback (-1), exit 255 (70000)
        raise InvalidValueError("--port", f"a port is a number from 0 to 65535 (0: any free port), not {port}.")
    _check_bindable(host, port)
    store = Store()
    row = get_row(store, job, JobKind.HYPERPARAMETER_TUNING_JOB)
    trials = store.trials(row.id)
    params = {t.id: t.parameters for t in trials}
    outputs = [(c.trial_id, params.get(c.trial_id, {}), c.record["outputDirectory"])
               for c in store.child_jobs(row.id) if c.trial_id and c.record.get("outputDirectory")]
    runs = tb.runs(outputs, local_path)
    spec = codec.study_spec_from_stored(row.record["studySpec"])
    study = tb.StudyLogs(str(store.job_dir(row.id) / "tensorboard"), spec, codec.iter_parameters(spec.parameters), trials)
    argv = tb.tensorboard_argv(runs, host=host, port=port, study=study)
    for r in runs:
        err(f"{r.name}: {r.log_dir}" + ("" if r.present else " (not on this machine: its HPARAMS session only)"))
    sys.stderr.flush()
    sys.stdout.flush()
    # exec: TensorBoard takes this process's place, so Ctrl-C or a kill stops it and nothing is left.
    os.execv(argv[0], argv)


def _check_bindable(host: str, port: int) -> None:
    """One line before TensorBoard starts for a port in use or a host not of this machine
    (TensorBoard said so after 5 s of its own start-up logging, and exited 255)."""
    import socket

    from vcli.errors import InvalidValueError

    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except (socket.gaierror, UnicodeError) as e:
        raise InvalidValueError("--host", f"cannot resolve [{host}]: {e}") from None
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(address)
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise InvalidValueError("--port", f"port {port} on {host} is in use (another TensorBoard?): "
                                                  "give another, or --port=0 for any free port.") from None
            raise InvalidValueError("--host", f"cannot listen on [{host}]:{port}: {e.strerror or e}") from None


@app.command("cancel", cls=GcloudCommand)
@command("hp-tuning-jobs.cancel")
def cancel(job: o.StudyRef, no_wait: o.NoWait = False, region: o.Region = None) -> None:
    """Cancel a running study from any terminal: every trial is stopped."""
    STUDIES.cancel(job, wait=not no_wait)


@app.command("stream-logs", cls=GcloudCommand)
@command("hp-tuning-jobs.stream-logs")
def stream_logs_(
    job: o.StudyRef,
    task_name: Annotated[Optional[str], typer.Option("--task-name", help="Only this replica of each trial, e.g. workerpool0-0.")] = None,
    polling_interval: o.PollingInterval = 1,
    region: o.Region = None,
    allow_multiline_logs: o.AllowMultilineLogs = False,
) -> None:
    """Print the logs of every trial (task names `trial-N/workerpool0-0`) until the study ends."""
    STUDIES.stream_logs(job, task_name)

"""From a resolved spec to a running job: plan, record, run, or hand to a detached runner.

The CLI assembles a spec from flags and files, then uses this module in three steps:
`plan_*` (build the executor and placer, plan and check every replica: nothing is recorded,
so a bad job leaves no trace), `submit_*` (record the job QUEUED), and `run_*` (run it to its
end in this process). `spawn_runner` starts a detached vcli process that runs a recorded job
instead (`create --async`). What is printed, and the exit code, stay in the CLI.

Every `Planned*` owns its `Execution`: the caller closes it (`planned.close()`) when done.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from vcli.control import recovery
from vcli.control.secrets import replicas_to_start, secrets_from_environment, study_starts_replicas
from vcli.control.suggesting import install_hint as install_hint  # where `study_suggester` names an extra
from vcli.control.suggesting import study_suggester
from vcli.control.waiting import end_queued, plan_waiting, queue_job
from vcli.control.wiring import Execution, executor_kind, open_execution
from vcli.enums import RpcCode
from vcli.errors import ExecutorError, MissingExtraError, VcliError
from vcli.spec import (
    CustomJobSpec,
    HyperparameterTuningJobSpec,
    JobKind,
    JobState,
    secret_values,
    with_secret_values,
)
from vcli.store import JobRow, Store, new_id
from vcli.tuning.events import StudyListener

# --------------------------------------------------------------------------- custom jobs


@dataclass
class PlannedJob:
    """A custom job planned and checked against its executor; not recorded, nothing started."""

    store: Store
    job_id: str
    spec: CustomJobSpec
    execution: Execution
    plan: Any  # vcli.control.jobs.JobPlan
    #: What the store keeps besides the state: jobSpec, labels, executor, output dir, hosts...
    record: dict[str, Any]
    #: For a resumed job: the stored replica rows (task name -> row) to take over.
    resume: Mapping[str, Any] | None = None
    #: Recorded QUEUED (and this process its controller) while it waited for GPUs, before its
    #: plan was complete (`plan_custom_job` with a display name): not to be submitted again.
    recorded: bool = False

    def close(self) -> None:
        self.execution.close()


def _open(executor: str | None, hosts: str | None, spec: CustomJobSpec | None = None, *,
          leases: bool = True, job: Mapping[str, Any] | None = None) -> Execution:
    from vcli import properties

    execution = open_execution(executor_kind(executor, spec), hosts, leases=leases, job=job)  # job: labels, record
    auto = not (executor or os.environ.get("VCLI_EXECUTOR") or properties.get("executor"))
    return replace(execution, auto=auto)


@contextlib.contextmanager
def _closed_on_error(execution: Execution) -> Iterator[None]:
    """Close `execution` if the block raises (then re-raise)."""
    try:
        yield
    except BaseException:
        execution.close()
        raise


def plan_custom_job(
    spec: CustomJobSpec, *, executor: str | None, hosts: str | None, shm_size: str | None, labels: Mapping[str, str],
    ready: bool = True, on_wait: Callable[[str], None] | None = None, leases: bool = True,
    display_name: str | None = None, executor_settings: Mapping[str, Any] | None = None,
) -> PlannedJob:
    """Plan every replica of `spec` and check it with the executor (`--executor`/`--hosts`).

    Raises the executor's or planner's `VcliError` for a job that cannot run; the execution is
    closed then. `ready=False` skips asking whether the executor can run it now (engine up,
    images present): `--validate-only` judges the job, not the machine. `leases=False` places
    without taking host-wide GPU leases (a job that is only validated, or run by another
    process); with them, a job whose GPUs other replicas hold waits (`plan_waiting`).

    `display_name` (a job run by this process): a job that waits for GPUs is recorded QUEUED
    meanwhile (`recorded`; see `vcli.control.waiting`), ended FAILED or CANCELLED if the wait is.

    `executor_settings`: the flags' settings by kind (`{"slurm": {"partition": ...}}`, `Execution.settings`).
    """
    from vcli.control.jobs import plan_job
    from vcli.control.plan import check_packages

    check_packages(spec)
    execution = _open(executor, hosts, spec, leases=leases, job={**(executor_settings or {}), "labels": labels})
    with _closed_on_error(execution):  # vcli's home cannot be used: the execution is not left open
        store = Store()
    job_id = new_id()
    queued: list[bool] = []

    def record(output_directory: str | None) -> dict[str, Any]:  # what the store keeps besides the state
        from vcli import codec

        return {"jobSpec": codec.custom_job_spec_to_dict(spec), "labels": dict(labels), "executor": execution.kind.value,
                "outputDirectory": output_directory, "hosts": hosts, **execution.settings(), "shmSize": shm_size,
                "workingDirectory": os.getcwd()}  # where commands and image-less modules are found (resume)

    def waiting(message: str) -> None:
        assert on_wait is not None
        on_wait(message)
        if display_name is not None and not queued:
            queue_job(store, job_id, display_name, record(None))
            queued.append(True)
            on_wait(f"CustomJob [{job_id}] is queued until then: `vcli custom-jobs cancel {job_id}` from another "
                    "terminal stops the wait.")

    try:
        plan = plan_waiting(lambda: plan_job(spec, job_id=job_id, job_dir=store.home / "jobs" / job_id,
                                             executor=execution.executor, shm_size=shm_size, placer=execution.placer),
                            spec, waiting if on_wait is not None else None,
                            cancelled=lambda: bool(queued) and store.cancel_requested(job_id))
        execution.executor.check(plan.launches)
        if ready:
            execution.executor.ready(plan.launches)
    except BaseException as e:
        execution.close()
        if queued:
            raise end_queued(store, job_id, e) from None
        raise
    return PlannedJob(store=store, job_id=job_id, spec=spec, execution=execution, plan=plan,
                      record=record(plan.base_output_directory), recorded=bool(queued))


def submit_custom_job(job: PlannedJob, display_name: str) -> JobRow:
    """Record the planned job as QUEUED (one queued while it waited: its whole record); its row."""
    if job.recorded:
        job.store.update_job(job.job_id, record=job.record)
        row = job.store.get_job(job.job_id)
        assert row is not None
        return row
    return job.store.create_job(kind=JobKind.CUSTOM_JOB, display_name=display_name, record=job.record,
                                state=JobState.JOB_STATE_QUEUED, job_id=job.job_id)


@dataclass(frozen=True)
class JobOutcome:
    state: JobState
    #: Why the job could not start (an executor or spec error), if that is how it ended.
    startup_error: BaseException | None = None


def run_custom_job(
    job: PlannedJob, *, on_progress: Callable[[str], None], on_tick: Callable[[], None] = lambda: None
) -> JobOutcome:
    """Run a submitted job to its end in this process (KeyboardInterrupt cancels it and re-raises).

    A job planned by `plan_resumed_custom_job` is taken over instead: its replicas that
    still run are adopted, not started again.
    """
    from vcli.control.jobs import JobRun, run_job
    from vcli.tracking.hooks import tracked_job

    with contextlib.ExitStack() as stack:
        try:  # with tracking on, an MLflow run that the chief logs into
            stack.enter_context(tracked_job(job, on_progress))
        except (KeyboardInterrupt, SystemExit):
            _cancel_unstarted(job.store, job.job_id)
            raise
        timeout = job.spec.scheduling.timeout_seconds if job.spec.scheduling else None
        run = JobRun(store=job.store, executor=job.execution.executor, plan=job.plan, timeout_seconds=timeout,
                     on_progress=on_progress)
        state = run_job(run, on_tick=on_tick, attach=job.resume)
    return JobOutcome(state, run.startup_error)


def _cancel_unstarted(store: Store, job_id: str) -> None:
    """An interrupt before a job or study started anything (while its tracking store opened)
    records it CANCELLED, as an interrupted wait for GPUs does: never QUEUED with no controller."""
    row = store.get_job(job_id)
    if row is not None and row.state == JobState.JOB_STATE_QUEUED:
        store.set_state(job_id, JobState.JOB_STATE_CANCELLED, error={"code": RpcCode.CANCELLED, "message": "CANCELED"})


def plan_resumed_custom_job(store: Store, row: JobRow, *, on_wait: Callable[[str], None] | None = None) -> PlannedJob:
    """Plan a job whose controller died, for a new controller that takes it over (`resume`).

    Replicas the old controller started keep their recorded placement, address and handle (or
    are found by the executor, their handle never recorded); a job that never got as far as
    starting replicas is planned afresh.
    """
    from vcli import codec

    rows = {r.task_name: r for r in store.replicas(row.id)}
    stored = codec.custom_job_spec_from_stored(row.record["jobSpec"])
    secrets = None
    if replicas_to_start(store, row):
        secrets = secret_values(secrets_from_environment(stored, f"Resuming job {row.id}"))
    if not rows:
        return plan_stored_custom_job(store, row, secrets=secrets, on_wait=on_wait)
    # Its replicas still hold their GPUs (their supervisors hold the leases): nothing is placed again.
    planned = plan_stored_custom_job(store, row, secrets=secrets, restore=restore_of(rows.values()))
    try:
        # With no handle recorded, a replica may still have started (its controller killed before
        # the write): adopted, never started twice. Only a job that started none is placed afresh.
        if any(r.handle for r in rows.values()) or recovery.unrecorded(planned.execution.executor, planned.plan.launches,
                                                                        rows):
            planned.resume = rows
            return planned
    except BaseException:
        planned.close()
        raise
    planned.close()
    return plan_stored_custom_job(store, row, secrets=secrets, on_wait=on_wait)


def restore_of(rows: Any) -> dict[str, tuple[Any, str]]:
    """Recorded placements and addresses of replica rows, for `plan_job(restore=...)`."""
    from vcli.control.active import restored_placements

    return restored_placements(rows)





def enter_working_directory(record: Mapping[str, Any]) -> None:
    """Work where the job was created: its commands and modules without a package were found
    there (relative paths, the current directory on PYTHONPATH), so a `resume` from another
    directory must not change what its trials run. A directory that is gone changes nothing."""
    where = record.get("workingDirectory")
    if isinstance(where, str) and os.path.isdir(where):
        os.chdir(where)


def plan_stored_custom_job(store: Store, row: JobRow, *, secrets: Mapping[str, str] | None = None,
                           on_wait: Callable[[str], None] | None = None,
                           restore: Mapping[str, Any] | None = None) -> PlannedJob:
    """Plan a recorded job again from its record (the detached runner of `create --async`).

    The record holds secret values redacted; `secrets` (handed over by the process that
    submitted the job, never stored) puts them back. GPUs other replicas hold are waited for
    as `plan_waiting` says, when `on_wait` is given.
    """
    from vcli import codec
    from vcli.control.jobs import plan_job

    rec = row.record
    enter_working_directory(rec)
    spec = with_secret_values(codec.custom_job_spec_from_stored(rec["jobSpec"]), secrets or {})
    execution = _open(rec.get("executor") or "local", rec.get("hosts"), job=rec)
    try:
        plan = plan_waiting(lambda: plan_job(
            spec, job_id=row.id, job_dir=store.home / "jobs" / row.id, executor=execution.executor,
            shm_size=rec.get("shmSize"), placer=execution.placer, base_output_directory=rec.get("outputDirectory"),
            restore=restore, trial_id=row.trial_id), spec, on_wait, cancelled=lambda: store.cancel_requested(row.id))
    except BaseException:
        execution.close()
        raise
    return PlannedJob(store=store, job_id=row.id, spec=spec, execution=execution, plan=plan, record=dict(rec))


def spawn_runner(store: Store, job_id: str, argv: list[str], *, secrets: Mapping[str, str] | None = None) -> None:
    """Start a detached `vcli ARGV` that runs a recorded job; its output goes to controller.log.

    `secrets` (name -> value) go to the runner through a pipe on its stdin, as one JSON
    document: never through the store, a file or its command line.
    """
    import json
    import os
    import subprocess

    from vcli.control.liveness import mark_controller

    log = store.job_dir(job_id) / "controller.log"
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "ab", buffering=0) as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "vcli", *argv],
            stdin=subprocess.PIPE, stdout=out, stderr=out, start_new_session=True, close_fds=True,
        )
    assert proc.stdin is not None
    try:
        proc.stdin.write(json.dumps(dict(secrets or {})).encode())
    finally:
        proc.stdin.close()
    # The runner records itself as the controller; until then the spawner stands in, so a
    # `cancel` in between waits for the runner instead of finding no controller.
    mark_controller(store, job_id, proc.pid)


# --------------------------------------------------------------------------- studies


@dataclass
class PlannedStudy:
    """A study with its suggester and executor; not recorded, no trial started."""

    store: Store
    study_id: str
    display_name: str
    spec: HyperparameterTuningJobSpec
    execution: Execution
    suggester: Any  # vcli.tuning.suggesters.Suggester
    seed: int
    shm_size: str | None
    record: dict[str, Any]

    def close(self) -> None:
        from vcli.control.suggesting import close

        close(self.suggester)
        self.execution.close()


def plan_study(
    spec: HyperparameterTuningJobSpec,
    *,
    display_name: str,
    labels: Mapping[str, str],
    seed: int | None,
    bayesian_backend: str,
    executor: str | None,
    hosts: str | None,
    shm_size: str | None,
    leases: bool = True,
    executor_settings: Mapping[str, Any] | None = None,
    warm_start: Any = None,
) -> PlannedStudy:
    """Build the study's executor and suggester (a random seed unless given), the suggester
    told the priors of `warm_start` (a `vcli.control.warmstart.WarmStart`, recorded too).
    Raises `InvalidValueError` for a study the suggester rejects, and `UsageError` naming the
    extra to install when it needs an optional package."""
    from vcli import codec

    if seed is None:
        import secrets

        seed = secrets.randbelow(2**31)
    elif not 0 <= seed < 2**63:  # numpy's seeds are non-negative: -1 crashed the controller after the study was recorded
        from vcli.errors import InvalidValueError

        raise InvalidValueError("--seed", f"must be an integer from 0 to {2**63 - 1}, received {seed}.")
    from vcli.control.plan import check_packages

    check_packages(spec.trial_job_spec, "trialJobSpec.")
    execution = _open(executor, hosts, spec.trial_job_spec, leases=leases,
                      job={**(executor_settings or {}), "labels": labels})
    try:
        store = Store()
        study_id = new_id()
        record = {
            "studySpec": codec.study_spec_to_dict(spec.study_spec),
            "trialJobSpec": codec.custom_job_spec_to_dict(spec.trial_job_spec),
            "maxTrialCount": spec.max_trial_count,
            "parallelTrialCount": spec.parallel_trial_count,
            "maxFailedTrialCount": spec.max_failed_trial_count,
            "labels": dict(labels),
            "seed": seed,
            "executor": execution.kind.value,
            "bayesianBackend": bayesian_backend,
            "studyTimeout": f"{spec.study_timeout_seconds:g}s" if spec.study_timeout_seconds else None,
            "goalValue": spec.goal_value,
            "outputDirectory": spec.trial_job_spec.base_output_directory or str(store.home / "jobs" / study_id / "output"),
            "hosts": hosts, **execution.settings(),
            "shmSize": shm_size,
            "workingDirectory": os.getcwd(),  # where commands and image-less modules are found (resume)
            **(warm_start.record() if warm_start is not None else {}),
        }
        suggester = study_suggester(spec, seed, bayesian_backend, warm_start.priors if warm_start is not None else ())
    except BaseException:
        execution.close()
        raise
    return PlannedStudy(store=store, study_id=study_id, display_name=display_name, spec=spec, execution=execution,
                        suggester=suggester, seed=seed, shm_size=shm_size, record=record)


def plan_stored_study(store: Store, row: JobRow, *, secrets: Mapping[str, str] | None = None) -> PlannedStudy:
    """A recorded study, its suggester rebuilt from the recorded seed and priors (`resume`,
    `extend`, and the runner of `create --async`, which is handed the values of the secret
    variables as `secrets`; `resume` and `extend` take them from their environment)."""
    from vcli import codec

    rec = row.record
    enter_working_directory(rec)
    spec = HyperparameterTuningJobSpec(
        study_spec=codec.study_spec_from_stored(rec["studySpec"]),
        trial_job_spec=codec.custom_job_spec_from_stored(rec["trialJobSpec"]),
        max_trial_count=int(rec["maxTrialCount"]),
        parallel_trial_count=int(rec["parallelTrialCount"]),
        max_failed_trial_count=int(rec.get("maxFailedTrialCount") or 0),
        study_timeout_seconds=float(rec["studyTimeout"].rstrip("s")) if rec.get("studyTimeout") else None,
        goal_value=rec.get("goalValue"),
    )
    if secrets is not None:
        spec = replace(spec, trial_job_spec=with_secret_values(spec.trial_job_spec, secrets))
    elif study_starts_replicas(store, row, spec.max_trial_count):
        spec = replace(spec, trial_job_spec=secrets_from_environment(spec.trial_job_spec, f"Resuming study {row.id}"))
    execution = _open(rec.get("executor") or "local", rec.get("hosts"), job=rec)
    try:
        from vcli.control.warmstart import stored_priors

        suggester = study_suggester(spec, int(rec["seed"]), rec.get("bayesianBackend") or "gp", stored_priors(rec))
    except BaseException:
        execution.close()
        raise
    return PlannedStudy(store=store, study_id=row.id, display_name=row.display_name, spec=spec, execution=execution,
                        suggester=suggester, seed=int(rec["seed"]), shm_size=rec.get("shmSize"), record=dict(rec))


def check_study(study: PlannedStudy) -> VcliError | None:
    """Plan one trial job and check it with the executor (`--validate-only`); records nothing.
    Returns why the executor could not run it now (engine down, image missing), as
    `custom-jobs create --validate-only` reports it, or None."""
    from vcli.control.jobs import plan_job

    plan = plan_job(study.spec.trial_job_spec, job_id="TRIAL_JOB_ID", job_dir=study.store.home / "jobs" / "validate-only",
                    executor=study.execution.executor, trial_id="1", placer=study.execution.placer)
    plan.release_placement()
    study.execution.executor.check(plan.launches)
    try:
        study.execution.executor.ready(plan.launches)
    except (ExecutorError, MissingExtraError) as e:
        return e
    return None


def submit_study(study: PlannedStudy) -> JobRow:
    """Record the study as QUEUED, with this process as its controller."""
    from vcli.control.liveness import claim_controller

    row = study.store.create_job(kind=JobKind.HYPERPARAMETER_TUNING_JOB, display_name=study.display_name,
                                 record=study.record, state=JobState.JOB_STATE_QUEUED, job_id=study.study_id)
    claim_controller(study.store, study.study_id)
    return row


def study_run(
    study: PlannedStudy,
    *,
    listener: StudyListener,
) -> Any:
    """The `StudyRun` controller of a submitted study; `.run()` runs it to its end, telling
    `listener` what happens."""
    from vcli.control.study import StudyRun
    from vcli.tracking.hooks import study_tracker
    from vcli.tuning.events import Listeners

    try:
        tracker = study_tracker(study.store, study.study_id, study.display_name, study.spec, study.record,
                                listener.progress)
    except (KeyboardInterrupt, SystemExit):
        _cancel_unstarted(study.store, study.study_id)
        raise
    return StudyRun(
        store=study.store, executor=study.execution.executor, spec=study.spec, study_id=study.study_id,
        display_name=study.display_name, suggester=study.suggester,
        listener=Listeners(tracker, listener) if tracker is not None else listener,
        placer=study.execution.placer, shm_size=study.shm_size, seed=study.seed,
        prepare_trial=tracker.prepare_trial if tracker is not None else None,
        enqueued=tuple(study.record.get("enqueuedTrials") or ()),
    )

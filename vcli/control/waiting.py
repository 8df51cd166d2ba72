"""Waiting for GPUs other replicas hold (other vcli processes, users or controllers): the
retry loop every custom job goes through while it is planned, and the record of a job that
waits in the store (QUEUED, this process its controller), so that `list`, `describe` and
`cancel` from another terminal see it and a `cancel` ends the wait (`WaitCancelled`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from vcli.enums import JobKind, JobState, RpcCode
from vcli.errors import WaitExpiredError
from vcli.spec import CustomJobSpec
from vcli.store import Store

#: How often a job that waits for GPUs held by other vcli processes tries again.
WAIT_RETRY_SECONDS = 0.25


class WaitCancelled(Exception):
    """The job was cancelled (`cancel` from another terminal) while it waited for GPUs."""


class TrialWait:
    """A study's wait for capacity to start its next trial (`Study._plan_trial`): said once per
    wait, and bounded by the trial job's `scheduling.maxWaitDuration` (`limit`), which counts
    only while none of the study's own trials runs. Those hold the GPUs the next trial waits
    for, and end by themselves: on Vertex each trial has machines of its own, so a study never
    waits for itself (counting that time failed every study with more parallel trials than GPUs
    whose trials ran longer than the limit, found by a probe)."""

    def __init__(self, limit: float | None, placer: Any = None) -> None:
        self.limit = limit
        self.placer = placer  # its queue entry goes with a trial whose wait ran out
        self.since: float | None = None  # when the counted wait began; None: not waiting
        self.began = ""  # when the wait of the trial that waits (or waited last) began, ISO 8601: its startTime

    def busy(self, now: float, own_running: bool, trial_id: str, reason: Exception,
             say: Callable[[str], None]) -> None:
        """Trial `trial_id` found no capacity (`reason`). Raises WaitExpiredError once it has
        waited longer than the limit with none of the study's trials running."""
        if self.since is None:
            from vcli.store import now_iso

            self.began = now_iso()
            say(f"Waiting for capacity to start trial {trial_id}: {reason}")
        if self.since is None or own_running:
            self.since = now
        elif self.limit is not None and now - self.since > self.limit:
            self.since = None
            # the next trial queues afresh: the entry of this one, first in line, kept the GPUs from it
            if (stop_waiting := getattr(self.placer, "stop_waiting", None)) is not None:
                stop_waiting()
            raise WaitExpiredError(f"Trial {trial_id} found no capacity within scheduling.maxWaitDuration "
                                   f"({self.limit:g}s): {reason}")

    def placed(self) -> None:
        self.since = None


def plan_waiting(make_plan: Callable[[], Any], spec: CustomJobSpec, on_wait: Callable[[str], None] | None,
                 cancelled: Callable[[], bool] | None = None) -> Any:
    """`make_plan()`, tried again while its GPUs are held by other replicas (other vcli
    processes, users or controllers): says once what it waits for through `on_wait`, and
    waits at most `scheduling.maxWaitDuration` (unset or 0: until they are free; FLEX_START:
    24 h unless set), or until `cancelled()` says the job was cancelled (`WaitCancelled`).
    Without `on_wait` a busy GPU raises `NoCapacityError` at once."""
    import time

    from vcli.placement import NoCapacityError

    limit = spec.scheduling.wait_limit_seconds if spec.scheduling else None
    # what it waits for: "GPUs" said so for a CPU-only job pending on Slurm or Ray
    what = "GPUs" if any(p.machine_spec.accelerator_count for p in spec.worker_pool_specs) else "capacity"
    started = time.monotonic()
    said = False
    while True:
        try:
            return make_plan()
        except NoCapacityError as e:
            if on_wait is None:
                raise
            if limit is not None and time.monotonic() - started >= limit and not getattr(e, "placer_waits", False):
                free = "free GPUs" if what == "GPUs" else "capacity"
                raise WaitExpiredError(f"The job found no {free} within scheduling.maxWaitDuration ({limit:g}s): "
                                       f"{e}") from None
            if not said:
                on_wait(f"Waiting for {what}: {e}")
                said = True
            if cancelled is not None and cancelled():
                raise WaitCancelled() from None
            time.sleep(WAIT_RETRY_SECONDS)


def lease_unstarted(launches: Any, spec: CustomJobSpec, on_wait: Callable[[str], None] | None,
                    cancelled: Callable[[], bool] | None = None,
                    remote: Callable[[str], Any] | None = None) -> None:
    """Take the leases of the recorded GPUs of `launches` (a resumed job's replicas that never
    started: `recovery.leased`), waiting for them as `plan_waiting` waits for a new job's, in
    the host's waiting queue meanwhile (`vcli hosts gpus` shows it WAITING): the leases stay with
    this process until each replica's start hands them to its supervisor. This machine's GPUs,
    and an SSH host's when `remote(host)` gives its leases (`SSHExecutor.gpu_leases`). A host
    whose leases cannot be asked for is the executor's error, not a wait."""
    from vcli.errors import ExecutorError
    from vcli.placement import NoCapacityError
    from vcli.placement.gpulease import LeaseBusy, base_record
    from vcli.placement.gpus import local_leases
    from vcli.properties import gpu_lease_dir

    def leases_of(host: str) -> Any:
        return local_leases(gpu_lease_dir()) if host == "local" else None if remote is None else remote(host)

    todo = [(launch, leases_of(launch.placement.host)) for launch in launches if launch.placement.gpu_indices]
    todo = [(launch, leases) for launch, leases in todo if leases is not None]
    if not todo:
        return
    queued: dict[int, Any] = {}  # id(leases) -> its queue entry, once a GPU there was found held
    gpus = sum(len(launch.placement.gpu_indices) for launch, _ in todo)

    def take() -> None:
        for launch, leases in todo:
            missing = [i for i in launch.placement.gpu_indices if leases.held_here(i) is None]
            try:
                leases.acquire(missing, base_record(job=launch.job_id, trial=launch.trial_id, replica=launch.task_name))
            except LeaseBusy as e:
                if "unavailable" in e.holder:  # the host cannot be asked: waiting would not end it
                    raise ExecutorError(f"Cannot start replica {launch.task_name} on host "
                                        f"{launch.placement.host}: {e}.") from None
                if id(leases) in queued:
                    queued[id(leases)].touch()  # still trying: keeps its place
                else:
                    queued[id(leases)] = leases.queue(base_record(job=launch.job_id, trial=launch.trial_id, gpus=gpus))
                raise NoCapacityError(f"replica {launch.task_name}'s {e}") from None

    try:
        plan_waiting(take, spec, on_wait, cancelled)
    finally:
        for entry in queued.values():
            entry.close()


def queue_job(store: Store, job_id: str, display_name: str, record: dict[str, Any]) -> None:
    """Record a job that waits for GPUs as QUEUED, this process its controller."""
    from vcli.control.liveness import claim_controller

    store.create_job(kind=JobKind.CUSTOM_JOB, display_name=display_name, record=record,
                     state=JobState.JOB_STATE_QUEUED, job_id=job_id)
    claim_controller(store, job_id)


def end_queued(store: Store, job_id: str, error: BaseException) -> BaseException:
    """Record the final state of a queued job whose wait for GPUs ended without a plan:
    CANCELLED when cancelled or interrupted, else FAILED with the reason. Returns what to raise:
    `error`, or for a VcliError of another exit code (its executor lost, say) the same message
    with a failed job's exit code, as the job is recorded (it exited 3)."""
    from vcli.errors import ExitCode, QueuedJobFailed, VcliError

    if isinstance(error, (WaitCancelled, KeyboardInterrupt, SystemExit)):
        store.set_state(job_id, JobState.JOB_STATE_CANCELLED, error={"code": RpcCode.CANCELLED, "message": "CANCELED"})
        return error
    store.set_state(job_id, JobState.JOB_STATE_FAILED, error={"code": RpcCode.INTERNAL, "message": str(error)})
    if isinstance(error, VcliError) and error.exit_code not in (ExitCode.JOB_FAILED, ExitCode.CANCELLED):
        return QueuedJobFailed(str(error))
    return error

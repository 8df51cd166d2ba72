"""`SlurmPlacer`: what `plan_job` calls to place a job (or one trial) on Slurm: one allocation
per job or trial, submitted by the executor, and the replicas' placements once it runs."""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from vcli.errors import ExecutorError
from vcli.executors import Placement
from vcli.executors.slurm.allocation import allocation_key, allocation_name
from vcli.executors.slurm.status import unlink

if TYPE_CHECKING:
    from vcli.executors.slurm.executor import SlurmExecutor

#: How long the placer waits for a job it has just submitted to start, before calling the
#: cluster full for now (later asks do not wait: a study's loop goes on).
FIRST_WAIT_SECONDS = 3.0


class SlurmPlacer:
    """The `plan_job` placer of a `SlurmExecutor`: one allocation per job or trial.

    `submit=False` (validation, print-env) checks that the job could ever fit and places
    nothing: replicas get a placeholder node."""

    def __init__(self, executor: SlurmExecutor, *, submit: bool = True, labels: Mapping[str, str] | None = None) -> None:
        self.executor = executor
        self.submit = submit
        self.labels = dict(labels or {})

    def __call__(self, replicas: Sequence[Any], spec: Any = None, job_id: str | None = None,
                 holder: Mapping[str, Any] | None = None, **_: Any) -> list[Placement]:
        from vcli.placement import NoCapacityError, PlacementError

        if spec is None:
            return [Placement() for _ in replicas]
        ex = self.executor
        groups = ex.task_groups(replicas, spec)
        if not self.submit:
            return [Placement(host=f"<slurm node {i}>", address="<slurm node>") for i in range(len(replicas))]
        job_id = job_id or uuid.uuid4().hex[:12]
        holder = holder or {}
        key = allocation_key(job_id, holder)
        with ex._lock:
            alloc = ex._pending.get(key)
        first = alloc is None
        if alloc is None:
            sched = spec.scheduling
            name = allocation_name(key)
            # a controller killed while this job's (or trial's) allocation pended left it queued
            ex.cancel_named(lambda other: other == name, pending_only=True)
            alloc = ex.submit(groups, key=key, name=name, comment=comment(key, self.labels),
                              timeout_seconds=sched.timeout_seconds if sched else None,
                              max_wait=sched.wait_limit_seconds if sched else None)
            with ex._lock:
                ex._pending[key] = alloc
        state, reason = ex.wait_running(alloc, FIRST_WAIT_SECONDS if first else 0.0)
        if state == "PENDING":
            waited = time.monotonic() - alloc.submitted
            if alloc.max_wait is not None and waited >= alloc.max_wait:
                self._drop(key)
                raise PlacementError(f"Slurm job {alloc.slurm_id} pended longer than scheduling.maxWaitDuration "
                                     f"({alloc.max_wait:g}s; Slurm's pending reason: {reason}) and was cancelled.")
            busy = NoCapacityError(f"Slurm job {alloc.slurm_id} is pending ({reason}).")
            busy.placer_waits = alloc.max_wait is not None  # type: ignore[attr-defined]  # it cancels the job itself
            raise busy
        if state != "RUNNING":
            self._drop(key)
            raise ExecutorError(f"Slurm job {alloc.slurm_id} did not run: {state} ({reason}).")
        try:
            placements = ex.placements(alloc, replicas)
        except BaseException:
            self._drop(key)
            raise
        with ex._lock:
            ex._pending.pop(key, None)
            alloc.job_id = job_id
            ex._allocs[job_id] = alloc
        return placements

    def _drop(self, key: str) -> None:
        with self.executor._lock:
            alloc = self.executor._pending.pop(key, None)
        if alloc is not None:
            self.executor.cancel_allocation(alloc.slurm_id)
            unlink(alloc.lease)

    def release(self, job_id: str) -> None:
        self.executor.release_job(job_id)

    def hold(self, job_id: str, replicas: Sequence[Any], spec: Any, placements: Sequence[Any]) -> None:
        """Nothing to do: the job's allocation is Slurm's, held for it whatever vcli process runs."""


def comment(key: str, labels: Mapping[str, str]) -> str:
    """The Slurm job's `--comment` (squeue's %k): `vcli KEY` and the job's labels, `k=v,...`."""
    return f"vcli {key}" + (" " + ",".join(f"{k}={v}" for k, v in sorted(labels.items())) if labels else "")

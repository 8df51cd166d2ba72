"""Capacity-aware placement of a job's replicas onto hosts (all or nothing). Standard library only.

The scheduler knows every host's capacity: GPUs by index and type (through `vcli.placement.gpus.
GpuAllocator`), CPUs and memory. A request is one job's (or trial's) replicas, each with a
Vertex machine type (mapped to vCPUs/memory by `machine_resources`) and an optional
accelerator type and count. `try_place` places every replica at once or nothing:

- GPUs are hard limits: a replica gets `accelerator_count` specific indices of one host that
  no other replica holds, of the requested `accelerator_type` (a host that declares GPUs but
  no type matches any type). A GPU is never given to two replicas.
- CPU and memory (when `enforce_cpu_memory` and the host's numbers are known) are limits too,
  but a machine type larger than a whole host is capped at that host: it means "the whole
  host", so an `n1-highmem-16` on an 8-core workstation runs alone instead of never.
- Replicas of one job are spread over distinct hosts when possible (as on Vertex, where each
  replica is its own VM); otherwise they share hosts. Among candidates, GPU requests prefer
  the best fit (fewest GPUs left over); CPU-only ones the least loaded host.
- A request that could not fit even on empty, healthy hosts fails at once (`PlacementError`,
  saying what is missing); one that does not fit *now* gets None from `try_place` (or waits
  in `place`) until `release` frees room. A study keeps such trials queued and tries again.
- Hosts marked unhealthy (`mark_unhealthy`, e.g. after an SSH connection died) get nothing new
  until `mark_healthy`.

Thread-safe; one lock. The bookkeeping is in memory (one vcli process: a job, a study); what
spans vcli processes, users and controllers is the host-wide GPU lease (`vcli.placement.gpulease`) the
allocator takes for every GPU it places on a host that has a lease directory (this machine's,
for the local and docker executors): a GPU another process leased is not free here.

    machines.py    the Vertex machine-type catalogue (`machine_resources`)
    scheduler.py   requests, host capacity and the `Scheduler`
    hosts.py       the host inventory (`hosts.yaml`): `Host`, `local_host()`, `resolve_hosts`;
                   its files in `hostfiles.py`, the rules of a host's settings in `hostrules.py`
    __init__.py    the placers `vcli.control.jobs.plan_job` calls (`JobPlacer`, `local_placer`)

`vcli.control.wiring` builds the scheduler for an ssh run and hands it to the SSH executor as
its `HostHealth` (it hears which hosts died); nothing here imports an executor.
"""

from __future__ import annotations

import threading
from typing import Any, Sequence

from vcli.placement.machines import machine_resources
from vcli.placement.scheduler import (
    HostCapacity,
    NoCapacityError,
    PlacementError,
    PlacementRequest,
    ReplicaRequest,
    Scheduler,
    request_for_job,
)
from vcli.placement.types import HERE, Placement

__all__ = [
    "HERE",
    "HostCapacity",
    "JobPlacer",
    "NoCapacityError",
    "PlacementError",
    "PlacementRequest",
    "ReplicaRequest",
    "Scheduler",
    "local_placer",
    "machine_resources",
    "request_for_job",
    "scheduler_for_hosts",
]


def scheduler_for_hosts(hosts: Sequence[Any], **kwargs: Any) -> Scheduler:
    """A scheduler over `vcli.placement.hosts.Host`s (e.g. `[hosts.local_host()]` for this machine)."""
    return Scheduler([HostCapacity.from_host(h) for h in hosts], **kwargs)


def local_placer(*, enforce_cpu_memory: bool = False, leases: bool = True) -> Any:
    """A `plan_job` placer for this machine alone that assigns GPUs (local executors).

    GPUs come from an inventory entry `local`, $VCLI_LOCAL_GPUS, $VCLI_GPUS or nvidia-smi. CPU
    and memory are not enforced by default (a workstation runs what it is given, as before).
    With `leases` (what runs replicas), every placed GPU is leased host-wide
    (`vcli.placement.gpus.local_leases()`), and GPUs that other vcli processes lease are busy; without
    (`--validate-only`, `print-env`), placement only says where the job would go.
    """
    from vcli import properties
    from vcli.placement.gpus import GpuAllocator, local_leases
    from vcli.placement.hosts import LOCAL, local_host

    allocator = GpuAllocator({LOCAL: local_leases(properties.gpu_lease_dir())} if leases else None,
                             nvidia_check=leases and properties.gpu_exclude_busy())
    return JobPlacer(scheduler_for_hosts([local_host()], enforce_cpu_memory=enforce_cpu_memory,
                                         gpu_allocator=allocator))


class JobPlacer:
    """The `placer(replicas, spec=..., job_id=...)` callable `vcli.control.jobs.plan_job` uses.

    Non-blocking by default: a job that does not fit now raises NoCapacityError (a study's
    controller keeps the trial queued and tries again; `wait_seconds` makes it wait instead),
    one that never fits raises PlacementError. Without `spec` (older callers) replicas ask for
    nothing but are still spread over the hosts.
    """

    def __init__(self, scheduler: Scheduler, *, wait_seconds: float = 0.0) -> None:
        self.scheduler = scheduler
        self.wait_seconds = wait_seconds
        self._anon = 0
        self._lock = threading.Lock()
        #: Entries in the hosts' waiting queues (`vcli hosts gpus`), per waiting job or trial.
        self._waiting: dict[tuple[Any, ...], list[Any]] = {}

    def __call__(self, replicas: Sequence[Any], spec: Any = None, job_id: str | None = None,
                 holder: Any = None, **_: Any) -> list[Placement]:
        """`holder` (job, trial, study, ...) is recorded in the host-wide leases of the GPUs."""
        if job_id is None:
            with self._lock:
                self._anon += 1
                job_id = f"anonymous-{self._anon}"
        if spec is not None:
            request = request_for_job(job_id, spec, replicas, with_machine=self.scheduler.enforce_cpu_memory,
                                      holder=holder)
        else:
            request = PlacementRequest(job_id=job_id, replicas=tuple(ReplicaRequest(r.task_name) for r in replicas))
        if self.scheduler.placed(job_id):  # planned again (e.g. print-env, then create): start afresh
            self.scheduler.release(job_id)
        key = tuple(sorted((holder or {}).items())) or (job_id,)
        try:
            if self.wait_seconds:
                got = self.scheduler.place(request, timeout=self.wait_seconds)
            else:
                got = self.scheduler.try_place(request)
                if got is None:
                    raise NoCapacityError(self.scheduler.why_not_now(request))
        except NoCapacityError:
            self._queue(key, request)
            raise
        self._unqueue(key)
        if spec is None:  # nothing is held, so nothing must be released later
            self.scheduler.release(job_id)
        return got

    def _queue(self, key: tuple[Any, ...], request: PlacementRequest) -> None:
        """Enter the request in the waiting queue of the leased hosts it may use (once)."""
        gpus = sum(r.accelerator_count for r in request.replicas)
        leases = self.scheduler.gpus.leases
        if not gpus or not leases:
            return
        with self._lock:
            entries = self._waiting.get(key)
        if entries is not None:
            for entry in entries:
                entry.touch()  # still waiting: keeps its place in the queue
            return
        with self._lock:
            if key in self._waiting:
                return
            from vcli.placement.gpulease import base_record

            record = base_record(job=request.job_id, gpus=gpus, **dict(request.holder))
            self._waiting[key] = [d.queue(record) for h, d in leases.items()
                                  if request.hosts is None or h in request.hosts]

    def _unqueue(self, key: tuple[Any, ...]) -> None:
        with self._lock:
            entries = self._waiting.pop(key, [])
        for entry in entries:
            entry.close()

    def stop_waiting(self) -> None:
        """Leave every waiting queue (the study or job gave up)."""
        with self._lock:
            entries = [e for es in self._waiting.values() for e in es]
            self._waiting.clear()
        for entry in entries:
            entry.close()

    def release(self, job_id: str) -> None:
        self.scheduler.release(job_id)

    def hold(self, job_id: str, replicas: Sequence[Any], spec: Any, placements: Sequence[Placement]) -> None:
        request = request_for_job(job_id, spec, replicas, with_machine=self.scheduler.enforce_cpu_memory)
        self.scheduler.hold(request, placements)


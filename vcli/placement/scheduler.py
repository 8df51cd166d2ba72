"""The capacity-aware scheduler: places a job's replicas on hosts, all or nothing.

See `vcli.placement` for the rules. Thread-safe (one lock); state is in memory and spans one
vcli process (a job, a study), not several vcli processes started separately.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from vcli.errors import ExitCode, VcliError
from vcli.placement.gpus import GpusBusyError
from vcli.placement.machines import machine_resources
from vcli.placement.types import Placement

__all__ = [
    "HostCapacity",
    "NoCapacityError",
    "PlacementError",
    "PlacementRequest",
    "ReplicaRequest",
    "Scheduler",
    "request_for_job",
]


class PlacementError(VcliError):
    """The request can never fit on these hosts (e.g. 8 GPUs where no host has 8)."""

    exit_code = ExitCode.INVALID


class NoCapacityError(VcliError):
    """The request fits these hosts in principle, but not now (GPUs busy, host unhealthy)."""

    exit_code = ExitCode.EXECUTOR_UNAVAILABLE



# =========================================================================== requests and hosts


def _gpus(count: Any) -> float:
    """Whole GPUs as an int; a share of one (0.25) as it is."""
    n = float(count or 0)
    return int(n) if n >= 1 or n == 0 else n


@dataclass(frozen=True)
class ReplicaRequest:
    task_name: str
    #: Whole GPUs, or a share of one GPU (0 < n < 1).
    accelerator_count: float = 0
    accelerator_type: str | None = None
    cpus: float = 0.0
    memory_gb: float = 0.0
    machine_type: str = ""

    def shape(self) -> tuple[Any, ...]:
        return (self.accelerator_count, self.accelerator_type, self.cpus, self.memory_gb)


@dataclass(frozen=True)
class PlacementRequest:
    """All replicas of one job (or trial); placed together or not at all."""

    job_id: str
    replicas: tuple[ReplicaRequest, ...]
    #: Restrict to these hosts (None: any host of the scheduler).
    hosts: tuple[str, ...] | None = None
    #: Who holds the GPUs once placed (job, trial, study, ...): written into host-wide leases.
    holder: tuple[tuple[str, Any], ...] = ()

    def shape(self) -> tuple[Any, ...]:
        return (self.hosts, tuple(r.shape() for r in self.replicas))


def request_for_job(job_id: str, spec: Any, replicas: Sequence[Any] | None = None,
                    *, hosts: Sequence[str] | None = None, with_machine: bool = True,
                    holder: Any = None) -> PlacementRequest:
    """A request for every replica of a `CustomJobSpec` (or the given `ReplicaId`s of it)."""
    if replicas is None:
        from vcli.cluster import replica_ids

        replicas = replica_ids(spec)
    reqs = []
    for r in replicas:
        ms = spec.worker_pool_specs[r.pool_index].machine_spec
        cpus, mem = machine_resources(ms.machine_type) if with_machine else (0.0, 0.0)
        reqs.append(ReplicaRequest(
            task_name=r.task_name,
            accelerator_count=_gpus(ms.accelerator_count) if ms.accelerator_type or ms.accelerator_count else 0,
            accelerator_type=ms.accelerator_type or None,
            cpus=cpus, memory_gb=mem, machine_type=ms.machine_type,
        ))
    return PlacementRequest(job_id=job_id, replicas=tuple(reqs), hosts=tuple(hosts) if hosts else None,
                            holder=tuple(sorted((holder or {}).items())))


@dataclass(frozen=True)
class HostCapacity:
    name: str
    address: str
    gpu_indices: tuple[int, ...] = ()
    gpu_type: str | None = None
    cpus: float | None = None
    memory_gb: float | None = None
    runtime: str = "process"

    @classmethod
    def from_host(cls, host: Any) -> HostCapacity:
        """From a `vcli.placement.hosts.Host` (declared values, else what `vcli hosts check` detected)."""
        indices, gtype = host.gpus()
        return cls(name=host.name, address=host.tf_address, gpu_indices=tuple(indices), gpu_type=gtype,
                   cpus=host.capacity_cpus(), memory_gb=host.capacity_memory_gb(), runtime=host.runtime)

    def describe(self) -> str:
        g = f"{len(self.gpu_indices)} x {self.gpu_type or 'GPU'}" if self.gpu_indices else "no GPUs"
        cpus = f", {self.cpus:g} vCPUs" if self.cpus is not None else ""  # the limit as often as the GPUs
        return f"{self.name}: {g}{cpus}"


@dataclass
class _HostState:
    cap: HostCapacity
    free_gpus: int
    cpus_used: float = 0.0
    mem_used: float = 0.0
    replicas: int = 0
    healthy: bool = True
    reason: str | None = None


@dataclass
class _Allocation:
    host: str
    gpu_indices: tuple[int, ...]
    cpus: float
    memory_gb: float
    #: A share of the one GPU of `gpu_indices`, and its sharing mechanism's variables.
    share: float | None = None
    gpu_env: Mapping[str, str] = field(default_factory=dict)



# =========================================================================== scheduler


class Scheduler:
    """Places requests on hosts; see the module docstring for the rules."""

    def __init__(self, hosts: Iterable[HostCapacity], *, gpu_allocator: Any = None,
                 enforce_cpu_memory: bool = True) -> None:
        from vcli.placement.gpus import GpuAllocator

        self._cond = threading.Condition(threading.RLock())
        self.gpus = gpu_allocator if gpu_allocator is not None else GpuAllocator()
        self.enforce_cpu_memory = enforce_cpu_memory
        self._hosts: dict[str, _HostState] = {}
        self._order: dict[str, int] = {}
        self._jobs: dict[str, list[_Allocation]] = {}
        self._feasible: dict[tuple[Any, ...], str | None] = {}
        for h in hosts:
            self.add_host(h)

    # ------------------------------------------------------------------ hosts

    def add_host(self, cap: HostCapacity) -> None:
        with self._cond:
            if cap.name in self._hosts:
                raise ValueError(f"host {cap.name} added twice")
            self.gpus.declare(cap.name, indices=cap.gpu_indices, accelerator_type=cap.gpu_type)
            self._hosts[cap.name] = _HostState(cap=cap, free_gpus=len(self.gpus.free(cap.name)))
            self._order[cap.name] = len(self._order)
            self._feasible.clear()
            self._cond.notify_all()

    def mark_unhealthy(self, host: str, reason: str) -> None:
        with self._cond:
            st = self._hosts.get(host)
            if st is not None:
                st.healthy, st.reason = False, reason

    def mark_healthy(self, host: str) -> None:
        with self._cond:
            st = self._hosts.get(host)
            if st is not None and not st.healthy:
                st.healthy, st.reason = True, None
                self._cond.notify_all()

    # ------------------------------------------------------------------ placing

    def check(self, request: PlacementRequest) -> None:
        """Raise PlacementError if `request` could never be placed on these hosts."""
        with self._cond:
            key = request.shape()
            if key not in self._feasible:
                self._feasible[key] = self._never_reason(request)
            reason = self._feasible[key]
        if reason:
            raise PlacementError(reason)

    def try_place(self, request: PlacementRequest) -> list[Placement] | None:
        """Placements for every replica (in request order), or None if they do not all fit now.

        Raises PlacementError when the request can never fit.
        """
        self.check(request)
        with self._cond:
            if request.job_id in self._jobs:
                raise ValueError(f"job {request.job_id} is already placed; release it first")
            if self.gpus.leases and any(r.accelerator_count for r in request.replicas):
                self._resync_free()  # other processes' leases come and go
            plan = self._plan(request, current=True)
            if plan is None:
                return None
            allocs: list[_Allocation] = []
            record = {"job": request.job_id, **dict(request.holder)}
            try:
                for (host, n, cpus, mem), r in zip(plan, request.replicas):
                    allocs.append(self._allocate(host, n, cpus, mem, {**record, "replica": r.task_name}))
            except GpusBusyError:  # taken by another user of a shared allocator: not now
                for a in allocs:
                    self.gpus.release(a.host, a.gpu_indices, share_of=request.job_id if a.share else None)
                self._resync_free()
                return None
            for a in allocs:
                st = self._hosts[a.host]
                st.free_gpus -= len(a.gpu_indices) if a.share is None else 0
                st.cpus_used += a.cpus
                st.mem_used += a.memory_gb
                st.replicas += 1
            self._jobs[request.job_id] = allocs
            return [
                Placement(host=a.host, address=self._hosts[a.host].cap.address, gpu_indices=a.gpu_indices,
                          runtime=self._hosts[a.host].cap.runtime, gpu_host=bool(self._hosts[a.host].cap.gpu_indices),
                          gpu_share=a.share, gpu_env=dict(a.gpu_env))
                for a in allocs
            ]

    def _allocate(self, host: str, n: float, cpus: float, mem: float, record: Mapping[str, Any]) -> _Allocation:
        """The GPUs of one replica on `host`: `n` whole ones, or a share of one (0 < n < 1)."""
        if not n:
            return _Allocation(host, (), cpus, mem)
        if n < 1:
            index, env = self.gpus.allocate_share(host, n, record=record)
            return _Allocation(host, (index,), cpus, mem, share=n, gpu_env=env)
        return _Allocation(host, tuple(self.gpus.allocate(host, int(n), timeout=0, record=record)), cpus, mem)

    def place(self, request: PlacementRequest, *, timeout: float | None = None,
              cancelled: threading.Event | None = None) -> list[Placement]:
        """Like try_place but waits for capacity (up to `timeout`; None = forever)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                got = self.try_place(request)
                if got is not None:
                    return got
                if cancelled is not None and cancelled.is_set():
                    raise NoCapacityError(f"placement of job {request.job_id} was cancelled")
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise NoCapacityError(self.why_not_now(request))
                self._cond.wait(0.5 if remaining is None else min(0.5, remaining))

    def hold(self, request: PlacementRequest, placements: Sequence[Placement]) -> None:
        """Record `request` as placed at `placements` (its replicas already run there: a resumed
        controller re-attached them), holding their GPU indices, CPUs and memory until
        `release`. A host this scheduler does not know holds nothing here."""
        with self._cond:
            self.release(request.job_id)
            allocs = []
            for r, p in zip(request.replicas, placements):
                st = self._hosts.get(p.host)
                if st is None:
                    continue
                taken = self.gpus.take(p.host, p.gpu_indices)
                cpus, mem = self._demand(st, r)
                allocs.append(_Allocation(p.host, taken, cpus, mem))
                st.free_gpus -= len(taken)
                st.cpus_used += cpus
                st.mem_used += mem
                st.replicas += 1
            self._jobs[request.job_id] = allocs

    def release(self, job_id: str) -> None:
        """Give back everything job `job_id` holds (idempotent); wakes waiters."""
        with self._cond:
            allocs = self._jobs.pop(job_id, None)
            if not allocs:
                return
            for a in allocs:
                self.gpus.release(a.host, a.gpu_indices, share_of=job_id if a.share else None)
                st = self._hosts.get(a.host)
                if st is not None:
                    st.free_gpus += len(a.gpu_indices) if a.share is None else 0
                    st.cpus_used = max(0.0, st.cpus_used - a.cpus)
                    st.mem_used = max(0.0, st.mem_used - a.memory_gb)
                    st.replicas = max(0, st.replicas - 1)
            self._cond.notify_all()

    def placed(self, job_id: str) -> bool:
        with self._cond:
            return job_id in self._jobs

    def why_not_now(self, request: PlacementRequest) -> str:
        with self._cond:
            sick = {n: st.reason for n, st in self._hosts.items() if not st.healthy and _allowed(request, n)}
            elsewhere = self.waiting_for(request)
            if elsewhere and not sick:
                return "waiting for " + "; ".join(elsewhere)
            trial = dict(request.holder).get("trial")
            parts = [f"{f'trial {trial}' if trial else f'job {request.job_id}'} does not fit on the hosts right now"]
            if self.gpus.leases:
                self._resync_free()
            busy = [f"{n}: {len(st.cap.gpu_indices) - st.free_gpus}/{len(st.cap.gpu_indices)} GPUs in use"
                    for n, st in self._hosts.items() if st.healthy and _allowed(request, n) and st.cap.gpu_indices]
            if busy:
                parts.append("; ".join(busy))
            if elsewhere:
                parts.append("waiting for " + "; ".join(elsewhere))
            if sick:
                parts.append("unhealthy: " + "; ".join(f"{n} ({r})" for n, r in sick.items()))
            return " - ".join(parts)

    # ------------------------------------------------------------------ internals

    def _resync_free(self) -> None:
        for n, st in self._hosts.items():
            st.free_gpus = len(self.gpus.free(n))

    def waiting_for(self, request: PlacementRequest) -> list[str]:
        """For each host the request may use: the GPUs another process holds (and by whom), as
        `GPU 1 on local (held by trial 4 of study 179556… started by alice 3m ago)`."""
        if not any(r.accelerator_count for r in request.replicas):
            return []
        with self._cond:
            hosts = [n for n, st in self._hosts.items() if _allowed(request, n) and st.cap.gpu_indices]
        out = []
        for host in hosts:
            by_why: dict[str, list[int]] = {}
            busy = self.gpus.busy_elsewhere(host)
            mine = self.gpus.held_by_this_process(host)
            for i, why in sorted({**self.gpus.kept_for_others(host), **mine, **busy}.items()):
                by_why.setdefault(why, []).append(i)
            for why, indices in by_why.items():
                out.append(f"GPU{'s' if len(indices) > 1 else ''} {','.join(map(str, indices))} on {host} ({why})")
        return out

    def _demand(self, st: _HostState, r: ReplicaRequest) -> tuple[float, float]:
        """CPU/memory the replica takes on that host: capped at the host's size; 0 if unknown."""
        if not self.enforce_cpu_memory:
            return 0.0, 0.0
        cap = st.cap
        cpus = min(r.cpus, cap.cpus) if cap.cpus is not None else 0.0
        mem = min(r.memory_gb, cap.memory_gb) if cap.memory_gb is not None else 0.0
        return cpus, mem

    def _plan(self, request: PlacementRequest, *, current: bool) -> list[tuple[str, float, float, float]] | None:
        """(host, gpus, cpus, memory) per replica, or None. `current=False`: on empty, healthy hosts.
        Replicas are placed largest first (GPUs, then CPUs), each on the host `_score` ranks first."""
        hosts = [st for n, st in self._hosts.items() if _allowed(request, n) and (st.healthy or not current)]
        if not hosts:
            return None
        tally = _Tally(hosts, current=current)
        order = sorted(range(len(request.replicas)),
                       key=lambda i: (-request.replicas[i].accelerator_count, -request.replicas[i].cpus, i))
        result: list[tuple[str, float, float, float] | None] = [None] * len(request.replicas)
        for i in order:
            r = request.replicas[i]
            scored = [(score, st) for st in hosts if (score := self._score(st, r, tally)) is not None]
            if not scored:
                return None
            best = min(scored, key=lambda pair: pair[0])[1]
            cpus, mem = self._demand(best, r)
            tally.add(best.cap.name, r.accelerator_count if r.accelerator_count >= 1 else 0, cpus, mem)
            result[i] = (best.cap.name, r.accelerator_count, cpus, mem)
        return result  # type: ignore[return-value]

    def _score(self, st: _HostState, r: ReplicaRequest, tally: _Tally) -> tuple[Any, ...] | None:
        """How host `st` ranks for replica `r` with what the plan has used (`tally`), smaller
        first: hosts holding fewer of this request's replicas, then a GPU replica on the host
        with the fewest GPUs left over, a CPU one on the least loaded host; None: it does not fit."""
        name = st.cap.name
        n = r.accelerator_count
        # A share needs a GPU with room, which the allocator finds (a whole GPU when planning on idle hosts).
        need = n if n >= 1 else (0 if tally.current else 1) if n else 0
        if n and (tally.free_g[name] < need or not st.cap.gpu_indices or not _gpu_type_fits(st, r)):
            return None
        cpus, mem = self._demand(st, r)
        if cpus and tally.used_c[name] + cpus > st.cap.cpus + 1e-9:  # type: ignore[operator]
            return None
        if mem and tally.used_m[name] + mem > st.cap.memory_gb + 1e-9:  # type: ignore[operator]
            return None
        mine = tally.mine.get(name, 0)
        if n:
            return (mine, tally.free_g[name] - n, tally.load[name], self._order[name])
        frac = (tally.used_c[name] / st.cap.cpus) if st.cap.cpus else 0.0
        # CPU-only work keeps off GPU hosts when it can, so GPUs stay reachable.
        return (mine, tally.load[name], frac, len(st.cap.gpu_indices) > 0, self._order[name])

    def _never_reason(self, request: PlacementRequest) -> str | None:
        """Why `request` can never be placed, whatever runs now; None when it can once hosts
        free up. It names an unknown host, it may use no host, a replica needs more GPUs (of its
        type) than any one host has, or its replicas do not fit together even on idle hosts."""
        allowed = [st for n, st in self._hosts.items() if _allowed(request, n)]
        if request.hosts:
            missing = [h for h in request.hosts if h not in self._hosts]
            if missing:
                return f"job {request.job_id}: unknown host(s) {', '.join(missing)}"
        if not allowed:
            return f"job {request.job_id}: there are no hosts to place it on"
        offers = "; ".join(st.cap.describe() for st in allowed)
        for r in request.replicas:
            short = _gpu_shortfall(r, allowed, offers)
            if short is not None:
                return short
        if self._plan(request, current=False) is None:
            return _too_big(request, allowed, offers)
        return None


def _gpu_type_fits(st: _HostState, r: ReplicaRequest) -> bool:
    """True unless both the replica and the host name a GPU type and the two differ."""
    return not (r.accelerator_type and st.cap.gpu_type and st.cap.gpu_type != r.accelerator_type)


def _gpu_shortfall(r: ReplicaRequest, allowed: Sequence[_HostState], offers: str) -> str | None:
    """Why GPU replica `r` fits on none of the `allowed` hosts (`offers` describes them): no
    host of a matching GPU type has `r.accelerator_count` GPUs. None when one has, or when `r`
    needs no GPU."""
    if not r.accelerator_count:
        return None
    matching = [st for st in allowed if _gpu_type_fits(st, r)]
    if any(len(st.cap.gpu_indices) >= r.accelerator_count for st in matching):
        return None
    most = max((len(st.cap.gpu_indices) for st in matching), default=0)
    what = f"{r.accelerator_count} x {r.accelerator_type or 'GPU'}"
    return (f"replica {r.task_name} needs {what} on one host, but no host has that many "
            f"(the most any matching host has is {most}; hosts: {offers}). Lower accelerator-count, "
            "or declare the hosts' GPUs with `vcli hosts add NAME --gpus=N --gpu-type=TYPE` "
            "(or detect them with `vcli hosts check`).")


def _too_big(request: PlacementRequest, allowed: Sequence[_HostState], offers: str) -> str:
    """The reason for a request whose replicas cannot all fit at once even on the idle
    `allowed` hosts (`offers` describes them): what it needs against the GPUs there are."""
    total = sum(r.accelerator_count for r in request.replicas)
    have = sum(len(st.cap.gpu_indices) for st in allowed)
    cpu = sum(r.cpus for r in request.replicas)
    return (f"job {request.job_id} cannot fit all {len(request.replicas)} replicas at once even on idle hosts: "
            f"it needs {total} GPU(s) and {cpu:g} vCPUs together (hosts: {offers}; {have} GPU(s) in total). "
            "Use fewer replicas or smaller machine types, or add hosts.")


class _Tally:
    """What a plan has taken so far on each host: free GPUs, CPUs and memory used, replicas
    placed (`load`, with what already runs when planning on the current state) and this
    request's own replicas (`mine`)."""

    def __init__(self, hosts: Sequence[_HostState], *, current: bool) -> None:
        self.current = current
        self.free_g = {st.cap.name: (st.free_gpus if current else len(st.cap.gpu_indices)) for st in hosts}
        self.used_c = {st.cap.name: (st.cpus_used if current else 0.0) for st in hosts}
        self.used_m = {st.cap.name: (st.mem_used if current else 0.0) for st in hosts}
        self.load = {st.cap.name: (st.replicas if current else 0) for st in hosts}
        self.mine: dict[str, int] = {}

    def add(self, name: str, gpus: float, cpus: float, mem: float) -> None:
        self.free_g[name] -= gpus
        self.used_c[name] += cpus
        self.used_m[name] += mem
        self.load[name] += 1
        self.mine[name] = self.mine.get(name, 0) + 1


def _allowed(request: PlacementRequest, host: str) -> bool:
    return request.hosts is None or host in request.hosts


"""Unit tests of the capacity-aware scheduler (vcli.placement). Fast, no I/O."""

from __future__ import annotations

import random
import threading
import time

import pytest

from vcli.errors import InvalidValueError
from vcli.placement import (
    HostCapacity,
    JobPlacer,
    NoCapacityError,
    PlacementError,
    PlacementRequest,
    ReplicaRequest,
    Scheduler,
    local_placer,
    machine_resources,
    request_for_job,
)
from vcli.spec import CustomJobSpec, MachineSpec, ReplicaId, WorkerPoolSpec

T4 = "NVIDIA_TESLA_T4"
L4 = "NVIDIA_L4"


def gpu_host(name: str, n: int, gtype: str | None = T4, **kw: object) -> HostCapacity:
    return HostCapacity(name=name, address=f"10.0.0.{len(name)}", gpu_indices=tuple(range(n)), gpu_type=gtype, **kw)


def job(job_id: str, *gpus: int, gtype: str | None = T4, cpus: float = 0, mem: float = 0) -> PlacementRequest:
    return PlacementRequest(job_id=job_id, replicas=tuple(
        ReplicaRequest(f"workerpool0-{i}", accelerator_count=g, accelerator_type=gtype if g else None, cpus=cpus,
                       memory_gb=mem) for i, g in enumerate(gpus)))


# --------------------------------------------------------------------------- machine types


def test_machine_catalogue() -> None:
    assert machine_resources("n1-standard-4") == (4, 15)
    assert machine_resources("n1-highmem-8") == (8, 52)
    assert machine_resources("n1-highcpu-16") == (16, 14.4)
    assert machine_resources("e2-standard-8") == (8, 32)
    assert machine_resources("a2-highgpu-1g") == (12, 85)
    assert machine_resources("g2-standard-8") == (8, 32)
    assert machine_resources("") == (0, 0)
    with pytest.raises(InvalidValueError, match="machine-type=z9-huge-3 is not in vcli's machine catalogue"):
        machine_resources("z9-huge-3")


# --------------------------------------------------------------------------- GPUs


def test_gpu_indices_are_never_shared_and_freed_on_release() -> None:
    s = Scheduler([gpu_host("a", 4)])
    got = [s.try_place(job(f"j{i}", 1)) for i in range(4)]
    indices = sorted(p[0].gpu_indices[0] for p in got)  # type: ignore[index]
    assert indices == [0, 1, 2, 3]
    assert s.try_place(job("j4", 1)) is None
    s.release("j2")
    again = s.try_place(job("j4", 1))
    assert again is not None and again[0].gpu_indices == got[2][0].gpu_indices  # type: ignore[index]
    s.release("j2")  # idempotent
    assert s.try_place(job("j5", 1)) is None


def test_all_or_nothing() -> None:
    s = Scheduler([gpu_host("a", 2), gpu_host("b", 2)])
    assert s.try_place(job("small", 1)) is not None  # a: 1 free, b: 2 free
    # 2 replicas x 2 GPUs fit idle hosts, but not now: nothing may be taken half-way.
    assert s.try_place(job("pair", 2, 2)) is None
    assert len(s.gpus.free("a")) + len(s.gpus.free("b")) == 3  # only `small`'s GPU is held
    s.release("small")
    placed = s.try_place(job("pair", 2, 2))
    assert placed is not None and {p.host for p in placed} == {"a", "b"}


def test_never_fits_fails_at_once_saying_what_is_missing() -> None:
    s = Scheduler([gpu_host("gpu1", 4), gpu_host("gpu2", 2, L4), gpu_host("cpu", 0, None)])
    with pytest.raises(PlacementError) as e:
        s.try_place(job("big", 8))
    msg = str(e.value)
    assert "needs 8 x NVIDIA_TESLA_T4 on one host" in msg and "most any matching host has is 4" in msg
    assert "gpu1: 4 x NVIDIA_TESLA_T4" in msg and "gpu2: 2 x NVIDIA_L4" in msg
    with pytest.raises(PlacementError, match="cannot fit all 3 replicas at once"):
        s.try_place(job("wide", 4, 4, 1))
    with pytest.raises(PlacementError, match="NVIDIA_TESLA_V100"):
        s.try_place(job("v100", 1, gtype="NVIDIA_TESLA_V100"))
    # Busy is not "never": the same shape fits once capacity frees.
    assert s.try_place(job("four", 4)) is not None
    assert s.try_place(job("four-again", 4)) is None


def test_a_job_that_never_fits_the_hosts_cpus_names_them() -> None:
    """The message named the hosts' GPUs only, when their CPUs were the limit (found by a probe)."""
    s = Scheduler([gpu_host("h1", 2, cpus=2), gpu_host("h2", 1, cpus=2)])
    with pytest.raises(PlacementError) as e:
        s.try_place(job("wide", 0, 0, 0, cpus=4))
    assert "h1: 2 x NVIDIA_TESLA_T4, 2 vCPUs; h2: 1 x NVIDIA_TESLA_T4, 2 vCPUs" in str(e.value), str(e.value)


def test_accelerator_type_is_matched() -> None:
    s = Scheduler([gpu_host("t4", 2, T4), gpu_host("l4", 2, L4), gpu_host("any", 1, None)])
    p = s.try_place(job("x", 2, gtype=L4))
    assert p is not None and p[0].host == "l4" and p[0].gpu_indices == (0, 1)
    p = s.try_place(job("y", 2, gtype=T4))
    assert p is not None and p[0].host == "t4"
    # A host without a declared type matches any type.
    p = s.try_place(job("z", 1, gtype=L4))
    assert p is not None and p[0].host == "any"


def test_best_fit_keeps_big_hosts_free() -> None:
    s = Scheduler([gpu_host("big", 8), gpu_host("small", 1)])
    p = s.try_place(job("one", 1))
    assert p is not None and p[0].host == "small"
    assert s.try_place(job("eight", 8)) is not None


# --------------------------------------------------------------------------- spreading, CPU, memory


def test_replicas_of_a_job_spread_over_hosts() -> None:
    s = Scheduler([HostCapacity("h1", "10.0.0.1"), HostCapacity("h2", "10.0.0.2")])
    p = s.try_place(job("mw", 0, 0))
    assert p is not None and [x.host for x in p] == ["h1", "h2"]
    assert [x.address for x in p] == ["10.0.0.1", "10.0.0.2"]
    p = s.try_place(job("three", 0, 0, 0))
    assert p is not None and {x.host for x in p} == {"h1", "h2"}


def test_cpu_and_memory_limits_with_whole_host_cap() -> None:
    s = Scheduler([HostCapacity("h", "a", cpus=8, memory_gb=30)])
    cpus, mem = machine_resources("n1-standard-4")
    assert s.try_place(job("a", 0, cpus=cpus, mem=mem)) is not None
    assert s.try_place(job("b", 0, cpus=cpus, mem=mem)) is not None
    assert s.try_place(job("c", 0, cpus=cpus, mem=mem)) is None  # 8 vCPUs taken
    s.release("a")
    s.release("b")
    # A machine type bigger than the host takes the whole host instead of never running.
    big = machine_resources("n1-highmem-16")
    assert s.try_place(job("big", 0, cpus=big[0], mem=big[1])) is not None
    assert s.try_place(job("tiny", 0, cpus=1, mem=1)) is None
    # Without enforcement (the default for the local host) CPU/memory are not counted.
    s2 = Scheduler([HostCapacity("h", "a", cpus=2, memory_gb=4)], enforce_cpu_memory=False)
    assert all(s2.try_place(job(f"j{i}", 0, cpus=16, mem=100)) is not None for i in range(5))


def test_request_for_job_uses_the_catalogue_and_machine_spec() -> None:
    pool = WorkerPoolSpec(machine_spec=MachineSpec(machine_type="a2-highgpu-1g", accelerator_type="NVIDIA_TESLA_A100",
                                                   accelerator_count=1), replica_count=2)
    spec = CustomJobSpec(worker_pool_specs=(pool,))
    req = request_for_job("j", spec)
    assert [r.task_name for r in req.replicas] == ["workerpool0-0", "workerpool0-1"]
    assert req.replicas[0] == ReplicaRequest("workerpool0-0", 1, "NVIDIA_TESLA_A100", 12, 85, "a2-highgpu-1g")


# --------------------------------------------------------------------------- health and waiting


def test_unhealthy_hosts_get_nothing_until_healthy() -> None:
    s = Scheduler([gpu_host("a", 1), gpu_host("b", 1)])
    s.mark_unhealthy("a", "no answer over SSH for 10s")
    p = s.try_place(job("x", 1))
    assert p is not None and p[0].host == "b"
    assert s.try_place(job("y", 1)) is None
    assert "unhealthy: a (no answer over SSH for 10s)" in s.why_not_now(job("y", 1))
    s.mark_healthy("a")
    p = s.try_place(job("y", 1))
    assert p is not None and p[0].host == "a"


def test_place_waits_for_capacity() -> None:
    s = Scheduler([gpu_host("a", 1)])
    assert s.try_place(job("first", 1)) is not None
    threading.Timer(0.3, s.release, args=("first",)).start()
    started = time.monotonic()
    p = s.place(job("second", 1), timeout=10)
    assert p[0].gpu_indices == (0,) and 0.2 < time.monotonic() - started < 5
    with pytest.raises(NoCapacityError):
        s.place(job("third", 1), timeout=0.2)


def test_thread_safety_never_oversubscribes() -> None:
    s = Scheduler([gpu_host(f"h{i}", 2) for i in range(3)])
    held: dict[tuple[str, int], str] = {}
    guard = threading.Lock()
    errors: list[str] = []

    def worker(w: int) -> None:
        rng = random.Random(w)
        for k in range(150):
            jid = f"w{w}-{k}"
            p = s.try_place(job(jid, *([rng.choice([1, 2])] * rng.choice([1, 2]))))
            if p is None:
                continue
            with guard:
                for pl in p:
                    for g in pl.gpu_indices:
                        if (pl.host, g) in held:
                            errors.append(f"{pl.host}:{g} given to {jid} and {held[(pl.host, g)]}")
                        held[(pl.host, g)] = jid
            time.sleep(rng.random() / 1000)
            with guard:
                for pl in p:
                    for g in pl.gpu_indices:
                        held.pop((pl.host, g), None)
            s.release(jid)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert all(s.gpus.free(f"h{i}") == (0, 1) for i in range(3))


# --------------------------------------------------------------------------- placers for plan_job


def test_job_placer_with_spec_assigns_gpus_and_raises_when_busy() -> None:
    pool = WorkerPoolSpec(machine_spec=MachineSpec(machine_type="n1-standard-4", accelerator_type=T4,
                                                   accelerator_count=1), replica_count=1)
    spec = CustomJobSpec(worker_pool_specs=(pool,))
    placer = JobPlacer(Scheduler([gpu_host("a", 1)]))
    replicas = [ReplicaId(pool_index=0, index=0)]
    p = placer(replicas, spec=spec, job_id="j1")
    assert p[0].gpu_indices == (0,)
    with pytest.raises(NoCapacityError, match="1/1 GPUs in use"):
        placer(replicas, spec=spec, job_id="j2")
    placer.release("j1")
    assert placer(replicas, spec=spec, job_id="j2")[0].gpu_indices == (0,)
    # Older callers (no spec): replicas are only spread, nothing is held.
    two = JobPlacer(Scheduler([HostCapacity("x", "1"), HostCapacity("y", "2")]))
    assert [p.host for p in two([ReplicaId(pool_index=0, index=0), ReplicaId(pool_index=1, index=0)])] == ["x", "y"]


def test_local_placer_takes_gpus_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("VCLI_HOSTS_FILE", str(tmp_path / "none.yaml"))
    monkeypatch.setenv("VCLI_LOCAL_GPUS", "2")
    placer = local_placer()
    pool = WorkerPoolSpec(machine_spec=MachineSpec(machine_type="n1-highmem-96", accelerator_type=T4,
                                                   accelerator_count=1), replica_count=2)
    p = placer([ReplicaId(pool_index=0, index=0), ReplicaId(pool_index=0, index=1)],
               spec=CustomJobSpec(worker_pool_specs=(pool,)), job_id="j")
    assert sorted(x.gpu_indices for x in p) == [(0,), (1,)] and {x.host for x in p} == {"local"}


# --------------------------------------------------------------------------- decision time


def test_decision_time_1000_queued_trials_over_50_hosts() -> None:
    """1,000 trials wait in FIFO order, as a study's queue does; each decision is one `try_place`
    of the head (what `JobPlacer` does when the study tries its next trial). Prints the time; the
    <100 ms goal is measured in bench/bench_ssh.py, not asserted here."""
    from collections import deque

    rng = random.Random(0)
    types = [T4, L4, "NVIDIA_TESLA_V100"]
    hosts = [gpu_host(f"h{i:02d}", rng.choice([1, 2, 4, 8]), types[i % 3], cpus=32, memory_gb=128) for i in range(50)]
    s = Scheduler(hosts)
    waiting = deque(job(f"t{i}", *([rng.choice([1, 1, 2, 4])] * rng.choice([1, 1, 2])), gtype=types[i % 3],
                        cpus=4, mem=15) for i in range(1000))
    times = []
    running: list[str] = []
    while waiting:
        t0 = time.perf_counter()
        placed = s.try_place(waiting[0])
        times.append(time.perf_counter() - t0)
        if placed is not None:
            head = waiting.popleft()
            assert len(placed) == len(head.replicas)
            assert all(p.gpu_indices and len(p.gpu_indices) == r.accelerator_count for p, r in zip(placed, head.replicas))
            running.append(head.job_id)
        else:
            assert running, "a trial that fits idle hosts was refused with nothing running"
            s.release(running.pop(rng.randrange(len(running))))
    per = sorted(times)
    print(f"\n{len(times)} decisions over 50 hosts / 1000 trials: median {per[len(per) // 2] * 1000:.2f} ms, "
          f"max {per[-1] * 1000:.2f} ms")
    for jid in running:
        s.release(jid)
    assert all(len(s.gpus.free(h.name)) == len(h.gpu_indices) for h in hosts)

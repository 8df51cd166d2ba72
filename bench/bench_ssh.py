"""SSH launch overhead per replica vs local processes, and placement decision time.

    sudo python3 bench/bench_ssh.py [--replicas 8] [--rounds 3] [--skip-ssh]

1. Launch overhead (needs root, sshd, iproute2, paramiko; .ci/ssh-setup.sh): two namespace
   hosts (tests/harness/netns.py), vcli running in the controller namespace. Each round
   starts N replicas of `python -c "print('ready')"` the way the job controller does
   (reserve_port, start, poll until exit, release), once through the SSH executor (spread
   over h1 and h2) and once as local processes (LocalExecutor), interleaved so both see the
   same load. Reported per replica (medians): reserve_port, start() (returns once the remote
   process group is known), start -> first output line in the log, start -> exit seen by
   poll(), and the whole job wall time divided by N. One run, same machine, same Python.
   The connection set-up (first connect + auth) is shown separately: it is paid once per
   host per vcli process.
2. Placement: 1,000 queued trials (1-2 replicas of 1-4 GPUs, three GPU types) over 50
   simulated hosts (1-8 GPUs each), waiting in FIFO order as a study's queue does. Every
   scheduling decision (`Scheduler.try_place` of the head of the queue: what `JobPlacer` does
   when the study tries its next trial; a trial that ends frees room when nothing fits) and
   every single `try_place` on a full cluster is timed. Goal: under 100 ms per decision.

Prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


# =========================================================================== placement


def bench_placement(seed: int = 0) -> dict[str, Any]:
    from collections import deque

    from vcli.placement import HostCapacity, PlacementRequest, ReplicaRequest, Scheduler

    rng = random.Random(seed)
    types = ["NVIDIA_TESLA_T4", "NVIDIA_L4", "NVIDIA_TESLA_V100"]
    hosts = [HostCapacity(name=f"h{i:02d}", address=f"10.1.{i // 250}.{i % 250}", gpu_indices=tuple(range(rng.choice([1, 2, 4, 8]))),
                          gpu_type=types[i % 3], cpus=32, memory_gb=128) for i in range(50)]
    s = Scheduler(hosts)
    requests = []
    for i in range(1000):
        n = rng.choice([1, 1, 2])
        g = rng.choice([1, 1, 2, 4])
        requests.append(PlacementRequest(job_id=f"t{i}", replicas=tuple(
            ReplicaRequest(f"workerpool0-{k}", accelerator_count=g, accelerator_type=types[i % 3], cpus=4, memory_gb=15)
            for k in range(n))))
    t0 = time.perf_counter()
    for r in requests:
        s.check(r)  # the never-fits check every trial passes before it waits
    check = (time.perf_counter() - t0) / len(requests)
    decisions: list[float] = []
    running: list[str] = []
    waiting = deque(requests)
    while waiting:
        t0 = time.perf_counter()
        got = s.try_place(waiting[0])
        decisions.append(time.perf_counter() - t0)
        if got is not None:
            running.append(waiting.popleft().job_id)
        else:
            s.release(running.pop(rng.randrange(len(running))))
    # single try_place calls on a full cluster (the cost of one "does it fit now?")
    tries = []
    for r in requests[:200]:
        t0 = time.perf_counter()
        got = s.try_place(PlacementRequest(job_id="probe-" + r.job_id, replicas=r.replicas))
        tries.append(time.perf_counter() - t0)
        if got is not None:
            s.release("probe-" + r.job_id)
    decisions.sort()
    return {
        "decisions": len(decisions),
        "decision_median_ms": statistics.median(decisions) * 1000,
        "decision_p99_ms": decisions[int(len(decisions) * 0.99) - 1] * 1000,
        "decision_max_ms": decisions[-1] * 1000,
        "try_place_median_ms": statistics.median(tries) * 1000,
        "check_ms": check * 1000,
    }


# =========================================================================== launch overhead


def _launches(tmp: Path, job_id: str, n: int, hosts: list[tuple[str, str]]) -> list[Any]:
    from vcli.executors import Placement, ReplicaLaunch
    from vcli.spec import ReplicaId

    out = []
    for i in range(n):
        replica = ReplicaId(pool_index=0 if i == 0 else 1, index=0 if i == 0 else i - 1)
        d = tmp / job_id / replica.task_name
        d.mkdir(parents=True, exist_ok=True)
        host, address = hosts[i % len(hosts)]
        out.append(ReplicaLaunch(
            job_id=job_id, trial_id=None, replica=replica, placement=Placement(host=host, address=address),
            image_uri=None, command=(sys.executable, "-c", "print('ready', flush=True)"), args=(),
            env={"VCLI_JOB_ID": job_id, "VCLI_TASK_NAME": replica.task_name,
                 "CLOUD_ML_HP_METRIC_FILE": str(d / "hypertune" / "output.metrics")},
            workdir=None, output_dir=str(d), log_path=str(d / "replica.log"),
            metric_file=str(d / "hypertune" / "output.metrics"),
        ))
    return out


def _first_output(path: str) -> float | None:
    try:
        for line in open(path, encoding="utf-8"):
            ts, stream, text = line.rstrip("\n").split("\t", 2)
            if stream == "stdout" and text == "ready":
                return float(ts)
    except (OSError, ValueError):
        pass
    return None


def run_round(executor: Any, launches: list[Any]) -> dict[str, list[float]]:
    import threading

    m: dict[str, list[float]] = {"reserve_port": [], "start": [], "first_output": [], "exit": []}
    job_t0 = time.perf_counter()
    for l in launches:
        t0 = time.perf_counter()
        executor.reserve_port(l.placement)
        m["reserve_port"].append(time.perf_counter() - t0)
    executor.prepare(launches, cancelled=threading.Event(), progress=lambda s: None)
    handles: list[Any] = []
    started_at: list[tuple[float, float]] = []
    done = threading.Event()
    exits: dict[int, float] = {}

    def poller() -> None:  # watches exits while later replicas are still being started
        while not done.is_set():
            for i, h in enumerate(list(handles)):
                if i not in exits and not executor.poll(h).running:
                    exits[i] = time.perf_counter() - started_at[i][1]
            if len(exits) == len(launches):
                return
            time.sleep(0.002)

    watcher = threading.Thread(target=poller, daemon=True)
    watcher.start()
    for l in launches:
        wall = time.time()
        t0 = time.perf_counter()
        started_at.append((wall, t0))
        h = executor.start(l)
        m["start"].append(time.perf_counter() - t0)
        handles.append(h)
    watcher.join(120)
    done.set()
    m["exit"] = list(exits.values())
    executor.release(handles)
    m["job_per_replica"] = [(time.perf_counter() - job_t0) / len(launches)]
    for l, (wall, _) in zip(launches, started_at):
        ts = _first_output(l.log_path)
        if ts is not None:
            m["first_output"].append(ts - wall)
    return m


def inner(replicas: int, rounds: int) -> None:
    """Runs in the controller namespace; prints one JSON line."""
    from vcli.control.wiring import ssh_executor, ssh_hosts
    from vcli.executors.local import LocalExecutor

    tmp = Path(tempfile.mkdtemp(prefix="vcli-bench-ssh-"))
    ssh = ssh_executor(ssh_hosts("h1,h2"))
    t0 = time.perf_counter()
    for name in ("h1", "h2"):
        ssh._link(name).conn()  # private: the one-off connection cost, measured apart
    connect = (time.perf_counter() - t0) / 2
    local = LocalExecutor()
    hosts_ssh = [("h1", "10.213.0.11"), ("h2", "10.213.0.12")]
    out: dict[str, dict[str, list[float]]] = {"ssh": {}, "local": {}}
    for r in range(rounds + 1):  # round 0 warms up (imports, remote home lookup)
        for kind, ex, hosts in (("ssh", ssh, hosts_ssh), ("local", local, [("local", "127.0.0.1")])):
            m = run_round(ex, _launches(tmp, f"{kind}{r}", replicas, hosts))
            if r == 0:
                continue
            for k, v in m.items():
                out[kind].setdefault(k, []).extend(v)
    ssh.close()
    print(json.dumps({"connect_s": connect, "results": out}))


def bench_launch(replicas: int, rounds: int) -> dict[str, Any]:
    from tests.harness import netns

    why = netns.available()
    if why:
        return {"skipped": why}
    tmp = Path(tempfile.mkdtemp(prefix="vcli-bench-netns-"))
    with netns.NetnsCluster(tmp, n=2) as c:
        workdirs = {h.name: tmp / f"{h.name}-work" for h in c.hosts}
        (tmp / "hosts.yaml").write_text(c.inventory_yaml(workdirs, sys.executable))
        (tmp / "known_hosts").write_text(c.known_hosts())
        env = dict(os.environ, VCLI_HOSTS_FILE=str(tmp / "hosts.yaml"), VCLI_CONFIG_DIR=str(tmp / "config"),
                   VCLI_SSH_USER_KNOWN_HOSTS=str(tmp / "known_hosts"), VCLI_HOME=str(tmp / "home"),
                   PYTHONPATH=str(ROOT))
        res = subprocess.run(c.ctl([sys.executable, __file__, "--inner", "--replicas", str(replicas),
                                    "--rounds", str(rounds)]), env=env, capture_output=True, text=True, timeout=900)
        if res.returncode != 0:
            raise SystemExit(f"inner benchmark failed:\n{res.stdout}\n{res.stderr}")
        data = json.loads(res.stdout.strip().splitlines()[-1])
        data["setup_s"] = c.setup_seconds
    data["teardown_s"] = c.teardown_seconds
    return data


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--replicas", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--skip-ssh", action="store_true")
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.inner:
        inner(a.replicas, a.rounds)
        return
    load = os.getloadavg()[0]
    print(f"machine: {os.cpu_count()} cores, load average {load:.1f} at start, Python {sys.version.split()[0]}\n")
    if not a.skip_ssh:
        data = bench_launch(a.replicas, a.rounds)
        if "skipped" in data:
            print(f"SSH launch overhead: skipped ({data['skipped']})\n")
        else:
            res = data["results"]
            med = lambda kind, k: statistics.median(res[kind][k]) * 1000 if res[kind].get(k) else float("nan")
            print(f"### Launch overhead per replica ({a.replicas} replicas x {a.rounds} rounds, "
                  "`python -c print('ready')`, medians)\n")
            print("| step | SSH process runtime (2 namespace hosts) | local processes | SSH - local |")
            print("|---|---:|---:|---:|")
            for k, label in (("reserve_port", "reserve_port"), ("start", "start() returns"),
                             ("first_output", "start -> first output line in the log"),
                             ("exit", "start -> exit seen by poll()"),
                             ("job_per_replica", "whole job / replicas (ports+start+wait+release)")):
                s, l = med("ssh", k), med("local", k)
                print(f"| {label} | {s:.1f} ms | {l:.1f} ms | {s - l:+.1f} ms |")
            print(f"\nOne-off per host and vcli process: connect + auth {data['connect_s'] * 1000:.0f} ms. "
                  f"Harness: namespaces + 2 sshd up in {data['setup_s']:.2f} s, torn down in {data['teardown_s']:.2f} s.\n")
    p = bench_placement()
    print("### Placement decision time (1,000 queued trials, 50 simulated hosts)\n")
    print("| measure | value |")
    print("|---|---:|")
    print(f"| scheduling decisions (try_place of the queue's head) | {p['decisions']} |")
    print(f"| decision median | {p['decision_median_ms']:.2f} ms |")
    print(f"| decision p99 | {p['decision_p99_ms']:.2f} ms |")
    print(f"| decision max | {p['decision_max_ms']:.2f} ms |")
    print(f"| one try_place (full cluster), median | {p['try_place_median_ms']:.3f} ms |")
    print(f"| never-fits check, per trial | {p['check_ms']:.3f} ms |")
    print(f"| goal < 100 ms per decision | {'met' if p['decision_max_ms'] < 100 else 'NOT met'} |")


if __name__ == "__main__":
    main()

"""Per-replica start overhead: containers (DockerExecutor) vs processes, same trivial command.

    python3 bench/bench_docker.py [--repeats 5] [--replicas 1,4] [--image vcli-base:bookworm]

Each round starts N replicas of `python3 -c pass` the way the job controller does (start()
for each, then poll() until all have exited, then release()), once as processes and once as
containers, interleaved so both see the same machine load. Reported: median wall time from
the first start() to "all exited", the same per replica, and through release(); the ratio
containers/processes comes from the same run. Processes use vcli's LocalExecutor when it is
importable, else subprocess.Popen(start_new_session=True). Both run Debian's /usr/bin/python3
(the interpreter inside vcli-base) when the host has it, so the interpreter cost is equal.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from vcli.executors import Placement, ReplicaLaunch
from vcli.spec import ReplicaId

PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else (shutil.which("python3") or sys.executable)


def launches(tmp: str, job_id: str, n: int, image: str, python: str, runtime: str) -> list[ReplicaLaunch]:
    out = []
    for i in range(n):
        replica = ReplicaId(pool_index=0 if i == 0 else 1, index=0 if i == 0 else i - 1)
        d = os.path.join(tmp, job_id, replica.task_name)
        os.makedirs(d, exist_ok=True)
        out.append(
            ReplicaLaunch(
                job_id=job_id,
                trial_id=None,
                replica=replica,
                placement=Placement(runtime=runtime),
                image_uri=image,
                command=(python, "-c", "pass"),
                args=(),
                env={},
                workdir=None,
                output_dir=d,
                log_path=os.path.join(d, "replica.log"),
                metric_file=os.path.join(d, "metrics"),
            )
        )
    return out


def run_executor(executor: Any, batch: list[ReplicaLaunch]) -> tuple[float, float]:
    """(seconds to all exited, seconds including release) for one batch."""
    t0 = time.perf_counter()
    handles = [executor.start(launch) for launch in batch]
    pending = list(handles)
    while pending:
        pending = [h for h in pending if executor.poll(h).running]
        if pending:
            time.sleep(0.005)
    t_done = time.perf_counter() - t0
    for h in handles:
        status = executor.poll(h)
        assert status.exit_code == 0, status
    executor.release(handles)
    return t_done, time.perf_counter() - t0


class PopenRunner:
    """Stand-in for the local executor: Popen in a new session, wait, done."""

    def start(self, launch: ReplicaLaunch) -> Any:
        log = open(launch.log_path, "ab")
        return (subprocess.Popen(list(launch.argv), stdout=log, stderr=log, start_new_session=True), log)

    def poll(self, handle: Any) -> Any:
        code = handle[0].poll()
        return type("S", (), {"running": code is None, "exit_code": code})()

    def release(self, handles: list[Any]) -> None:
        for _, log in handles:
            log.close()


def process_executor() -> tuple[str, Any]:
    try:
        from vcli.executors.local import LocalExecutor

        return "LocalExecutor", LocalExecutor()
    except ImportError:
        return "Popen", PopenRunner()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--replicas", default="1,4")
    ap.add_argument("--image", default="vcli-base:bookworm")
    opts = ap.parse_args()
    counts = [int(x) for x in opts.replicas.split(",")]

    from vcli.executors.docker import DockerExecutor

    docker_ex = DockerExecutor()
    proc_name, proc_ex = process_executor()
    tmp = tempfile.mkdtemp(prefix="vcli-bench-docker-")
    # Warm-up (engine connection, image lookup, page cache), not measured.
    warm = launches(tmp, "warm", 1, opts.image, "python3", "docker")
    docker_ex.prepare(warm, cancelled=threading.Event(), progress=lambda _: None)
    run_executor(docker_ex, warm)
    run_executor(proc_ex, launches(tmp, "warmp", 1, None, PY, "process"))  # type: ignore[arg-type]

    results: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for r in range(opts.repeats):
        for n in counts:
            for kind, ex, python in (("processes", proc_ex, PY), ("containers", docker_ex, "python3")):
                job = f"bench{os.getpid()}-{r}-{n}-{kind[0]}"
                batch = launches(tmp, job, n, opts.image if kind == "containers" else None, python, kind)  # type: ignore[arg-type]
                results.setdefault((kind, n), []).append(run_executor(ex, batch))
    shutil.rmtree(tmp, ignore_errors=True)

    load = os.getloadavg()
    print("# Replica start overhead: containers vs processes (`python3 -c pass`)\n")
    print(
        f"{platform.node()}: {os.cpu_count()} cores, load {load[0]:.2f} {load[1]:.2f}; engine "
        f"{docker_ex.client().version().get('Version')} ({docker_ex.client().info().get('Driver')}); "
        f"image {opts.image}; processes via {proc_name} ({PY}); median of {opts.repeats} rounds.\n"
    )
    print("| replicas | runtime | start → all exited | per replica | incl. release | ratio (containers / processes) |")
    print("| ---: | --- | ---: | ---: | ---: | ---: |")
    med: Callable[[list[float]], float] = statistics.median
    for n in counts:
        p_done = med([x[0] for x in results[("processes", n)]])
        for kind in ("processes", "containers"):
            rows = results[(kind, n)]
            done, total = med([x[0] for x in rows]), med([x[1] for x in rows])
            ratio = "1.0×" if kind == "processes" else f"{done / p_done:.1f}×"
            print(f"| {n} | {kind} | {done * 1000:.0f} ms | {done / n * 1000:.0f} ms | {total * 1000:.0f} ms | {ratio} |")


if __name__ == "__main__":
    main()

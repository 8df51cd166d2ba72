"""Crash-safety figures (issue: crash-safe execution), through the real CLI and real processes.

    python bench/bench_crash.py [--runs 5]

1. Re-attach: a 3-replica job's controller is `kill -9`ed; time from the kill to a new
   `vcli custom-jobs resume` controller having taken over (its first heartbeat in the store,
   written after every replica is re-attached). Includes the new process's start-up.
2. Sibling failure to clean machine: a 2-replica job whose chief starts a tree (a child, a
   grandchild, a `setsid` child, a double-forked daemon); the worker exits 1. Time from the
   worker's exit (its supervisor's status file) until no process of the chief's tree is left.
3. End-of-trial latency when a helper keeps the trainer's stdout open: time from the trainer's
   exit to vcli seeing the replica end, against the same trainer read the way vcli read
   replicas before (a pipe read to EOF), measured in the same run; and what the helper adds
   to a whole `custom-jobs create` (vs the same job without it).

Prints medians and the ratio for (3).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

POOL = "machine-type=n1-standard-4,replica-count=1,container-image-uri=x"


def env_for(home: Path) -> dict[str, str]:
    env = dict(os.environ, VCLI_HOME=str(home), VCLI_CONFIG_DIR=str(home / "config"))
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def vcli(home: Path, *args: str, **popen: object) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "vcli", *args], env=env_for(home), cwd=REPO, text=True,
                            start_new_session=True, **popen)  # type: ignore[call-overload]


def wait(predicate: Any, timeout: float = 60, interval: float = 0.005) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError


def tagged(token: str) -> list[int]:
    out = []
    for e in os.listdir("/proc"):
        if e.isdigit():
            try:
                with open(f"/proc/{e}/cmdline", "rb") as f:
                    if token.encode() in f.read().split(b"\0"):
                        out.append(int(e))
            except OSError:
                pass
    return out


def job_row(home: Path, job_id: str) -> dict:  # type: ignore[type-arg]
    from vcli.store import Store

    row = Store(home).get_job(job_id)
    return {"pid": row.controller_pid, "heartbeat": row.heartbeat, "state": row.state} if row else {}


def bench_reattach(tmp: Path) -> float:
    home = tmp / "home"
    script = tmp / "sleep.py"
    script.write_text("import time; time.sleep(60)\n")
    proc = vcli(home, "custom-jobs", "create", "--display-name=bench", f"--worker-pool-spec={POOL}",
                f"--worker-pool-spec={POOL.replace('replica-count=1', 'replica-count=2')}",
                f"--command={sys.executable},{script}", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    line = wait(lambda: proc.stderr.readline())  # type: ignore[union-attr]
    while "submitted successfully" not in line:
        line = proc.stderr.readline()  # type: ignore[union-attr]
    job_id = line.split("[", 1)[1].split("]", 1)[0].rsplit("/", 1)[-1]
    from vcli.store import Store

    wait(lambda: sum(1 for r in Store(home).replicas(job_id) if r.handle) == 3)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    killed = time.time()
    resumer = vcli(home, "custom-jobs", "resume", job_id, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait(lambda: job_row(home, job_id).get("pid") == resumer.pid and (job_row(home, job_id)["heartbeat"] or 0) > killed)
    took = time.time() - killed
    os.killpg(resumer.pid, signal.SIGINT)  # cancels the job: every replica stopped
    resumer.wait(60)
    return took


CHIEF = textwrap.dedent("""
    import os, subprocess, sys, time
    token = sys.argv[1]
    sleeper = [sys.executable, "-S", "-c", "import time; time.sleep(300)", token]
    subprocess.Popen(sleeper)
    subprocess.Popen([sys.executable, "-S", "-c", "import subprocess, sys, time; subprocess.Popen(sys.argv[1:]); time.sleep(300)", *sleeper])
    subprocess.Popen(sleeper, start_new_session=True)
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, sleeper)
        os._exit(0)
    time.sleep(300)
""")


def bench_sibling_failure(tmp: Path) -> float:
    home = tmp / "home"
    chief, worker = tmp / "chief.py", tmp / "worker.py"
    chief.write_text(CHIEF)
    worker.write_text("import time, sys; time.sleep(2); sys.exit(1)\n")
    token = f"vcli-bench-{os.getpid()}-{time.monotonic_ns()}"
    config = tmp / "job.json"
    pool = {"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": 1}
    config.write_text(json.dumps({"workerPoolSpecs": [
        {**pool, "containerSpec": {"imageUri": "x", "command": [sys.executable, str(chief), token]}},
        {**pool, "containerSpec": {"imageUri": "x", "command": [sys.executable, str(worker)]}},
    ]}))
    proc = vcli(home, "custom-jobs", "create", "--display-name=bench", f"--config={config}",
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait(lambda: len(tagged(token)) == 6, 30)  # the chief and its five descendants
    status = wait(lambda: list((home / "jobs").glob("*/replicas/workerpool1-0/replica.status")), 30)[0]
    wait(lambda: tagged(token) == [], 30, 0.002)
    gone = time.time()
    ended = json.loads(status.read_text())["endTime"]
    proc.wait(60)
    return gone - ended


TRAINER = "import subprocess, sys; subprocess.Popen(['sleep', '4']); print('done', flush=True)\n"


def bench_end_latency(tmp: Path) -> tuple[float, float]:
    from vcli.executors import supervisor

    script = tmp / "trainer.py"
    script.write_text(TRAINER)
    status, log = tmp / "status", tmp / "log"
    start = time.time()
    sup = subprocess.Popen([sys.executable, "-S", supervisor.__file__, str(status), str(log), "--",
                            sys.executable, str(script)], start_new_session=True)
    wait(lambda: status.exists(), 30, 0.001)
    seen = time.time()
    vcli_latency = seen - json.loads(status.read_text())["endTime"]
    sup.wait(30)
    # Before: the replica's end was the end of its output pipe.
    start = time.time()
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, start_new_session=True)
    exited = None
    while p.stdout.read(1):  # type: ignore[union-attr]
        if exited is None and p.poll() is not None:
            exited = time.time()
    eof = time.time()
    p.wait()
    exited = exited or start
    return vcli_latency, eof - exited


def bench_job_end(tmp: Path) -> float:
    """Whole `vcli custom-jobs create` of the helper-spawning trainer, minus the same job whose
    trainer starts no helper: what a helper holding stdout adds to the end of a job."""
    plain = tmp / "plain.py"
    plain.write_text("print('done', flush=True)\n")
    helper = tmp / "helper.py"
    helper.write_text(TRAINER)
    times = []
    for script in (plain, helper):
        started = time.monotonic()
        p = vcli(tmp / "home", "custom-jobs", "create", "--display-name=end", f"--worker-pool-spec={POOL}",
                 f"--command={sys.executable},{script}", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        assert p.wait(60) == 0
        times.append(time.monotonic() - started)
    return times[1] - times[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    reattach, cleanup, ours, before, job_end = [], [], [], [], []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as d:
            reattach.append(bench_reattach(Path(d)))
        with tempfile.TemporaryDirectory() as d:
            cleanup.append(bench_sibling_failure(Path(d)))
        with tempfile.TemporaryDirectory() as d:
            a, b = bench_end_latency(Path(d))
            ours.append(a)
            before.append(b)
        with tempfile.TemporaryDirectory() as d:
            job_end.append(bench_job_end(Path(d)))
    med = statistics.median
    print(f"kill -9 -> resumed controller re-attached (3 replicas): median {med(reattach) * 1000:.0f} ms "
          f"(max {max(reattach) * 1000:.0f} ms), incl. vcli start-up")
    print(f"sibling failure -> last process of the chief's 6-process tree gone: median {med(cleanup) * 1000:.0f} ms")
    print(f"end of a trainer whose helper holds stdout: vcli sees it after {med(ours) * 1000:.1f} ms; "
          f"a pipe read to EOF after {med(before) * 1000:.0f} ms ({med(before) / max(med(ours), 1e-6):.0f}x)")
    print(f"a whole job whose trainer leaves a helper holding stdout takes {med(job_end) * 1000:+.0f} ms "
          "compared with the same job without the helper")


if __name__ == "__main__":
    main()

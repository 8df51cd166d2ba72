"""Proof on a real NVIDIA GPU that vcli never gives one GPU to two replicas (not part of CI).

    python bench/gpu_check.py               # a machine with nvidia-smi, PyTorch and vcli installed
    python bench/gpu_check.py --declared 1  # no GPU: rehearse every step on a declared GPU
                                            # (VCLI_LOCAL_GPUS); the CUDA checks are then skipped

Every step runs the real CLI (`python -m vcli`) as a user would, with a private vcli home,
config and lease directory, on the machine's GPUs as nvidia-smi reports them:

1. detection: `vcli hosts gpus` lists every GPU nvidia-smi lists, all FREE;
2. one job with `accelerator-count=1` sees exactly one GPU (`CUDA_VISIBLE_DEVICES` is one
   index, `torch.cuda.device_count() == 1`) and trains on it (a linear model's loss falls);
3. two jobs, each asking for all the machine's GPUs, started 1 s apart: the second says it
   waits, and their trainers never overlap in time;
4. a study with `--parallel-trial-count=2`, each trial asking for all GPUs: its trials run
   one at a time;
5. `kill -9` of a controller whose replica holds the GPUs: `vcli hosts gpus` still shows them
   HELD by that job; `custom-jobs resume` re-attaches; once the replica ends they are FREE;
6. `vcli gpu run -- python trainer.py` holds one GPU while it runs (`hosts gpus` names its
   command) and trains on exactly that GPU;
7. a process vcli did not start holds memory on GPU 0: `hosts gpus` shows GPU 0 BUSY with its
   pid, user and command (skipped on declared GPUs);
8. GPU shares with NVIDIA MPS (`gpu_sharing: mps` in the private lease directory's policy; vcli
   starts the MPS daemon as this user when none runs, and stops it again): two trials of
   `accelerator-count=0.5` run at once on one GPU, each with its MPS limits, and both train
   (`shared` on declared GPUs);
9. the idle policy (`idle: {below_percent: 5, window: 5s, action: stop}`): a job whose trainer
   holds its GPU without using it is stopped within seconds, saying why (skipped on declared GPUs).

Prints one line per check and a JSON summary; exits 0 when every check passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

TRAINER = textwrap.dedent("""
    import json, os, sys, time
    out, seconds = sys.argv[1], float(sys.argv[2])
    rec = {"cuda": os.environ.get("CUDA_VISIBLE_DEVICES"), "start": time.time(), "job": os.environ.get("VCLI_JOB_ID"),
           "trial": os.environ.get("CLOUD_ML_TRIAL_ID"), "share": os.environ.get("VCLI_GPU_SHARE"),
           "mps_threads": os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"),
           "mps_memory": os.environ.get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")}
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        rec["device_count"] = torch.cuda.device_count()
        if torch.cuda.is_available():
            dev = torch.device("cuda:0")
            rec["device_name"] = torch.cuda.get_device_name(0)
            torch.manual_seed(0)
            model = torch.nn.Linear(256, 1).to(dev)
            opt = torch.optim.SGD(model.parameters(), lr=0.01)
            x = torch.randn(8192, 256, device=dev)
            y = x[:, :8].sum(1, keepdim=True)
            steps, first = 0, None
            # at least 50 steps: CUDA's start-up alone can take longer than `seconds`
            while steps < 50 or time.time() - rec["start"] < seconds:
                loss = ((model(x) - y) ** 2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                steps += 1
                if first is None:
                    first = loss.item()
            torch.cuda.synchronize()
            rec.update(steps=steps, first_loss=first, last_loss=loss.item())
    while time.time() - rec["start"] < seconds:
        time.sleep(0.05)
    rec["end"] = time.time()
    fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    os.write(fd, (json.dumps(rec) + "\\n").encode())
    os.close(fd)
    if os.environ.get("CLOUD_ML_HP_METRIC_FILE"):
        with open(os.environ["CLOUD_ML_HP_METRIC_FILE"], "a") as f:
            f.write(json.dumps({"loss": str(rec.get("last_loss", 0.5)), "global_step": "1"}) + "\\n")
""")


class Check:
    def __init__(self) -> None:
        self.results: list[dict[str, Any]] = []

    def __call__(self, name: str, ok: bool, detail: str = "") -> bool:
        self.results.append({"check": name, "ok": bool(ok), "detail": detail})
        print(f"{'PASS' if ok else 'FAIL'}  {name}{': ' + detail if detail else ''}", flush=True)
        return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--declared", type=int, default=0, help="no GPU: declare this many (VCLI_LOCAL_GPUS)")
    ap.add_argument("--seconds", type=float, default=6.0, help="how long each trainer runs")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="vcli-gpu-check-"))
    check = Check()
    try:
        run_checks(work, args.declared, args.seconds, check)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    failed = [r for r in check.results if not r["ok"]]
    print(json.dumps({"checks": len(check.results), "failed": len(failed), "results": check.results}, indent=1))
    return 1 if failed or not check.results else 0


def run_checks(work: Path, declared: int, seconds: float, check: Check) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VCLI_")}
    env.update(VCLI_HOME=str(work / "home"), VCLI_CONFIG_DIR=str(work / "config"),
               VCLI_GPU_LEASE_DIR=str(work / "leases"), PYTHONUNBUFFERED="1")
    if declared:
        env["VCLI_LOCAL_GPUS"] = str(declared)
    trainer = work / "trainer.py"
    trainer.write_text(TRAINER)

    def vcli(*argv: str, home: str = "home", timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "vcli", *argv], env={**env, "VCLI_HOME": str(work / home)},
                              capture_output=True, text=True, timeout=timeout)

    def spawn(*argv: str, home: str = "home") -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, "-m", "vcli", *argv], env={**env, "VCLI_HOME": str(work / home)},
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)

    def leases() -> list[dict[str, Any]]:
        r = vcli("hosts", "gpus", "--format=json", timeout=60)
        return json.loads(r.stdout) if r.returncode == 0 and r.stdout.strip() else []

    def records(log: Path) -> list[dict[str, Any]]:
        return [json.loads(line) for line in log.read_text().splitlines() if line.strip()] if log.exists() else []

    def disjoint(recs: list[dict[str, Any]]) -> bool:
        spans = sorted((r["start"], r["end"]) for r in recs)
        return all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))

    # 1. detection
    smi = shutil.which("nvidia-smi")
    if declared:
        count = declared
        check("nvidia-smi", True, f"skipped: {declared} GPU(s) declared with VCLI_LOCAL_GPUS")
    else:
        if not check("nvidia-smi", smi is not None, smi or "not found"):
            return
        listed = subprocess.run([str(smi), "--query-gpu=index,name,memory.used", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=30).stdout.strip().splitlines()
        count = len(listed)
        check("nvidia-smi lists GPUs", count > 0, "; ".join(listed))
    rows = leases()
    check("vcli hosts gpus lists every GPU, all FREE", [r["state"] for r in rows if r["gpu"] is not None] == ["FREE"] * count,
          json.dumps(rows))
    hosts = vcli("hosts", "list", "--include-local", "--format=json", timeout=60)
    local = next((h for h in json.loads(hosts.stdout or "[]") if h.get("name") == "local"), {})
    gpu_type = local.get("gpuType") or "NVIDIA_TESLA_T4"
    check("vcli detects the GPU type", bool(local.get("gpuType")) or bool(declared), f"gpuType={local.get('gpuType')}")

    def pool(gpus: int) -> str:
        return (f"--worker-pool-spec=machine-type=n1-standard-4,replica-count=1,accelerator-type={gpu_type},"
                f"accelerator-count={gpus},container-image-uri=unused")

    def job(name: str, log: Path, gpus: int, secs: float) -> list[str]:
        return ["custom-jobs", "create", f"--display-name={name}", pool(gpus), f"--command={sys.executable},{trainer}",
                f"--args={log},{secs}"]

    # 2. one GPU, seen and trained on
    log = work / "one.jsonl"
    r = vcli(*job("one-gpu", log, 1, seconds))
    recs = records(log)
    check("a 1-GPU job succeeds", r.returncode == 0 and len(recs) == 1, r.stderr[-500:] if r.returncode else "")
    if recs:
        rec = recs[0]
        check("it sees exactly one GPU index", rec["cuda"] is not None and len(rec["cuda"].split(",")) == 1,
              f"CUDA_VISIBLE_DEVICES={rec['cuda']}")
        if not declared:
            check("torch.cuda.device_count() == 1", rec.get("device_count") == 1, f"{rec.get('device_count')} "
                  f"({rec.get('device_name')})")
            check("it trained on the GPU", bool(rec.get("steps")) and rec["last_loss"] < rec["first_loss"],
                  f"{rec.get('steps')} steps, loss {rec.get('first_loss')} -> {rec.get('last_loss')}")

    # 3. two jobs for all the GPUs
    log = work / "two.jsonl"
    first = spawn(*job("all-a", log, count, seconds))
    time.sleep(1.0)
    second = spawn(*job("all-b", log, count, seconds), home="home-b")
    outs = [p.communicate(timeout=600) for p in (first, second)]
    recs = records(log)
    check("two all-GPU jobs both succeed", first.returncode == 0 and second.returncode == 0 and len(recs) == 2,
          " | ".join(o[1][-300:] for o in outs if o[1]) if first.returncode or second.returncode else "")
    check("the second waited and said for whom", "Waiting for GPUs" in outs[1][1] and "held by" in outs[1][1],
          next((line for line in outs[1][1].splitlines() if "Waiting for GPUs" in line), "no wait line"))
    check("their trainers never overlapped", len(recs) == 2 and disjoint(recs),
          json.dumps([(round(x["start"], 2), round(x["end"], 2), x["cuda"]) for x in recs]))

    # 4. a study of all-GPU trials, two in parallel
    log = work / "study.jsonl"
    r = vcli("hp-tuning-jobs", "create", "--display-name=gpu-study", "--max-trial-count=4",
             "--parallel-trial-count=2", "--algorithm=random-search", "--metric=metric-id=loss,goal=minimize",
             "--parameter-spec=parameter-id=lr,type=double,min=0.001,max=0.1", pool(count),
             f"--command={sys.executable},{trainer}", f"--args={log},{seconds / 2}", "--format=json")
    recs = records(log)
    check("the study succeeds with 4 trials", r.returncode == 0 and len(recs) == 4, r.stderr[-500:] if r.returncode else "")
    check("its trials ran one at a time", len(recs) == 4 and disjoint(recs),
          json.dumps([(round(x["start"], 2), round(x["end"], 2), x["cuda"]) for x in recs]))

    # 5. kill -9 of the controller, then resume
    log = work / "killed.jsonl"
    ctl = spawn(*job("killed", log, count, seconds * 2), home="home-k")
    deadline = time.monotonic() + 120
    held: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        held = [x for x in leases() if x["state"] == "HELD" and x.get("pid")]
        if len(held) == count:
            break
        time.sleep(0.2)
    job_id = held[0]["job"] if held else None
    os.killpg(ctl.pid, signal.SIGKILL)  # the controller's group; the replica's supervisor has its own session
    ctl.communicate()
    time.sleep(0.5)
    after = leases()
    check("after kill -9 of the controller its GPUs stay HELD by its job",
          bool(job_id) and [x["state"] for x in after if x["gpu"] is not None] == ["HELD"] * count
          and all(x["job"] == job_id for x in after if x["gpu"] is not None), json.dumps(after))
    r = vcli("custom-jobs", "resume", str(job_id), home="home-k")
    check("resume re-attaches and the job succeeds", r.returncode == 0 and "re-attached" in r.stderr,
          r.stderr[-500:])
    final = leases()
    check("once the replica ended every GPU is FREE",
          [x["state"] for x in final if x["gpu"] is not None] == ["FREE"] * count and len(records(log)) == 1,
          json.dumps(final))
    team_checks(work, declared, seconds, check, vcli, spawn, leases, records, job, gpu_type)


def team_checks(work: Path, declared: int, seconds: float, check: Check, vcli: Any, spawn: Any, leases: Any,
                records: Any, job: Any, gpu_type: str) -> None:
    """Checks 6-9: `gpu run`, a process vcli did not start, MPS shares and the idle policy."""
    trainer = work / "trainer.py"
    # 6. vcli gpu run
    log = work / "gpu-run.jsonl"
    run = spawn("gpu", "run", "--", sys.executable, str(trainer), str(log), str(seconds))
    seen: list[dict[str, Any]] = []
    for _ in range(300):
        seen = [x for x in leases() if x["state"] == "HELD" and x.get("command")]
        if seen or run.poll() is not None:
            break
        time.sleep(0.2)
    out, err = run.communicate(timeout=600)
    recs = records(log)
    check("gpu run holds a GPU, shown with its command", bool(seen) and str(trainer) in str(seen[0]["command"]),
          json.dumps(seen))
    check("gpu run's program ran on one GPU", run.returncode == 0 and len(recs) == 1 and recs[0]["cuda"] is not None
          and (declared or recs[0].get("device_count") == 1), err[-300:] + json.dumps(recs))
    # 7. a process vcli did not start
    if not declared:
        holder = subprocess.Popen([sys.executable, "-c", "import time, torch; x = torch.ones(1 << 28, device='cuda:0'); "
                                   "time.sleep(60)"], env={**os.environ, "CUDA_VISIBLE_DEVICES": "0"})
        busy: list[dict[str, Any]] = []
        for _ in range(150):
            busy = [x for x in leases() if x["state"] == "BUSY" and x["gpu"] == 0]
            if busy:
                break
            time.sleep(0.2)
        holder.kill()
        holder.wait()
        check("hosts gpus names the pid, user and command of a process vcli did not start",
              bool(busy) and busy[0]["pid"] == holder.pid and bool(busy[0]["user"]) and "torch" in str(busy[0]["command"]),
              json.dumps(busy))
    # 8. shares of one GPU
    mechanism = "shared" if declared else "mps"
    vcli("hosts", "policy", "--set", f"gpu_sharing={mechanism}")
    log = work / "shares.jsonl"
    r = vcli("hp-tuning-jobs", "create", "--display-name=shares", "--max-trial-count=2", "--parallel-trial-count=2",
             "--algorithm=random-search", "--metric=metric-id=loss,goal=minimize",
             "--parameter-spec=parameter-id=lr,type=double,min=0.001,max=0.1",
             f"--worker-pool-spec=machine-type=n1-standard-4,accelerator-type={gpu_type},accelerator-count=0.5,"
             "container-image-uri=unused", f"--command={sys.executable},{trainer}", f"--args={log},{seconds}")
    recs = records(log)
    spans = sorted((x["start"], x["end"]) for x in recs)
    check(f"two 0.5 trials share one GPU at once ({mechanism})", r.returncode == 0 and len(recs) == 2
          and len({x["cuda"] for x in recs}) == 1 and spans[0][1] > spans[1][0], r.stderr[-500:] + json.dumps(recs))
    if not declared:
        check("each has its MPS limits and trained", all(x["mps_threads"] == "50" and x["mps_memory"]
                                                         and x.get("last_loss", 1) < x.get("first_loss", 0) for x in recs),
              json.dumps(recs))
        subprocess.run(["sh", "-c", "echo quit | nvidia-cuda-mps-control"], capture_output=True, timeout=30)
    vcli("hosts", "policy", "--unset", "gpu_sharing")
    # 9. the idle policy
    if not declared:
        vcli("hosts", "policy", "--set", "idle.below_percent=5", "--set", "idle.window=5s", "--set", "idle.action=stop")
        idle = work / "idle.py"
        idle.write_text("import time\ntime.sleep(120)\n")
        t0 = time.monotonic()
        r = vcli("custom-jobs", "create", "--display-name=idle", job("x", work / "x", 1, 1)[3],
                 f"--command={sys.executable},{idle}")
        took = time.monotonic() - t0
        check("the idle policy stopped a job that held its GPU unused", r.returncode != 0 and took < 60
              and "stayed below 5 %" in r.stderr + vcli("custom-jobs", "list", "--format=json").stdout,
              f"{took:.1f}s: {r.stderr[-300:]}")
        vcli("hosts", "policy", "--unset", "idle")


if __name__ == "__main__":
    sys.exit(main())

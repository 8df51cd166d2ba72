"""A team's GPU server: the host's lease policy (per-user GPU limits, trials per study, fair
share), `vcli gpu run` for programs vcli does not start, and `hosts gpus` naming the processes
vcli did not start. Real vcli processes under two real Unix users on a host that declares GPUs
(`VCLI_LOCAL_GPUS`); each program appends `<CUDA_VISIBLE_DEVICES> <start> <end> <label>` to a
shared file, and the tests check the limits at every instant from those intervals."""

from __future__ import annotations

import json
import os
import shutil
import signal
import site
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Iterator

import pytest

from tests.helpers import REPO, describe, job_id_from_stderr, spawn, vcli, vcli_env, wait_for
from tests.kit import OTHER_USER, assert_disjoint, ensure_other_user, gpu_intervals, gpu_job_args, gpu_trainer, system_python
from vcli.placement.gpulease import LeaseDir

#: A program that holds its GPUs for argv[3] seconds (or until the file `until:PATH` exists) and
#: logs `<gpus> <start> <end> <label>`.
HOLD = textwrap.dedent("""
    import os, sys, time
    start = time.time()
    if sys.argv[3].startswith("until:"):  # held until the test makes that file
        while not os.path.exists(sys.argv[3][6:]):
            time.sleep(0.05)
    else:
        time.sleep(float(sys.argv[3]))
    line = f"{os.environ.get('CUDA_VISIBLE_DEVICES', '')} {start:.6f} {time.time():.6f} {sys.argv[2]}\\n"
    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    os.write(fd, line.encode())
    os.close(fd)
""")


@pytest.fixture
def shared() -> Iterator[Path]:
    """A directory both Unix users reach (outside pytest's private temp root), with the hold
    program, a log both may append to, and the lease directory (made by root: its policy's owner)."""
    ensure_other_user()
    root = Path(tempfile.mkdtemp(prefix="vcli-team-", dir="/tmp"))
    try:
        os.chmod(root, 0o777)
        (root / "hold.py").write_text(HOLD)
        log = root / "gpus.log"
        log.touch()
        os.chmod(log, 0o666)
        (root / "leases").mkdir(mode=0o1777)
        os.chmod(root / "leases", 0o1777)
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _env(shared: Path, gpus: int) -> dict[str, str]:
    return {"VCLI_LOCAL_GPUS": str(gpus), "VCLI_GPU_LEASE_DIR": str(shared / "leases")}


def _hold(shared: Path, label: str, seconds: float | str) -> list[str]:
    return ["--", sys.executable, str(shared / "hold.py"), str(shared / "gpus.log"),
            label, str(seconds)]


def _as_other(shared: Path, gpus: int, *args: str) -> subprocess.Popen[str]:
    """`python -m vcli ARGS` as the second Unix user, in its own home."""
    python = system_python()
    paths = os.pathsep.join([str(REPO), *site.getsitepackages()])
    args = tuple(python if a == sys.executable else a for a in args)
    return subprocess.Popen(
        ["runuser", "-u", OTHER_USER, "--", python, "-m", "vcli", *args],
        env=vcli_env(shared / "other-home", HOME=str(shared), PYTHONPATH=paths, **_env(shared, gpus)), cwd=shared,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _policy(shared: Path, text: str) -> None:
    path = shared / "leases" / "policy.yaml"
    path.write_text(textwrap.dedent(text))
    path.chmod(0o644)


def _finish(*procs: subprocess.Popen[str]) -> None:
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-3000:]


def _most_at_once(spans: list[tuple[float, float]]) -> int:
    """The largest number of the intervals `spans` that overlap at one instant."""
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans], key=lambda x: (x[0], x[1]))
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def _held(shared: Path, gpus: int) -> int:
    d = LeaseDir(str(shared / "leases"))
    return sum(1 for rec in d.probe(range(gpus)).values() if rec)


# ----------------------------------------------------------------------------- per-user limits


def test_each_users_gpu_limit_holds_at_every_instant_across_processes_and_users(shared: Path) -> None:
    """A 4-GPU host whose policy lets each user hold 2 GPUs at once: root and a second user
    each start four `vcli gpu run` programs of one GPU at the same time. At no instant does a
    user hold more than 2, no GPU is shared, and all eight programs run."""
    assert vcli(shared / "root-home", "hosts", "policy", "--set", "max_gpus_per_user=2",
                **_env(shared, 4)).returncode == 0
    procs = []
    for n in range(4):
        procs.append(spawn(shared / "root-home", "gpu", "run", *_hold(shared, f"root-{n}", 1.0), **_env(shared, 4)))
        procs.append(_as_other(shared, 4, "gpu", "run", *_hold(shared, f"other-{n}", 1.0)))
    _finish(*procs)
    spans = gpu_intervals(shared / "gpus.log")
    assert len(spans) == 8
    assert_disjoint(spans)
    for user in ("root", "other"):
        mine = [(s, e) for _, s, e, label in spans if label.startswith(user)]
        assert _most_at_once(mine) <= 2, (user, sorted(mine))


def test_a_request_over_the_users_limit_can_never_run_and_says_why(shared: Path) -> None:
    _policy(shared, "max_gpus_per_user: 1\nusers: {root: 1}\n")
    r = vcli(shared / "h", "gpu", "run", "--gpus=2", *_hold(shared, "x", 0), **_env(shared, 4))
    assert r.returncode == 1
    assert r.stderr.strip().splitlines()[-1] == (
        f"ERROR: (vcli.gpu.run) root may hold at most 1 GPU at once on host local (lease policy "
        f"{shared}/leases/policy.yaml), and this asks for 2")


def test_a_policy_file_another_user_wrote_is_ignored_with_one_warning(shared: Path) -> None:
    """The lease directory is writable by everyone: a policy file of another user (not root,
    not the directory's owner) limits nothing, and every command says so in one line."""
    path = shared / "leases" / "policy.yaml"
    path.write_text("max_gpus_per_user: 0\n")
    os.chown(path, int(subprocess.check_output(["id", "-u", OTHER_USER])), -1)
    r = vcli(shared / "h", "gpu", "run", *_hold(shared, "x", 0), **_env(shared, 1))
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("WARNING: the lease policy") == 1
    assert f"owned by {OTHER_USER}, neither root nor the lease directory's owner (root): not trusted" in r.stderr


def test_a_wrong_policy_is_one_line_naming_the_key(shared: Path) -> None:
    _policy(shared, "queue: lifo\n")
    r = vcli(shared / "h", "gpu", "run", *_hold(shared, "x", 0), **_env(shared, 1))
    assert r.returncode == 1
    assert r.stderr.strip() == (f"ERROR: (vcli.gpu.run) {shared}/leases/policy.yaml: queue: expected one of "
                                "first-come, fair-share, got 'lifo'")
    r = vcli(shared / "h", "hosts", "policy", "--set", "max_gpus_per_user=-1", **_env(shared, 1))
    assert r.returncode == 1
    assert r.stderr.strip().splitlines()[-1] == ("ERROR: (vcli.hosts.policy) --set: max_gpus_per_user: expected a "
                                                 "number of GPUs >= 0, got -1")
    r = vcli(shared / "h", "hosts", "policy", "--set", "queue=fair-share", "--format=json", **_env(shared, 1))
    assert r.returncode == 0, r.stderr  # --set repairs a broken file, saying what it drops
    assert "queue: expected one of first-come, fair-share, got 'lifo'; --set starts from an empty policy" in r.stderr
    assert json.loads(r.stdout)["policy"] == {"queue": "fair-share"}


def test_only_root_or_the_lease_directorys_owner_sets_the_policy(shared: Path) -> None:
    p = _as_other(shared, 1, "hosts", "policy", "--set", "queue=fair-share")
    out, err = p.communicate(timeout=60)
    assert p.returncode == 1
    assert "only root or the owner of" in err and "may set its lease policy" in err
    assert not (shared / "leases" / "policy.yaml").exists()


def test_a_study_holds_at_most_its_trials_per_study_on_the_host(shared: Path) -> None:
    """`max_trials_per_study: 1` on a 2-GPU host: a study of 3 trials, 2 in parallel, never
    has two trials holding GPUs at once, and the study succeeds."""
    _policy(shared, "max_trials_per_study: 1\n")
    trainer, log = gpu_trainer(shared), shared / "trials.log"
    config = shared / "study.yaml"
    config.write_text(textwrap.dedent(f"""\
        displayName: capped
        maxTrialCount: 3
        parallelTrialCount: 2
        studySpec:
          algorithm: RANDOM_SEARCH
          metrics: [{{metricId: loss, goal: MINIMIZE}}]
          parameters: [{{parameterId: lr, doubleValueSpec: {{minValue: 0.1, maxValue: 1.0}}}}]
        trialJobSpec:
          workerPoolSpecs:
          - machineSpec: {{machineType: n1-standard-4, acceleratorType: NVIDIA_TESLA_T4, acceleratorCount: 1}}
            replicaCount: 1
            containerSpec: {{imageUri: unused, command: [{sys.executable}, {trainer}], args: [{log}, '0.6']}}
    """))
    r = vcli(shared / "h", "hp-tuning-jobs", "create", "--display-name=capped", f"--config={config}", timeout=180,
             **_env(shared, 2))
    assert r.returncode == 0, r.stderr[-3000:]
    spans = [(s, e) for _, s, e, _ in gpu_intervals(log)]
    assert len(spans) == 3
    assert _most_at_once(spans) == 1, sorted(spans)


# ----------------------------------------------------------------------------- queue order


@pytest.mark.parametrize("order, first", [("fair-share", "other"), ("first-come", "root")])
def test_fair_share_serves_the_user_holding_fewest_gpus_first(shared: Path, order: str, first: str) -> None:
    """Root holds both GPUs of a host (one long, one short); root's waiter arrives, then the
    second user's. When the short one ends, fair share gives the GPU to the second user (who
    holds none; root holds one), first come to root's earlier waiter. `hosts gpus` says why."""
    _policy(shared, f"queue: {order}\n")
    home = shared / "root-home"
    long = spawn(home, "gpu", "run", *_hold(shared, "long", f"until:{shared}/end-long"), **_env(shared, 2))
    wait_for(lambda: _held(shared, 2) == 1, 30, "the long holder's lease")
    short = spawn(home, "gpu", "run", *_hold(shared, "short", f"until:{shared}/end-short"), **_env(shared, 2))
    wait_for(lambda: _held(shared, 2) == 2, 30, "both GPUs held")
    mine = spawn(home, "gpu", "run", *_hold(shared, "root", 0.5), **_env(shared, 2))
    wait_for(lambda: len(LeaseDir(str(shared / "leases")).waiters()) == 1, 30, "root's waiter")
    other = _as_other(shared, 2, "gpu", "run", *_hold(shared, "other", 0.5))
    wait_for(lambda: len(LeaseDir(str(shared / "leases")).waiters()) == 2, 30, "both waiters")
    rows = json.loads(vcli(home, "hosts", "gpus", "--format=json", **_env(shared, 2)).stdout)
    reasons = {r["user"]: r["reason"] for r in rows if r["state"] == "WAITING"}
    if order == "fair-share":
        assert reasons == {"root": "fair share: root holds 2 GPUs here", OTHER_USER: f"fair share: {OTHER_USER} holds 0 GPUs here"}
    else:
        assert reasons == {"root": None, OTHER_USER: None}
    (shared / "end-short").touch()
    _finish(short, mine, other)
    (shared / "end-long").touch()
    _finish(long)
    spans = {label: start for _, start, _, label in gpu_intervals(shared / "gpus.log")}
    later = "root" if first == "other" else "other"
    assert spans[first] < spans[later], spans


# ----------------------------------------------------------------------------- vcli gpu run


def test_gpu_run_queues_behind_a_job_and_kill_9_frees_its_gpu(shared: Path) -> None:
    """`vcli gpu run` waits for the GPU a job holds, saying whose it is, then runs with
    CUDA_VISIBLE_DEVICES set; a `gpu run` program shows in `hosts gpus` with its command, and
    kill -9 of it gives the GPU back at once."""
    env = _env(shared, 1)
    home = shared / "h"
    trainer = gpu_trainer(shared)
    job = spawn(home, *gpu_job_args(trainer, shared / "gpus.log", 6.0, 1, "first"), **env)
    wait_for(lambda: _held(shared, 1) == 1, 60, "the job's lease")
    run = spawn(home, "gpu", "run", *_hold(shared, "gpu-run", 0.2), **env)
    out, err = run.communicate(timeout=120)
    assert run.returncode == 0, err
    assert "Waiting for 1 GPU of this machine: GPU 0 held by job " in err
    _finish(job)
    spans = sorted(gpu_intervals(shared / "gpus.log"), key=lambda s: s[1])
    assert [(gpus, label == "gpu-run") for gpus, _, _, label in spans] == [((0,), False), ((0,), True)]
    assert spans[1][1] >= spans[0][2]

    sleeper = spawn(home, "gpu", "run", "--", "sleep", "60", **env)
    try:
        wait_for(lambda: _held(shared, 1) == 1, 30, "the lease")
        rows = json.loads(vcli(home, "hosts", "gpus", "--format=json", **env).stdout)
        assert [(r["state"], r["command"], r["pid"], r["user"]) for r in rows] == [("HELD", "sleep 60", sleeper.pid, "root")]
        os.kill(sleeper.pid, signal.SIGKILL)
        sleeper.wait(timeout=10)
        t0 = time.monotonic()
        wait_for(lambda: _held(shared, 1) == 0, 5, "the lease to end", interval=0.05)
        assert time.monotonic() - t0 < 2
    finally:
        sleeper.kill()
        sleeper.wait()


def test_gpu_run_gives_up_after_max_wait_and_leaves_no_queue_entry(shared: Path) -> None:
    env = _env(shared, 1)
    holder = spawn(shared / "h", "gpu", "run", "--", "sleep", "30", **env)
    try:
        wait_for(lambda: _held(shared, 1) == 1, 30, "the lease")
        r = vcli(shared / "h", "gpu", "run", "--max-wait=1s", *_hold(shared, "x", 0), **env)
        assert r.returncode == 3, r.stderr
        assert "1 GPU of this machine did not come free within --max-wait: GPU 0 held by `sleep 30`" in r.stderr
        assert LeaseDir(str(shared / "leases")).waiters() == []
    finally:
        holder.kill()
        holder.wait()
    r = vcli(shared / "h", "gpu", "run", "--", "no-such-program-here", **env)
    assert r.returncode == 1
    assert "[no-such-program-here] is not a program that can be run" in r.stderr


# ----------------------------------------------------------------------------- who else uses a GPU


def test_hosts_gpus_names_the_user_command_and_memory_of_a_process_vcli_did_not_start(shared: Path) -> None:
    """nvidia-smi (a stand-in) reports a process of the second user on GPU 1: `hosts gpus`
    shows GPU 1 BUSY with that user, its pid, its command and its memory."""
    sleeper = subprocess.Popen(["sleep", "60"], user=OTHER_USER)
    try:
        bin_dir = shared / "smi-bin"
        bin_dir.mkdir()
        smi = bin_dir / "nvidia-smi"
        smi.write_text(textwrap.dedent(f"""\
            #!/bin/sh
            case "$1" in
              --query-gpu=index,uuid) printf '0, GPU-a\\n1, GPU-b\\n' ;;
              --query-compute-apps=*) printf 'GPU-b, {sleeper.pid}, 6144\\n' ;;
              *) exit 2 ;;
            esac
        """))
        smi.chmod(0o755)
        env = {**_env(shared, 2), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
        rows = json.loads(vcli(shared / "h", "hosts", "gpus", "--format=json", **env).stdout)
        busy = [r for r in rows if r["state"] == "BUSY"]
        assert [(r["gpu"], r["user"], r["pid"], r["command"]) for r in busy] == [(1, OTHER_USER, sleeper.pid, "sleep 60")]
        assert busy[0]["reason"] == (f"used by a process vcli did not start (pid {sleeper.pid} of {OTHER_USER}: "
                                     "sleep 60, 6144 MiB)")
    finally:
        sleeper.kill()
        sleeper.wait()


# ----------------------------------------------------------------------------- idle GPUs


def _idle_smi(root: Path, percent: int) -> str:
    """A PATH whose `nvidia-smi` says every GPU runs at `percent` % and no process holds memory."""
    bin_dir = root / "idle-bin"
    bin_dir.mkdir(exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    smi.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        case "$1" in
          --query-gpu=index,utilization.gpu) printf '0, {percent}\\n1, {percent}\\n' ;;
          --query-gpu=index,uuid) printf '0, GPU-a\\n1, GPU-b\\n' ;;
          --query-compute-apps=*) ;;
          *) exit 2 ;;
        esac
    """))
    smi.chmod(0o755)
    return f"{bin_dir}{os.pathsep}{os.environ['PATH']}"


@pytest.mark.parametrize("action", ["stop", "warn"])
def test_the_idle_policy_warns_about_or_stops_a_replica_whose_gpu_stays_idle(shared: Path, action: str) -> None:
    """The host's policy: a replica whose GPU stays below 5 % for 1 s. nvidia-smi (a stand-in)
    says 0 %: with `stop` the job fails within seconds, saying why; with `warn` its log and
    `hosts gpus` say so, and it runs to its end."""
    _policy(shared, f"idle: {{below_percent: 5, window: 1s, action: {action}}}\n")
    env = {**_env(shared, 1), "PATH": _idle_smi(shared, 0)}
    home = shared / "h"
    seconds = 60 if action == "stop" else 12
    t0 = time.monotonic()
    job = spawn(home, *gpu_job_args(gpu_trainer(shared), shared / "gpus.log", seconds, 1, "idle"), **env)
    if action == "warn":
        def held_reason() -> str | None:
            rows = json.loads(vcli(home, "hosts", "gpus", "--format=json", **env).stdout)
            return next((r["reason"] for r in rows if r["state"] == "HELD" and r["reason"]), None)

        assert wait_for(held_reason, 30, "the idle note") == ("GPU 0 stayed below 5 % utilisation for 1s (the host's "
                                                               "idle policy)")
    out, err = job.communicate(timeout=120)
    if action == "stop":
        assert job.returncode == 6, err[-3000:]
        assert time.monotonic() - t0 < 40
        record = describe(home, "custom-jobs", job_id_from_stderr(err))
        assert record["failureCause"] == ("vcli: GPU 0 stayed below 5 % utilisation for 1s (the host's idle policy): "
                                          "stopping the replica.")
    else:
        assert job.returncode == 0, err[-3000:]
    assert _held(shared, 1) == 0


def test_a_busy_gpu_is_never_idle(shared: Path) -> None:
    _policy(shared, "idle: {below_percent: 5, window: 1s, action: stop}\n")
    env = {**_env(shared, 1), "PATH": _idle_smi(shared, 90)}
    r = vcli(shared / "h", *gpu_job_args(gpu_trainer(shared), shared / "gpus.log", 3, 1, "busy"), timeout=120, **env)
    assert r.returncode == 0, r.stderr[-3000:]


# ----------------------------------------------------------------------------- shares of a GPU

#: A trainer that logs its GPU variables and the time it held them, as one JSON line.
SHARE_TRAINER = textwrap.dedent("""
    import json, os, sys, time
    start = time.time()
    time.sleep(float(sys.argv[2]))
    keys = ("CUDA_VISIBLE_DEVICES", "VCLI_GPU_SHARE", "XLA_PYTHON_CLIENT_MEM_FRACTION",
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")
    line = json.dumps({"start": start, "end": time.time(), **{k: os.environ.get(k) for k in keys}}) + "\\n"
    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    os.write(fd, line.encode())
    os.close(fd)
    if os.environ.get("CLOUD_ML_HP_METRIC_FILE"):
        with open(os.environ["CLOUD_ML_HP_METRIC_FILE"], "a") as f:
            f.write('{"loss": "0.5", "global_step": "1"}\\n')
""")


def _share_study(shared: Path, share: float, trials: int, seconds: float) -> Path:
    trainer = shared / "share_trainer.py"
    trainer.write_text(SHARE_TRAINER)
    config = shared / "shares.yaml"
    config.write_text(textwrap.dedent(f"""\
        displayName: shares
        maxTrialCount: {trials}
        parallelTrialCount: {trials}
        studySpec:
          algorithm: RANDOM_SEARCH
          metrics: [{{metricId: loss, goal: MINIMIZE}}]
          parameters: [{{parameterId: lr, doubleValueSpec: {{minValue: 0.1, maxValue: 1.0}}}}]
        trialJobSpec:
          workerPoolSpecs:
          - machineSpec: {{machineType: n1-standard-4, acceleratorType: NVIDIA_TESLA_T4, acceleratorCount: {share}}}
            replicaCount: 1
            containerSpec: {{imageUri: unused, command: [{sys.executable}, {trainer}], args: [{shared / 'shares.log'}, '{seconds}']}}
    """))
    return config


def _shares_log(shared: Path) -> list[dict]:
    return [json.loads(line) for line in (shared / "shares.log").read_text().splitlines()]


def test_four_quarter_gpu_trials_share_one_gpu_and_a_fifth_waits(shared: Path) -> None:
    """`gpu_sharing: shared` on a 1-GPU host: a study of five 0.25 trials, all five in parallel:
    at most four hold the GPU at once (and four do), each with CUDA_VISIBLE_DEVICES=0 and the
    framework memory caps of its share."""
    _policy(shared, "gpu_sharing: shared\n")
    r = vcli(shared / "h", "hp-tuning-jobs", "create", "--display-name=shares",
             f"--config={_share_study(shared, 0.25, 5, 8.0)}", timeout=240, **_env(shared, 1))
    assert r.returncode == 0, r.stderr[-3000:]
    lines = _shares_log(shared)
    assert len(lines) == 5
    assert {(x["CUDA_VISIBLE_DEVICES"], x["VCLI_GPU_SHARE"], x["XLA_PYTHON_CLIENT_MEM_FRACTION"]) for x in lines} == {
        ("0", "0.25", "0.25")}
    assert _most_at_once([(x["start"], x["end"]) for x in lines]) == 4


def test_a_share_on_a_host_whose_policy_names_no_sharing_is_one_line(shared: Path) -> None:
    r = vcli(shared / "h", "custom-jobs", "create", "--display-name=quarter",
             "--worker-pool-spec=machine-type=n1-standard-4,accelerator-type=NVIDIA_TESLA_T4,accelerator-count=0.25,"
             "container-image-uri=unused", f"--command={sys.executable},-c,pass", timeout=120, **_env(shared, 1))
    assert r.returncode != 0
    assert ("a 0.25 share of a GPU needs host local's lease policy to name how its GPUs are shared: `vcli hosts "
            "policy --set gpu_sharing=shared`") in r.stderr, r.stderr[-2000:]
    r = vcli(shared / "h", "custom-jobs", "create", "--display-name=more", "--validate-only",
             "--worker-pool-spec=machine-type=n1-standard-4,accelerator-type=NVIDIA_TESLA_T4,accelerator-count=1.5,"
             "container-image-uri=unused", f"--command={sys.executable},-c,pass", timeout=120, **_env(shared, 1))
    assert r.returncode == 2
    assert "a share is of one GPU: ask for less than 1 (such as 0.25) or for whole GPUs" in r.stderr


def test_with_mps_each_replica_gets_its_share_of_threads_and_memory(shared: Path) -> None:
    """`gpu_sharing: mps`: vcli starts the MPS control daemon (a stand-in that records it) and
    each replica gets CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and CUDA_MPS_PINNED_DEVICE_MEM_LIMIT
    for its share of an 80 GB GPU (nvidia-smi's memory.total, a stand-in)."""
    bin_dir = shared / "mps-bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(textwrap.dedent("""\
        #!/bin/sh
        case "$1" in
          --query-gpu=index,memory.total) printf '0, 81559\\n' ;;
          --query-gpu=index,uuid) printf '0, GPU-a\\n' ;;
          --query-compute-apps=*) ;;
          *) exit 2 ;;
        esac
    """))
    (bin_dir / "nvidia-cuda-mps-control").write_text(f"#!/bin/sh\necho \"$@\" >> {shared}/mps.calls\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    _policy(shared, "gpu_sharing: mps\n")
    env = {**_env(shared, 1), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    r = vcli(shared / "h", "hp-tuning-jobs", "create", "--display-name=mps",
             f"--config={_share_study(shared, 0.5, 2, 0.5)}", timeout=240, **env)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = _shares_log(shared)
    assert [(x["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], x["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"]) for x in lines] == [
        ("50", "0=40779M")] * 2
    assert (shared / "mps.calls").read_text().splitlines()[0] == "-d"


def test_a_whole_gpu_waits_for_the_shares_and_gpu_run_takes_a_fraction(shared: Path) -> None:
    """`vcli gpu run --fraction=0.5` twice share the GPU (`hosts gpus` shows both, half each);
    a whole-GPU `gpu run` waits until both are gone."""
    _policy(shared, "gpu_sharing: shared\n")
    env = _env(shared, 1)
    home = shared / "h"
    gate = f"until:{shared}/end-halves"
    halves = [spawn(home, "gpu", "run", "--fraction=0.5", *_hold(shared, f"half-{n}", gate), **env) for n in range(2)]
    wait_for(lambda: len(LeaseDir(str(shared / "leases")).holders()) == 2, 30, "both halves")
    rows = json.loads(vcli(home, "hosts", "gpus", "--format=json", **env).stdout)
    assert [(r["gpu"], r["state"], r["gpus"]) for r in rows] == [(0, "HELD", 0.5), (0, "HELD", 0.5)]
    whole = spawn(home, "gpu", "run", *_hold(shared, "whole", 0.1), **env)
    wait_for(lambda: len(LeaseDir(str(shared / "leases")).waiters()) == 1, 30, "the whole GPU's wait")
    (shared / "end-halves").touch()
    _finish(whole, *halves)
    spans = {label: (start, end) for _, start, end, label in gpu_intervals(shared / "gpus.log")}
    assert spans["whole"][0] >= max(spans["half-0"][1], spans["half-1"][1])
    assert _most_at_once([spans["half-0"], spans["half-1"]]) == 2

"""Host-wide GPU leases (`vcli.placement.gpulease`): a GPU is never shared by two replicas, whichever vcli
process, Unix user or controller started them. Real vcli processes on a host that declares GPUs
(`VCLI_LOCAL_GPUS`); each trainer appends `<CUDA_VISIBLE_DEVICES> <start> <end>` to a shared
file, and the tests check that no two intervals of one GPU index overlap."""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.helpers import REPO, describe, job_id_from_stderr, read_stderr_until, reap, spawn, vcli, vcli_env, wait_for
from tests.kit import (
    OTHER_USER,
    assert_disjoint,
    ensure_other_user,
    gpu_intervals,
    gpu_job_args,
    gpu_pool,
    gpu_trainer,
    system_python,
)
from vcli.placement.gpulease import LeaseBusy, LeaseDir

#: The study flags of the tests' studies (one parameter, the metric the trainer reports).
STUDY = ("--parameter-spec=parameter-id=lr,type=double,min=0.1,max=1.0", "--metric=metric-id=loss,goal=minimize",
         "--algorithm=random-search")


def _env(**extra: str) -> dict[str, str]:
    return {"VCLI_LOCAL_GPUS": "2", **extra}


# ----------------------------------------------------------------------------- the lease itself


def test_acquire_is_all_or_nothing_and_dies_with_its_holder(tmp_path: Path) -> None:
    """Two lease directories objects stand for two processes; a holder process that is killed
    frees its GPU at once (the kernel drops the lock), no stale lease is left."""
    d = tmp_path / "leases"
    mine = LeaseDir(str(d))
    mine.acquire([1], {"job": "A", "user": "alice", "since": time.time()})
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(REPO)!r})
        from vcli.placement.gpulease import LeaseDir
        LeaseDir({str(d)!r}).acquire([2], {{"job": "B", "trial": "4", "study": "179556123", "user": "bob"}})
        print("held", flush=True)
        time.sleep(60)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        other = LeaseDir(str(d))
        with pytest.raises(LeaseBusy) as e:
            other.acquire([0, 1], {"job": "C"})  # 0 is free, 1 is not: neither is taken
        assert e.value.index == 1 and e.value.holder["job"] == "A"
        assert other.probe([0, 1, 2]) == {0: None, 1: mine.probe([1])[1], 2: other.probe([2])[2]}
        with pytest.raises(LeaseBusy, match=r"trial 4 of study 179556123 started by bob"):
            other.acquire([2], {"job": "C"})
        holder.kill()
        holder.wait()
        t0 = time.monotonic()
        assert other.probe([2]) == {2: None}
        other.acquire([0, 2], {"job": "C"})
        assert time.monotonic() - t0 < 1.0
        mine.release([1])
        assert other.probe([1]) == {1: None}
    finally:
        holder.kill()
        holder.wait()
    mode = os.stat(d).st_mode
    assert mode & 0o1777 == 0o1777, oct(mode)  # sticky and world-writable, like /tmp




def test_the_lease_server_runs_from_its_shipped_copies_without_vcli(tmp_path: Path) -> None:
    """What an SSH host runs: `python -S leaseserver.py serve DIR GPULEASE GPUINFO LEASEFILES` from copies
    under other names (`install_tools` hashes them), outside the repository and with no
    site-packages, so no file may import vcli. Its leases are the kernel's locks of DIR: a
    LeaseDir here sees them held, they are all or none, and they end with the server's stdin.
    It lists every holder with the user that owns the lease, and reads the host's policy file."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    lib = bin_dir / "vcli-gpulease-0123456789ab.py"
    server = bin_dir / "vcli-leaseserver-ba9876543210.py"
    shutil.copy(REPO / "vcli/placement/gpulease.py", lib)
    info = bin_dir / "vcli-gpuinfo-456789abcdef.py"
    files = bin_dir / "vcli-leasefiles-fedcba987654.py"
    shutil.copy(REPO / "vcli/placement/leaseserver.py", server)
    shutil.copy(REPO / "vcli/placement/gpuinfo.py", info)
    shutil.copy(REPO / "vcli/placement/leasefiles.py", files)
    d = tmp_path / "leases"
    proc = subprocess.Popen([sys.executable, "-S", "-I", str(server), "serve", str(d), str(lib), str(info), str(files)],
                            cwd="/",
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={"PATH": os.environ["PATH"]})
    assert proc.stdin is not None and proc.stdout is not None
    try:
        hello = proc.stdout.readline()
        if not hello.startswith("VCLI-LEASES "):
            proc.kill()
            pytest.fail(f"no handshake: {hello!r} {proc.communicate(timeout=10)[1][-2000:]}")
        assert json.loads(hello.split(" ", 1)[1])["path"] == str(d)

        def ask(req: dict) -> dict:
            proc.stdin.write(json.dumps(req) + "\n")
            proc.stdin.flush()
            return json.loads(proc.stdout.readline())

        assert ask({"op": "acquire", "indices": [0, 1], "record": {"job": "A", "user": "alice"}}) == {"ok": True}
        here = LeaseDir(str(d))
        with pytest.raises(LeaseBusy, match="job A"):
            here.acquire([1], {"job": "B"})
        here.acquire([2], {"job": "B", "user": "bob"})
        busy = ask({"op": "acquire", "indices": [3, 2], "record": {"job": "C"}})
        assert busy["busy"] == 2 and busy["holder"]["job"] == "B"
        assert [i for i, rec in ask({"op": "probe", "indices": [0, 1, 2, 3]})["held"] if rec] == [0, 1, 2]
        assert here.probe([3]) == {3: None}  # nothing of the refused acquire was kept
        holders = ask({"op": "holders"})["holders"]
        assert [(h["gpu"], h["job"], h["user"]) for h in holders] == [(0, "A", "root"), (1, "A", "root"),
                                                                       (2, "B", "root")]
        assert ask({"op": "policy"}) == {"policy": {}}
        (d / "policy.yaml").write_text("queue: fair-share\n")
        assert ask({"op": "policy"})["policy"]["text"] == "queue: fair-share\n"
        assert ask({"op": "processes"}) == {"processes": []}  # no nvidia-smi on PATH
        assert ask({"op": "release", "indices": [0]}) == {"ok": True}
        assert here.probe([0]) == {0: None}
        assert "unknown op" in ask({"op": "launch-missiles"})["error"]
        proc.stdin.close()  # the controller's channel closes: its leases end with the server
        assert proc.wait(timeout=10) == 0
        assert here.probe([1]) == {1: None}
    finally:
        proc.kill()
        proc.wait()
# ----------------------------------------------------------------------------- concurrent vcli processes


@pytest.mark.parametrize("count", [2, 5])
def test_concurrent_jobs_never_share_a_gpu(tmp_path: Path, count: int) -> None:
    """`count` vcli processes (separate homes, as separate terminals or users would have), each
    asking for both GPUs of a 2-GPU host, started together: they run one after another, never
    two on one index, and every job succeeds; the later ones say what they wait for."""
    trainer, log = gpu_trainer(tmp_path), tmp_path / "gpus.log"
    procs = [spawn(tmp_path / f"home{i}", *gpu_job_args(trainer, log, 1.0, 2, f"job{i}"), **_env()) for i in range(count)]
    outs = [p.communicate(timeout=60 + 10 * count) for p in procs]
    for p, (_out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
        assert "JOB_STATE_SUCCEEDED" in err, err[-3000:]
    spans = gpu_intervals(log)
    assert len(spans) == count
    assert_disjoint(spans)
    waited = [err for _, err in outs if "Waiting for GPUs" in err]
    assert waited, "no job said that it waited"
    assert all("held by job" in err and "started by" in err for err in waited), waited[0]


def test_jobs_and_studies_share_free_gpus_without_overlap(tmp_path: Path) -> None:
    """A study (2 parallel 1-GPU trials) and two 1-GPU jobs on a 2-GPU host, all at once: 6
    trainers, never two on one GPU, everything finishes."""
    trainer, log = gpu_trainer(tmp_path), tmp_path / "gpus.log"
    study = spawn(tmp_path / "study", "hp-tuning-jobs", "create", "--display-name=s",
                  gpu_pool(trainer, log, 0.8, 1), f"--command={sys.executable},{trainer}", f"--args={log},0.8",
                  "--max-trial-count=4", "--parallel-trial-count=2", *STUDY, **_env())
    jobs = [spawn(tmp_path / f"j{i}", *gpu_job_args(trainer, log, 0.8, 1, f"j{i}"), **_env()) for i in range(2)]
    for p in [study, *jobs]:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-3000:]
    spans = gpu_intervals(log)
    assert len(spans) == 6, spans
    assert_disjoint(spans)


def test_two_studies_of_two_replica_trials_never_deadlock(tmp_path: Path) -> None:
    """Gang: two studies whose trials are 2 replicas x 1 GPU each, on a 3-GPU host, both with 2
    parallel trials: a trial never holds one GPU while it waits for its second, so neither
    study starves the other of half a trial; both finish, no GPU is shared."""
    trainer, log = gpu_trainer(tmp_path), tmp_path / "gpus.log"
    studies = [spawn(tmp_path / f"s{i}", "hp-tuning-jobs", "create", f"--display-name=s{i}",
                     gpu_pool(trainer, log, 0.6, 1), gpu_pool(trainer, log, 0.6, 1), f"--command={sys.executable},{trainer}",
                     f"--args={log},0.6", *STUDY, "--max-trial-count=2", "--parallel-trial-count=2",
                     **_env(VCLI_LOCAL_GPUS="3"))
               for i in range(2)]
    for p in studies:
        out, err = p.communicate(timeout=150)
        assert p.returncode == 0, err[-3000:]
    spans = gpu_intervals(log)
    assert len(spans) == 8, spans  # 2 studies x 2 trials x 2 replicas
    assert_disjoint(spans)


# ----------------------------------------------------------------------------- kill -9


def _lease_holder(lease_dir: Path, index: int) -> dict:
    """The holder record of a GPU; `controllerPid` is in it once the replica's supervisor holds
    the lease (before, its controller does)."""
    return LeaseDir(str(lease_dir)).probe([index])[index] or {}


def test_kill_9_of_the_supervisor_frees_the_lease_within_a_second(tmp_path: Path, gpu_lease_dir: Path) -> None:
    trainer, log = gpu_trainer(tmp_path), tmp_path / "gpus.log"
    proc = spawn(tmp_path / "h", *gpu_job_args(trainer, log, 60, 1, "long"), **_env(VCLI_LOCAL_GPUS="1"))
    try:
        rec = wait_for(lambda: _lease_holder(gpu_lease_dir, 0).get("controllerPid") and _lease_holder(gpu_lease_dir, 0),
                       30, "the replica's lease")
        supervisor = int(rec["pid"])
        assert rec["user"] == pwd.getpwuid(os.geteuid()).pw_name and rec["replica"] == "workerpool0-0"
        os.kill(supervisor, signal.SIGKILL)
        t0 = time.monotonic()
        wait_for(lambda: LeaseDir(str(gpu_lease_dir)).probe([0])[0] is None, 1.0, "the lease to be free", interval=0.01)
        assert time.monotonic() - t0 < 1.0
        out, err = proc.communicate(timeout=30)  # the controller sees its replica gone
        assert proc.returncode != 0
        # it says so in words, not "a non-zero status of None"
        assert "The replica workerpool0-0 ended without an exit code (the replica is gone" in err, err[-2000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_kill_9_of_the_whole_tree_frees_the_lease(tmp_path: Path, gpu_lease_dir: Path) -> None:
    trainer, log = gpu_trainer(tmp_path), tmp_path / "gpus.log"
    proc = spawn(tmp_path / "h", *gpu_job_args(trainer, log, 60, 1, "long"), **_env(VCLI_LOCAL_GPUS="1"))
    rec = wait_for(lambda: _lease_holder(gpu_lease_dir, 0).get("controllerPid") and _lease_holder(gpu_lease_dir, 0),
                   30, "the replica's lease")
    job = rec["job"]
    from tests.helpers import processes_with_env

    tree = [proc.pid, *processes_with_env("VCLI_JOB_ID", job)]
    for pid in tree:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    t0 = time.monotonic()
    wait_for(lambda: LeaseDir(str(gpu_lease_dir)).probe([0])[0] is None, 1.0, "the lease to be free", interval=0.01)
    assert time.monotonic() - t0 < 1.0
    proc.wait()


def test_kill_9_of_the_controller_keeps_the_lease_until_the_resumed_replica_ends(tmp_path: Path,
                                                                                  gpu_lease_dir: Path) -> None:
    """The replica keeps its GPU while its controller is dead; a second job waits for it (and
    names who holds it); `resume` re-attaches without leasing again; once the replica ends the
    GPU is free and the waiting job runs."""
    trainer, log = gpu_trainer(tmp_path), tmp_path / "gpus.log"
    home = tmp_path / "h"
    first = spawn(home, *gpu_job_args(trainer, log, 6, 1, "first"), **_env(VCLI_LOCAL_GPUS="1"))
    job = job_id_from_stderr(read_stderr_until(first, "submitted successfully", 30))
    wait_for(lambda: _lease_holder(gpu_lease_dir, 0).get("controllerPid"), 30, "the replica's supervisor's lease")
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    time.sleep(0.5)
    held = _lease_holder(gpu_lease_dir, 0)
    assert held.get("job") == job, held
    second = spawn(tmp_path / "h2", *gpu_job_args(trainer, log, 0.5, 1, "second"), **_env(VCLI_LOCAL_GPUS="1"))
    try:
        seen = read_stderr_until(second, "Waiting for GPUs", 30)
        assert f"GPU 0 on local (held by job {job}" in seen, seen
        r = vcli(home, "custom-jobs", "resume", job, timeout=60, **_env(VCLI_LOCAL_GPUS="1"))
        assert r.returncode == 0, r.stderr[-3000:]
        assert "re-attached" in r.stderr
        out, err = second.communicate(timeout=60)
        assert second.returncode == 0, err[-3000:]
    finally:
        if second.poll() is None:
            os.killpg(second.pid, signal.SIGKILL)
            second.wait()
    assert describe(home, "custom-jobs", job)["state"] == "JOB_STATE_SUCCEEDED"
    spans = gpu_intervals(log)
    assert len(spans) == 2
    assert_disjoint(spans)
    assert LeaseDir(str(gpu_lease_dir)).probe([0]) == {0: None}


@pytest.mark.parametrize("then", ["wait", "cancel"])
def test_resume_waits_for_the_gpu_of_a_replica_that_never_started(tmp_path: Path, gpu_lease_dir: Path,
                                                                  then: str) -> None:
    """A controller killed before it started a job's second replica, whose GPU another holder
    took meanwhile (found by a probe): `resume` failed the job at once ("GPU 1 is held by ..."),
    stopping the chief it had adopted. It now takes the job over and that replica waits for its
    GPU, as a new job would: the job runs to its end on the GPUs it was placed on. A `cancel`
    in that wait stops the adopted chief too (found by a probe: with the wait before the take-over,
    the job was CANCELLED and its chief ran on for good)."""
    from tests.helpers import processes_with_env
    from vcli.store import Store

    trainer, log = gpu_trainer(tmp_path), tmp_path / "gpus.log"
    home = tmp_path / "h"
    seconds = "6" if then == "wait" else "120"
    args = ["custom-jobs", "create", "--display-name=half-started", gpu_pool(trainer, log, 6, 1), gpu_pool(trainer, log, 6, 1),
            f"--command={sys.executable},{trainer}", f"--args={log},{seconds}"]
    first = spawn(home, *args, **_env())
    job = job_id_from_stderr(read_stderr_until(first, "submitted successfully", 30))
    wait_for(lambda: all(_lease_holder(gpu_lease_dir, i).get("controllerPid") for i in (0, 1)), 30, "both replicas' leases")
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    worker = set(processes_with_env("VCLI_JOB_ID", job)) & set(processes_with_env("VCLI_TASK_NAME", "workerpool1-0"))
    for sig in (signal.SIGSTOP, signal.SIGKILL):  # stopped first: its supervisor records no exit
        for pid in worker:
            os.kill(pid, sig)
    store = Store(home)  # as if the controller had died before starting it
    store.upsert_replica(job, "workerpool1-0", handle=None, state="PENDING", start_time=None)
    store.close()
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(REPO)!r})
        from vcli.placement.gpulease import LeaseDir
        LeaseDir({str(gpu_lease_dir)!r}).acquire([1], {{"job": "OTHER", "user": "someone"}})
        print("held", flush=True)
        time.sleep({3 if then == "wait" else 120})
    """)], stdout=subprocess.PIPE, text=True)
    resume = None
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        resume = spawn(home, "custom-jobs", "resume", job, **_env())
        seen = read_stderr_until(resume, "Waiting for GPUs", 60)
        assert "job OTHER" in seen, seen
        if then == "cancel":  # the wait is in the host's queue, as a new job's (it was not: found by a probe)
            r = vcli(tmp_path / "viewer", "hosts", "gpus", "--format=json", timeout=60, **_env())
            assert r.returncode == 0, r.stderr
            waiting = [row for row in json.loads(r.stdout) if row["state"] == "WAITING"]
            assert [(w["job"], w["gpus"]) for w in waiting] == [(job, 1)], r.stdout
            r = vcli(home, "custom-jobs", "cancel", job, timeout=60, **_env())
            assert r.returncode == 0, r.stderr
        assert resume.wait(timeout=120) == (0 if then == "wait" else 5)
    finally:
        holder.kill()
        holder.wait()
        if resume is not None:
            reap(resume)
    state = describe(home, "custom-jobs", job)["state"]
    assert state == ("JOB_STATE_SUCCEEDED" if then == "wait" else "JOB_STATE_CANCELLED")
    assert not processes_with_env("VCLI_JOB_ID", job)
    if then == "wait":
        assert sorted(s[0] for s in gpu_intervals(log)) == [(0,), (1,)], gpu_intervals(log)  # each ran once, on its GPU
    assert LeaseDir(str(gpu_lease_dir)).probe([0, 1]) == {0: None, 1: None}


# ----------------------------------------------------------------------------- two Unix users


def test_two_unix_users_never_share_a_gpu(tmp_path: Path) -> None:
    """root and a second user each run jobs asking for both GPUs at once: no index is shared,
    and the second user can read neither root's job data nor its leases' holders' files."""
    ensure_other_user()
    import tempfile

    # Outside pytest's private temp root (mode 0700), so that the second user reaches it.
    shared = Path(tempfile.mkdtemp(prefix="vcli-two-users-", dir="/tmp"))
    try:
        _two_users(shared, tmp_path)
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def _two_users(shared: Path, tmp_path: Path) -> None:
    os.chmod(shared, 0o777)
    leases = shared / "leases"  # both users' host-wide lease directory, created by vcli (1777)
    trainer, log = gpu_trainer(shared), shared / "gpus.log"
    log.touch()
    os.chmod(log, 0o666)
    other_home = shared / "other-home"
    root_home = tmp_path / "root-home"
    python = system_python()
    import site

    paths = os.pathsep.join([str(REPO), *site.getsitepackages()])
    args = gpu_job_args(trainer, log, 1.5, 2, "other")
    args = [a.replace(f"--command={sys.executable},", f"--command={python},") for a in args]
    other = subprocess.Popen(
        ["runuser", "-u", OTHER_USER, "--", python, "-m", "vcli", *args],
        env=vcli_env(other_home, HOME=str(shared), VCLI_LOCAL_GPUS="2", PYTHONPATH=paths,
                     VCLI_GPU_LEASE_DIR=str(leases)), cwd=shared,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    mine = spawn(root_home, *gpu_job_args(trainer, log, 1.5, 2, "mine"), **_env(VCLI_GPU_LEASE_DIR=str(leases)))
    for p in (other, mine):
        out, err = p.communicate(timeout=90)
        assert p.returncode == 0, err[-3000:]
    spans = gpu_intervals(log)
    assert len(spans) == 2
    assert_disjoint(spans)
    # Job data is private: the other user cannot list root's home.
    r = subprocess.run(["runuser", "-u", OTHER_USER, "--", "ls", str(root_home)], capture_output=True, text=True)
    assert r.returncode != 0, r.stdout


# ----------------------------------------------------------------------------- the view


# ----------------------------------------------------------------------------- queue order


def test_waiting_jobs_get_a_freed_gpu_first_come_first_served(tmp_path: Path, gpu_lease_dir: Path) -> None:
    """Three vcli processes (three homes) wait, one after another, for the only GPU, which
    someone else holds; once it is free they run in the order they asked, never together.
    (Without an order each would win the freed GPU by chance: 1 run in 6 in the right order.)"""
    trainer, log = gpu_trainer(tmp_path), tmp_path / "gpus.log"
    someone = LeaseDir(str(gpu_lease_dir))
    someone.acquire([0], {"job": "someone-else", "user": "bob"})
    procs = []
    try:
        for i in range(3):
            procs.append(spawn(tmp_path / f"home{i}", *gpu_job_args(trainer, log, 0.3, 1, f"job{i}"),
                               **_env(VCLI_LOCAL_GPUS="1")))
            read_stderr_until(procs[-1], "Waiting for GPUs", 60)
            time.sleep(0.3)  # its entry in the queue is older than the next one's
        someone.release([0])
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        someone.release([0])
        for p in procs:
            reap(p)
    for p, (_out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    spans = gpu_intervals(log)
    assert_disjoint(spans)
    order = [job for _, _, _, job in sorted(spans, key=lambda span: span[1])]
    jobs = [job_id_from_stderr(err) for _, err in outs]
    assert order == jobs, f"ran in the order {order}, asked in the order {jobs}"


def test_a_job_that_leaves_a_free_gpu_to_an_earlier_waiter_says_for_whom(tmp_path: Path, gpu_lease_dir: Path) -> None:
    """The only GPU is free but an earlier waiter comes first: the job said "job N does not fit
    on the hosts right now - local: 0/1 GPUs in use" (found by a probe), neither that it waits
    its turn nor for whom. It now names the waiter, and starts once that one has gone."""
    trainer, log = gpu_trainer(tmp_path), tmp_path / "gpus.log"
    early = LeaseDir(str(gpu_lease_dir)).queue({"job": "early", "gpus": 1, "user": "alice", "since": time.time() - 5})
    proc = spawn(tmp_path / "home", *gpu_job_args(trainer, log, 0.2, 1, "late"), **_env(VCLI_LOCAL_GPUS="1"))
    try:
        seen = read_stderr_until(proc, "Waiting for GPUs", 60)
        early.touch()  # still trying: keeps its place
        assert "GPU 0 on local (kept for job early of alice, which has waited" in seen, seen
        assert "first come, first served" in seen and "does not fit" not in seen, seen
        early.close()
        out, err = proc.communicate(timeout=60)
    finally:
        early.close()
        reap(proc)
    assert proc.returncode == 0, err[-3000:]
    assert len(gpu_intervals(log)) == 1


def test_an_earlier_waiter_comes_first_a_larger_one_after_waiting_long_enough(tmp_path: Path) -> None:
    """`first_come` over a real lease directory and its waiting queue: an earlier waiter that the
    free GPUs fit comes first; one that needs more than is free lets later requests use them
    (no GPU idles) until it has waited FAIR_WAIT_SECONDS; a waiter that stopped trying (a
    suspended process) keeps no place; a request comes after itself never."""
    from vcli.placement import gpus as G

    leases = LeaseDir(str(tmp_path / "leases"))
    now = time.time()
    early = leases.queue({"job": "early", "gpus": 1, "user": "alice", "since": now - 5})
    try:
        assert G.first_come(leases, {"job": "late"}, [0, 1]) == (
            "kept for job early of alice, which has waited 5s (first come, first served)")
        assert G.first_come(leases, {"job": "early"}, [0, 1]) is None
        leases.acquire([0, 1], {"job": "running"})
        assert G.first_come(leases, {"job": "late"}, [0, 1]) is None  # nothing free it could have
        leases.release([0, 1])
        os.utime(early.fd, (now - 60, now - 60))  # its process stopped trying
        assert G.first_come(leases, {"job": "late"}, [0, 1]) is None
        early.touch()
        assert G.first_come(leases, {"job": "late"}, [0, 1]) is not None
    finally:
        early.close()
    big = leases.queue({"job": "big", "gpus": 3, "since": now - 5})
    try:
        assert G.first_come(leases, {"job": "small"}, [0, 1]) is None  # 3 do not fit in 2: backfill
    finally:
        big.close()
    starving = leases.queue({"job": "big", "gpus": 3, "since": now - G.FAIR_WAIT_SECONDS - 1})
    try:
        assert "kept for job big" in (G.first_come(leases, {"job": "small"}, [0, 1]) or "")
    finally:
        starving.close()
    assert leases.waiters() == []


def test_hosts_gpus_shows_holders_and_waiters(tmp_path: Path, gpu_lease_dir: Path) -> None:
    trainer, log = gpu_trainer(tmp_path), tmp_path / "gpus.log"
    first = spawn(tmp_path / "a", *gpu_job_args(trainer, log, 20, 1, "first"), **_env())
    job = job_id_from_stderr(read_stderr_until(first, "submitted successfully", 30))
    wait_for(lambda: _lease_holder(gpu_lease_dir, 0).get("controllerPid"), 30, "the replica's supervisor's lease")
    second = spawn(tmp_path / "b", *gpu_job_args(trainer, log, 20, 2, "second"), **_env())
    try:
        read_stderr_until(second, "Waiting for GPUs", 30)

        def rows() -> list[dict]:
            r = vcli(tmp_path / "viewer", "hosts", "gpus", "--format=json", timeout=60, **_env())
            assert r.returncode == 0, r.stderr
            return json.loads(r.stdout)

        got = wait_for(lambda: (x := rows()) and len(x) == 3 and x, 20, "the waiting row")
        keys = {"host", "gpu", "state", "user", "job", "study", "trial", "replica", "command", "pid", "since", "gpus",
                "reason"}
        assert all(set(row) == keys for row in got)
        states = [(row["gpu"], row["state"]) for row in got]
        assert states == [(0, "HELD"), (1, "FREE"), (None, "WAITING")], got
        assert got[0]["job"] == job and got[0]["replica"] == "workerpool0-0" and got[2]["gpus"] == 2
        table = vcli(tmp_path / "viewer", "hosts", "gpus", timeout=60, **_env())
        assert "HELD" in table.stdout and "WAITING" in table.stdout
        assert describe(tmp_path / "a", "custom-jobs", job)["replicas"][0]["gpus"] == "0"
        unknown = vcli(tmp_path / "viewer", "hosts", "gpus", "gpu9", timeout=60, **_env())
        assert unknown.returncode == 4 and unknown.stderr.count("\n") == 1 and "gpu9" in unknown.stderr
    finally:
        for p in (first, second):
            os.killpg(p.pid, signal.SIGINT)
        for p in (first, second):
            p.communicate(timeout=60)


def test_hosts_gpus_says_which_waiter_keeps_no_place(tmp_path: Path, gpu_lease_dir: Path) -> None:
    """A waiter that has not tried for 10 s (a suspended process) keeps no place in the queue;
    `hosts gpus` listed it WAITING as any other (found by a probe). Its REASON now says so."""
    leases = LeaseDir(str(gpu_lease_dir))
    now = time.time()
    stopped = leases.queue({"job": "stopped", "gpus": 1, "user": "alice", "since": now - 60})
    trying = leases.queue({"job": "trying", "gpus": 1, "user": "bob", "since": now - 5})
    try:
        os.utime(stopped.fd, (now - 30, now - 30))
        r = vcli(tmp_path / "viewer", "hosts", "gpus", "--format=json", timeout=60, **_env())
        assert r.returncode == 0, r.stderr
        waiting = {row["job"]: row["reason"] for row in json.loads(r.stdout) if row["state"] == "WAITING"}
        assert waiting["trying"] is None, waiting
        assert "has not tried for 30s" in waiting["stopped"] and "keeps no place" in waiting["stopped"], waiting
    finally:
        stopped.close()
        trying.close()


@pytest.mark.parametrize("mode", ["foreground", "async"])
def test_a_job_waiting_for_gpus_is_listed_and_cancelled_from_another_terminal(tmp_path: Path, gpu_lease_dir: Path,
                                                                              mode: str) -> None:
    """A foreground `create` that waits for GPUs was recorded only once it had them: not in
    `list`, `cancel` said "not found", and its createTime was its start. Both kinds of job are
    now QUEUED while they wait, and `cancel` from another terminal ends the wait at once (an
    `--async` one's runner waited on, and `cancel` gave up after 120 s)."""
    home = tmp_path / "home"
    trainer, log = gpu_trainer(tmp_path), tmp_path / "gpus.log"
    first = spawn(home, *gpu_job_args(trainer, log, 60, 1, "holder"), **_env(VCLI_LOCAL_GPUS="1"))
    waiter = None
    try:
        read_stderr_until(first, "submitted successfully", 30)
        wait_for(lambda: _lease_holder(gpu_lease_dir, 0).get("controllerPid"), 30, "the holder's lease")
        args = gpu_job_args(trainer, log, 1, 1, "waiter") + (["--async"] if mode == "async" else [])
        waiter = spawn(home, *args, **_env(VCLI_LOCAL_GPUS="1"))
        if mode == "foreground":
            read_stderr_until(waiter, "is queued until then", 30)

        def queued() -> list[str]:
            r = vcli(home, "custom-jobs", "list", "--filter=displayName=waiter", "--format=value(name.basename(),state)",
                     timeout=60, **_env(VCLI_LOCAL_GPUS="1"))
            return r.stdout.split()

        job_id, state = wait_for(lambda: (x := queued()) and x, 30, "the waiting job listed")
        assert state == "JOB_STATE_QUEUED"
        started = time.monotonic()
        r = vcli(home, "custom-jobs", "cancel", job_id, timeout=120, **_env(VCLI_LOCAL_GPUS="1"))
        assert r.returncode == 0, r.stderr
        assert time.monotonic() - started < 30, r.stderr
        assert describe(home, "custom-jobs", job_id)["state"] == "JOB_STATE_CANCELLED"
        if mode == "foreground":
            _, err = waiter.communicate(timeout=60)
            assert waiter.returncode == 5 and "cancelled while it waited for GPUs" in err, err
    finally:
        os.killpg(first.pid, signal.SIGINT)
        first.communicate(timeout=60)
        if waiter is not None and waiter.poll() is None:
            os.killpg(waiter.pid, signal.SIGINT)
            waiter.communicate(timeout=60)
    assert not log.exists() or job_id not in log.read_text(), "the cancelled job ran"


def test_the_gpus_of_an_unreachable_ssh_host_are_an_error_never_free(tmp_path: Path) -> None:
    """`hosts gpus HOST` reads an SSH host's leases on the host: one it cannot reach is exit 3
    in one line (never rows of FREE GPUs), a name not in the inventory exit 4."""
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {"VCLI_HOSTS_FILE": str(tmp_path / "hosts.yaml")}
    added = vcli(tmp_path, "hosts", "add", "gone", "--address=127.0.0.1", f"--port={port}", "--gpus=2",
                 "--gpu-lease-dir=/tmp/vcli-gpu-leases-gone", "--no-connect", timeout=60, **env)
    assert added.returncode == 0, added.stderr
    assert "gpu_lease_dir: /tmp/vcli-gpu-leases-gone" in (tmp_path / "hosts.yaml").read_text()
    r = vcli(tmp_path, "hosts", "gpus", "gone", "--format=json", timeout=120, **env)
    assert r.returncode == 3 and r.stdout == "" and r.stderr.count("\n") == 1, r
    assert "gone" in r.stderr and "/tmp/vcli-gpu-leases-gone" in r.stderr
    r = vcli(tmp_path, "hosts", "gpus", "local", "nowhere", timeout=60, **env)
    assert r.returncode == 4 and "nowhere" in r.stderr and r.stderr.count("\n") == 1, r
    bad = vcli(tmp_path, "hosts", "add", "gone", "--gpu-lease-dir=relative/dir", "--no-connect", timeout=60, **env)
    assert bad.returncode == 1 and "--gpu-lease-dir" in bad.stderr and bad.stderr.count("\n") == 1, bad


# ----------------------------------------------------------------------------- GPUs something else uses

#: An `nvidia-smi` that answers vcli's two queries for a 2-GPU machine where pid 99999999, a
#: process vcli did not start, holds memory on GPU 0.
FAKE_SMI = textwrap.dedent("""\
    #!/bin/sh
    case "$1" in
      --query-gpu=*) printf '0, GPU-aaaa\\n1, GPU-bbbb\\n' ;;
      --query-compute-apps=*) printf 'GPU-aaaa, 99999999, 1500\\n' ;;
      *) exit 2 ;;
    esac
""")


def _fake_smi(root: Path) -> Path:
    bin_dir = root / "fake-bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(FAKE_SMI)
    smi.chmod(0o755)
    return bin_dir


def _smi_listing(root: Path, *names: str) -> Path:
    """A directory holding an `nvidia-smi` whose `-L` lists GPUs of these names (and a MIG
    device under the first, as the real one prints it)."""
    bin_dir = root / "smi-bin"
    bin_dir.mkdir()
    lines = "".join(f"GPU {i}: {name} (UUID: GPU-{i:04d})\\n" + ("  MIG 1g.18gb     Device  0: (UUID: MIG-1)\\n" if i == 0 else "")
                    for i, name in enumerate(names))
    smi = bin_dir / "nvidia-smi"
    uuids = "".join(f"{i}, GPU-{i:04d}\\n" for i in range(len(names)))
    smi.write_text(f"#!/bin/sh\ncase \"$1\" in\n  -L) printf '{lines}' ;;\n  --query-gpu=*) printf '{uuids}' ;;\n"
                   "  --query-compute-apps=*) ;;\n  *) exit 2 ;;\nesac\n")
    smi.chmod(0o755)
    return bin_dir


@pytest.mark.parametrize("names, expected", [
    (("NVIDIA H200", "NVIDIA H200"), "NVIDIA_H200_141GB"),
    (("NVIDIA H100 80GB HBM3",), "NVIDIA_H100_80GB"),
    (("NVIDIA H200", "NVIDIA L40S"), None),  # two kinds, or one Vertex has no name for: no type
    (("NVIDIA L40S",), None),
])
def test_the_local_hosts_gpus_and_their_type_come_from_nvidia_smi(tmp_path: Path, names: tuple[str, ...],
                                                                   expected: str | None) -> None:
    """With nothing declared, `nvidia-smi -L` gives the local host its GPUs (MIG lines are not
    GPUs) and its Vertex accelerator type, which `hosts list` shows and $VCLI_LOCAL_GPU_TYPE
    overrides. (The real-GPU check saw gpuType empty on an H200: only SSH hosts were typed.)
    The detected type is shown, not matched: a job written for a T4 runs on these GPUs."""
    env = {"PATH": f"{_smi_listing(tmp_path, *names)}{os.pathsep}{os.environ['PATH']}"}
    env.pop("VCLI_LOCAL_GPUS", None)

    def local(**extra: str) -> dict:
        r = vcli(tmp_path / "home", "hosts", "list", "--include-local", "--format=json", timeout=60, **env, **extra)
        assert r.returncode == 0, r.stderr
        return next(h for h in json.loads(r.stdout) if h["name"] == "local")

    row = local()
    assert (row["gpus"], row["gpuIndices"], row.get("gpuType")) == (len(names), ",".join(map(str, range(len(names)))), expected)
    assert local(VCLI_LOCAL_GPU_TYPE="NVIDIA_TESLA_T4")["gpuType"] == "NVIDIA_TESLA_T4"
    trainer, log = gpu_trainer(tmp_path), tmp_path / "gpus.log"
    r = vcli(tmp_path / "home", *gpu_job_args(trainer, log, 0.1, 1, "t4-job"), timeout=120, **env)  # asks for a T4
    assert r.returncode == 0, r.stderr[-3000:]
    assert [gpus for gpus, *_ in gpu_intervals(log)] == [(0,)]


def test_gpus_found_by_nvidia_smi_are_leased_across_processes_too(tmp_path: Path) -> None:
    """Nothing declared: three vcli processes (own homes) find the same two GPUs through
    `nvidia-smi -L` and each asks for both, all at once. They run one after another, never two
    on one index, as with declared GPUs (the real-GPU check's case on an H200)."""
    trainer, log = gpu_trainer(tmp_path), tmp_path / "gpus.log"
    env = {"PATH": f"{_smi_listing(tmp_path, 'NVIDIA H200', 'NVIDIA H200')}{os.pathsep}{os.environ['PATH']}"}
    assert "VCLI_LOCAL_GPUS" not in os.environ
    procs = [spawn(tmp_path / f"home{i}", *gpu_job_args(trainer, log, 1.0, 2, f"job{i}"), **env) for i in range(3)]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (_out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    spans = gpu_intervals(log)
    assert sorted(gpus for gpus, *_ in spans) == [(0, 1)] * 3, spans
    assert_disjoint(spans)
    assert any("Waiting for GPUs" in err for _, err in outs), "no job said that it waited"


def test_a_gpu_another_program_uses_is_busy_never_placed(tmp_path: Path) -> None:
    """nvidia-smi shows a process vcli did not start on GPU 0: a 1-GPU job runs on GPU 1,
    `hosts gpus` shows GPU 0 BUSY and why; `gpu/exclude-busy false` turns the check off."""
    trainer, log = gpu_trainer(tmp_path), tmp_path / "gpus.log"
    env = _env(PATH=f"{_fake_smi(tmp_path)}{os.pathsep}{os.environ['PATH']}")
    r = vcli(tmp_path / "a", *gpu_job_args(trainer, log, 0.1, 1, "beside"), timeout=120, **env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert [gpus for gpus, *_ in gpu_intervals(log)] == [(1,)]
    rows = json.loads(vcli(tmp_path / "a", "hosts", "gpus", "--format=json", timeout=60, **env).stdout)
    assert [(row["gpu"], row["state"]) for row in rows] == [(0, "BUSY"), (1, "FREE")]
    assert rows[0]["reason"] == "used by a process vcli did not start (pid 99999999, 1500 MiB)"
    assert vcli(tmp_path / "a", "config", "set", "gpu/exclude-busy", "false", **env).returncode == 0
    rows = json.loads(vcli(tmp_path / "a", "hosts", "gpus", "--format=json", timeout=60, **env).stdout)
    assert [(row["gpu"], row["state"]) for row in rows] == [(0, "FREE"), (1, "FREE")]


def test_an_ssh_hosts_own_nvidia_smi_decides_what_is_busy_there(tmp_path: Path) -> None:
    """The lease server on an SSH host asks the host's nvidia-smi (here: the host's python is a
    script that puts a fake one on PATH), and the placer skips the GPU it reports."""
    from tests.harness import loopback_sshd
    from vcli.control.wiring import ssh_executor
    from vcli.placement.gpus import GpuAllocator
    from vcli.placement.hosts import Host

    why = loopback_sshd.available()
    if why:
        pytest.fail(why)
    bin_dir = _fake_smi(tmp_path)
    python = tmp_path / "host-python"
    python.write_text(f"#!/bin/sh\nPATH={bin_dir}:$PATH exec {sys.executable} \"$@\"\n")
    python.chmod(0o755)
    with loopback_sshd.LoopbackSSHD(tmp_path / "sshd") as sshd:
        known = tmp_path / "known_hosts"
        known.write_text(sshd.known_hosts_line())
        os.environ["VCLI_SSH_USER_KNOWN_HOSTS"] = str(known)
        try:
            host = Host(name="lo", address="127.0.0.1", port=sshd.port, user="root",
                        identity_file=str(sshd.client_key), workdir=str(tmp_path / "remote"), python=str(python),
                        gpu_lease_dir=str(tmp_path / "host-leases"), gpu_count=2)
            executor = ssh_executor([host])
            try:
                leases = executor.gpu_leases("lo")
                assert leases.nvidia_busy() == {0: "used by a process vcli did not start (pid 99999999, 1500 MiB)"}
                allocator = GpuAllocator({"lo": leases}, nvidia_check=True)
                allocator.declare("lo", count=2)
                assert allocator.allocate("lo", 1, record={"job": "j"}) == (1,)
                assert allocator.busy_elsewhere("lo", (0,)) == {0: leases.nvidia_busy()[0]}
                allocator.release("lo", (1,))
            finally:
                executor.close()
        finally:
            del os.environ["VCLI_SSH_USER_KNOWN_HOSTS"]


def test_a_cpu_replica_on_a_gpu_host_sees_no_gpu(tmp_path: Path) -> None:
    """A replica that asks for no GPU, on a host that declares GPUs, saw every GPU (or the
    shell's CUDA_VISIBLE_DEVICES), those leased to other jobs too. On a host that declares
    none, the variable is the user's to set and is left alone."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "gpu.py").write_text("import os\nprint('CVD=' + os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>'))\n")
    pool = f"--worker-pool-spec=machine-type=n1-standard-4,replica-count=1,local-package-path={pkg},python-module=gpu"
    seen = {}
    for name, extra in (("gpu-host", _env(CUDA_VISIBLE_DEVICES="0,1")), ("cpu-host", {"CUDA_VISIBLE_DEVICES": "0,1"})):
        r = vcli(tmp_path / "home", "custom-jobs", "create", f"--display-name={name}", pool, timeout=120, **extra)
        assert r.returncode == 0, r.stderr
        seen[name] = [line.split("CVD=", 1)[1] for line in r.stdout.splitlines() if "CVD=" in line]
    assert seen == {"gpu-host": [""], "cpu-host": ["0,1"]}, seen


def test_a_job_whose_max_wait_runs_out_is_failed_and_says_so_in_its_exit_code(tmp_path: Path, gpu_lease_dir: Path) -> None:
    """It was recorded FAILED but exited 3 ("executor unavailable": nothing created, retry),
    where a study's trial that waited as long exits 6."""
    trainer, log = gpu_trainer(tmp_path), tmp_path / "gpus.log"
    config = tmp_path / "job.yaml"
    config.write_text("workerPoolSpecs:\n- machineSpec: {machineType: n1-standard-4, acceleratorType: NVIDIA_TESLA_T4, "
                      f"acceleratorCount: 1}}\n  replicaCount: 1\n  containerSpec: {{imageUri: unused, command: "
                      f"[{sys.executable}, {trainer}], args: [{log}, '0']}}\nscheduling: {{maxWaitDuration: 1s}}\n")
    someone = LeaseDir(str(gpu_lease_dir))
    someone.acquire([0], {"job": "someone-else", "user": "bob"})
    try:
        r = vcli(tmp_path / "home", "custom-jobs", "create", "--display-name=impatient", f"--config={config}", timeout=120,
                 **_env(VCLI_LOCAL_GPUS="1"))
    finally:
        someone.release([0])
    assert r.returncode == 6, r.stderr
    assert "found no free GPUs within scheduling.maxWaitDuration (1s)" in r.stderr
    job_id = re.search(r"CustomJob \[(\d+)\] is queued", r.stderr)[1]  # type: ignore[index]
    assert describe(tmp_path / "home", "custom-jobs", job_id)["state"] == "JOB_STATE_FAILED"


def _seconds(stamp: str) -> float:
    import datetime

    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _study_config(path: Path, trainer: Path, log: Path, seconds: float, trials: int, parallel: int, extra: str = "") -> Path:
    """A study of 1-GPU trials whose trial job has `scheduling: {maxWaitDuration: 1s}`."""
    path.write_text(textwrap.dedent(f"""\
        displayName: impatient
        maxTrialCount: {trials}
        parallelTrialCount: {parallel}
        {extra}
        studySpec:
          algorithm: RANDOM_SEARCH
          metrics: [{{metricId: loss, goal: MINIMIZE}}]
          parameters: [{{parameterId: lr, doubleValueSpec: {{minValue: 0.1, maxValue: 1.0}}}}]
        trialJobSpec:
          workerPoolSpecs:
          - machineSpec: {{machineType: n1-standard-4, acceleratorType: NVIDIA_TESLA_T4, acceleratorCount: 1}}
            replicaCount: 1
            containerSpec: {{imageUri: unused, command: [{sys.executable}, {trainer}], args: [{log}, '{seconds}']}}
          scheduling: {{maxWaitDuration: 1s}}
    """))
    return path


def test_a_study_with_more_parallel_trials_than_gpus_never_waits_for_itself_past_max_wait(tmp_path: Path) -> None:
    """1 GPU, 2 parallel trials of 2.5 s, maxWaitDuration 1s (found by a probe): the second
    trial waited for the first one's GPU, the wait counted, and after 1 s the whole study FAILED
    (exit 6) and the first trial was killed. The study's own trials end by themselves: that
    wait is not counted, and every trial runs, one after another."""
    trainer, log = gpu_trainer(tmp_path), tmp_path / "gpus.log"
    config = _study_config(tmp_path / "study.yaml", trainer, log, 2.5, 3, 2)
    r = vcli(tmp_path / "home", "hp-tuning-jobs", "create", f"--config={config}", "--format=json", timeout=180,
             **_env(VCLI_LOCAL_GPUS="1"))
    assert r.returncode == 0, r.stderr[-3000:]
    study = json.loads(r.stdout)
    assert study["state"] == "JOB_STATE_SUCCEEDED"
    assert [t["state"] for t in study["trials"]] == ["SUCCEEDED"] * 3, study["trials"]
    said = next(line for line in r.stderr.splitlines() if line.startswith("Waiting for capacity to start trial 2"))
    assert "waiting for GPU 0 on local (held by trial 1 of study" in said, said  # not "does not fit ... 1/1 in use"
    spans = gpu_intervals(log)
    assert len(spans) == 3 and all(s[0] == (0,) for s in spans), spans
    assert_disjoint(spans)


def test_a_trial_whose_wait_runs_out_fails_alone_and_the_study_goes_on(tmp_path: Path, gpu_lease_dir: Path) -> None:
    """Another holder keeps the only GPU: the first trial's wait runs out after maxWaitDuration.
    It ended the whole study (exit 6, the trial never recorded); on Vertex a trial job that
    cannot start fails as a trial. It is now INFEASIBLE, naming the wait, within the failure
    budget, and the next trial runs once the GPU is free."""
    trainer, log = gpu_trainer(tmp_path), tmp_path / "gpus.log"
    config = _study_config(tmp_path / "study.yaml", trainer, log, 0.2, 2, 1, extra="maxFailedTrialCount: 1")
    someone = LeaseDir(str(gpu_lease_dir))
    someone.acquire([0], {"job": "someone-else", "user": "bob"})
    proc = spawn(tmp_path / "home", "hp-tuning-jobs", "create", f"--config={config}", "--format=json",
                 **_env(VCLI_LOCAL_GPUS="1"))
    try:
        read_stderr_until(proc, "INFEASIBLE", 60)
        someone.release([0])
        out, err = proc.communicate(timeout=120)
    finally:
        someone.release([0])
        reap(proc)
    assert proc.returncode == 0, err[-3000:]
    trials = json.loads(out)["trials"]
    assert [t["state"] for t in trials] == ["INFEASIBLE", "SUCCEEDED"], trials
    assert "Trial 1 found no capacity within scheduling.maxWaitDuration (1s)" in trials[0]["infeasibleReason"]
    assert "held by job someone-else" in trials[0]["infeasibleReason"]
    waited = _seconds(trials[0]["endTime"]) - _seconds(trials[0]["startTime"])  # its wait (it was 0.0 s)
    assert 1.0 <= waited < 30, trials[0]
    assert len(gpu_intervals(log)) == 1


@pytest.mark.parametrize("how", ["max_wait", "sigterm", "sigint", "async_sigterm"])
def test_a_queued_jobs_wait_ended_in_resume_or_its_runner_is_recorded(tmp_path: Path, gpu_lease_dir: Path,
                                                                      how: str) -> None:
    """A queued job (its GPU held by someone else) whose waiting `create` was killed -9, then
    `resume`d: maxWaitDuration, SIGTERM or Ctrl-C in the resumed wait left it QUEUED with its
    controller gone, and a later resume ran the job the first had said failed (found by a
    probe). They now end it as in `create`: FAILED (exit 6) or CANCELLED (143, 130). Likewise
    SIGTERM to an `--async` job's runner while it waits: it died silently, the job QUEUED."""
    trainer, log = gpu_trainer(tmp_path), tmp_path / "gpus.log"
    home, config = tmp_path / "home", tmp_path / "job.yaml"
    config.write_text("workerPoolSpecs:\n- machineSpec: {machineType: n1-standard-4, acceleratorType: NVIDIA_TESLA_T4, "
                      f"acceleratorCount: 1}}\n  replicaCount: 1\n  containerSpec: {{imageUri: unused, command: "
                      f"[{sys.executable}, {trainer}], args: [{log}, '0']}}\n"
                      + ("scheduling: {maxWaitDuration: 2s}\n" if how == "max_wait" else ""))
    someone = LeaseDir(str(gpu_lease_dir))
    someone.acquire([0], {"job": "someone-else", "user": "bob"})
    procs: list[subprocess.Popen[str]] = []
    try:
        if how == "async_sigterm":
            r = vcli(home, "custom-jobs", "create", "--display-name=w", f"--config={config}", "--async", timeout=60,
                     **_env(VCLI_LOCAL_GPUS="1"))
            assert r.returncode == 0, r.stderr
            job_id = job_id_from_stderr(r.stderr)
            runner = wait_for(lambda: someone.waiters(), 60, "the runner in the queue")[0]["pid"]
            os.kill(runner, signal.SIGTERM)
            state = wait_for(lambda: (s := describe(home, "custom-jobs", job_id)["state"]) != "JOB_STATE_QUEUED" and s,
                             60, "the job's end")
            assert state == "JOB_STATE_CANCELLED"
            return
        first = spawn(home, "custom-jobs", "create", "--display-name=w", f"--config={config}", **_env(VCLI_LOCAL_GPUS="1"))
        procs.append(first)
        job_id = re.search(r"CustomJob \[(\d+)\] is queued", read_stderr_until(first, "is queued until then", 60))[1]  # type: ignore[index]
        os.killpg(first.pid, signal.SIGKILL)
        first.communicate(timeout=30)
        resume = spawn(home, "custom-jobs", "resume", job_id, **_env(VCLI_LOCAL_GPUS="1"))
        procs.append(resume)
        read_stderr_until(resume, "Waiting for GPUs", 60)
        if how != "max_wait":
            os.killpg(resume.pid, signal.SIGTERM if how == "sigterm" else signal.SIGINT)
        _, err = resume.communicate(timeout=60)
    finally:
        someone.release([0])
        for p in procs:
            reap(p)
    want = {"max_wait": (6, "JOB_STATE_FAILED"), "sigterm": (143, "JOB_STATE_CANCELLED"),
            "sigint": (130, "JOB_STATE_CANCELLED")}[how]
    assert (resume.returncode, describe(home, "custom-jobs", job_id)["state"]) == want, err
    assert err.count("ERROR") <= 1 and "Traceback" not in err, err
    if how == "max_wait":
        assert "found no free GPUs within scheduling.maxWaitDuration (2s)" in err, err
    again = vcli(home, "custom-jobs", "resume", job_id, timeout=60, **_env(VCLI_LOCAL_GPUS="1"))
    assert "has already ended" in again.stderr, again.stderr  # never run after all
    assert not log.exists()


def test_a_lease_directory_nobody_can_use_is_one_line_and_fails_what_was_recorded(tmp_path: Path) -> None:
    """VCLI_GPU_LEASE_DIR=/dev/null, or a directory where a GPU's lock file should be (any user
    can make one in the shared, world-writable default), was a 60-line traceback; `hosts gpus`
    showed those GPUs FREE; a --async study was left QUEUED with its runner gone."""
    trainer, log = gpu_trainer(tmp_path), tmp_path / "gpus.log"
    blocked = tmp_path / "leases"
    (blocked / f"uid-{os.geteuid()}" / "gpu0.lock").mkdir(parents=True)
    home = tmp_path / "home"
    for lease_dir, file in (("/dev/null", "Not a directory: /dev/null"),
                            (str(blocked), f"{blocked}/uid-{os.geteuid()}/gpu0.lock")):
        env = _env(VCLI_LOCAL_GPUS="1", VCLI_GPU_LEASE_DIR=lease_dir)
        for argv in (gpu_job_args(trainer, log, 0, 1, "blocked"), ["hosts", "gpus"]):
            r = vcli(home, *argv, timeout=60, **env)
            assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
            assert r.stderr.splitlines()[-1].startswith(f"ERROR: (vcli.{argv[0]}.") and file in r.stderr, r.stderr
    r = vcli(home, "hp-tuning-jobs", "create", "--display-name=queued", gpu_pool(trainer, log, 0, 1),
             f"--command={sys.executable},{trainer}", f"--args={log},0", *STUDY, "--max-trial-count=1", "--async",
             "--format=value(name.basename())", timeout=60, **_env(VCLI_LOCAL_GPUS="1", VCLI_GPU_LEASE_DIR="/dev/null"))
    assert r.returncode == 0, r.stderr
    study_id = r.stdout.strip()
    wait_for(lambda: describe(home, "hp-tuning-jobs", study_id)["state"] == "JOB_STATE_FAILED", 60, "the study FAILED")
    assert "Not a directory: /dev/null" in describe(home, "hp-tuning-jobs", study_id)["error"]["message"]
    listed = vcli(home, "custom-jobs", "list", "--format=value(displayName)")
    assert "blocked" not in listed.stdout  # nothing recorded for a job refused in the foreground


def test_a_mistyped_local_gpu_type_is_named(tmp_path: Path) -> None:
    """`VCLI_LOCAL_GPU_TYPE='NVIDIA_TESLA_T4 '` made every GPU job "never fit" with advice to
    lower accelerator-count; the variable went unnamed."""
    trainer, log = gpu_trainer(tmp_path), tmp_path / "gpus.log"
    for argv in (gpu_job_args(trainer, log, 0, 1, "typo"), ["hosts", "list", "--include-local"]):
        r = vcli(tmp_path / "home", *argv, timeout=60, **_env(VCLI_LOCAL_GPUS="1", VCLI_LOCAL_GPU_TYPE="nvidia_tesla_t4"))
        assert r.returncode == 1, r.stderr
        assert "Invalid value for [VCLI_LOCAL_GPU_TYPE]: [nvidia_tesla_t4] is not one of [" in r.stderr.splitlines()[-1]


def test_a_lease_record_nested_too_deep_reads_as_an_unknown_holder(tmp_path: Path) -> None:
    # Lease files are world-writable: a record of 100,000 "[" crashed `hosts gpus` and every
    # create waiting for that GPU with a RecursionError traceback (found by a probe).
    from vcli.placement.gpulease import _read_record, describe_holder

    path = tmp_path / "gpu0.lock"
    path.write_text("[" * 100_000)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert _read_record(fd) == {}
    finally:
        os.close(fd)
    assert describe_holder({}) == "another vcli replica"


def test_resume_in_a_shell_that_declares_no_gpus_warns_as_create_does(tmp_path: Path, gpu_lease_dir: Path) -> None:
    """A job queued for a GPU whose controller died, resumed from a shell without
    VCLI_LOCAL_GPUS (cron, another terminal), ran at once without any GPU, silently
    (found by a probe); `create` says so in one WARNING line, and now `resume` does too."""
    trainer, log = gpu_trainer(tmp_path), tmp_path / "gpus.log"
    home = tmp_path / "home"
    someone = LeaseDir(str(gpu_lease_dir))
    someone.acquire([0], {"job": "someone-else", "user": "bob"})
    try:
        proc = spawn(home, *gpu_job_args(trainer, log, 0, 1, "queued"), **_env(VCLI_LOCAL_GPUS="1"))
        try:
            job_id = re.search(r"CustomJob \[(\d+)\] is queued", read_stderr_until(proc, "is queued", 60))[1]  # type: ignore[index]
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        env = {k: v for k, v in os.environ.items() if k != "VCLI_LOCAL_GPUS"}
        r = subprocess.run([sys.executable, "-m", "vcli", "custom-jobs", "resume", job_id], capture_output=True,
                           text=True, timeout=120, env={**vcli_env(home), **{"VCLI_GPUS": ""},
                                                        **{k: env[k] for k in ("PATH",)}})
    finally:
        someone.release([0])
    assert r.returncode == 0, r.stderr
    assert ("WARNING: workerpool0 asks for 1 NVIDIA_TESLA_T4 but this machine declares no GPUs: its replicas run "
            "without one") in r.stderr, r.stderr


def test_a_hung_nvidia_smi_is_one_warning_and_asked_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """A hung nvidia-smi (a GPU fallen off the bus) added 20 s to every command, silently, and
    the machine was then taken for one without GPUs (found by a probe)."""
    from vcli.placement import gpus

    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text("#!/bin/sh\nsleep 30\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{smi.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("VCLI_GPUS", raising=False)
    monkeypatch.setattr(gpus, "SMI_TIMEOUT_SECONDS", 0.5)
    monkeypatch.setattr(gpus, "_SMI_HUNG", False)
    started = time.monotonic()
    assert gpus.detect_local_gpus() == ((), None)
    assert gpus.detect_local_gpus() == ((), None)  # not asked again
    assert time.monotonic() - started < 5
    err = capsys.readouterr().err
    assert err.count("WARNING: nvidia-smi did not answer within 0.5 s") == 1, err


def test_shares_of_an_ssh_hosts_gpu_come_from_its_own_lease_policy_and_server(tmp_path: Path) -> None:
    """On an SSH host whose lease policy (set through its lease server) says `gpu_sharing:
    shared`, the placer takes two 0.5 shares of GPU 0 through the server (packed onto one GPU),
    a third goes to GPU 1, a fifth waits; a host whose policy names no mechanism refuses a share
    in one line."""
    from tests.harness import loopback_sshd
    from vcli.control.wiring import ssh_executor
    from vcli.placement.gpus import GpuAllocator, GpusBusyError
    from vcli.placement.hosts import Host
    from vcli.placement.sharing import SharingError

    why = loopback_sshd.available()
    if why:
        pytest.fail(why)
    lease_dir = tmp_path / "host-leases"
    lease_dir.mkdir(mode=0o1777)
    with loopback_sshd.LoopbackSSHD(tmp_path / "sshd") as sshd:
        known = tmp_path / "known_hosts"
        known.write_text(sshd.known_hosts_line())
        os.environ["VCLI_SSH_USER_KNOWN_HOSTS"] = str(known)
        try:
            host = Host(name="lo", address="127.0.0.1", port=sshd.port, user="root",
                        identity_file=str(sshd.client_key), workdir=str(tmp_path / "remote"), python=sys.executable,
                        gpu_lease_dir=str(lease_dir), gpu_count=2)
            executor = ssh_executor([host])
            try:
                allocator = GpuAllocator({"lo": executor.gpu_leases("lo")})
                allocator.declare("lo", count=2)
                with pytest.raises(SharingError, match="needs host lo's lease policy to name how its GPUs are shared"):
                    allocator.allocate_share("lo", 0.5, record={"job": "a"})
                # Set through the host's lease server, as `vcli hosts policy lo --set` does.
                from vcli.placement import leasepolicy

                assert leasepolicy.write(allocator.leases["lo"], {"gpu_sharing": "shared"}) == str(lease_dir / "policy.yaml")
                assert (lease_dir / "policy.yaml").read_text() == "gpu_sharing: shared\n"
                assert (lease_dir / "policy.yaml").stat().st_mode & 0o777 == 0o644
                got = [allocator.allocate_share("lo", 0.5, record={"job": f"j{n}", "replica": "workerpool0-0"})
                       for n in range(3)]
                assert [index for index, _ in got] == [0, 0, 1]  # packed: GPU 1 only once GPU 0 is full
                assert got[0][1]["VCLI_GPU_SHARE"] == "0.5"
                holders = LeaseDir(str(lease_dir)).holders()
                assert sorted((x["gpu"], x["share"], x["job"]) for x in holders) == [(0, 0.5, "j0"), (0, 0.5, "j1"),
                                                                                      (1, 0.5, "j2")]
                allocator.allocate_share("lo", 0.5, record={"job": "j3"})
                with pytest.raises(GpusBusyError, match="no GPU has room for a 0.5 share"):
                    allocator.allocate_share("lo", 0.5, record={"job": "j4"})
                for n in range(4):
                    allocator.release("lo", (0, 1), share_of=f"j{n}")
                assert LeaseDir(str(lease_dir)).holders() == []
            finally:
                executor.close()
        finally:
            del os.environ["VCLI_SSH_USER_KNOWN_HOSTS"]

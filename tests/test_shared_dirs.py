"""Files in shared directories, against a second real Unix user: whatever that user plants at a
name vcli opens there (GPU lease files and directories, the MLflow schema lock), vcli never
writes, truncates or chmods a file it did not create, and what that user can delete never
gives a GPU another user's replica holds to a second job. Root is the victim here (CI runs as
root); the other user is made with `useradd`."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import REPO, reap, spawn, vcli, wait_for
from tests.kit import OTHER_USER, assert_disjoint, ensure_other_user, gpu_intervals, gpu_job_args, gpu_trainer, system_python
from vcli.placement.gpulease import LeaseBusy, LeaseDir


def _as_other(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["runuser", "-u", OTHER_USER, "--", *argv], capture_output=True, text=True, check=check,
                          timeout=60)


@pytest.fixture
def shared() -> Iterator[Path]:
    """A world-writable, sticky directory outside pytest's private temp root (like /tmp),
    where both users can make names."""
    ensure_other_user()
    path = Path(tempfile.mkdtemp(prefix="vcli-shared-", dir="/tmp"))
    os.chmod(path, 0o1777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A root-owned 0600 file whose content and mode must never change."""
    path = tmp_path / "victim"
    path.write_text("root's secret\n")
    path.chmod(0o600)
    return path


def _untouched(victim: Path) -> None:
    assert victim.read_text() == "root's secret\n"
    assert victim.stat().st_mode & 0o777 == 0o600 and victim.stat().st_uid == 0


def _gpu_job(home: Path, root: Path, leases: Path, name: str, seconds: float = 0.2) -> subprocess.CompletedProcess[str]:
    trainer, log = gpu_trainer(root), root / "gpus.log"
    return vcli(home, *gpu_job_args(trainer, log, seconds, 1, name), timeout=120,
                VCLI_LOCAL_GPUS="1", VCLI_GPU_LEASE_DIR=str(leases))


def test_symlinks_planted_at_lease_names_are_never_followed(shared: Path, victim: Path, tmp_path: Path) -> None:
    """The other user makes the lease directory (1777, theirs) and plants symbolic links at a
    flat lock file's name and at root's own subdirectory's name: a GPU job of root either
    runs (the flat link is no lease) or is refused in one line naming the link; the link's
    target is never written, truncated or chmod-ed."""
    leases = shared / "leases"
    _as_other("mkdir", "-m", "1777", str(leases))
    _as_other("ln", "-s", str(victim), str(leases / "gpu0.lock"))
    r = _gpu_job(tmp_path / "home", tmp_path, leases, "flat-link")
    assert r.returncode == 0, r.stderr
    _untouched(victim)
    assert (leases / "uid-0" / "gpu0.lock").is_file() and not (leases / "uid-0" / "gpu0.lock").is_symlink()

    shutil.rmtree(leases / "uid-0")
    victim_dir = tmp_path / "victim-dir"
    victim_dir.mkdir(mode=0o700)
    _as_other("ln", "-s", str(victim_dir), str(leases / "uid-0"))
    r = _gpu_job(tmp_path / "home", tmp_path, leases, "dir-link")
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    last = r.stderr.splitlines()[-1]
    assert last.startswith("ERROR: (vcli.custom-jobs.create) Cannot lease GPUs of host local") and \
        f"{leases}/uid-0" in last and "symbolic link" in last, r.stderr
    assert list(victim_dir.iterdir()) == [] and victim_dir.stat().st_mode & 0o777 == 0o700
    _untouched(victim)


def test_a_subdirectory_another_user_made_in_roots_name_is_refused(shared: Path, victim: Path, tmp_path: Path) -> None:
    """`uid-0` made by the other user, with a link to root's file as its `gpu0.lock`: root's job
    is refused in one line that says whose it is and what to do; `hosts gpus` too."""
    leases = shared / "leases"
    _as_other("mkdir", "-m", "1777", str(leases))
    _as_other("mkdir", "-m", "0755", str(leases / "uid-0"))
    _as_other("ln", "-s", str(victim), str(leases / "uid-0" / "gpu0.lock"))
    r = _gpu_job(tmp_path / "home", tmp_path, leases, "planted-dir")
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"owned by {OTHER_USER}, not by root (remove it: vcli creates it)" in r.stderr.splitlines()[-1], r.stderr
    _untouched(victim)


def test_a_lease_directory_writable_by_all_but_not_sticky_is_refused(tmp_path: Path) -> None:
    leases = tmp_path / "open-leases"
    leases.mkdir()
    leases.chmod(0o777)
    r = _gpu_job(tmp_path / "home", tmp_path, leases, "not-sticky")
    assert r.returncode == 1, r.stderr
    assert "writable by other users but not sticky" in r.stderr and f"chmod +t {leases}" in r.stderr, r.stderr
    assert not (leases / "uid-0").exists()


def test_the_mlflow_schema_lock_never_follows_a_planted_link(shared: Path, victim: Path, tmp_path: Path) -> None:
    """The SQLite store's schema lock has a predictable name in $TMPDIR: a link the other user
    plants there is not opened (the store opens without that lock), so its target keeps its
    mode (it was made 0666) and content."""
    pytest.importorskip("mlflow")
    db = tmp_path / "mlruns.db"
    name = f"vcli-mlflow-{hashlib.sha256(str(db).encode()).hexdigest()[:16]}.lock"
    _as_other("ln", "-s", str(victim), str(shared / name))
    from vcli.tracking import backend

    old = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(shared)
    tempfile.tempdir = None
    try:
        with backend._schema_lock(f"sqlite:///{db}"):
            pass
    finally:
        if old is None:
            os.environ.pop("TMPDIR")
        else:
            os.environ["TMPDIR"] = old
        tempfile.tempdir = None
    _untouched(victim)
    # Made by vcli where nothing was planted: a regular file, readable by every user's vcli.
    db2 = tmp_path / "other.db"
    name2 = f"vcli-mlflow-{hashlib.sha256(str(db2).encode()).hexdigest()[:16]}.lock"
    fd = backend._lock_file(str(shared / name2))
    assert fd is not None
    os.close(fd)
    assert (shared / name2).stat().st_mode & 0o777 == 0o644


def test_what_another_user_can_delete_never_frees_a_gpu_held_by_a_replica(shared: Path, tmp_path: Path) -> None:
    """The other user owns the lease directory and holds nothing; root's job holds GPU 0. The
    other user deletes everything of theirs (`find -user ... -delete`), tries to delete root's
    lock file, and renames root's subdirectory (which the owner of the directory may do), then
    starts a job on GPU 0: it waits for root's to end; no two trainers ever share the GPU."""
    leases = shared / "leases"
    _as_other("mkdir", "-m", "1777", str(leases))
    trainer, log = gpu_trainer(shared), shared / "gpus.log"
    log.touch()
    log.chmod(0o666)
    mine = spawn(tmp_path / "root-home", *gpu_job_args(trainer, log, 4, 1, "roots"),
                 VCLI_LOCAL_GPUS="1", VCLI_GPU_LEASE_DIR=str(leases))
    other = None
    try:
        lock = leases / "uid-0" / "gpu0.lock"
        wait_for(lambda: (LeaseDir(str(leases)).probe([0])[0] or {}).get("controllerPid"), 60, "root's replica's lease")
        _as_other("find", str(leases), "-user", OTHER_USER, "-delete", check=False)
        assert _as_other("rm", "-f", str(lock), check=False).returncode != 0
        assert lock.exists()
        _as_other("mv", str(leases / "uid-0"), str(leases / "hidden"))
        assert LeaseDir(str(leases)).probe([0])[0] is not None, "a renamed holder's lease is still seen"
        python = system_python()
        import site

        paths = os.pathsep.join([str(REPO), *site.getsitepackages()])
        args = [a.replace(f"--command={sys.executable},", f"--command={python},")
                for a in gpu_job_args(trainer, log, 0.2, 1, "others")]
        other = subprocess.Popen(
            ["runuser", "-u", OTHER_USER, "--", python, "-m", "vcli", *args],
            env={"PATH": os.environ["PATH"], "VCLI_HOME": str(shared / "other-home"), "HOME": str(shared),
                 "VCLI_LOCAL_GPUS": "1", "PYTHONPATH": paths, "VCLI_GPU_LEASE_DIR": str(leases),
                 "VCLI_DISABLE_PROMPTS": "1"},
            cwd=shared, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        _, err = other.communicate(timeout=120)
        assert other.returncode == 0, err[-3000:]
        assert "Waiting for GPUs" in err, err[-3000:]
        out, err = mine.communicate(timeout=120)
        assert mine.returncode == 0, err[-3000:]
    finally:
        reap(mine)
        if other is not None:
            reap(other)  # type: ignore[arg-type]
    spans = gpu_intervals(log)
    assert len(spans) == 2, spans
    assert_disjoint(spans)


def test_a_holder_puts_back_its_lease_file_when_its_owner_removes_it(tmp_path: Path, gpu_lease_dir: Path) -> None:
    """Root removes its own held lease file (a tmp cleaner, a careless `rm`): the replica's
    supervisor puts it back within seconds, locked, so the GPU is held again, says so in its
    log, and `hosts gpus` says so in the GPU's row."""
    trainer, log = gpu_trainer(tmp_path), tmp_path / "gpus.log"
    home = tmp_path / "home"
    proc = spawn(home, *gpu_job_args(trainer, log, 8, 1, "held"), VCLI_LOCAL_GPUS="1")
    try:
        lock = gpu_lease_dir / "uid-0" / "gpu0.lock"
        wait_for(lambda: (LeaseDir(str(gpu_lease_dir)).probe([0])[0] or {}).get("controllerPid"), 60, "the lease")
        inode = lock.stat().st_ino
        lock.unlink()
        wait_for(lambda: lock.exists() and lock.stat().st_ino != inode, 20, "the lease file put back")
        with pytest.raises(LeaseBusy):
            LeaseDir(str(gpu_lease_dir)).acquire([0], {"job": "second"})
        import json

        rows = json.loads(vcli(home, "hosts", "gpus", "--format=json", VCLI_LOCAL_GPUS="1").stdout)
        row = next(r for r in rows if r["gpu"] == 0)
        assert row["state"] == "HELD" and "its lease file was removed while held" in (row["reason"] or ""), rows
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-3000:]
    finally:
        reap(proc)
    logs = list((home).rglob("workerpool0-0.log")) or list(home.rglob("*.log"))
    text = "".join(p.read_text(errors="replace") for p in logs)
    assert "was removed while this replica held it; vcli put it back" in text, [str(p) for p in logs]

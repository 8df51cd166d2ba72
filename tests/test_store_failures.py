"""vcli's home that cannot be used: errors are one line with exit code 7, never a traceback,
and no job is left PENDING or RUNNING by it.

Full and read-only file systems are real: a small tmpfs mounted in a private mount namespace
(`unshare -m`, so nothing on the machine changes), with the vcli commands run inside it.
Needs root (CI runs as root).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.helpers import REPO, processes_with_env, vcli, vcli_env

STORE_UNAVAILABLE = 7


def in_namespace(tmp: Path, script: str, *, size: str = "4m", readonly: bool = False, timeout: float = 120) -> str:
    """Run `script` (sh) with $H = a fresh tmpfs of `size` in a private mount namespace."""
    if os.geteuid() != 0:
        pytest.fail("these tests mount a tmpfs in a private mount namespace: run them as root")
    mnt = tmp / "mnt"
    mnt.mkdir()
    setup = f"mount -t tmpfs -o size={size},mode=0700 tmpfs {mnt}"
    if readonly:
        setup += f" && mount -o remount,ro {mnt}"
    env = vcli_env(tmp / "unused", H=str(mnt), PY=sys.executable)
    env.pop("VCLI_HOME")
    proc = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", f"{setup} && {script}"],
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"harness failed: {proc.stdout}\n{proc.stderr}"
    return proc.stdout


def one_line_error(stderr: str) -> str:
    lines = [l for l in stderr.splitlines() if l.strip()]
    assert "Traceback" not in stderr, stderr
    errors = [l for l in lines if l.startswith("ERROR: ")]
    assert len(errors) == 1, stderr
    return errors[0]


def test_a_file_in_the_way_of_vcli_home(tmp_path: Path) -> None:
    """The reason comes from the error's code, never its text: a path that says "full" or
    "readonly" is not a full disk or a read-only file system."""
    blocker = tmp_path / "fullstack-readonly"
    blocker.write_text("")
    r = vcli(blocker / "home", "custom-jobs", "list")
    assert r.returncode == STORE_UNAVAILABLE
    line = one_line_error(r.stderr)
    assert str(blocker / "home") in line and "VCLI_HOME" in line
    assert "a file is in the way of the directory" in line and "Move that file away" in line, line
    assert "disk is full" not in line and "Free space" not in line


def test_read_only_vcli_home(tmp_path: Path) -> None:
    out = in_namespace(tmp_path, textwrap.dedent("""
        export VCLI_HOME=$H/home
        $PY -m vcli custom-jobs list 2>err1; echo "rc1=$?"
        $PY -m vcli custom-jobs create --display-name=ro --worker-pool-spec=machine-type=n1-standard-4,replica-count=1,container-image-uri=x --command=true 2>err2; echo "rc2=$?"
        cat err1 err2 >&2; cat err1; echo ---; cat err2
        """).replace("err1", "/tmp/vcli-ro-err1").replace("err2", "/tmp/vcli-ro-err2"), readonly=True)
    assert "rc1=7" in out and "rc2=7" in out, out
    first, second = out.split("rc2=7", 1)[1].split("---")
    for text in (first, second):
        assert "read-only file system" in one_line_error(text)


def test_a_full_disk_before_the_run(tmp_path: Path) -> None:
    out = in_namespace(tmp_path, textwrap.dedent("""
        export VCLI_HOME=$H/home
        head -c 2000000 /dev/zero > $H/filler 2>/dev/null
        $PY -m vcli custom-jobs create --display-name=full --worker-pool-spec=machine-type=n1-standard-4,replica-count=1,container-image-uri=x --command=true 2>/tmp/vcli-full-err; echo "rc=$?"
        cat /tmp/vcli-full-err
        """), size="2m")
    rc_line, rest = out.split("\n", 1)
    assert rc_line == "rc=7", out
    assert "the disk is full" in one_line_error(rest)


def test_a_disk_that_fills_up_during_the_run(tmp_path: Path) -> None:
    """The trainer fills the disk with output: the job still ends in a final state, no process
    is left, and the CLI says what happened in one line (or the job succeeded, if the store
    could still write its end)."""
    trainer = "import sys\nfor i in range(6000): print('x' * 1000)\nprint('done')\n"
    (tmp_path / "filler.py").write_text(trainer)
    job = tmp_path / "job-id"
    out = in_namespace(tmp_path, textwrap.dedent(f"""
        export VCLI_HOME=$H/home
        $PY -m vcli custom-jobs create --display-name=fills --format='value(name.basename())' \
            --worker-pool-spec=machine-type=n1-standard-4,replica-count=1,container-image-uri=x \
            --command=$PY,{tmp_path / 'filler.py'} >{job} 2>/tmp/vcli-fill-err; echo "rc=$?"
        rm -f $H/home/jobs/*/replicas/*/replica.log
        $PY -m vcli custom-jobs list --format=json
        echo ---
        cat /tmp/vcli-fill-err
        """), size="5m", timeout=300)
    rc_line, rest = out.split("\n", 1)
    listed, stderr = rest.split("---\n", 1)
    [row] = json.loads(listed)
    assert row["state"] in ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED"), row
    if rc_line == "rc=7":
        assert "the disk is full" in one_line_error(stderr)
        assert row["state"] == "JOB_STATE_FAILED"
    else:
        assert rc_line in ("rc=0", "rc=6"), out
        assert "Traceback" not in stderr
    assert not processes_with_env("VCLI_JOB_ID", row["name"].rsplit("/", 1)[-1])


def test_job_directories_and_files_are_private(tmp_path: Path) -> None:
    """Job, replica and log directories are 0700 and vcli's own files 0600, whatever the umask."""
    home = tmp_path / "home"
    r = vcli(home, "custom-jobs", "create", "--display-name=perm", "--async", "--format=value(name.basename())",
             "--worker-pool-spec=machine-type=n1-standard-4,replica-count=1,container-image-uri=x",
             "--command=python3,-c,print('hi')")
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.strip()
    vcli(home, "custom-jobs", "stream-logs", job_id, timeout=60)
    job = home / "jobs" / job_id
    for d in (home, home / "jobs", job, job / "replicas", job / "replicas" / "workerpool0-0"):
        assert d.stat().st_mode & 0o777 == 0o700, (d, oct(d.stat().st_mode))
    for f in ("replicas/workerpool0-0/replica.log", "replicas/workerpool0-0/replica.status", "controller.log"):
        assert (job / f).stat().st_mode & 0o777 == 0o600, (f, oct((job / f).stat().st_mode))
    assert (home / "vcli.db").stat().st_mode & 0o777 == 0o600


def test_rows_are_typed_and_only_known_columns_reach_sql(tmp_path: Path) -> None:
    """The store boundary: rows carry enum members, trials cross as `Trial` objects, and a
    column name that is not a row field is refused before any SQL is built."""
    from vcli.spec import JobKind, JobState, ReplicaState, Trial, TrialState
    from vcli.store import Store

    store = Store(tmp_path / "home")
    row = store.create_job(kind=JobKind.CUSTOM_JOB, display_name="typed", record={}, state=JobState.JOB_STATE_QUEUED)
    assert row.kind is JobKind.CUSTOM_JOB and row.state is JobState.JOB_STATE_QUEUED
    assert f"{row.state}" == str(row.state) == "JOB_STATE_QUEUED"
    store.upsert_replica(row.id, "workerpool0-0", host="local", state=ReplicaState.RUNNING, log_path="l", metric_file="m")
    (replica,) = store.replicas(row.id)
    assert replica.state is ReplicaState.RUNNING and not replica.state.is_final()
    assert ReplicaState.NOT_STARTED.is_final() and ReplicaState.STOPPED.is_final()
    with pytest.raises(ValueError, match="no column"):
        store.update_job(row.id, **{"state = 'JOB_STATE_SUCCEEDED' --": 1})
    with pytest.raises(ValueError, match="no column"):
        store.upsert_replica(row.id, "workerpool0-0", **{"exit_code = 0, state": "x"})
    assert store.get_job(row.id).state is JobState.JOB_STATE_QUEUED
    store.save_trial(row.id, Trial(id="1", parameters={}, state=TrialState.ACTIVE), {})
    (trial,) = store.trials(row.id)
    assert isinstance(trial, Trial) and trial.state is TrialState.ACTIVE
    assert store.trial_records(row.id) == [{"id": "1", "state": "ACTIVE", "parameters": []}]


@pytest.mark.parametrize(
    "sql,where",
    [
        ("UPDATE jobs SET record = '{garbage'", "job {job}: Expecting property name"),
        ("UPDATE jobs SET record = '[]'", "job {job}: its record or error is not a JSON object"),
        ("UPDATE jobs SET state = 'BOGUS'", "job {job}: 'BOGUS' is not a valid JobState"),
        ("UPDATE jobs SET error = 'notjson'", "job {job}: its record or error is not a JSON object"),
        ("UPDATE replicas SET state = 'X'", "replica workerpool0-0 of job {job}: 'X' is not a valid ReplicaState"),
        ("UPDATE replicas SET handle = '{'", "replica workerpool0-0 of job {job}: Expecting property name"),
    ],
    ids=["record-not-json", "record-a-list", "unknown-state", "error-not-json", "replica-state", "replica-handle"],
)
def test_a_damaged_row_is_one_line_not_a_traceback(tmp_path: Path, sql: str, where: str) -> None:
    """A row vcli cannot decode (the file edited by hand, or by another program) made every
    `list` and `describe` a traceback; it is one line naming the row, exit 7."""
    import sqlite3

    home = tmp_path / "home"
    r = vcli(home, "custom-jobs", "create", "--display-name=d", "--format=value(name.basename())",
             "--worker-pool-spec=machine-type=n1-standard-4,replica-count=1,container-image-uri=x",
             "--command=python3,-c,print('hi')", "--executor=local")
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()
    with sqlite3.connect(home / "vcli.db") as conn:
        conn.execute(sql)
    for args in (("custom-jobs", "list"), ("custom-jobs", "describe", job)):
        r = vcli(home, *args)
        assert r.returncode == STORE_UNAVAILABLE, r.stderr
        line = one_line_error(r.stderr)
        assert f"vcli's store has a damaged record ({where.format(job=job)}" in line, line


def test_a_relative_home_works_for_the_read_only_store_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The dashboard's read-only open built a file: URI from a relative VCLI_HOME: every page a
    # 500 ("relative path can't be expressed as a file URI") while `list` worked.
    from vcli.enums import JobKind
    from vcli.store import Store, default_home

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("VCLI_HOME", "home")
    assert default_home() == tmp_path / "home"
    Store().close()
    for store in (Store(readonly=True), Store("home", readonly=True)):
        assert store.home == tmp_path / "home" and store.list_jobs(JobKind.CUSTOM_JOB) == []
        store.close()


def test_a_store_locked_by_another_process_says_so(tmp_path: Path) -> None:
    """SQLite's busy timeout (30 s) running out, because another process (a sqlite3 shell, a
    backup) held vcli.db's write lock, was reported as "database is locked. Set VCLI_HOME to a
    writable directory on a local disk": wrong advice for a fine home (found by a probe)."""
    import sqlite3

    from vcli.store_tx import store_error

    for code in (5, 6):  # SQLITE_BUSY, SQLITE_LOCKED
        error = sqlite3.OperationalError("database is locked")
        error.sqlite_errorcode = code  # type: ignore[attr-defined]
        line = str(store_error(tmp_path, error))
        assert line == (f"Cannot use vcli's home {tmp_path} (VCLI_HOME): its store vcli.db was locked by another process "
                        f"for more than 30 s. Find it with `fuser {tmp_path / 'vcli.db'}` (a sqlite3 shell, a backup), "
                        "and try again once it is done."), line


def test_a_controller_waits_out_a_store_another_process_keeps_locked(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """A running job's controller failed the job (and stopped its trainer) once another
    process had held vcli.db's write lock for SQLite's 30 s (found by a probe). Here SQLite's
    wait is made 50 ms; a controller (`wait_out_locks`) waits out a 1 s lock, saying so once;
    any other command still fails with the line above."""
    import sqlite3
    import threading

    from vcli.errors import StoreError
    from vcli.store import Store
    from vcli.store_tx import wait_out_locks

    store = Store(tmp_path / "home")
    store._conn.execute("PRAGMA busy_timeout=50")  # SQLite's 30 s, shortened for the test
    row = store.create_job(kind="customJob", display_name="j", record={}, state="JOB_STATE_RUNNING")

    def hold(seconds: float, held: threading.Event) -> None:
        other = sqlite3.connect(store.db_path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        held.set()
        time.sleep(seconds)
        other.execute("ROLLBACK")
        other.close()

    for patience, seconds in ((0.0, 1.0), (30.0, 1.0)):
        wait_out_locks(patience)
        held = threading.Event()
        holder = threading.Thread(target=hold, args=(seconds, held))
        holder.start()
        held.wait(10)
        try:
            if patience:
                store.beat(row.id)  # waits for the holder
            else:
                with pytest.raises(StoreError, match="locked by another process"):
                    store.beat(row.id)
        finally:
            holder.join()
            wait_out_locks(0)
    assert capsys.readouterr().err.count("is locked by another process (for more than 30 s now); waiting for it.") == 1
    store.close()


def test_a_ctrl_c_just_after_a_transaction_began_leaves_the_connection_usable(tmp_path: Path) -> None:
    """A Ctrl-C between a BEGIN that succeeded and its return left the connection inside the
    transaction: every later write was "cannot start a transaction within a transaction" (exit
    7, telling the user to change VCLI_HOME) and the job stayed RUNNING (found by a probe)."""
    import sqlite3
    import threading

    from vcli.store_tx import Tx

    real = sqlite3.connect(tmp_path / "t.db", isolation_level=None)
    real.execute("CREATE TABLE t (x)")

    class InterruptedAfterBegin:
        """The connection, with a Ctrl-C arriving the moment BEGIN returned."""

        in_transaction = property(lambda self: real.in_transaction)

        def execute(self, sql: str, *args: object) -> object:
            out = real.execute(sql, *args)
            if sql.startswith("BEGIN"):
                raise KeyboardInterrupt
            return out

    lock = threading.RLock()
    with pytest.raises(KeyboardInterrupt):
        with Tx(InterruptedAfterBegin(), lock, tmp_path):  # type: ignore[arg-type]
            pass
    assert not real.in_transaction
    with Tx(real, lock, tmp_path) as conn:  # the next write works, and the lock was let go
        conn.execute("INSERT INTO t VALUES (1)")
    assert real.execute("SELECT count(*) FROM t").fetchone() == (1,)

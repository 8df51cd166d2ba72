"""A replica's code on the process executor: private working directories and installed packages.

Real processes throughout: the CLI runs studies and jobs whose trainers write relative files
and import code that only an install provides; the snapshot and working-directory helpers run
on real files.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO, vcli_env
from tests.kit import PACKAGE_URIS_STUDY, WORKDIR_TASK, file_tree, hostile_package, trainer_package, trainer_sdist, vcli_only
from vcli import packages


def test_notebook_study_installs_package_uris_once_and_isolates_trials(tmp_path: Path) -> None:
    tarball = trainer_sdist(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    config = tmp_path / "study.yaml"
    config.write_text(PACKAGE_URIS_STUDY.format(uri=f"file://{tarball}"))
    home = tmp_path / "home"

    first = vcli_only(home, empty, "hp-tuning-jobs", "create", f"--config={config}", "--format=json")
    assert first.returncode == 0, first.stderr
    study = json.loads(first.stdout)
    assert study["state"] == "JOB_STATE_SUCCEEDED"
    assert sorted(t["state"] for t in study["trials"]) == ["SUCCEEDED", "SUCCEEDED"]
    assert sorted(t["finalMeasurement"]["metrics"][0]["value"] for t in study["trials"]) == [0.1, 0.2]
    assert "Installing trainer-0.1.tar.gz" in first.stderr
    [env_dir] = [p for p in (home / "envs").iterdir() if p.is_dir()]
    marker = env_dir / packages.ENV_MARKER
    built = marker.stat().st_mtime_ns
    assert not list(empty.iterdir())  # nothing written where vcli was run

    second = vcli_only(home, empty, "hp-tuning-jobs", "create", f"--config={config}", "--format=json")
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout)["state"] == "JOB_STATE_SUCCEEDED"
    assert "Installing" not in second.stderr and f"Using the Python environment {env_dir}" in second.stderr
    assert marker.stat().st_mtime_ns == built
    assert [p for p in (home / "envs").iterdir() if p.is_dir()] == [env_dir]
    assert not list(empty.iterdir())


def _two_parallel_trials_keep_to_their_own_directories(home: Path, cwd: Path, src: Path, pool: str) -> None:
    """A grid study of 2 trials at once of WORKDIR_TASK (which fails if its working directory is
    shared) with this pool, run from `cwd`: both succeed, `src` is untouched, and each replica
    wrote its own data.csv in its own working directory."""
    before = file_tree(src)
    r = vcli_only(
        home, cwd, "hp-tuning-jobs", "create", "--display-name=isolated", "--metric=metric-id=accuracy,goal=maximize",
        f"--worker-pool-spec=machine-type=n1-standard-4,replica-count=1,{pool}",
        "--parameter-spec=parameter-id=lr,type=discrete,values=0.1;0.2",
        "--algorithm=grid-search", "--max-trial-count=2", "--parallel-trial-count=2", "--format=json",
    )
    assert r.returncode == 0, r.stderr
    assert [t["state"] for t in json.loads(r.stdout)["trials"]] == ["SUCCEEDED", "SUCCEEDED"]
    assert file_tree(src) == before  # no data.csv, no __pycache__, nothing changed in the source
    written = sorted(p.read_text().strip() for p in (home / "jobs").glob("*/replicas/*/work/data.csv"))
    assert len(written) == 2 and len(set(written)) == 2


def test_parallel_trials_get_private_working_directories(tmp_path: Path) -> None:
    pkg = trainer_package(tmp_path / "pkg")
    home = tmp_path / "home"
    _two_parallel_trials_keep_to_their_own_directories(home, tmp_path, pkg,
                                                       f"local-package-path={pkg},python-module=trainer.task")
    for work in (home / "jobs").glob("*/replicas/*/work"):  # each a copy of the package
        assert (work / "trainer" / "task.py").read_text() == WORKDIR_TASK


def test_an_image_module_is_imported_from_where_vcli_runs_but_works_in_its_own_directory(tmp_path: Path) -> None:
    # pythonPackageSpec {executorImageUri, pythonModule} with no package: on Vertex the image
    # holds the code; here it is the directory vcli runs in (the README's examples/hp_tuning.yaml).
    src = trainer_package(tmp_path / "src")
    _two_parallel_trials_keep_to_their_own_directories(
        tmp_path / "home", src, src,
        "executor-image-uri=us-docker.pkg.dev/vertex-ai/training/tf-cpu.2-12.py310:latest,python-module=trainer.task")


def test_a_requirement_that_cannot_be_installed_fails_the_job_with_one_line(tmp_path: Path) -> None:
    pkg = trainer_package(tmp_path / "pkg")
    r = vcli_only(
        tmp_path / "home", tmp_path, "custom-jobs", "create", "--display-name=broken-reqs",
        f"--worker-pool-spec=machine-type=n1-standard-4,local-package-path={pkg},python-module=trainer.task,"
        "requirements=vcli-no-such-package-xyz",
        PIP_NO_INDEX="1", UV_OFFLINE="1",
    )
    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    failure = [line for line in r.stderr.splitlines() if "Cannot install vcli-no-such-package-xyz" in line]
    assert len(failure) == 1, r.stderr
    assert "vcli-no-such-package-xyz" in failure[0].split(":", 1)[1]  # the installer's reason names it too
    assert not (tmp_path / "home" / "envs").exists() or not any(
        (p / packages.ENV_MARKER).exists() for p in (tmp_path / "home" / "envs").iterdir())


def test_a_package_with_pipes_sockets_devices_and_non_utf8_names_runs(tmp_path: Path) -> None:
    # Before: a FIFO hung `create` for ever (SIGTERM and cancel could not stop it), /dev/zero's
    # node ate memory without bound, a socket or a non-UTF-8 name failed the job with
    # OSError / UnicodeEncodeError. Pipes, sockets and devices are not copied; the rest is.
    pkg = hostile_package(tmp_path / "pkg")
    r = subprocess.run([sys.executable, "-m", "vcli", "custom-jobs", "create", "--display-name=hostile",
                        "--executor=local",
                        f"--worker-pool-spec=machine-type=n1-standard-4,local-package-path={pkg},python-module=task"],
                       env=vcli_env(tmp_path / "home"), cwd=tmp_path, capture_output=True, timeout=60,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr.decode()
    assert b"files [b'link', b'task.py', b'\\xff\\xfe.txt']" in r.stdout
    assert packages.tree_hash(str(pkg)) == packages.tree_hash(str(pkg))


def test_package_uris_that_are_pipes_or_devices_are_refused_before_anything_runs(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    for uri in ("/dev/zero", str(tmp_path / "pipe")):
        for extra in ("--validate-only", "--executor=local"):
            r = subprocess.run([sys.executable, "-m", "vcli", "custom-jobs", "create", "--display-name=p", extra,
                                "--worker-pool-spec=machine-type=n1-standard-4,executor-image-uri=python:3,"
                                "python-module=task", f"--python-package-uris={uri}"],
                               env=vcli_env(tmp_path / "home"), capture_output=True, text=True, timeout=60,
                               stdin=subprocess.DEVNULL)
            assert r.returncode == 1, r.stderr
            assert r.stderr.strip() == (
                "ERROR: (vcli.custom-jobs.create) Invalid value for [workerPoolSpecs[0].pythonPackageSpec.packageUris[0]]: "
                f"the package [{uri}] is not a file or a directory (an sdist, a wheel or a package directory)")
    with pytest.raises(packages.ExecutorError, match="is not a file or a directory"):
        packages.local_uri("/dev/zero")


def test_snapshot_is_read_only_and_working_dirs_are_private_copies(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / ".git").mkdir(parents=True)
    (src / ".git" / "HEAD").write_text("ref")
    (src / "small.py").write_text("x = 1\n")
    (src / "big.bin").write_bytes(b"\0" * packages.SMALL_FILE_BYTES)
    (src / "run.sh").write_text("echo hi\n")
    os.chmod(src / "run.sh", 0o755)

    snap = Path(packages.snapshot(str(src), str(tmp_path / "store")))
    assert snap.name == packages.tree_hash(str(src))
    assert packages.snapshot(str(src), str(tmp_path / "store")) == str(snap)  # once per content
    assert sorted(p.name for p in snap.iterdir()) == ["big.bin", "run.sh", "small.py"]  # no .git
    assert all(not (p.stat().st_mode & 0o222) for p in snap.iterdir())
    assert (snap / "run.sh").stat().st_mode & 0o100

    one, two = tmp_path / "one", tmp_path / "two"
    packages.populate(str(snap), str(one))
    packages.populate(str(snap), str(two))
    # Small files are private, writable copies: rewriting one in place changes nothing else.
    (one / "small.py").write_text("x = 2\n")
    assert (two / "small.py").read_text() == (snap / "small.py").read_text() == (src / "small.py").read_text()
    # Large files are links to the snapshot's read-only bytes, not copies.
    assert (one / "big.bin").stat().st_ino == (snap / "big.bin").stat().st_ino
    assert not stat.S_IMODE((one / "big.bin").stat().st_mode) & 0o222
    # The source changing after the snapshot does not change what replicas get.
    (src / "small.py").write_text("x = 3\n")
    packages.populate(str(snap), str(one))
    assert (one / "small.py").read_text() == "x = 1\n"


@pytest.mark.parametrize("uri", ["gs://bucket/trainer.tar.gz", "https://example.com/trainer.tar.gz"])
def test_package_uris_the_process_executor_cannot_reach_are_refused_clearly(uri: str) -> None:
    with pytest.raises(packages.ExecutorError, match="local files and file:// URIs"):
        packages.local_uri(uri)


def _workspace(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The SSH hosts' helper, run as a host runs it: `python -S workspace.py ...` beside a `vcli`
    package (here: the checkout, through PYTHONPATH)."""
    script = REPO / "vcli" / "executors" / "ssh" / "workspace.py"
    full = {**os.environ, "PYTHONPATH": str(REPO), **env}
    return subprocess.run([sys.executable, "-S", str(script), *args], capture_output=True, text=True, timeout=300,
                          env=full, stdin=subprocess.DEVNULL)


def test_the_hosts_helper_makes_private_working_directories_from_one_snapshot(tmp_path: Path) -> None:
    code = trainer_package(tmp_path / "code")
    store, one, two = tmp_path / "job" / "package", tmp_path / "r0" / "work", tmp_path / "r1" / "work"
    r = _workspace("populate", str(code), str(store), str(one), str(two))
    assert r.returncode == 0, r.stdout + r.stderr
    [snap] = list(store.iterdir())
    assert snap.name == packages.tree_hash(str(code))
    assert file_tree(one) == file_tree(two) == file_tree(code)
    (one / "trainer" / "task.py").write_text("changed")  # a replica's own copy
    assert file_tree(two) == file_tree(code) == file_tree(snap)


def test_the_hosts_helper_reports_a_failed_install_in_one_line(tmp_path: Path) -> None:
    spec = {"home": str(tmp_path / "host"), "python": sys.executable, "packages": [],
            "requirements": ["vcli-no-such-package-xyz"], "requirementFiles": [], "origin": None}
    r = _workspace("env", json.dumps(spec), PIP_NO_INDEX="1", UV_OFFLINE="1")
    assert r.returncode == 1
    [error] = [line for line in r.stdout.splitlines() if line.startswith("VCLI-ERROR ")]
    assert "Cannot install vcli-no-such-package-xyz" in error and "Traceback" not in r.stdout + r.stderr
    assert not any((p / packages.ENV_MARKER).exists() for p in (tmp_path / "host" / "envs").iterdir())


def test_content_hash_is_what_the_installs_key_counts(tmp_path: Path) -> None:
    wheel = tmp_path / "a-1.0-py3-none-any.whl"
    wheel.write_bytes(b"not really a wheel")
    assert packages.content_hash(str(wheel)) == hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert packages.content_hash(str(tmp_path)) == packages.tree_hash(str(tmp_path))

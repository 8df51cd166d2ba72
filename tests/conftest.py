"""Shared pytest fixtures for the vcli test suite.

- `vcli_home`: a private, empty VCLI_HOME and VCLI_CONFIG_DIR (tmp dirs) for the test.
- `run_vcli`: runs the real CLI (`python -m vcli ...`) in a subprocess with that home and
  returns the CompletedProcess (text mode, stdout and stderr captured, never raises on a
  non-zero exit).

Markers (registered in pyproject.toml) come from one table here, `NEEDS`, applied at collection
by `pytest_collection_modifyitems`: what a test needs beyond vcli's base install (a daemon, a
browser, TensorFlow, MLflow), and `integration` on every such test and on the slow end-to-end
runs. `pytest -m "not integration"` is the inner loop; `bash .ci/run` runs everything.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

# numpy's BLAS (OpenBLAS) starts a thread per core and spins them while they wait: on a busy
# 2-core machine the suggester suites took 330 s instead of 47 s (243 s of CPU instead of 30),
# in this process and in every vcli process a test starts. One thread each, as bench/ does, set
# before anything imports numpy; a value set outside the suite wins.
for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

# --------------------------------------------------------------------------- markers

#: Markers that say a test needs something beyond vcli's base install and this machine's Python.
#: Each one brings `integration` with it.
NEEDS_MARKERS = ("docker", "ssh", "slurm", "ray", "browser", "tensorflow", "mlflow")

_KINDS = {"docker": ("docker",), "ssh": ("ssh",), "ssh-docker": ("ssh", "docker"), "ray": ("ray",), "slurm": ("slurm",)}

#: What tests need, by where they are. A key is a test module (`test_ray`: all of it), one test
#: (`test_dashboard::test_x`: each of its parametrized cases), or a module's cases that got a
#: parameter (`test_executor_contract[docker]`: whichever harness fixture took the executor
#: kind). A value names markers of NEEDS_MARKERS, or `integration` alone for a slow end-to-end
#: run that needs nothing more.
NEEDS: dict[str, tuple[str, ...]] = {
    # Daemons and browsers (the harnesses in tests/harness/ start them; CI installs them).
    "test_docker_executor": ("docker",),
    "test_docker_jobs": ("docker",),
    "test_gcs::test_gs_output_is_visible_at_gcs_in_a_container": ("docker",),
    "test_pbt_study::test_pbt_study_in_containers_copies_checkpoints_between_bind_mounts": ("docker",),
    "test_ssh": ("ssh",),
    "test_gpu_leases::test_an_ssh_hosts_own_nvidia_smi_decides_what_is_busy_there": ("ssh",),
    "test_slurm": ("slurm",),
    "test_ray": ("ray",),
    "test_cli_errors::test_an_unreachable_ray_cluster_is_one_line_at_once": ("ray",),
    "test_cli_errors::test_the_ray_address_flag_wins_over_the_property_and_the_environment": ("ray",),
    "test_cli_errors::test_a_ray_address_that_is_not_a_ray_cluster_is_one_line_at_once": ("ray",),
    **{f"test_executor_contract[{kind}]": needs for kind, needs in _KINDS.items()},
    "test_report_browser": ("browser",),
    "test_dashboard::test_the_study_page_updates_itself_in_a_real_browser": ("browser",),
    # Heavy packages: the example trainer's TensorFlow, MLflow (and its tracking server).
    "test_trainer": ("tensorflow",),
    "test_custom_jobs::test_two_replica_multiworker_job_trains_digits": ("tensorflow",),
    "test_custom_jobs::test_reduction_server_job_trains_with_its_workers_alone": ("tensorflow",),
    "test_hp_tuning::test_bayesian_study_of_the_real_trainer": ("tensorflow",),
    "test_hp_tuning::test_study_with_two_replica_trials": ("tensorflow",),
    "test_pbt_study::test_pbt_with_the_real_tensorflow_trainer": ("tensorflow",),
    "test_examples::test_the_readme_study_runs_from_the_repository_root": ("tensorflow",),
    "test_ray::test_two_replica_multiworker_job_lands_on_two_nodes_and_trains": ("tensorflow",),
    "test_slurm::test_two_replica_multiworker_job_runs_on_two_slurm_nodes": ("tensorflow",),
    "test_ssh::test_multiworker_job_across_two_hosts": ("tensorflow",),
    "test_readme_demo": ("tensorflow",),
    "test_tracking": ("mlflow",),
    "test_tracking_stores": ("mlflow",),
    "test_shared_dirs::test_the_mlflow_schema_lock_never_follows_a_planted_link": ("mlflow",),
    "test_aiplatform_reattach::test_experiment_runs_go_to_mlflow_when_tracking_is_on": ("mlflow",),
    # Slow runs that need nothing more: whole jobs and studies through the real CLI and real
    # trainer processes, controllers killed and resumed, a fresh install, fuzzing, soaks and
    # bounds on 10,000-trial stores. The inner loop keeps the controllers' rules in-process
    # (the fake executor on a fake clock), the CLI's parsing and errors, reports and exports.
    "test_custom_jobs": ("integration",),
    "test_hp_tuning": ("integration",),
    "test_katib::test_a_random_experiment_runs_with_stdout_metrics": ("integration",),
    "test_katib::test_a_bayesian_experiment_with_medianstop_runs": ("integration",),
    "test_katib::test_a_grid_experiment_runs_every_point": ("integration",),
    "test_mcp": ("integration",),
    "test_study_algorithms": ("integration",),
    "test_pbt_study": ("integration",),
    "test_resume": ("integration",),
    "test_gpu_leases": ("integration",),
    "test_shared_dirs": ("integration",),
    "test_aiplatform": ("integration",),
    "test_aiplatform_reattach": ("integration",),
    "test_extend": ("integration",),
    "test_failures": ("integration",),
    "test_tensorboard": ("integration",),
    "test_view::test_live_view_in_a_real_terminal": ("integration",),
    "test_packages::test_notebook_study_installs_package_uris_once_and_isolates_trials": ("integration",),
    "test_suggesters::test_a_base_install_runs_the_default_algorithm_and_names_what_skopt_needs": ("integration",),
    "test_fuzz": ("integration",),
    "test_big_studies": ("integration",),
    "test_doc_examples": ("integration",),
    "test_soak_memory": ("integration",),
}


def _needs(item: pytest.Item) -> set[str]:
    module = item.path.stem
    function = getattr(item, "originalname", item.name)
    found = set(NEEDS.get(module, ())) | set(NEEDS.get(f"{module}::{function}", ()))
    callspec = getattr(item, "callspec", None)
    for value in (callspec.params.values() if callspec is not None else ()):
        if isinstance(value, str):
            found |= set(NEEDS.get(f"{module}[{value}]", ()))
    return found


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks each test with what `NEEDS` says, and `integration` where it names anything (or
    where the test carries one of NEEDS_MARKERS already)."""
    for item in items:
        needs = _needs(item) | {m for m in NEEDS_MARKERS if item.get_closest_marker(m) is not None}
        for marker in sorted(needs - {"integration"}):
            if item.get_closest_marker(marker) is None:
                item.add_marker(marker)
        if needs and item.get_closest_marker("integration") is None:
            item.add_marker("integration")


#: Outer-environment variables that would change how vcli behaves in a test.
_SCRUB = ("VCLI_EXECUTOR", "VCLI_PYTHON", "TF_CONFIG", "CLUSTER_SPEC", "CLOUD_ML_TRIAL_ID")


@pytest.fixture
def vcli_home(tmp_path, monkeypatch):
    """An empty vcli home and config dir; returns the home Path (config dir is its sibling)."""
    home = tmp_path / "vcli-home"
    conf = tmp_path / "vcli-config"
    home.mkdir()
    conf.mkdir()
    monkeypatch.setenv("VCLI_HOME", str(home))
    monkeypatch.setenv("VCLI_CONFIG_DIR", str(conf))
    for name in _SCRUB:
        monkeypatch.delenv(name, raising=False)
    return home


@pytest.fixture
def run_vcli(vcli_home):
    """`run_vcli(*args, input=None, env=None, timeout=60)` -> subprocess.CompletedProcess."""

    def run(*args: str, input: str | None = None, env: dict[str, str] | None = None, timeout: float = 60):
        full_env = dict(os.environ)  # already holds VCLI_HOME / VCLI_CONFIG_DIR (monkeypatched)
        full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), full_env.get("PYTHONPATH")]))
        if env:
            full_env.update(env)
        return subprocess.run(
            [sys.executable, "-m", "vcli", *args],
            input=input,
            env=full_env,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=None if input is not None else subprocess.DEVNULL,
        )

    return run


def _processes_under(root: str) -> list[int]:
    """Live processes (not this one) whose VCLI_HOME lies under `root`: everything a test's vcli
    runs started (controllers, supervisors, trainers) carries its home in the environment."""
    found = []
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X"):
                    continue
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except (OSError, IndexError):
            continue
        if any(v.startswith(b"VCLI_HOME=" + root.encode()) for v in env):
            found.append(int(entry))
    return found


@pytest.fixture(autouse=True)
def no_process_left_behind(tmp_path):
    """Fails a test that leaves any process of its vcli runs behind (orphans are a defect), after
    killing them so that they do not outlive the suite. Processes get 10 s to finish on their own."""
    yield
    import signal
    import time

    root = str(tmp_path)
    deadline = time.monotonic() + 10
    left = _processes_under(root)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = _processes_under(root)
    if not left:
        return
    described = []
    for pid in left:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                described.append(f"{pid}: {f.read().replace(chr(0).encode(), b' ').decode(errors='replace')[:200]}")
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    pytest.fail("processes left behind by the test:\n" + "\n".join(described), pytrace=False)


@pytest.fixture(autouse=True)
def gpu_lease_dir(tmp_path_factory, monkeypatch):
    """A host-wide GPU lease directory of the test's own (`vcli.placement.gpulease`): tests that declare
    GPUs never meet another test's (or a real user's) leases. Returns its path."""
    path = tmp_path_factory.mktemp("gpu-leases")
    monkeypatch.setenv("VCLI_GPU_LEASE_DIR", str(path))
    import sys as _sys

    kinds = _sys.modules.get("vcli.executors.kinds")
    if kinds is not None:
        kinds._PLACERS.clear()  # placers cached by an earlier test use its directory
    return path

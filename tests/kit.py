"""The test kit: everything more than one test module uses, imported from here.

A test module imports from this kit, tests/harness/ (the real services: Docker, sshd, Slurm,
Ray, MLflow, Chromium) and the fixtures of tests/conftest.py, never from another test module
(tests/test_layering.py holds that). What lives here:

- Running the CLI, and waiting on what it runs (from tests/helpers.py): `vcli`, `spawn`, `reap`,
  `vcli_env`, `describe`, `list_ids`, `job_id_from_stderr`, `read_stderr_until`, `wait_for`,
  `processes_with_env`, `running_replicas`, `clusters_from_stdout`, `script_study`, `write_package`.
- Controllers in-process (from tests/fakes.py: `FakeClock`, `FakeWorld`, `FakeExecutor`), and
  what builds them: `pool`, `job_spec`, `study`, `Recorder`, `X`.
- Trainers and studies that several suites run: `WORKDIR_TASK` and its packages
  (`trainer_package`, `trainer_sdist`, `hostile_package`, `file_tree`, `PACKAGE_URIS_STUDY`),
  PBT's toy (`PBT_TOY`, `PBT_STUDY`), the GPU-lease trainer (`GPU_TRAINER`, `gpu_trainer`,
  `gpu_job_args`, `gpu_intervals`, `assert_disjoint`) and a second Unix user (`OTHER_USER`).
- Search spaces and trials for suggesters: `mixed_parameters`, `grid_parameters`, `done_trial`,
  `toy_loss`, `check_values`.

The one way to run the CLI in a test is `vcli(home, *args, **env)`: `python -m vcli ARGS` in a
process of its own session, to its end, with `home` as VCLI_HOME (its `config` as
VCLI_CONFIG_DIR), this checkout first on PYTHONPATH, stdin closed unless `input` is given, in
the repository root unless `cwd` says otherwise, `env` added to the environment; on timeout
it kills the whole session and fails the test. `spawn(home, *args, **env)` starts the same in
the background (`reap` it in a `finally`); `vcli_only` is `vcli` where only vcli, not the
repository's `trainer` package, is importable. The `run_vcli` fixture (tests/conftest.py) does
the same for the tests that take the `vcli_home` fixture.
"""

from __future__ import annotations

import json
import math
import os
import pwd
import shutil
import stat
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

import pytest

from tests.contract_replica import replica_command
from tests.fakes import SIGKILL_EXIT, SIGTERM_EXIT, FakeClock, FakeExecutor, FakeWorld
from tests.helpers import (
    REPO,
    clusters_from_stdout,
    describe,
    job_id_from_stderr,
    list_ids,
    processes_with_env,
    read_stderr_until,
    reap,
    running_replicas,
    script_study,
    spawn,
    vcli,
    vcli_env,
    wait_for,
    write_package,
)
from vcli.control.jobs import local_placer
from vcli.control.study import StudyRun
from vcli.spec import (
    Algorithm,
    CategoricalValueSpec,
    ConditionalParameterSpec,
    ContainerSpec,
    CustomJobSpec,
    DiscreteValueSpec,
    DoubleValueSpec,
    Goal,
    HyperparameterTuningJobSpec,
    IntegerValueSpec,
    JobKind,
    JobState,
    MachineSpec,
    Measurement,
    MeasurementSelectionType,
    MetricSpec,
    ParameterSpec,
    ScaleType,
    Scheduling,
    StudyEvent,
    StudySpec,
    Trial,
    TrialState,
    WorkerPoolSpec,
)
from vcli.store import Store
from vcli.tuning.events import StudyListener
from vcli.tuning.suggesters import get_suggester

__all__ = [
    # tests/helpers.py
    "REPO", "clusters_from_stdout", "describe", "job_id_from_stderr", "list_ids", "processes_with_env",
    "read_stderr_until", "reap", "running_replicas", "script_study", "spawn", "vcli", "vcli_env", "wait_for",
    "write_package",
    # tests/fakes.py
    "SIGKILL_EXIT", "SIGTERM_EXIT", "FakeClock", "FakeExecutor", "FakeWorld",
    # this module
    "GPU_TRAINER", "OTHER_USER", "PACKAGE_URIS_STUDY", "PBT_STUDY", "PBT_TOY", "WORKDIR_TASK", "X", "Recorder",
    "assert_disjoint", "check_values", "done_trial", "ensure_other_user", "file_tree", "gpu_intervals",
    "gpu_job_args", "gpu_pool", "gpu_trainer", "grid_parameters", "hostile_package", "job_spec",
    "mixed_parameters", "pool", "study", "system_python", "toy_loss", "trainer_package", "trainer_sdist",
    "vcli_only",
]


# --------------------------------------------------------------------------- the CLI


def vcli_only(home: Path, cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`vcli` in `cwd`, importing vcli from this checkout but nothing else of it: the
    repository's own `trainer` package must not shadow the one a test installs."""
    shim = home.parent / "vcli-only"
    if not shim.exists():
        shim.mkdir()
        (shim / "vcli").symlink_to(REPO / "vcli")
    return vcli(home, *args, cwd=cwd, PYTHONPATH=str(shim), **env)


# --------------------------------------------------------------------------- controllers in-process


def pool(*actions: str, replicas: int = 1) -> WorkerPoolSpec:
    """A pool of the contract replica (tests/contract_replica.py) doing `actions`."""
    return WorkerPoolSpec(machine_spec=MachineSpec(machine_type="n1-standard-4"), replica_count=replicas,
                          container_spec=ContainerSpec(image_uri="img", command=replica_command(), args=tuple(actions)))


def job_spec(*pools: WorkerPoolSpec, timeout: float | None = None) -> CustomJobSpec:
    return CustomJobSpec(worker_pool_specs=tuple(pools),
                         scheduling=Scheduling(timeout_seconds=timeout) if timeout else None)


#: The one parameter of `study`'s studies unless it is given others.
X = ParameterSpec(parameter_id="x", value_spec=DoubleValueSpec(min_value=0.0, max_value=1.0))


def study(
    store: Store,
    world: FakeWorld,
    *actions: str,
    max_trials: int = 4,
    parallel: int = 2,
    failures: int = 0,
    algorithm: Algorithm = Algorithm.RANDOM_SEARCH,
    parameters: tuple[ParameterSpec, ...] = (X,),
    goal: Goal = Goal.MAXIMIZE,
    selection: MeasurementSelectionType = MeasurementSelectionType.MEASUREMENT_SELECTION_TYPE_UNSPECIFIED,
    executor: FakeExecutor | None = None,
    placer: Any = local_placer,
    metrics: tuple[MetricSpec, ...] = (),
    stopping: Any = None,
    scheduling: Scheduling | None = None,
    **extra: Any,
) -> tuple[StudyRun, list[tuple[str, str | None]]]:
    """A `StudyRun` of trials that are the contract replica doing `actions` on the fake executor
    (on `world`'s clock), stored in `store`; and the list its `Recorder` fills with events."""
    spec = HyperparameterTuningJobSpec(
        study_spec=StudySpec(metrics=metrics or (MetricSpec(metric_id="acc", goal=goal),), parameters=parameters,
                             algorithm=algorithm, measurement_selection_type=selection, automated_stopping_spec=stopping),
        trial_job_spec=replace(job_spec(pool(*actions)), scheduling=scheduling),
        max_trial_count=max_trials, parallel_trial_count=parallel, max_failed_trial_count=failures, **extra,
    )
    row = store.create_job(kind=JobKind.HYPERPARAMETER_TUNING_JOB.value, display_name="s", record={},
                           state=JobState.JOB_STATE_QUEUED.value)
    recorder = Recorder()
    run = StudyRun(store=store, executor=executor or FakeExecutor(world), spec=spec, study_id=row.id,
                   display_name="s", suggester=get_suggester(spec.study_spec, seed=7), clock=world.clock,
                   placer=placer, listener=recorder)
    return run, recorder.events


class Recorder(StudyListener):
    """Records a study's events as (event name, trial id) and its status lines."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str | None]] = []
        self.lines: list[str] = []

    def trial_started(self, trial: Trial) -> None:
        self.events.append((StudyEvent.TRIAL_STARTED.value, trial.id))

    def trial_measured(self, trial: Trial) -> None:
        self.events.append((StudyEvent.TRIAL_MEASUREMENT.value, trial.id))

    def trial_stopping(self, trial: Trial) -> None:
        self.events.append((StudyEvent.TRIAL_STOPPING.value, trial.id))

    def trial_ended(self, trial: Trial) -> None:
        self.events.append((StudyEvent.TRIAL_FINISHED.value, trial.id))

    def study_ended(self, state: JobState, best: Trial | None, optimal: Sequence[Trial]) -> None:
        self.events.append((StudyEvent.STUDY_FINISHED.value, best.id if best else None))

    def progress(self, message: str) -> None:
        self.lines.append(message)


# --------------------------------------------------------------------------- trainer packages

#: A trainer that fails if its working directory is shared: it writes data.csv, waits for its
#: sibling to do the same, and checks the file is still its own. Reports through stdout.
WORKDIR_TASK = textwrap.dedent("""
    import os, sys, time
    args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:] if "=" in a)
    me = os.environ.get("CLOUD_ML_TRIAL_ID", "0") + "/" + os.environ.get("VCLI_REPLICA", "")
    if os.path.exists("data.csv"):
        sys.exit("data.csv already exists: the working directory is shared")
    with open("data.csv", "w") as f:
        f.write(me + "\\n")
    time.sleep(1.5)
    with open("data.csv") as f:
        if f.read().strip() != me:
            sys.exit("data.csv was overwritten by another replica")
    print(f"accuracy={float(args.get('lr', 0.1)):.3f}", flush=True)
""")

#: A grid study of two trials at once of `trainer_sdist`'s package from packageUris
#: (`.format(uri=...)`).
PACKAGE_URIS_STUDY = """
displayName: notebook-study
maxTrialCount: 2
parallelTrialCount: 2
studySpec:
  metrics:
  - metricId: accuracy
    goal: MAXIMIZE
  parameters:
  - parameterId: lr
    discreteValueSpec: {{values: [0.1, 0.2]}}
  algorithm: GRID_SEARCH
trialJobSpec:
  workerPoolSpecs:
  - machineSpec: {{machineType: n1-standard-4}}
    replicaCount: 1
    pythonPackageSpec:
      executorImageUri: us-docker.pkg.dev/vertex-ai/training/tf-cpu.2-12.py310:latest
      packageUris: [{uri}]
      pythonModule: trainer.task
"""


def trainer_package(root: Path) -> Path:
    """A trainer package directory: trainer/__init__.py and trainer/task.py (WORKDIR_TASK)."""
    (root / "trainer").mkdir(parents=True)
    (root / "trainer" / "__init__.py").write_text("")
    (root / "trainer" / "task.py").write_text(WORKDIR_TASK)
    return root


def trainer_sdist(tmp_path: Path) -> Path:
    """A `setup.py sdist` of the trainer package, as a notebook builds for packageUris."""
    src = trainer_package(tmp_path / "src")
    (src / "setup.py").write_text(
        "from setuptools import setup\nsetup(name='trainer', version='0.1', packages=['trainer'])\n"
    )
    subprocess.run([sys.executable, "setup.py", "-q", "sdist", "--formats=gztar"], cwd=src, check=True,
                   capture_output=True, timeout=120)
    [tarball] = (src / "dist").glob("trainer-0.1.tar.gz")
    return tarball


def file_tree(root: Path) -> dict[str, bytes]:
    """Every file under `root` (relative path -> contents)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def hostile_package(root: Path) -> Path:
    """A package a working tree may really hold: a named pipe, a UNIX socket, a device node,
    a file name and a link target that are not UTF-8, beside the trainer."""
    import socket

    root.mkdir(parents=True)
    (root / "task.py").write_text("import os\nprint('files', sorted(os.listdir(b'.')))\n")
    os.mkfifo(root / "pipe")
    os.mknod(root / "zero", 0o600 | stat.S_IFCHR, os.makedev(1, 5))  # /dev/zero's numbers
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(root / "s.sock"))
    s.close()
    (root / os.fsdecode(b"\xff\xfe.txt")).write_text("latin-1 name")
    os.symlink(os.fsdecode(b"\xff\xfe.txt"), root / "link")
    return root


# --------------------------------------------------------------------------- PBT's toy

#: Ray's PBT toy as a trainer: a "model" whose score grows fastest when the learning rate is
#: close to an optimum that moves with the step; it saves and restores its state in
#: AIP_CHECKPOINT_DIR. Arguments: --lr, --steps, --pause, --mode, --marker.
PBT_TOY = """
import json, os, sys, time
args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:] if "=" in a)
lr = float(args["lr"]); steps = int(args.get("steps", 8)); pause = float(args.get("pause", 0.4))
mode = args.get("mode", "")
ckpt = os.environ["AIP_CHECKPOINT_DIR"].rstrip("/")
state = {"step": 0, "score": 0.0}
path = os.path.join(ckpt, "state.json")
trial = os.environ["CLOUD_ML_TRIAL_ID"]
if mode == "staggered" and trial == "2":   # a loaded machine: trial 2 starts once trial 1 has ended
    deadline = time.time() + 120
    while not os.path.exists(args["marker"]) and time.time() < deadline:
        time.sleep(0.05)
if os.path.exists(path):
    with open(path) as f:
        state = json.load(f)
    print(f"restored step={state['step']} score={state['score']:.6f}", flush=True)
while state["step"] < steps:
    time.sleep(pause)
    state["step"] += 1
    best_lr = 0.1 if state["step"] <= steps // 2 else 0.01   # the optimum moves half-way
    diverged = mode == "staggered" and trial == "1"
    state["score"] += 0.0 if diverged else max(0.0, 1.0 - abs(lr - best_lr) / 0.1)
    if mode != "no-checkpoint":
        os.makedirs(ckpt, exist_ok=True)
        with open(path + ".tmp", "w") as f:
            json.dump(state, f)
        os.replace(path + ".tmp", path)    # a checkpoint is complete or absent
    if mode == "no-step":
        print(f"score={state['score']:.6f}", flush=True)
        import hypertune
        hypertune.HyperTune().report_hyperparameter_tuning_metric(
            hyperparameter_metric_tag="score", metric_value=state["score"])
    else:
        print(f"score={state['score']:.6f} step={state['step']}", flush=True)
if mode == "staggered" and trial == "1":
    open(args["marker"], "w").close()
"""

#: A PBT study of PBT_TOY: `.format(max_trials=, population=, python=, script=, extra=)`
#: (`extra` is appended to the trainer's args, e.g. ", --pause=1.0").
PBT_STUDY = """
displayName: pbt-toy
maxTrialCount: {max_trials}
parallelTrialCount: 4
studySpec:
  metrics: [{{metricId: score, goal: MAXIMIZE}}]
  algorithm: POPULATION_BASED_TRAINING
  populationBasedTrainingSpec:
    populationSize: {population}
    perturbationIntervalSteps: 2
    quantileFraction: 0.25
    resampleProbability: 0.25
    perturbationFactors: [0.8, 1.2]
    maxStepCount: 8
  parameters:
  - parameterId: lr
    doubleValueSpec: {{minValue: 0.001, maxValue: 0.2}}
    scaleType: UNIT_LOG_SCALE
trialJobSpec:
  workerPoolSpecs:
  - machineSpec: {{machineType: n1-standard-4}}
    replicaCount: 1
    containerSpec:
      imageUri: toy
      command: [{python}, {script}]
      args: [--steps=8{extra}]
"""


# --------------------------------------------------------------------------- GPU leases

#: A trainer that holds its GPUs for SECONDS and records which, and when (one line, appended
#: atomically with O_APPEND).
GPU_TRAINER = textwrap.dedent("""
    import os, sys, time
    start = time.time()
    time.sleep(float(sys.argv[2]))
    line = f"{os.environ.get('CUDA_VISIBLE_DEVICES', '')} {start:.6f} {time.time():.6f} {os.environ.get('VCLI_JOB_ID', '')}\\n"
    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    os.write(fd, line.encode())
    os.close(fd)
    if os.environ.get("CLOUD_ML_HP_METRIC_FILE"):
        with open(os.environ["CLOUD_ML_HP_METRIC_FILE"], "a") as f:
            f.write('{"loss": "0.5", "global_step": "1"}\\n')
""")


def gpu_trainer(root: Path) -> Path:
    """GPU_TRAINER as `root/gpu_trainer.py`, executable."""
    path = root / "gpu_trainer.py"
    path.write_text(GPU_TRAINER)
    path.chmod(0o755)
    return path


def gpu_pool(trainer: Path, log: Path, seconds: float, gpus: int, replicas: int = 1) -> str:
    return (f"--worker-pool-spec=machine-type=n1-standard-4,replica-count={replicas},accelerator-type=NVIDIA_TESLA_T4,"
            f"accelerator-count={gpus},container-image-uri=unused")


def gpu_job_args(trainer: Path, log: Path, seconds: float, gpus: int, name: str) -> list[str]:
    """`custom-jobs create` of one replica of `trainer` holding `gpus` GPUs for `seconds`, logging to `log`."""
    return ["custom-jobs", "create", f"--display-name={name}", gpu_pool(trainer, log, seconds, gpus),
            f"--command={sys.executable},{trainer}", f"--args={log},{seconds}"]


def gpu_intervals(log: Path) -> list[tuple[tuple[int, ...], float, float, str]]:
    """The (GPU indices, start, end, job id) lines GPU_TRAINER appended to `log`."""
    out = []
    for line in log.read_text().splitlines():
        gpus, start, end, job = (line.split(" ") + [""])[:4]
        out.append((tuple(int(g) for g in gpus.split(",") if g), float(start), float(end), job))
    return out


def assert_disjoint(intervals: list[tuple[tuple[int, ...], float, float, str]]) -> None:
    """No GPU index was held by two trainers at once."""
    by_gpu: dict[int, list[tuple[float, float, str]]] = {}
    for gpus, start, end, job in intervals:
        assert gpus, f"a trainer ran without CUDA_VISIBLE_DEVICES: {intervals}"
        for g in gpus:
            by_gpu.setdefault(g, []).append((start, end, job))
    for g, spans in by_gpu.items():
        spans.sort()
        for (s1, e1, j1), (s2, e2, j2) in zip(spans, spans[1:]):
            assert s2 >= e1, f"GPU {g} was held by {j1} ({s1:.3f}-{e1:.3f}) and {j2} ({s2:.3f}-{e2:.3f}) at once"


#: The second Unix user of the tests that need two (`ensure_other_user` makes it).
OTHER_USER = "vcli-lease-test"


def system_python() -> str:
    """An interpreter the second user may run (the suite's own may live under /root, which is
    private): the system's python of the same version, which imports vcli's dependencies from
    the suite's environment (same version, same ABI)."""
    candidate = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    if not os.access(candidate, os.X_OK):
        pytest.fail(f"the two-user test needs {candidate} (Debian's python3 of the suite's version)")
    return candidate


def ensure_other_user() -> None:
    try:
        pwd.getpwnam(OTHER_USER)
    except KeyError:
        if shutil.which("useradd") is None or os.geteuid() != 0:
            pytest.fail("the two-user test needs root and useradd (CI runs as root)")
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", OTHER_USER],
                       check=True)


# --------------------------------------------------------------------------- suggesters


def mixed_parameters() -> tuple[ParameterSpec, ...]:
    """Every value type and scale, plus a categorical parent with conditional children."""
    return (
        ParameterSpec(
            parameter_id="lr",
            value_spec=DoubleValueSpec(min_value=1e-5, max_value=1.0),
            scale_type=ScaleType.UNIT_LOG_SCALE,
        ),
        ParameterSpec(
            parameter_id="beta",
            value_spec=DoubleValueSpec(min_value=0.01, max_value=0.999),
            scale_type=ScaleType.UNIT_REVERSE_LOG_SCALE,
        ),
        ParameterSpec(parameter_id="layers", value_spec=IntegerValueSpec(min_value=1, max_value=8)),
        ParameterSpec(
            parameter_id="batch",
            value_spec=DiscreteValueSpec(values=(16.0, 32.0, 64.0, 128.0)),
            scale_type=ScaleType.UNIT_LOG_SCALE,
        ),
        ParameterSpec(
            parameter_id="optimizer",
            value_spec=CategoricalValueSpec(values=("sgd", "adam")),
            conditional_parameter_specs=(
                ConditionalParameterSpec(
                    parameter_spec=ParameterSpec(
                        parameter_id="momentum", value_spec=DoubleValueSpec(min_value=0.0, max_value=0.99)
                    ),
                    parent_values=("sgd",),
                ),
                ConditionalParameterSpec(
                    parameter_spec=ParameterSpec(
                        parameter_id="amsgrad", value_spec=CategoricalValueSpec(values=("yes", "no"))
                    ),
                    parent_values=("adam",),
                ),
            ),
        ),
    )


def grid_parameters() -> tuple[ParameterSpec, ...]:
    """A small grid: an integer, and a categorical with a conditional child."""
    return (
        ParameterSpec(parameter_id="units", value_spec=IntegerValueSpec(min_value=1, max_value=3)),
        ParameterSpec(
            parameter_id="act",
            value_spec=CategoricalValueSpec(values=("relu", "tanh")),
            conditional_parameter_specs=(
                ConditionalParameterSpec(
                    parameter_spec=ParameterSpec(
                        parameter_id="slope", value_spec=DiscreteValueSpec(values=(0.1, 0.3))
                    ),
                    parent_values=("relu",),
                ),
            ),
        ),
    )


def done_trial(tid: str, params, value: float | None, state=TrialState.SUCCEEDED) -> Trial:
    """A finished trial whose final `loss` is `value` (none when `value` is None)."""
    m = None if value is None else Measurement(step_count=1, metrics={"loss": value})
    return Trial(id=tid, parameters=dict(params), state=state, final_measurement=m)


def toy_loss(p) -> float:
    """A cheap deterministic objective over any of the fixture spaces."""
    v = 0.0
    for k, x in sorted(p.items()):
        v += (len(x) if isinstance(x, str) else float(x)) * (1 + len(k) % 3)
    return math.sin(v) + 0.01 * v


def check_values(space_params, p) -> None:
    """Active parameters only, plain types, within bounds / domains."""
    by_id = {}

    def walk(specs, parent=None):
        for s in specs:
            by_id[s.parameter_id] = (s, parent)
            for c in s.conditional_parameter_specs:
                walk([c.parameter_spec], (s.parameter_id, c.parent_values))

    walk(space_params)
    for pid, value in p.items():
        spec, parent = by_id[pid]
        vs = spec.value_spec
        if isinstance(vs, DoubleValueSpec):
            assert type(value) is float and vs.min_value <= value <= vs.max_value
        elif isinstance(vs, IntegerValueSpec):
            assert type(value) is int and vs.min_value <= value <= vs.max_value
        elif isinstance(vs, DiscreteValueSpec):
            assert type(value) is float and value in vs.values
        else:
            assert type(value) is str and value in vs.values
        if parent is not None:
            assert p[parent[0]] in parent[1], f"{pid} present while {parent[0]}={p[parent[0]]}"
    # every active parameter present
    for pid, (_spec, parent) in by_id.items():
        if parent is None or (parent[0] in p and p[parent[0]] in parent[1]):
            assert pid in p, f"active parameter {pid} missing from {p}"
    json.dumps(p)  # plain Python types only

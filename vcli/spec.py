"""The vcli data model: Vertex AI's training and study types as frozen dataclasses.

Standard library only. Python uses snake_case; `vcli.codec` is the only place that
translates to and from Vertex's camelCase YAML/JSON. Enum values are Vertex's strings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Mapping, Union

#: Environment variables whose names end with one of these are secrets: never printed.
SECRET_SUFFIXES = ("_SECRET", "_TOKEN", "_PASSWORD", "_KEY")
SECRET_PREFIX = "VCLI_SECRET_"


def is_secret(name: str, extra: tuple[str, ...] | list[str] = ()) -> bool:
    """Documented rule: names starting with VCLI_SECRET_ or ending _SECRET/_TOKEN/_PASSWORD/_KEY."""
    return name in extra or name.startswith(SECRET_PREFIX) or name.upper().endswith(SECRET_SUFFIXES)


# --------------------------------------------------------------------------- enums


class JobState(str, Enum):
    """Vertex `JobState`, shared by CustomJob and HyperparameterTuningJob."""

    JOB_STATE_QUEUED = "JOB_STATE_QUEUED"
    JOB_STATE_PENDING = "JOB_STATE_PENDING"
    JOB_STATE_RUNNING = "JOB_STATE_RUNNING"
    JOB_STATE_SUCCEEDED = "JOB_STATE_SUCCEEDED"
    JOB_STATE_FAILED = "JOB_STATE_FAILED"
    JOB_STATE_CANCELLING = "JOB_STATE_CANCELLING"
    JOB_STATE_CANCELLED = "JOB_STATE_CANCELLED"

    def is_final(self) -> bool:
        return self in _FINAL_JOB_STATES


_FINAL_JOB_STATES = frozenset(
    {JobState.JOB_STATE_SUCCEEDED, JobState.JOB_STATE_FAILED, JobState.JOB_STATE_CANCELLED}
)


class TrialState(str, Enum):
    """Vertex `Trial.State`. There is no FAILED: a trial without a metric is INFEASIBLE."""

    REQUESTED = "REQUESTED"
    ACTIVE = "ACTIVE"
    STOPPING = "STOPPING"
    SUCCEEDED = "SUCCEEDED"
    INFEASIBLE = "INFEASIBLE"

    def is_final(self) -> bool:
        return self in (TrialState.SUCCEEDED, TrialState.INFEASIBLE)


class ReplicaState(str, Enum):
    """One replica's life as the store records it (Vertex has no replica resource; vcli's own)."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    #: Stopped by vcli (a sibling failed, the job was cancelled or timed out).
    STOPPED = "STOPPED"
    #: Never started (the job ended before its turn).
    NOT_STARTED = "NOT_STARTED"


class JobKind(str, Enum):
    """The two Vertex resources vcli stores; the value is the resource collection's singular."""

    CUSTOM_JOB = "customJob"
    HYPERPARAMETER_TUNING_JOB = "hyperparameterTuningJob"


class ExecutorKind(str, Enum):
    """What runs replicas (`--executor`): child processes, local containers, SSH hosts."""

    LOCAL = "local"
    DOCKER = "docker"
    SSH = "ssh"


class StudyEvent(str, Enum):
    """What a study controller tells its view (`on_event(event, trial)`)."""

    TRIAL_STARTED = "started"
    #: A running trial reported a new intermediate measurement.
    TRIAL_MEASUREMENT = "measurement"
    TRIAL_STOPPING = "stopping"
    TRIAL_FINISHED = "finished"
    #: The study ended; the trial passed along is the best one (or None).
    STUDY_FINISHED = "study-finished"


class Goal(str, Enum):
    MAXIMIZE = "MAXIMIZE"
    MINIMIZE = "MINIMIZE"


class ScaleType(str, Enum):
    SCALE_TYPE_UNSPECIFIED = "SCALE_TYPE_UNSPECIFIED"
    UNIT_LINEAR_SCALE = "UNIT_LINEAR_SCALE"
    UNIT_LOG_SCALE = "UNIT_LOG_SCALE"
    UNIT_REVERSE_LOG_SCALE = "UNIT_REVERSE_LOG_SCALE"


class Algorithm(str, Enum):
    ALGORITHM_UNSPECIFIED = "ALGORITHM_UNSPECIFIED"  # Vertex's default: Bayesian optimisation
    GRID_SEARCH = "GRID_SEARCH"
    RANDOM_SEARCH = "RANDOM_SEARCH"


class MeasurementSelectionType(str, Enum):
    MEASUREMENT_SELECTION_TYPE_UNSPECIFIED = "MEASUREMENT_SELECTION_TYPE_UNSPECIFIED"  # = LAST
    LAST_MEASUREMENT = "LAST_MEASUREMENT"
    BEST_MEASUREMENT = "BEST_MEASUREMENT"


#: Vertex `MachineSpec.acceleratorType` names accepted by `--worker-pool-spec` (v1, gcloud 578).
ACCELERATOR_TYPES: tuple[str, ...] = (
    "NVIDIA_A100_80GB",
    "NVIDIA_B200",
    "NVIDIA_GB200",
    "NVIDIA_H100_80GB",
    "NVIDIA_H100_MEGA_80GB",
    "NVIDIA_H200_141GB",
    "NVIDIA_L4",
    "NVIDIA_RTX_PRO_6000",
    "NVIDIA_TESLA_A100",
    "NVIDIA_TESLA_K80",
    "NVIDIA_TESLA_P100",
    "NVIDIA_TESLA_P4",
    "NVIDIA_TESLA_T4",
    "NVIDIA_TESLA_V100",
    "TPU_V2",
    "TPU_V3",
    "TPU_V4_POD",
    "TPU_V5_LITEPOD",
)

#: Vertex's positional meaning of workerPoolSpecs[i] -> TF task type.
POOL_TASK_TYPES: tuple[str, ...] = ("chief", "worker", "ps", "evaluator")

# --------------------------------------------------------------------------- job specs


@dataclass(frozen=True, kw_only=True)
class EnvVar:
    name: str
    value: str


@dataclass(frozen=True, kw_only=True)
class MachineSpec:
    machine_type: str = ""
    accelerator_type: str | None = None
    accelerator_count: int = 0


@dataclass(frozen=True, kw_only=True)
class DiskSpec:
    boot_disk_type: str = "pd-ssd"
    boot_disk_size_gb: int = 100


@dataclass(frozen=True, kw_only=True)
class ContainerSpec:
    image_uri: str = ""
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    env: tuple[EnvVar, ...] = ()


@dataclass(frozen=True, kw_only=True)
class PythonPackageSpec:
    executor_image_uri: str = ""
    package_uris: tuple[str, ...] = ()
    python_module: str = ""
    args: tuple[str, ...] = ()
    env: tuple[EnvVar, ...] = ()


@dataclass(frozen=True, kw_only=True)
class LocalPackage:
    """vcli's record of gcloud's autopackaging keys (`local-package-path`, `script`, ...).

    gcloud turns these into a built image; vcli keeps them so the process executor can run
    the code in place and the Docker executor can build the image itself.
    """

    path: str
    executor_image_uri: str | None = None
    python_module: str | None = None
    script: str | None = None
    requirements: tuple[str, ...] = ()
    extra_packages: tuple[str, ...] = ()
    extra_dirs: tuple[str, ...] = ()
    output_image_uri: str | None = None


@dataclass(frozen=True, kw_only=True)
class WorkerPoolSpec:
    """One worker pool. An empty pool (a placeholder for pools 1-3) has replica_count 0."""

    machine_spec: MachineSpec = field(default_factory=MachineSpec)
    replica_count: int = 0
    disk_spec: DiskSpec | None = None
    container_spec: ContainerSpec | None = None
    python_package_spec: PythonPackageSpec | None = None
    local_package: LocalPackage | None = None

    @property
    def is_empty(self) -> bool:
        return self.replica_count == 0 and self.container_spec is None and self.python_package_spec is None


@dataclass(frozen=True, kw_only=True)
class Scheduling:
    timeout_seconds: float | None = None
    restart_job_on_worker_restart: bool = False
    disable_retries: bool = False
    strategy: str | None = None


@dataclass(frozen=True, kw_only=True)
class CustomJobSpec:
    worker_pool_specs: tuple[WorkerPoolSpec, ...]
    base_output_directory: str | None = None
    scheduling: Scheduling | None = None
    service_account: str | None = None
    network: str | None = None
    enable_web_access: bool = False
    enable_dashboard_access: bool = False
    persistent_resource_id: str | None = None
    tensorboard: str | None = None
    experiment: str | None = None
    experiment_run: str | None = None


# --------------------------------------------------------------------------- study specs


@dataclass(frozen=True, kw_only=True)
class MetricSpec:
    metric_id: str
    goal: Goal


@dataclass(frozen=True, kw_only=True)
class DoubleValueSpec:
    min_value: float
    max_value: float
    default_value: float | None = None


@dataclass(frozen=True, kw_only=True)
class IntegerValueSpec:
    min_value: int
    max_value: int
    default_value: int | None = None


@dataclass(frozen=True, kw_only=True)
class CategoricalValueSpec:
    values: tuple[str, ...]
    default_value: str | None = None


@dataclass(frozen=True, kw_only=True)
class DiscreteValueSpec:
    values: tuple[float, ...]
    default_value: float | None = None


ValueSpec = Union[DoubleValueSpec, IntegerValueSpec, CategoricalValueSpec, DiscreteValueSpec]
ParameterValue = Union[float, int, str]


@dataclass(frozen=True, kw_only=True)
class ConditionalParameterSpec:
    """A child parameter, active only when its parent takes one of `parent_values`."""

    parameter_spec: ParameterSpec
    parent_values: tuple[ParameterValue, ...]


@dataclass(frozen=True, kw_only=True)
class ParameterSpec:
    parameter_id: str
    value_spec: ValueSpec
    scale_type: ScaleType = ScaleType.SCALE_TYPE_UNSPECIFIED
    conditional_parameter_specs: tuple[ConditionalParameterSpec, ...] = ()


@dataclass(frozen=True, kw_only=True)
class StudySpec:
    metrics: tuple[MetricSpec, ...]
    parameters: tuple[ParameterSpec, ...]
    algorithm: Algorithm = Algorithm.ALGORITHM_UNSPECIFIED
    measurement_selection_type: MeasurementSelectionType = (
        MeasurementSelectionType.MEASUREMENT_SELECTION_TYPE_UNSPECIFIED
    )


@dataclass(frozen=True, kw_only=True)
class HyperparameterTuningJobSpec:
    """The user's inputs of a Vertex `HyperparameterTuningJob` plus vcli's study limits."""

    study_spec: StudySpec
    trial_job_spec: CustomJobSpec
    max_trial_count: int = 1
    parallel_trial_count: int = 1
    max_failed_trial_count: int = 0
    #: vcli extension: wall-clock budget of the whole study, seconds (None = unlimited).
    study_timeout_seconds: float | None = None
    #: vcli extension: stop the study once a trial's final metric reaches this value.
    goal_value: float | None = None
    seed: int | None = None


# --------------------------------------------------------------------------- runtime records


@dataclass(frozen=True, kw_only=True)
class Measurement:
    step_count: int
    metrics: Mapping[str, float]
    elapsed_seconds: float | None = None


@dataclass(frozen=True, kw_only=True)
class TrialSuggestion:
    parameters: Mapping[str, ParameterValue]


@dataclass(frozen=True, kw_only=True)
class Trial:
    id: str
    parameters: Mapping[str, ParameterValue]
    state: TrialState = TrialState.REQUESTED
    final_measurement: Measurement | None = None
    measurements: tuple[Measurement, ...] = ()
    infeasible_reason: str | None = None
    custom_job: str | None = None
    start_time: str | None = None
    end_time: str | None = None


@dataclass(frozen=True, kw_only=True)
class ReplicaId:
    """One replica: `workerpool{pool_index}-{index}`; task_type is the TF name of its pool."""

    pool_index: int
    index: int

    @property
    def task_name(self) -> str:
        return f"workerpool{self.pool_index}-{self.index}"

    @property
    def task_type(self) -> str:
        return POOL_TASK_TYPES[self.pool_index]

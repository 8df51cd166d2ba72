"""The vcli data model: Vertex AI's training and study types as frozen dataclasses.

Standard library only. Python uses snake_case; `vcli.codec` is the only place that
translates to and from Vertex's camelCase YAML/JSON. Enum values are Vertex's strings.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Annotated, Any, ClassVar, Mapping, Sequence, Union

# The model's enums live in `vcli.enums` (cheap for the CLI's start-up) and are re-exported here.
from vcli.enums import (  # noqa: F401
    Algorithm,
    ExecutorKind,
    FailureClass,
    Goal,
    JobKind,
    JobState,
    MeasurementSelectionType,
    ReplicaState,
    RpcCode,
    ScaleType,
    StudyEvent,
    TrialState,
)

#: Environment variables whose names end with one of these are secrets: never printed.
SECRET_SUFFIXES = ("_SECRET", "_TOKEN", "_PASSWORD", "_KEY")
SECRET_PREFIX = "VCLI_SECRET_"


def is_secret(name: str, extra: tuple[str, ...] | list[str] = ()) -> bool:
    """Documented rule: names starting with VCLI_SECRET_ or ending _SECRET/_TOKEN/_PASSWORD/_KEY."""
    return name in extra or name.startswith(SECRET_PREFIX) or name.upper().endswith(SECRET_SUFFIXES)


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

#: What names Vertex's Reduction Server image (`us-docker.pkg.dev/vertex-ai-training/reductionserver:latest`).
REDUCTION_SERVER_IMAGE = "/reductionserver"

#: Vertex's positional meaning of workerPoolSpecs[i] -> TF task type.
POOL_TASK_TYPES: tuple[str, ...] = ("chief", "worker", "ps", "evaluator")

# --------------------------------------------------------------------------- Vertex wire facts


@dataclass(frozen=True)
class Vertex:
    """What `vcli.codec` needs to know about a field beyond its name and type hint.

    The rule (`vcli.codec.schema`): field `foo_bar` is Vertex's `fooBar`; `str`, `int` (int32),
    `float` (double), `bool`, an Enum (by value), `tuple[X, ...]` (a list), `X | None`, a
    dataclass (a message) and a Union of dataclasses (a oneof, each member named after its class)
    map without help. Only the exceptions carry a `Vertex`, via `field(metadata=vertex(...))`
    or, for a field vcli accepts but does not model (`VERTEX_UNMODELED`), `Annotated[type, Vertex(...)]`.
    """

    #: Vertex's name when it is not the camelCase of the field's.
    name: str | None = None
    #: An int64: a JSON string on output; numeric strings are accepted on input.
    int64: bool = False
    #: A google.protobuf.Duration (`8000s`) held as seconds.
    duration: bool = False
    #: vcli: an int32 that may be a fraction (`accelerator-count=0.25`: a share of a GPU; Ray's, or a host's
    #: lease policy's `gpu_sharing`).
    fractional: bool = False
    #: A str that Vertex types as an enum: the accepted names, in Vertex's order.
    choices: tuple[str, ...] = ()
    #: The value sits alone in a message: "Message.field" (e.g. GcsDestination.outputUriPrefix).
    wrapper: str | None = None
    #: Shown on output even when zero or empty (only None leaves it out); implied for a
    #: required field (one without a default).
    keep_zero: bool = False
    #: vcli's own field: not part of the Vertex message (a flag sets it).
    vcli_only: bool = False
    #: The value travels as one of these (Vertex name, message) pairs; the codec picks which.
    oneof: tuple[tuple[str, type], ...] = ()


def vertex(**facts: Any) -> dict[str, Vertex]:
    """`field(metadata=vertex(int64=True))`: the metadata entry `vcli.codec` reads."""
    return {"vertex": Vertex(**facts)}


# --------------------------------------------------------------------------- job specs


@dataclass(frozen=True, kw_only=True)
class EnvVar:
    name: str
    value: str


@dataclass(frozen=True, kw_only=True)
class MachineSpec:
    VERTEX_UNMODELED: ClassVar[Mapping[str, Any]] = {
        "gpuPartitionSize": str,
        "tpuTopology": str,
        "reservationAffinity": Any,
        "multihostGpuNodeCount": int,
    }

    machine_type: str = ""
    accelerator_type: str | None = field(
        default=None, metadata=vertex(choices=("ACCELERATOR_TYPE_UNSPECIFIED",) + ACCELERATOR_TYPES)
    )
    accelerator_count: float = field(default=0, metadata=vertex(fractional=True))


@dataclass(frozen=True, kw_only=True)
class DiskSpec:
    boot_disk_type: str = field(default="pd-ssd", metadata=vertex(keep_zero=True))
    boot_disk_size_gb: int = field(default=100, metadata=vertex(keep_zero=True))


@dataclass(frozen=True, kw_only=True)
class ContainerSpec:
    image_uri: str = ""
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    env: tuple[EnvVar, ...] = ()


@dataclass(frozen=True, kw_only=True)
class PythonPackageSpec:
    executor_image_uri: str = field(default="", metadata=vertex(keep_zero=True))
    python_module: str = field(default="", metadata=vertex(keep_zero=True))
    package_uris: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    env: tuple[EnvVar, ...] = ()


@dataclass(frozen=True, kw_only=True)
class LocalPackage:
    """vcli's record of gcloud's autopackaging keys (`local-package-path`, `script`, ...).

    gcloud turns these into a built image; vcli keeps them so the process executor can run
    the code in place and the Docker executor can build the image itself."""

    path: str
    executor_image_uri: str | None = None
    python_module: str | None = None
    script: str | None = None
    output_image_uri: str | None = None
    requirements: tuple[str, ...] = ()
    extra_packages: tuple[str, ...] = ()
    extra_dirs: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class WorkerPoolSpec:
    """One worker pool. An empty pool (a placeholder for pools 1-3) has replica_count 0."""

    VERTEX_UNMODELED: ClassVar[Mapping[str, Any]] = {"nfsMounts": tuple[Any, ...], "lustreMounts": tuple[Any, ...]}

    machine_spec: MachineSpec = field(default_factory=MachineSpec)
    replica_count: int = field(default=0, metadata=vertex(int64=True))
    disk_spec: DiskSpec | None = None
    container_spec: ContainerSpec | None = None
    python_package_spec: PythonPackageSpec | None = None
    #: vcli extension: gcloud's autopackaging keys for pool 0, kept instead of a built image.
    local_package: LocalPackage | None = None

    @property
    def is_empty(self) -> bool:
        return self.replica_count == 0 and self.container_spec is None and self.python_package_spec is None

    @property
    def is_reduction_server(self) -> bool:
        """Does this pool run Vertex's Reduction Server image (its own entrypoint)? Such a
        pool only speeds up the GPU workers' all-reduce through Google's NCCL plugin; it holds
        no training code, so vcli does not start it (see `vcli.cluster.replica_ids`)."""
        cs = self.container_spec
        return cs is not None and REDUCTION_SERVER_IMAGE in cs.image_uri and not cs.command


@dataclass(frozen=True, kw_only=True)
class Scheduling:
    timeout_seconds: float | None = field(default=None, metadata=vertex(name="timeout", duration=True, keep_zero=True))
    #: How long the job may wait for its resources (trials waiting for GPUs); recorded.
    max_wait_seconds: float | None = field(default=None, metadata=vertex(name="maxWaitDuration", duration=True))
    restart_job_on_worker_restart: bool = False
    disable_retries: bool = False
    strategy: str | None = field(
        default=None, metadata=vertex(choices=("STRATEGY_UNSPECIFIED", "ON_DEMAND", "LOW_COST", "STANDARD", "SPOT", "FLEX_START"))
    )

    #: Vertex's default wait of a FLEX_START job for its resources.
    FLEX_START_WAIT_SECONDS: ClassVar[float] = 24 * 3600.0

    @property
    def wait_limit_seconds(self) -> float | None:
        """How long the job may wait for its resources (every replica placed at once), None for
        ever: `maxWaitDuration`, 0 meaning for ever as on Vertex; FLEX_START's default 24 h."""
        limit = self.max_wait_seconds
        if limit is None and self.strategy == "FLEX_START":
            return self.FLEX_START_WAIT_SECONDS
        return None if limit == 0 else limit


@dataclass(frozen=True, kw_only=True)
class CustomJobSpec:
    VERTEX_UNMODELED: ClassVar[Mapping[str, Any]] = {
        "reservedIpRanges": tuple[str, ...],
        "protectedArtifactLocationId": str,
        "models": tuple[str, ...],
        "pscInterfaceConfig": Any,
    }

    # Field order is the order of the keys in the REST shape (CLUSTER_SPEC's `job` keeps it).
    worker_pool_specs: tuple[WorkerPoolSpec, ...]
    #: A local directory (Vertex: a GcsDestination; vcli accepts paths and file:// URIs).
    base_output_directory: str | None = field(default=None, metadata=vertex(wrapper="GcsDestination.outputUriPrefix"))
    scheduling: Scheduling | None = None
    service_account: str | None = None
    network: str | None = None
    persistent_resource_id: str | None = None
    tensorboard: str | None = None
    experiment: str | None = None
    experiment_run: str | None = None
    enable_web_access: bool = False
    enable_dashboard_access: bool = False


# --------------------------------------------------------------------------- study specs


@dataclass(frozen=True, kw_only=True)
class SafetyMetricConfig:
    """Safe search: the metric that holds it is a constraint, not an objective. A trial is
    safe when its value is on the good side of `safety_threshold` for the metric's goal (at
    least it for MAXIMIZE, at most it for MINIMIZE); `desired_min_safe_trials_fraction` is the
    fraction of trials the search aims to keep safe (0 or unset: no target, 1: safe ones only).
    Vertex lets the threshold be unset; vcli requires it (`vcli.codec.study`)."""

    safety_threshold: float | None = field(default=None, metadata=vertex(keep_zero=True))
    desired_min_safe_trials_fraction: float | None = field(default=None, metadata=vertex(keep_zero=True))


@dataclass(frozen=True, kw_only=True)
class MetricSpec:
    metric_id: str
    #: Vertex's GOAL_TYPE_UNSPECIFIED is read as MAXIMIZE.
    goal: Goal = field(metadata=vertex(choices=("GOAL_TYPE_UNSPECIFIED", "MAXIMIZE", "MINIMIZE")))
    #: Set: a safety metric (a constraint of safe search), never an objective.
    safety_config: SafetyMetricConfig | None = None

    def is_safe(self, value: float) -> bool:
        """Is `value` of this safety metric on the good side of its threshold (`SafetyMetricConfig`)?"""
        threshold = self.safety_config.safety_threshold if self.safety_config is not None else None
        return threshold is not None and value == value and self.goal.sign * (value - threshold) >= 0


@dataclass(frozen=True, kw_only=True)
class DoubleValueSpec:
    min_value: float
    max_value: float
    default_value: float | None = field(default=None, metadata=vertex(keep_zero=True))


@dataclass(frozen=True, kw_only=True)
class IntegerValueSpec:
    min_value: int = field(metadata=vertex(int64=True))
    max_value: int = field(metadata=vertex(int64=True))
    default_value: int | None = field(default=None, metadata=vertex(int64=True, keep_zero=True))


@dataclass(frozen=True, kw_only=True)
class CategoricalValueSpec:
    values: tuple[str, ...]
    default_value: str | None = field(default=None, metadata=vertex(keep_zero=True))


@dataclass(frozen=True, kw_only=True)
class DiscreteValueSpec:
    values: tuple[float, ...]
    default_value: float | None = field(default=None, metadata=vertex(keep_zero=True))


ValueSpec = Union[DoubleValueSpec, IntegerValueSpec, CategoricalValueSpec, DiscreteValueSpec]
ParameterValue = Union[float, int, str]


# Wire shapes only: Vertex wraps a child's parent values in one of these, by the parent's type;
# vcli keeps the values in ConditionalParameterSpec.parent_values.
@dataclass(frozen=True, kw_only=True)
class DiscreteValueCondition:
    values: tuple[float, ...] = ()


@dataclass(frozen=True, kw_only=True)
class IntValueCondition:
    values: tuple[int, ...] = field(default=(), metadata=vertex(int64=True))


@dataclass(frozen=True, kw_only=True)
class CategoricalValueCondition:
    values: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class ConditionalParameterSpec:
    """A child parameter, active only when its parent takes one of `parent_values`."""

    parameter_spec: ParameterSpec
    parent_values: tuple[ParameterValue, ...] = field(
        metadata=vertex(
            oneof=(
                ("parentDiscreteValues", DiscreteValueCondition),
                ("parentIntValues", IntValueCondition),
                ("parentCategoricalValues", CategoricalValueCondition),
            )
        )
    )


@dataclass(frozen=True, kw_only=True)
class ParameterSpec:
    parameter_id: str
    value_spec: ValueSpec
    scale_type: ScaleType = ScaleType.SCALE_TYPE_UNSPECIFIED
    conditional_parameter_specs: tuple[ConditionalParameterSpec, ...] = ()


# Automated early stopping (Vertex's oneof, plus vcli's ASHA and Hyperband; rules in `vcli.tuning.stopping`).


@dataclass(frozen=True, kw_only=True)
class MedianAutomatedStoppingSpec:
    """Stop a trial whose best value so far is worse than the median of the other trials'
    running averages at the same step."""

    use_elapsed_duration: bool = False


@dataclass(frozen=True, kw_only=True)
class DecayCurveAutomatedStoppingSpec:
    """Stop a trial whose predicted final value (its learning curve extrapolated, as fitted on
    completed trials) cannot beat the best trial so far."""

    VERTEX_NAME: ClassVar[str] = "DecayCurveStoppingSpec"
    use_elapsed_duration: bool = False


@dataclass(frozen=True, kw_only=True)
class ConvexAutomatedStoppingSpec:
    """Vertex's convex rule: stop a trial whose optimistic (convex) extrapolation to
    `max_step_count` cannot beat the best trial; judged from `min_step_count` on."""

    max_step_count: int | None = field(default=None, metadata=vertex(int64=True))
    min_step_count: int | None = field(default=None, metadata=vertex(int64=True))
    min_measurement_count: int | None = field(default=None, metadata=vertex(int64=True))
    learning_rate_parameter_name: str | None = None
    use_elapsed_duration: bool = False
    update_all_stopped_trials: bool | None = None


@dataclass(frozen=True, kw_only=True)
class AshaStoppingSpec:
    """vcli extension: asynchronous successive halving. Rungs at `min_step_count *
    reduction_factor**k` steps (below `max_step_count` when given); a trial reaching a rung
    continues only if it is in the top 1/reduction_factor of the trials that reached it."""

    reduction_factor: int = 3
    min_step_count: int = 1
    max_step_count: int | None = None
    use_elapsed_duration: bool = False


@dataclass(frozen=True, kw_only=True)
class HyperbandStoppingSpec:
    """vcli extension: Hyperband as brackets of ASHA with growing minimum step counts; each
    trial is assigned to one bracket (deterministically, by trial id)."""

    reduction_factor: int = 3
    min_step_count: int = 1
    max_step_count: int = 0
    use_elapsed_duration: bool = False


AutomatedStoppingSpec = Union[
    MedianAutomatedStoppingSpec,
    DecayCurveAutomatedStoppingSpec,
    ConvexAutomatedStoppingSpec,
    AshaStoppingSpec,
    HyperbandStoppingSpec,
]


@dataclass(frozen=True, kw_only=True)
class PopulationBasedTrainingSpec:
    """vcli extension (`studySpec.populationBasedTrainingSpec`), with `algorithm:
    POPULATION_BASED_TRAINING`. `population_size` members train at once; every
    `perturbation_interval_steps` reported steps a member in the bottom `quantile_fraction`
    of the population is replaced by a new trial that starts from a copy of a top-quantile
    member's latest checkpoint, with that member's hyperparameters explored: resampled with
    `resample_probability`, else perturbed by one of `perturbation_factors` (numbers) or moved
    to a neighbouring value (discrete, categorical). Members train to `max_step_count`."""

    population_size: int = 4
    perturbation_interval_steps: int = 1
    quantile_fraction: float = 0.25
    resample_probability: float = 0.25
    perturbation_factors: tuple[float, ...] = (0.8, 1.2)
    max_step_count: int = field(default=0, metadata=vertex(int64=True, keep_zero=True))


@dataclass(frozen=True, kw_only=True)
class StudySpec:
    VERTEX_UNMODELED: ClassVar[Mapping[str, Any]] = {
        "observationNoise": Annotated[str, Vertex(choices=("OBSERVATION_NOISE_UNSPECIFIED", "LOW", "HIGH"))],
        "convexStopConfig": Any,
        "studyStoppingConfig": Any,
    }

    metrics: tuple[MetricSpec, ...]
    parameters: tuple[ParameterSpec, ...]
    algorithm: Algorithm = field(default=Algorithm.ALGORITHM_UNSPECIFIED, metadata=vertex(keep_zero=True))
    measurement_selection_type: MeasurementSelectionType = field(
        default=MeasurementSelectionType.MEASUREMENT_SELECTION_TYPE_UNSPECIFIED, metadata=vertex(keep_zero=True)
    )
    automated_stopping_spec: AutomatedStoppingSpec | None = None
    population_based_training_spec: PopulationBasedTrainingSpec | None = None
    #: Not a key of its own: the entries of `metrics` that have a `safetyConfig` (safe search),
    #: constraints every trial reports beside the objectives. vcli keeps them apart from the
    #: objectives and shows them as entries of `metrics`, after the objectives.
    safety_metrics: tuple[MetricSpec, ...] = field(default=(), metadata=vertex(vcli_only=True))


@dataclass(frozen=True, kw_only=True)
class EncryptionSpec:
    """Wire shape only: accepted in a HyperparameterTuningJob, not used (nothing is encrypted)."""

    kms_key_name: str = ""


@dataclass(frozen=True, kw_only=True)
class HyperparameterTuningJobSpec:
    """The user's inputs of a Vertex `HyperparameterTuningJob` plus vcli's study limits."""

    VERTEX_NAME: ClassVar[str] = "HyperparameterTuningJob"
    # displayName and labels are returned beside the spec (they belong to the stored record).
    VERTEX_UNMODELED: ClassVar[Mapping[str, Any]] = {
        "displayName": str,
        "labels": Mapping[str, str],
        "encryptionSpec": EncryptionSpec,
    }

    study_spec: StudySpec
    trial_job_spec: CustomJobSpec
    # Shown even at 0: the stored record and `describe` always list the study's limits.
    max_trial_count: int = field(default=1, metadata=vertex(keep_zero=True))
    parallel_trial_count: int = field(default=1, metadata=vertex(keep_zero=True))
    max_failed_trial_count: int = field(default=0, metadata=vertex(keep_zero=True))
    #: vcli extension: wall-clock budget of the whole study, seconds (None = unlimited).
    study_timeout_seconds: float | None = field(default=None, metadata=vertex(vcli_only=True))
    #: vcli extension: stop the study once a trial's final metric reaches this value.
    goal_value: float | None = field(default=None, metadata=vertex(vcli_only=True))
    seed: int | None = field(default=None, metadata=vertex(vcli_only=True))


# --------------------------------------------------------------------------- runtime records


@dataclass(frozen=True, kw_only=True)
class Measurement:
    step_count: int
    metrics: Mapping[str, float]
    elapsed_seconds: float | None = None


@dataclass(frozen=True, kw_only=True)
class TrialSuggestion:
    parameters: Mapping[str, ParameterValue]
    #: vcli: where a suggestion that is not the model's answer to the study as it stands came
    #: from (`vcli.control.suggesting`): "model-ahead" or "random-fallback"; None otherwise.
    suggested_by: str | None = None


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
    #: vcli: why the study stopped this trial before it ended by itself (an early-stopping
    #: rule, the goal value, the study's time budget, a cancel).
    stop_reason: str | None = None
    #: vcli: the early-stopping rule that stopped it ("median", "asha", ...), if one did.
    early_stopping_rule: str | None = None
    #: vcli, Population Based Training: where this trial came from.
    lineage: PbtLineage | None = None
    #: vcli: `TrialSuggestion.suggested_by` of the suggestion the trial runs, if it had one.
    suggested_by: str | None = None
    #: vcli: why an INFEASIBLE trial failed (`vcli.control.failures`); None when it did not fail.
    failure_class: FailureClass | None = None
    #: vcli: the trial whose parameters this one runs again (an INFRASTRUCTURE failure's retry).
    retry_of: str | None = None
    #: vcli, safe search (`StudySpec.safety_metrics`): False for a SUCCEEDED trial whose final
    #: measurement breaks a safety threshold (it stays SUCCEEDED but is never the study's best),
    #: True for one that meets them all; None without safety metrics or a final measurement.
    safe: bool | None = None


@dataclass(frozen=True, kw_only=True)
class PbtLineage:
    """A PBT trial's place in its population: `member` (0-based) is the population slot it
    trains in; an exploited trial also names the trial whose checkpoint it started from, that
    checkpoint's step, and the hyperparameters it inherited before exploring."""

    member: int
    parent_trial_id: str | None = None
    start_step: int = 0
    inherited_parameters: Mapping[str, ParameterValue] = field(default_factory=dict)


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


def iter_parameters(params: Sequence[ParameterSpec]) -> list[ParameterSpec]:
    """Every parameter, conditional children included, depth first."""
    out: list[ParameterSpec] = []
    for p in params:
        out.append(p)
        out.extend(iter_parameters([c.parameter_spec for c in p.conditional_parameter_specs]))
    return out


def secret_values(spec: CustomJobSpec) -> dict[str, str]:
    """The values of the spec's secret environment variables (which the store never holds)."""
    out: dict[str, str] = {}
    for pool in spec.worker_pool_specs:
        for holder in (pool.container_spec, pool.python_package_spec):
            for env in holder.env if holder is not None else ():
                if is_secret(env.name):
                    out[env.name] = env.value
    return out


def with_secret_values(spec: CustomJobSpec, values: Mapping[str, str]) -> CustomJobSpec:
    """`spec` with the redacted values of its secret variables put back."""

    def fill(holder: Any) -> Any:
        if holder is None:
            return None
        env = tuple(replace(e, value=values[e.name]) if e.name in values else e for e in holder.env)
        return replace(holder, env=env)

    pools = tuple(replace(p, container_spec=fill(p.container_spec), python_package_spec=fill(p.python_package_spec))
                  for p in spec.worker_pool_specs)
    return replace(spec, worker_pool_specs=pools)

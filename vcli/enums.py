"""The enumerations of vcli's data model: Vertex's (values are Vertex's strings) and vcli's own.

Standard library only, and cheap to import: the CLI's option types need them at start-up,
while `vcli.spec` (which re-exports them) defines dozens of dataclasses.
"""

from __future__ import annotations

from enum import Enum, IntEnum


class VertexEnum(str, Enum):
    """A string enumeration whose text is its value everywhere (`str`, f-strings, `%s`,
    JSON, SQLite), so a member can cross into records, messages and `--format` output as is."""

    def __str__(self) -> str:
        return str.__str__(self)

    def __format__(self, spec: str) -> str:
        return str.__format__(str.__str__(self), spec)


class JobState(VertexEnum):
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


class TrialState(VertexEnum):
    """Vertex `Trial.State`. There is no FAILED: a trial without a metric is INFEASIBLE."""

    REQUESTED = "REQUESTED"
    ACTIVE = "ACTIVE"
    STOPPING = "STOPPING"
    SUCCEEDED = "SUCCEEDED"
    INFEASIBLE = "INFEASIBLE"

    def is_final(self) -> bool:
        return self in (TrialState.SUCCEEDED, TrialState.INFEASIBLE)


class ReplicaState(VertexEnum):
    """One replica's life as the store records it (Vertex has no replica resource; vcli's own)."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    #: Stopped by vcli (a sibling failed, the job was cancelled or timed out).
    STOPPED = "STOPPED"
    #: Never started (the job ended before its turn).
    NOT_STARTED = "NOT_STARTED"

    def is_final(self) -> bool:
        """The replica has ended (or never will start): nothing of it runs."""
        return self in _FINAL_REPLICA_STATES


_FINAL_REPLICA_STATES = frozenset(
    {ReplicaState.SUCCEEDED, ReplicaState.FAILED, ReplicaState.STOPPED, ReplicaState.NOT_STARTED}
)


class FailureClass(VertexEnum):
    """vcli: why a trial or custom job failed (`vcli.control.failures` decides it)."""

    #: The trainer's own error: an exception, a non-zero exit, a crash of its own.
    USER = "USER"
    #: Out of memory (GPU or host) or out of disk space.
    RESOURCE = "RESOURCE"
    #: The host, container engine, node, network or controller was lost, or a signal vcli did
    #: not send killed a replica.
    INFRASTRUCTURE = "INFRASTRUCTURE"
    #: `scheduling.timeout` or `scheduling.maxWaitDuration` ran out.
    TIMEOUT = "TIMEOUT"


class JobKind(VertexEnum):
    """The two Vertex resources vcli stores; the value is the resource collection's singular."""

    CUSTOM_JOB = "customJob"
    HYPERPARAMETER_TUNING_JOB = "hyperparameterTuningJob"


class ExecutorKind(VertexEnum):
    """What runs replicas (`--executor`): child processes, local containers, SSH hosts, a Ray
    cluster, a Slurm cluster."""

    LOCAL = "local"
    DOCKER = "docker"
    SSH = "ssh"
    RAY = "ray"
    SLURM = "slurm"


class StudyEvent(VertexEnum):
    """The names of a study's events (`vcli.tuning.events.StudyListener` has a method for each)."""

    TRIAL_STARTED = "started"
    #: A running trial reported a new intermediate measurement.
    TRIAL_MEASUREMENT = "measurement"
    TRIAL_STOPPING = "stopping"
    TRIAL_FINISHED = "finished"
    #: The study ended; the trial passed along is the best one (or None).
    STUDY_FINISHED = "study-finished"


class Goal(VertexEnum):
    MAXIMIZE = "MAXIMIZE"
    MINIMIZE = "MINIMIZE"

    @property
    def sign(self) -> float:
        """+1 for MAXIMIZE, -1 for MINIMIZE: `sign * value` is higher when better."""
        return 1.0 if self is Goal.MAXIMIZE else -1.0


class ScaleType(VertexEnum):
    SCALE_TYPE_UNSPECIFIED = "SCALE_TYPE_UNSPECIFIED"
    UNIT_LINEAR_SCALE = "UNIT_LINEAR_SCALE"
    UNIT_LOG_SCALE = "UNIT_LOG_SCALE"
    UNIT_REVERSE_LOG_SCALE = "UNIT_REVERSE_LOG_SCALE"


class Algorithm(VertexEnum):
    ALGORITHM_UNSPECIFIED = "ALGORITHM_UNSPECIFIED"  # Vertex's default: Bayesian optimisation
    GRID_SEARCH = "GRID_SEARCH"
    RANDOM_SEARCH = "RANDOM_SEARCH"
    #: vcli extension: the Tree-structured Parzen Estimator (Hyperopt's and Optuna's default).
    TPE = "TPE"
    #: vcli extension: Population Based Training (`StudySpec.population_based_training_spec`).
    POPULATION_BASED_TRAINING = "POPULATION_BASED_TRAINING"

    def flag_word(self) -> str:
        """gcloud's `--algorithm` spelling: `grid-search` for GRID_SEARCH."""
        return self.value.lower().replace("_", "-")


class MeasurementSelectionType(VertexEnum):
    MEASUREMENT_SELECTION_TYPE_UNSPECIFIED = "MEASUREMENT_SELECTION_TYPE_UNSPECIFIED"  # = LAST
    LAST_MEASUREMENT = "LAST_MEASUREMENT"
    BEST_MEASUREMENT = "BEST_MEASUREMENT"


class RpcCode(IntEnum):
    """`google.rpc.Code`: the `error.code` of a job or study that did not succeed, as Vertex
    records it (only the codes vcli uses)."""

    CANCELLED = 1
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    PERMISSION_DENIED = 7
    FAILED_PRECONDITION = 9
    INTERNAL = 13

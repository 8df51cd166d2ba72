"""The enumerations of vcli's data model: Vertex's (values are Vertex's strings) and vcli's own.

Standard library only, and cheap to import: the CLI's option types need them at start-up,
while `vcli.spec` (which re-exports them) defines dozens of dataclasses.
"""

from __future__ import annotations

from enum import Enum


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
    """What runs replicas (`--executor`): child processes, local containers, SSH hosts, a Ray cluster."""

    LOCAL = "local"
    DOCKER = "docker"
    SSH = "ssh"
    RAY = "ray"


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

    @property
    def sign(self) -> float:
        """+1 for MAXIMIZE, -1 for MINIMIZE: `sign * value` is higher when better."""
        return 1.0 if self is Goal.MAXIMIZE else -1.0


class ScaleType(str, Enum):
    SCALE_TYPE_UNSPECIFIED = "SCALE_TYPE_UNSPECIFIED"
    UNIT_LINEAR_SCALE = "UNIT_LINEAR_SCALE"
    UNIT_LOG_SCALE = "UNIT_LOG_SCALE"
    UNIT_REVERSE_LOG_SCALE = "UNIT_REVERSE_LOG_SCALE"


class Algorithm(str, Enum):
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


class MeasurementSelectionType(str, Enum):
    MEASUREMENT_SELECTION_TYPE_UNSPECIFIED = "MEASUREMENT_SELECTION_TYPE_UNSPECIFIED"  # = LAST
    LAST_MEASUREMENT = "LAST_MEASUREMENT"
    BEST_MEASUREMENT = "BEST_MEASUREMENT"

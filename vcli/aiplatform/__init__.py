"""The part of `google.cloud.aiplatform` that notebooks use for custom training and tuning,
run on this machine by vcli: change the import, keep the code.

    from vcli import aiplatform                      # was: from google.cloud import aiplatform
    from vcli.aiplatform import hyperparameter_tuning as hpt

    aiplatform.init(project="my-project", location="us-central1", staging_bucket="gs://my-bucket")
    job = aiplatform.CustomJob(display_name="train", worker_pool_specs=[...])
    job.run()

Names and arguments are Vertex's: `init`, `CustomJob` (`from_local_script`, `run`, `submit`,
`wait`, `cancel`, `state`, `resource_name`), `HyperparameterTuningJob` (`run`, `trials`), both
with `get` and `list` (any process re-attaches to a job the CLI or another process created),
`CustomTrainingJob` and `CustomContainerTrainingJob` (`vcli.aiplatform.training_jobs`),
Experiments (`start_run`, `log_params`, `log_metrics`, `end_run`, `get_experiment_df`:
`vcli.aiplatform.experiments`), `hyperparameter_tuning.*ParameterSpec`, `gapic.JobState` and
`NotFound` (`vcli.aiplatform.exceptions`). Jobs go through vcli's own controllers
(`vcli.aiplatform.jobs`): `vcli custom-jobs list` and the dashboard show them.

Importing this package imports no heavy library (no TensorFlow, Docker, Ray or MLflow): the
controllers are imported when a job is submitted.
"""

from __future__ import annotations

from types import SimpleNamespace

from vcli.aiplatform import hyperparameter_tuning
from vcli.aiplatform.exceptions import NotFound
from vcli.aiplatform.experiments import (
    ExperimentRun,
    end_run,
    get_experiment_df,
    log_metrics,
    log_params,
    start_run,
)
from vcli.aiplatform.initializer import init
from vcli.aiplatform.jobs import CustomJob, HyperparameterTuningJob
from vcli.aiplatform.training_jobs import CustomContainerTrainingJob, CustomTrainingJob
from vcli.enums import JobState

#: `aiplatform.gapic.JobState.JOB_STATE_SUCCEEDED`, as Vertex's SDK spells it.
gapic = SimpleNamespace(JobState=JobState)

__all__ = ["CustomContainerTrainingJob", "CustomJob", "CustomTrainingJob", "ExperimentRun", "HyperparameterTuningJob",
           "JobState", "NotFound", "end_run", "gapic", "get_experiment_df", "hyperparameter_tuning", "init",
           "log_metrics", "log_params", "start_run"]

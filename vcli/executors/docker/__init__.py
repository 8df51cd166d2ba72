"""Replicas as containers of a Docker engine.

- `executor`: `DockerExecutor` (one container per replica, labelled with its job, trial and
  task; output streamed into the replica's log, secrets masked; exit status read back).
- `container`: what it sends the engine for a launch (`container_create_kwargs`): name,
  labels, bind mounts, entrypoint, GPUs.
- `output`: a container's log stream as timed lines, its state as a ReplicaStatus.
- `autopackage`: the image gcloud builds for a worker pool's `local-package-path`
  (Dockerfile recipe, build context, content hash, build).
- `engine`: connecting to the engine, one-line errors, finding or pulling images.

Importing this package does not import the Docker SDK; it is imported when an engine is used.
"""

from __future__ import annotations

from vcli.executors.docker.autopackage import AUTOGEN_REPOSITORY, autopackage_dockerfile
from vcli.executors.docker.container import (
    LABEL_JOB,
    LABEL_TASK,
    LABEL_TRIAL,
    container_create_kwargs,
    container_labels,
    container_name,
)
from vcli.executors.docker.engine import TRAINER_IMAGE
from vcli.executors.docker.executor import DockerExecutor, cleanup_job
from vcli.executors.docker.output import iter_log_lines, status_from_state

__all__ = [
    "AUTOGEN_REPOSITORY",
    "DockerExecutor",
    "LABEL_JOB",
    "LABEL_TASK",
    "LABEL_TRIAL",
    "TRAINER_IMAGE",
    "autopackage_dockerfile",
    "cleanup_job",
    "container_create_kwargs",
    "container_labels",
    "container_name",
    "iter_log_lines",
    "status_from_state",
]

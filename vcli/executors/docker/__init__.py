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

from typing import Any

#: Where each name lives: imported on first use, so that importing the package (its `kind`
#: module, the registry) imports no executor.
_WHERE = {
    "AUTOGEN_REPOSITORY": "vcli.executors.docker.autopackage",
    "DockerExecutor": "vcli.executors.docker.executor",
    "LABEL_JOB": "vcli.executors.docker.container",
    "LABEL_TASK": "vcli.executors.docker.container",
    "LABEL_TRIAL": "vcli.executors.docker.container",
    "TRAINER_IMAGE": "vcli.executors.docker.engine",
    "autopackage_dockerfile": "vcli.executors.docker.autopackage",
    "cleanup_job": "vcli.executors.docker.executor",
    "container_create_kwargs": "vcli.executors.docker.container",
    "container_labels": "vcli.executors.docker.container",
    "container_name": "vcli.executors.docker.container",
    "iter_log_lines": "vcli.executors.docker.output",
    "status_from_state": "vcli.executors.docker.output",
}

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


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(name)

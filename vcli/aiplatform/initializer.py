"""`aiplatform.init(...)`: settings every later job of this Python process uses, and the one
`Note:` line per argument that changes nothing on a local run.

Honoured: `project` and `location` (they name the resources: `resource_name`), `staging_bucket`
(the default output directory of a job: `<staging_bucket>/aiplatform-custom-job-<time>`, a gs://
URI mapped under `storage/gcs-root`), `experiment` (the MLflow experiment of jobs run with
tracking on, and the experiment of `start_run`'s runs) and the vcli extensions `tracking_uri` (as `--tracking-uri`) and `executor` (as
`--executor`). Everything else Vertex's `init` takes is accepted and named once.
"""

from __future__ import annotations

import sys
from typing import Any

#: The settings of `init`, read by the jobs (`vcli.aiplatform.jobs`).
config: dict[str, Any] = {"project": None, "location": None, "staging_bucket": None, "experiment": None,
                          "tracking_uri": None, "executor": None}

#: Argument names already named in a `Note:` line in this process.
_noted: set[str] = set()


def note_unused(where: str, **given: Any) -> None:
    """One `Note:` line on stderr naming the arguments given (not None, False or empty) that
    change nothing on a local run; each name only the first time in this process."""
    names = [name for name, value in given.items() if value not in (None, False, "", [], {}) and name not in _noted]
    if not names:
        return
    _noted.update(names)
    verb = "has" if len(names) == 1 else "have"
    sys.stderr.write(f"Note: vcli.aiplatform {where}: {', '.join(names)} {verb} no effect on local runs.\n")
    sys.stderr.flush()


def init(
    *,
    project: str | None = None,
    location: str | None = None,
    experiment: str | None = None,
    experiment_description: str | None = None,
    experiment_tensorboard: Any = None,
    staging_bucket: str | None = None,
    credentials: Any = None,
    encryption_spec_key_name: str | None = None,
    network: str | None = None,
    service_account: str | None = None,
    api_endpoint: str | None = None,
    api_key: str | None = None,
    api_transport: str | None = None,
    request_metadata: Any = None,
    tracking_uri: str | None = None,
    executor: str | None = None,
) -> None:
    """Set this process's defaults for the jobs it creates (Vertex's `aiplatform.init`).
    `location` is checked as the CLI's `--region` is (`local` or a region Vertex trains in):
    ValueError otherwise."""
    if location is not None:
        from vcli.codec.flags import check_region
        from vcli.errors import InvalidValueError

        if not isinstance(location, str):
            raise TypeError(f"location must be a string, not {type(location).__name__}")
        try:
            check_region(location)
        except InvalidValueError as e:  # mars-central1 was stored and printed in resource names
            raise ValueError(f"location: {e.message}") from None
    given = (("project", project), ("location", location), ("staging_bucket", staging_bucket),
             ("experiment", experiment), ("tracking_uri", tracking_uri), ("executor", executor))
    for name, value in given:  # checked here, not when a later job trips on them
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{name} must be a string, not {type(value).__name__}")
    for name, value in given:
        if value is not None:
            config[name] = value
    note_unused("init()", experiment_description=experiment_description, experiment_tensorboard=experiment_tensorboard,
                credentials=credentials, encryption_spec_key_name=encryption_spec_key_name, network=network,
                service_account=service_account, api_endpoint=api_endpoint, api_key=api_key, api_transport=api_transport,
                request_metadata=request_metadata)


def resource_name(collection: str, job_id: str) -> str:
    """`projects/P/locations/L/<collection>/<id>`, P and L from `init` (else `local`)."""
    return f"projects/{config['project'] or 'local'}/locations/{config['location'] or 'local'}/{collection}/{job_id}"

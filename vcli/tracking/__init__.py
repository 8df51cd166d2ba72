"""Experiment tracking: jobs and studies as MLflow runs (what Vertex Experiments autologging is).

Tracking is off unless a tracking URI is given, first found of: the `--tracking-uri` flag of
`create` (`--tracking-uri=off` turns it off), $MLFLOW_TRACKING_URI, `vcli config set
tracking/uri URI`. When off, nothing of MLflow is imported. The settings are decided once, at
`create`, and recorded in the job's record (`tracking`): `resume` and the detached runner of
`--async` use the recorded ones, whatever their shell says.

- A study is a parent run; each trial a nested child run (`vcli.tracking.study`). A custom job
  is one run (`vcli.tracking.job`). `jobSpec.experiment` / `experimentRun` (a Vertex resource
  name or a bare name; its last segment counts) name the MLflow experiment and run, else the
  job's display name does.
- The chief replica (workerpool0-0) gets MLFLOW_TRACKING_URI, MLFLOW_EXPERIMENT_NAME and
  MLFLOW_RUN_ID, so the trainer's `mlflow.log_metric` / `mlflow.autolog()` land in its
  trial's (or job's) run; other replicas get none of them (see `vcli.tracking.env`).
- Tracking never changes how a job or study ends (`vcli.tracking.sync`).

This module is light: it reads settings and imports nothing of MLflow.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any, Mapping, Sequence
from urllib.parse import urlsplit, urlunsplit

__all__ = ["OFF_WORDS", "display_uri", "effective_no_effect", "settings", "tracking_uri"]

#: `--tracking-uri` values that turn tracking off for one job (over the variable and property).
OFF_WORDS = ("off", "none", "")
#: The Vertex fields that become meaningful when tracking is on.
TRACKING_FIELDS = ("experiment", "experimentRun")


def tracking_uri(flag: str | None = None) -> str | None:
    """The tracking URI in force: the flag, else $MLFLOW_TRACKING_URI, else the `tracking/uri`
    property; None (tracking off) when none is set or the flag says `off`."""
    from vcli import properties

    if flag is not None:
        return None if flag.strip().lower() in OFF_WORDS else flag.strip()
    return os.environ.get("MLFLOW_TRACKING_URI") or properties.get("tracking/uri") or None


def _basename(resource: str | None) -> str | None:
    """`projects/p/locations/l/metadataStores/default/contexts/my-exp` -> `my-exp`."""
    if not resource:
        return None
    return resource.rstrip("/").rsplit("/", 1)[-1] or None


def settings(flag: str | None, *, display_name: str, experiment: str | None = None,
             experiment_run: str | None = None) -> dict[str, Any] | None:
    """What a new job or study records as its `tracking` (None: tracking off).

    Raises `UsageError` (exit 2) when tracking is on and MLflow is not installed: the line
    names the extra to install.
    """
    uri = tracking_uri(flag)
    if uri is None:
        return None
    if importlib.util.find_spec("mlflow") is None:
        from vcli.errors import UsageError

        raise UsageError(f"experiment tracking at [{display_uri(uri)}] needs MLflow, which is not installed: "
                         "pip install 'vcli[mlflow]' (or turn tracking off with --tracking-uri=off)")
    return {"uri": uri, "experiment": _basename(experiment) or display_name,
            "runName": _basename(experiment_run) or display_name}


def display_uri(uri: str) -> str:
    """`uri` with any password in it replaced by `<redacted>` (for lines and `describe`)."""
    try:
        parts = urlsplit(uri)
    except ValueError:
        return uri
    if parts.password is None:
        return uri
    netloc = f"{parts.username}:<redacted>@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def shown(record: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A stored `tracking` record as `describe` shows it (the URI's password redacted)."""
    if not record:
        return None
    return {**record, "uri": display_uri(str(record.get("uri", "")))}


def effective_no_effect(paths: Sequence[str], tracking: Mapping[str, Any] | None) -> list[str]:
    """The `--config` paths that change nothing here: with tracking on, `experiment` and
    `experimentRun` name the MLflow experiment and run, so they leave the list."""
    if not tracking:
        return list(paths)
    return [p for p in paths if p.rsplit(".", 1)[-1] not in TRACKING_FIELDS]

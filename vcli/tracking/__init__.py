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

__all__ = ["OFF_WORDS", "display_uri", "effective_no_effect", "settings", "store_problem", "tracking_uri", "uri_problem"]

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
    problem = uri_problem(uri)
    if problem:
        from vcli.errors import UsageError

        raise UsageError(f"{_source(flag)}: [{display_uri(uri)!r}] is not a tracking URI: {problem}"
                         if any(ord(c) < 32 or ord(c) == 127 for c in uri) else
                         f"{_source(flag)}: [{display_uri(uri)}] is not a tracking URI: {problem}")
    if importlib.util.find_spec("mlflow") is None:
        from vcli.errors import MissingExtraError

        raise MissingExtraError(f"Experiment tracking at [{display_uri(uri)}] (--tracking-uri=off turns it off)", "mlflow",
                                "MLflow")
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


#: The tracking stores MLflow itself knows (a plugin adds its own, found by its entry point).
_SCHEMES = ("file", "sqlite", "http", "https", "postgresql", "mysql", "mssql", "databricks", "databricks-uc", "uc")


def _source(flag: str | None) -> str:
    """Where the tracking URI in force came from, as an error names it."""
    if flag is not None:
        return "argument --tracking-uri"
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return "MLFLOW_TRACKING_URI"
    return "property [tracking/uri] (vcli config set tracking/uri)"


def _plugin_schemes() -> set[str]:
    from importlib.metadata import entry_points

    try:
        return {ep.name for ep in entry_points(group="mlflow.tracking_store")}
    except Exception:  # a broken distribution's metadata: no plugins
        return set()


def uri_problem(uri: str) -> str | None:
    """Why `uri` cannot name any tracking store (a malformed URI, a scheme MLflow does not
    know, an impossible port), or None. Static: nothing is opened, MLflow is not imported."""
    if any(ord(c) < 32 or ord(c) == 127 for c in uri):
        return "it contains control characters (a newline, a tab)"
    try:
        parts = urlsplit(uri)
        port = parts.port  # raises ValueError when out of range
    except ValueError as e:
        return f"{e}"
    scheme = parts.scheme.lower()
    if not scheme or (len(scheme) == 1 and uri[1:2] == ":"):
        return None  # a path: MLflow's file store
    base = scheme.split("+", 1)[0]
    if base not in _SCHEMES and scheme not in _plugin_schemes():
        return (f"unknown scheme [{scheme}]; MLflow's stores are [http, https, sqlite, file, postgresql, mysql, "
                "mssql, databricks] (or a directory path)")
    if base in ("http", "https"):
        if not parts.hostname:
            return "it names no host (http://HOST:PORT)"
        if port == 0:
            return "port 0 is not a port"
    if base == "sqlite" and uri.rstrip("/") != "sqlite:" and not uri.startswith("sqlite:///"):
        return "a SQLite store is sqlite:///RELATIVE/PATH.db or sqlite:////ABSOLUTE/PATH.db"
    return None


def store_problem(uri: str) -> str | None:
    """Why the local store `uri` names (a SQLite database or a file store) cannot be opened
    by this user now, or None (also for servers: they are tried, and retried, when the job
    runs). Nothing is created and MLflow is not imported, so this is instant."""
    scheme = urlsplit(uri).scheme.lower() if "://" in uri or uri.startswith("sqlite:") else ""
    if scheme.startswith("sqlite"):
        path = uri[len("sqlite:///"):].split("?", 1)[0] if uri.startswith("sqlite:///") else ""
        if not path:
            return None  # in memory
        return _file_problem(os.path.abspath(path), "SQLite database", directory=False)
    if scheme == "file":
        return _file_problem(os.path.abspath(urlsplit(uri).path), "file store", directory=True)
    if not scheme:
        return _file_problem(os.path.abspath(os.path.expanduser(uri)), "file store", directory=True)
    return None


def _file_problem(path: str, what: str, *, directory: bool) -> str | None:
    import stat

    try:
        st = os.stat(path)
    except FileNotFoundError:
        parent = os.path.dirname(path)
        while parent != os.path.dirname(parent) and not os.path.exists(parent):
            parent = os.path.dirname(parent)  # MLflow creates the missing directories
        if not os.path.isdir(parent):
            return f"the {what} {path} cannot be created: {parent} is not a directory"
        if not os.access(parent, os.W_OK | os.X_OK):
            return f"the {what} {path} cannot be created: {parent} is not writable by you"
        return None
    except OSError as e:
        return f"the {what} {path} cannot be opened: {e.strerror}"
    if directory and not stat.S_ISDIR(st.st_mode):
        return f"the {what} {path} is not a directory"
    if not directory and not stat.S_ISREG(st.st_mode):
        return f"the {what} {path} is not a regular file"
    if not os.access(path, os.R_OK | os.W_OK):
        return f"the {what} {path} is not writable by you"
    if not directory and not os.access(os.path.dirname(path), os.W_OK | os.X_OK):
        return f"the directory of the {what} {path} is not writable by you (SQLite writes its journal there)"
    return None


def cannot_start_notice(record: Mapping[str, Any] | None) -> str | None:
    """The WARNING line for a job or study whose tracking store cannot be opened now (what
    `--validate-only` prints; the run itself then goes untracked), or None."""
    if not record:
        return None
    problem = store_problem(str(record.get("uri", "")))
    if problem is None:
        return None
    return f"WARNING: MLflow tracking at {display_uri(str(record['uri']))} cannot start: {problem}; the job would run untracked."

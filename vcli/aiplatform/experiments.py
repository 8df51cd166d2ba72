"""Vertex Experiments: `init(experiment=)`, `start_run`, `log_params`, `log_metrics`, `end_run`,
`get_experiment_df`, `ExperimentRun`.

Where runs are kept:

- with tracking on (`init(tracking_uri=)`, $MLFLOW_TRACKING_URI or `vcli config set tracking/uri`,
  as for jobs), in MLflow: the experiment is an MLflow experiment, a run an MLflow run named as
  the Vertex run (params, metrics, state `FINISHED`/`FAILED`/`KILLED`);
- otherwise in vcli's home, one JSON file per run: `$VCLI_HOME/experiments/<experiment>/<run>.json`
  (`experiment`, `run`, `state`, `params`, `metrics`, `createTime`, `updateTime`), written
  whole under a lock, so any process reads what another logged.

Names follow Vertex's rule for experiments and runs: lowercase letters, digits and `-`, starting
with a letter or digit, at most 128 characters. A run's state is Vertex's `Execution.State` name
(`RUNNING`, `COMPLETE`, `FAILED`, `CANCELLED`). Nothing here imports MLflow or pandas until it
is used: `get_experiment_df` needs pandas (MLflow installs it); `experiment_rows` gives the same
rows as dicts without it.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from vcli.aiplatform.initializer import config, note_unused

__all__ = ["ExperimentRun", "end_run", "experiment_rows", "get_experiment_df", "log_metrics", "log_params",
           "start_run"]

_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,127}")
#: Vertex's `Execution.State` names a run may end in.
_END_STATES = ("COMPLETE", "FAILED", "CANCELLED")

#: The run `start_run` began in this process (None: none).
_current: dict[str, ExperimentRun | None] = {"run": None}


def _checked_name(what: str, value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a string, not {type(value).__name__}")
    name = value.rstrip("/").rsplit("/", 1)[-1]  # a resource name's last segment, as jobs read it
    if not _NAME.fullmatch(name):
        raise ValueError(f"{what} [{value}] must be lowercase letters, digits and '-', start with a letter or "
                         "a digit and be at most 128 characters (Vertex's rule for experiment and run names)")
    return name


def _experiment(experiment: str | None) -> str:
    """The experiment named, else `init(experiment=)`'s; ValueError when neither is set."""
    name = experiment if experiment is not None else config["experiment"]
    if name is None:
        raise ValueError("No experiment set: call aiplatform.init(experiment='my-experiment') first.")
    return _checked_name("experiment", name)


def _backend() -> Any:
    """MLflow when tracking is on, else the files under vcli's home (`vcli.aiplatform.experiment_store`)."""
    from vcli import tracking
    from vcli.aiplatform import experiment_store

    uri = tracking.tracking_uri(config["tracking_uri"])
    if uri is None:
        return experiment_store.FileRuns()
    problem = tracking.uri_problem(uri)
    if problem:
        raise ValueError(f"tracking_uri: [{tracking.display_uri(uri)}] is not a tracking URI: {problem}")
    return experiment_store.MlflowRuns(uri)


def _numbers(what: str, values: Any, *, text: bool) -> dict[str, Any]:
    """`values` checked: a dict of names to numbers (and, with `text`, strings)."""
    if not isinstance(values, Mapping):
        raise TypeError(f"{what} must be a dict of names to values, not {type(values).__name__}")
    kinds = (int, float, str) if text else (int, float)
    for key, value in values.items():
        if not isinstance(key, str) or not key:
            raise TypeError(f"{what}: every name must be a non-empty string, not {key!r}")
        if isinstance(value, bool) or not isinstance(value, kinds):
            allowed = "a number or a string" if text else "a number"
            raise TypeError(f"{what}[{key!r}] must be {allowed}, not {value!r}")
    return dict(values)


class ExperimentRun:
    """A run of an experiment, as Vertex's `aiplatform.ExperimentRun`: `ExperimentRun(run_name,
    experiment)` gets one that exists (`NotFound` otherwise); `start_run` makes one."""

    def __init__(self, run_name: str, experiment: str | None = None, *, project: str | None = None,
                 location: str | None = None, credentials: Any = None) -> None:
        from vcli.aiplatform.exceptions import NotFound

        note_unused("ExperimentRun()", project=project, location=location, credentials=credentials)
        self.name = _checked_name("run_name", run_name)
        self.experiment_name = _experiment(experiment)
        self._backend = _backend()
        if self._backend.get(self.experiment_name, self.name) is None:
            raise NotFound(f"Run [{self.name}] of experiment [{self.experiment_name}] was not found.")

    @property
    def state(self) -> str:
        """`RUNNING`, `COMPLETE`, `FAILED` or `CANCELLED`."""
        return str(self._record()["state"])

    def _record(self) -> dict[str, Any]:
        from vcli.aiplatform.exceptions import NotFound

        record = self._backend.get(self.experiment_name, self.name)
        if record is None:
            raise NotFound(f"Run [{self.name}] of experiment [{self.experiment_name}] was not found.")
        return record

    def get_params(self) -> dict[str, Any]:
        return dict(self._record()["params"])

    def get_metrics(self) -> dict[str, Any]:
        return dict(self._record()["metrics"])

    def log_params(self, params: Mapping[str, Any]) -> None:
        self._backend.log(self.experiment_name, self.name, params=_numbers("params", params, text=True))

    def log_metrics(self, metrics: Mapping[str, Any]) -> None:
        self._backend.log(self.experiment_name, self.name, metrics=_numbers("metrics", metrics, text=False))

    def end_run(self, state: Any = "COMPLETE") -> None:
        """End the run in `state` (a name, or an `Execution.State` member: its name)."""
        name = str(getattr(state, "name", state)).upper()
        if name not in _END_STATES:
            raise ValueError(f"state must be one of {list(_END_STATES)}, not {state!r}")
        self._backend.end(self.experiment_name, self.name, name)
        if _current["run"] is self:
            _current["run"] = None

    def __enter__(self) -> ExperimentRun:
        return self

    def __exit__(self, kind: Any, error: Any, traceback: Any) -> None:
        self.end_run("FAILED" if kind is not None else "COMPLETE")

    def __repr__(self) -> str:
        return f"ExperimentRun(run_name={self.name!r}, experiment={self.experiment_name!r})"


def start_run(run: str, *, tensorboard: Any = None, resume: bool = False) -> ExperimentRun:
    """Start run `run` of `init(experiment=)`'s experiment (ending the one this process had
    started); `resume=True` continues one that exists (`NotFound` if none), and without it a
    run of that name that exists is a ValueError. Usable as a context manager."""
    note_unused("start_run()", tensorboard=tensorboard)
    name = _checked_name("run", run)
    experiment = _experiment(None)
    backend = _backend()
    exists = backend.get(experiment, name) is not None
    if resume and not exists:
        from vcli.aiplatform.exceptions import NotFound

        raise NotFound(f"Run [{name}] of experiment [{experiment}] was not found.")
    if exists and not resume:
        raise ValueError(f"Run [{name}] of experiment [{experiment}] already exists: "
                         "start_run(run, resume=True) continues it.")
    if _current["run"] is not None:  # checked first: a refused start_run leaves the current run as it was
        _current["run"].end_run()
    if resume:
        backend.resume(experiment, name)
    else:
        backend.create(experiment, name)
    handle = ExperimentRun(name, experiment)
    _current["run"] = handle
    return handle


def _active(verb: str) -> ExperimentRun:
    run = _current["run"]
    if run is None:
        raise ValueError(f"No run set: call aiplatform.start_run('my-run') before {verb}.")
    return run


def log_params(params: Mapping[str, Any]) -> None:
    """Log parameters (numbers or strings) to the current run; a name logged again is replaced."""
    _active("log_params").log_params(params)


def log_metrics(metrics: Mapping[str, Any]) -> None:
    """Log summary metrics (numbers) to the current run; a name logged again is replaced."""
    _active("log_metrics").log_metrics(metrics)


def end_run(state: Any = "COMPLETE") -> None:
    """End the current run (`COMPLETE`, `FAILED` or `CANCELLED`)."""
    _active("end_run").end_run(state)


def experiment_rows(experiment: str | None = None) -> list[dict[str, Any]]:
    """The rows of `get_experiment_df`, as dicts (no pandas needed), oldest run first:
    `experiment_name`, `run_name`, `run_type`, `state`, `param.<name>`..., `metric.<name>`...;
    `NotFound` for an experiment with no run."""
    from vcli.aiplatform.exceptions import NotFound

    name = _experiment(experiment)
    records = _backend().runs(name)
    if not records:
        raise NotFound(f"Experiment [{name}] was not found: it has no run.")
    rows = []
    for rec in records:
        row = {"experiment_name": name, "run_name": rec["run"], "run_type": "system.ExperimentRun",
               "state": rec["state"]}
        row.update({f"param.{k}": v for k, v in rec["params"].items()})
        row.update({f"metric.{k}": v for k, v in rec["metrics"].items()})
        rows.append(row)
    return rows


def get_experiment_df(experiment: str | None = None, *, include_time_series: bool = True) -> Any:
    """A pandas DataFrame of the experiment's runs, one row each (`experiment_rows`), as Vertex's
    `aiplatform.get_experiment_df` gives it. vcli keeps no time series: `include_time_series`
    changes nothing."""
    rows = experiment_rows(experiment)
    try:
        import pandas as pd
    except ImportError:
        from vcli.errors import MissingExtraError

        raise MissingExtraError("get_experiment_df()", "mlflow", "pandas") from None
    columns: list[str] = []
    for row in rows:
        columns.extend(k for k in row if k not in columns)
    return pd.DataFrame(rows, columns=columns)

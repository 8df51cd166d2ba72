"""Where `vcli.aiplatform.experiments` keeps runs: `FileRuns` (vcli's home) or `MlflowRuns`.

Both answer the same calls, with a run as a dict: `experiment`, `run`, `state` (Vertex's
`Execution.State` name), `params`, `metrics`, `createTime`, `updateTime`.

`FileRuns`: `$VCLI_HOME/experiments/<experiment>/<run>.json`, each change made under an
exclusive lock on `<run>.lock` and written whole (a temporary file renamed over it), so two
processes logging to one run lose nothing and a reader never sees half a file.
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping

#: MLflow's run statuses for Vertex's end states, and back.
_TO_MLFLOW = {"RUNNING": "RUNNING", "COMPLETE": "FINISHED", "FAILED": "FAILED", "CANCELLED": "KILLED"}
_FROM_MLFLOW = {v: k for k, v in _TO_MLFLOW.items()} | {"SCHEDULED": "RUNNING"}


class FileRuns:
    """Runs as JSON files under vcli's home (`experiments/<experiment>/<run>.json`)."""

    def __init__(self, home: Path | None = None) -> None:
        from vcli.store import default_home

        self.root = (home or default_home()) / "experiments"

    def _path(self, experiment: str, run: str) -> Path:
        return self.root / experiment / f"{run}.json"

    @contextmanager
    def _locked(self, experiment: str, run: str) -> Iterator[Path]:
        import fcntl

        path = self._path(experiment, run)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path.with_suffix(".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield path
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    @staticmethod
    def _read(path: Path) -> dict[str, Any] | None:
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None

    @staticmethod
    def _write(path: Path, record: Mapping[str, Any]) -> None:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(record, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(tmp, path)

    def get(self, experiment: str, run: str) -> dict[str, Any] | None:
        return self._read(self._path(experiment, run))

    def create(self, experiment: str, run: str) -> None:
        from vcli.store import now_iso

        with self._locked(experiment, run) as path:
            stamp = now_iso()
            self._write(path, {"experiment": experiment, "run": run, "state": "RUNNING", "params": {}, "metrics": {},
                               "createTime": stamp, "updateTime": stamp})

    def _change(self, experiment: str, run: str, **fields: Any) -> None:
        from vcli.store import now_iso

        with self._locked(experiment, run) as path:
            record = self._read(path)
            if record is None:
                from vcli.aiplatform.exceptions import NotFound

                raise NotFound(f"Run [{run}] of experiment [{experiment}] was not found.")
            for key in ("params", "metrics"):
                record[key].update(fields.pop(key, {}))
            record.update(fields, updateTime=now_iso())
            self._write(path, record)

    def resume(self, experiment: str, run: str) -> None:
        self._change(experiment, run, state="RUNNING")

    def log(self, experiment: str, run: str, *, params: Mapping[str, Any] | None = None,
            metrics: Mapping[str, Any] | None = None) -> None:
        self._change(experiment, run, params=dict(params or {}), metrics=dict(metrics or {}))

    def end(self, experiment: str, run: str, state: str) -> None:
        self._change(experiment, run, state=state)

    def runs(self, experiment: str) -> list[dict[str, Any]]:
        folder = self.root / experiment
        found = [r for p in sorted(folder.glob("*.json")) if (r := self._read(p)) is not None] if folder.is_dir() else []
        return sorted(found, key=lambda r: (r.get("createTime", ""), r.get("run", "")))


class MlflowRuns:
    """Runs in the MLflow tracking store at `uri`: a Vertex run is the MLflow run of that name."""

    def __init__(self, uri: str) -> None:
        try:
            from mlflow.tracking import MlflowClient
        except ImportError:
            from vcli.errors import MissingExtraError
            from vcli.tracking import display_uri

            raise MissingExtraError(f"Experiments in MLflow at [{display_uri(uri)}] (init(tracking_uri='off') keeps "
                                    "them in vcli's home)", "mlflow", "MLflow") from None
        self.client = MlflowClient(tracking_uri=uri)

    def _experiment_id(self, experiment: str, *, create: bool) -> str | None:
        found = self.client.get_experiment_by_name(experiment)
        if found is not None:
            return str(found.experiment_id)
        return str(self.client.create_experiment(experiment)) if create else None

    def _run(self, experiment: str, run: str) -> Any:
        exp_id = self._experiment_id(experiment, create=False)
        if exp_id is None:
            return None
        found = self.client.search_runs([exp_id], filter_string=f"attributes.run_name = '{run}'", max_results=1)
        return found[0] if found else None

    @staticmethod
    def _record(experiment: str, found: Any) -> dict[str, Any]:
        from vcli.store import now_iso

        info = found.info
        return {"experiment": experiment, "run": info.run_name, "state": _FROM_MLFLOW.get(info.status, info.status),
                "params": dict(found.data.params), "metrics": dict(found.data.metrics),
                "createTime": now_iso(info.start_time / 1000) if info.start_time else None,
                "updateTime": now_iso(info.end_time / 1000) if info.end_time else None}

    def get(self, experiment: str, run: str) -> dict[str, Any] | None:
        found = self._run(experiment, run)
        return None if found is None else self._record(experiment, found)

    def create(self, experiment: str, run: str) -> None:
        self.client.create_run(self._experiment_id(experiment, create=True), run_name=run)

    def _run_id(self, experiment: str, run: str) -> str:
        found = self._run(experiment, run)
        if found is None:
            from vcli.aiplatform.exceptions import NotFound

            raise NotFound(f"Run [{run}] of experiment [{experiment}] was not found.")
        return str(found.info.run_id)

    def resume(self, experiment: str, run: str) -> None:
        self.client.update_run(self._run_id(experiment, run), status="RUNNING")

    def log(self, experiment: str, run: str, *, params: Mapping[str, Any] | None = None,
            metrics: Mapping[str, Any] | None = None) -> None:
        from mlflow.entities import Metric, Param

        run_id = self._run_id(experiment, run)
        import time

        now = int(time.time() * 1000)
        self.client.log_batch(run_id, params=[Param(k, str(v)) for k, v in (params or {}).items()],
                              metrics=[Metric(k, float(v), now, 0) for k, v in (metrics or {}).items()])

    def end(self, experiment: str, run: str, state: str) -> None:
        self.client.set_terminated(self._run_id(experiment, run), status=_TO_MLFLOW[state])

    def runs(self, experiment: str) -> list[dict[str, Any]]:
        exp_id = self._experiment_id(experiment, create=False)
        if exp_id is None:
            return []
        found = self.client.search_runs([exp_id], order_by=["attributes.start_time ASC"])
        return [self._record(experiment, r) for r in found]

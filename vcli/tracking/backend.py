"""The MLflow client as vcli's trackers use it: a handful of calls, each bounded in time.

Importing this module imports MLflow (a second or two): only trackers that are on do.

Time bounds: vcli's own requests to a tracking server give up after
`MLFLOW_HTTP_REQUEST_TIMEOUT` seconds (5 unless you set it) with no retries inside MLflow
(`MLFLOW_HTTP_REQUEST_MAX_RETRIES`, 0 unless you set it): vcli retries on its own schedule
(`vcli.tracking.sync`). These are set in the controller's environment only when unset, and
`replica_env` gives every replica MLflow's own values back, so a trainer's logging keeps
MLflow's usual patience. MLflow's "View run ... at" lines are kept off vcli's stdout the same way.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Any, Iterable, Iterator, Mapping, Sequence

#: vcli's bounds for its own requests (used when the variable is not set), and no "View run"
#: lines from MLflow on stdout, which holds vcli's data (`--format=json`).
CONTROLLER_ENV = {"MLFLOW_HTTP_REQUEST_TIMEOUT": "5", "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
                  "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true"}

#: The user's values of those variables before vcli set them (None: unset), per process.
_ORIGINAL: dict[str, str | None] = {}

#: MLflow's batch limits (log_batch: 1000 metrics, 100 params, 100 tags per request).
_MAX_METRICS, _MAX_PARAMS, _MAX_TAGS = 1000, 100, 100
#: MLflow's limits on a param value and a tag value (characters).
_PARAM_LEN, _TAG_LEN = 6000, 8000


def bound_requests() -> None:
    """Give this process's MLflow requests vcli's time bounds, unless the user chose theirs."""
    for name, value in CONTROLLER_ENV.items():
        if name not in _ORIGINAL:
            _ORIGINAL[name] = os.environ.get(name)
            os.environ.setdefault(name, value)


def replica_env() -> dict[str, str]:
    """What replicas get for the variables `bound_requests` set: the user's values, or
    MLflow's defaults (a local replica inherits the controller's environment)."""
    from mlflow import environment_variables as ev

    defaults = {"MLFLOW_HTTP_REQUEST_TIMEOUT": ev.MLFLOW_HTTP_REQUEST_TIMEOUT.default,
                "MLFLOW_HTTP_REQUEST_MAX_RETRIES": ev.MLFLOW_HTTP_REQUEST_MAX_RETRIES.default,
                "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "false"}
    return {name: _ORIGINAL.get(name) or str(defaults[name]) for name in CONTROLLER_ENV}


class Backend:
    """One tracking URI's MLflow client. Every method may raise (the server down or slow,
    a refused request): callers (`vcli.tracking.sync`) catch and retry."""

    def __init__(self, uri: str) -> None:
        bound_requests()
        import logging

        # "Creating initial MLflow database tables..." and alembic's migration steps are
        # MLflow's INFO lines on vcli's stderr, which --no-user-output-enabled could not silence;
        # its database errors came as tracebacks, once per retry (825 lines for one study).
        # vcli says what failed itself, in one WARNING line (`vcli.tracking.sync`).
        for name in ("mlflow.store.db.utils", "alembic"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
        from mlflow.tracking import MlflowClient

        self.uri = uri
        self.client = MlflowClient(tracking_uri=uri)

    def experiment_id(self, name: str) -> str:
        """The id of experiment `name`, created if missing (another process may create it at
        the same moment: then its id)."""
        found = self.client.get_experiment_by_name(name)
        if found is not None:
            if found.lifecycle_stage == "deleted":
                self.client.restore_experiment(found.experiment_id)
            return found.experiment_id
        try:
            return self.client.create_experiment(name)
        except Exception:
            again = self.client.get_experiment_by_name(name)
            if again is None:
                raise
            return again.experiment_id

    def runs_tagged(self, experiment_id: str, key: str, value: str) -> list[Any]:
        """Every run of the experiment whose tag `key` is `value` (all pages)."""
        out: list[Any] = []
        token = None
        while True:
            page = self.client.search_runs([experiment_id], filter_string=f"tags.`{key}` = '{value}'",
                                           max_results=1000, page_token=token)
            out.extend(page)
            token = page.token
            if not token:
                return out

    def create_run(self, experiment_id: str, *, name: str, start_ms: int | None, tags: Mapping[str, str],
                   params: Mapping[str, str]) -> str:
        run = self.client.create_run(experiment_id, start_time=start_ms, tags=dict(_tags(tags)), run_name=name)
        run_id = run.info.run_id
        self.log(run_id, params=params)
        return run_id

    def log(self, run_id: str, *, metrics: Sequence[tuple[str, float, int, int]] = (),
            params: Mapping[str, str] | None = None, tags: Mapping[str, str] | None = None) -> None:
        """Log `metrics` (key, value, timestamp ms, step), params and tags, in batches."""
        from mlflow.entities import Metric, Param, RunTag

        ms = [Metric(k, float(v), int(ts), int(step)) for k, v, ts, step in metrics]
        ps = [Param(k, str(v)[:_PARAM_LEN]) for k, v in (params or {}).items()]
        tg = [RunTag(k, v) for k, v in _tags(tags or {})]
        for i in range(0, len(ps), _MAX_PARAMS):
            self.client.log_batch(run_id, params=ps[i:i + _MAX_PARAMS])
        for i in range(0, len(tg), _MAX_TAGS):
            self.client.log_batch(run_id, tags=tg[i:i + _MAX_TAGS])
        for i in range(0, len(ms), _MAX_METRICS):
            self.client.log_batch(run_id, metrics=ms[i:i + _MAX_METRICS])

    def end(self, run_id: str, status: str, end_ms: int | None) -> None:
        self.client.set_terminated(run_id, status=status, end_time=end_ms)

    def steps(self, run_id: str, key: str) -> set[int]:
        """The steps at which metric `key` of the run is already logged."""
        return {m.step for m in self.client.get_metric_history(run_id, key)}


def _tags(tags: Mapping[str, str]) -> Iterable[tuple[str, str]]:
    for key, value in tags.items():
        yield key, str(value)[:_TAG_LEN]


#: Tries and the first pause of `open_backend` (the pause doubles: 0.5 + 1 + 2 + 4 s at most).
OPEN_TRIES, OPEN_PAUSE = 5, 0.5
#: No try of `open_backend` starts this many seconds after its first failed try: a store that
#: cannot be opened costs a job seconds, then it runs untracked (a WARNING says so).
OPEN_SECONDS = 6.0
#: MLflow's own retries of a SQL engine that cannot connect (its default, 10, waits ~100 s).
ENGINE_TRIES = 2


def open_backend(uri: str) -> Backend:
    """`Backend(uri)`, tried again on a failure other than MLflow missing: two controllers that
    start at once on a new SQLite store race in MLflow's schema migration (alembic: "Online
    migration expected to match one row"), and the loser ran its whole job untracked; worse, a
    migration run twice at once can leave the store half-migrated for good (`table
    _alembic_tmp_tags already exists`), so for a SQLite store the opening is serialised across
    processes and users (`_schema_lock`)."""
    import time

    _bound_engine_retries()
    first_failure = None
    for attempt in range(OPEN_TRIES):
        try:
            with _schema_lock(uri):
                return Backend(uri)
        except ImportError:
            raise
        except Exception:
            now = time.monotonic()
            first_failure = now if first_failure is None else first_failure
            pause = OPEN_PAUSE * 2 ** attempt
            if attempt + 1 == OPEN_TRIES or now + pause - first_failure > OPEN_SECONDS:
                raise
            time.sleep(pause)
    raise AssertionError("unreachable")


def _bound_engine_retries() -> None:
    """MLflow retries a SQL engine that cannot connect 10 times with growing pauses (~100 s,
    inside one `Backend(uri)`); vcli retries on its own schedule, so MLflow's are cut to
    `ENGINE_TRIES` in the controller (replicas keep MLflow's)."""
    try:
        from mlflow.store.db import utils
    except ImportError:
        return
    if isinstance(getattr(utils, "MAX_RETRY_COUNT", None), int):
        utils.MAX_RETRY_COUNT = min(utils.MAX_RETRY_COUNT, ENGINE_TRIES)


#: How long `_schema_lock` waits for another process's opening of the same store.
SCHEMA_LOCK_SECONDS = 60.0


@contextmanager
def _schema_lock(uri: str) -> Iterator[None]:
    """Around the opening of a SQLite tracking store (where MLflow creates and migrates its
    schema): an exclusive `flock` on a lock file in the temporary directory named after the
    database's absolute path, so every vcli process of every user on this machine opens that
    store one at a time. Other stores, or a lock that cannot be had within
    SCHEMA_LOCK_SECONDS, go ahead unlocked."""
    import fcntl
    import hashlib
    import tempfile
    import time

    if not uri.startswith("sqlite:///"):
        yield
        return
    database = os.path.abspath(uri[len("sqlite:///"):].split("?", 1)[0])
    name = f"vcli-mlflow-{hashlib.sha256(database.encode()).hexdigest()[:16]}.lock"
    path = os.path.join(tempfile.gettempdir(), name)
    fd = _lock_file(path)
    if fd is None:
        yield
        return
    try:
        deadline = time.monotonic() + SCHEMA_LOCK_SECONDS
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # drops the lock


def _lock_file(path: str) -> int | None:
    """A read-only descriptor of the lock file `path` in the shared temporary directory (a
    read-only descriptor locks as well), created (mode 0644) when missing; None when it
    cannot be used. Never through a symbolic link, and never a file that is not a regular
    one: another user may have put anything at that predictable name. Only a file this
    process created gets its mode set."""
    import stat

    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    for _ in range(3):
        try:
            fd = os.open(path, flags)
        except FileNotFoundError:
            try:
                fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                continue
            except OSError:
                return None
            try:
                os.fchmod(fd, 0o644)  # ours: every user's vcli must be able to open it
            except OSError:
                pass
        except OSError:
            return None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            return None
        return fd
    return None

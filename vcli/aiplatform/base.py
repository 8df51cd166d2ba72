"""What `aiplatform.CustomJob` and `aiplatform.HyperparameterTuningJob` share (`_Job`): the
record in vcli's store, reading it back (`get`, `list`: any Python process re-attaches to a job
that the CLI or another process created), its state, waiting and cancelling; and the helpers
that turn the SDK's arguments into vcli's spec.

Reading goes through the same lookup and resource builders as `vcli ... describe` and `list`
(`vcli.resources`): an unknown id is `vcli.aiplatform.exceptions.NotFound`, with the CLI's line.
"""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from datetime import datetime
from typing import Any, Iterator, Mapping, TypeVar

from vcli.aiplatform.initializer import config, note_unused, resource_name
from vcli.enums import JobKind, JobState

J = TypeVar("J", bound="_Job")

#: How often `wait()` reads the job's state.
POLL_SECONDS = 0.5


def _camel(value: Any) -> Any:
    """Vertex SDK dicts (snake_case keys, as its samples write them) in the REST shape
    (camelCase); enum members (`AcceleratorType.NVIDIA_TESLA_T4`) become their names."""
    if isinstance(value, Mapping):
        return {_camel_key(str(k)): _camel(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_camel(v) for v in value]
    if hasattr(value, "name") and type(value).__module__ != "builtins" and not isinstance(value, str):
        return value.name
    return value


def _camel_key(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(w[:1].upper() + w[1:] for w in rest)


def _decode_custom_job(doc: Mapping[str, Any], source: str) -> Any:
    """A CustomJobSpec REST dict -> `vcli.spec.CustomJobSpec`, checked as `--config` is."""
    from vcli.codec import Decoder, custom_job_spec_from_dict
    from vcli.spec import CustomJobSpec

    decoder = Decoder(source)
    return custom_job_spec_from_dict(decoder.decode_message(dict(doc), CustomJobSpec, ""), decoder)


@contextmanager
def _as_value_error() -> Iterator[None]:
    """vcli's errors for a bad argument (a field the codec refuses, a display name) as the
    ValueError Vertex's SDK raises, naming the field: `Invalid value for [--config]` named a
    flag nobody passed, and `except ValueError` missed them."""
    from vcli.errors import ConfigError, InvalidValueError

    try:
        yield
    except ConfigError as e:
        raise ValueError(f"{e.path}: {e.message}" if e.path else e.message) from None
    except InvalidValueError as e:
        raise ValueError(f"{e.flag.lstrip('-').replace('-', '_')}: {e.message}") from None


def _datetime(stamp: str | None) -> datetime | None:
    """A stored time as a UTC datetime (None for none)."""
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")) if stamp else None


def _status_text(error: Mapping[str, Any] | None, state: JobState) -> str:
    """A stored error as Vertex's SDK prints its `google.rpc.Status` (`code: 3` / `message: "..."`)."""
    if not error:
        return "code: 1\nmessage: \"CANCELLED\"" if state == JobState.JOB_STATE_CANCELLED else "(no error recorded)"
    import json

    return f"code: {error.get('code', 2)}\nmessage: {json.dumps(str(error.get('message', '')))}"


def _say(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


class _Job:
    """What both kinds share: the record in vcli's store, its state, waiting, cancelling."""

    _kind = JobKind.CUSTOM_JOB
    _collection = "customJobs"
    _noun = "CustomJob"
    _group = "custom-jobs"

    def __init__(self, display_name: str, labels: Mapping[str, str] | None) -> None:
        from vcli.codec.flags import check_display_name

        if not isinstance(display_name, str) or not display_name:
            raise TypeError(f"display_name must be a non-empty string, not {display_name!r}")
        if labels is not None and not isinstance(labels, Mapping):
            raise TypeError(f"labels must be a dict of strings, not {type(labels).__name__}")
        from vcli.codec.flags import label_problem

        if labels and (problem := label_problem(labels)):  # the CLI's --labels rules (they were stored unchecked)
            raise ValueError(f"labels: {problem}")
        with _as_value_error():
            self.display_name = check_display_name(display_name)
        self.labels = dict(labels or {})
        self._job_id: str | None = None

    # ------------------------------------------------------------------ re-attaching

    @classmethod
    def get(cls: type[J], resource_name: str, project: str | None = None, location: str | None = None,
            credentials: Any = None) -> J:
        """The job named `resource_name` (its id, or `projects/P/locations/L/<collection>/ID`),
        recorded by the CLI or by any Python process; `NotFound` (the CLI's line) if there is
        none, ValueError for a name of another collection."""
        from vcli.aiplatform.exceptions import NotFound
        from vcli.errors import InvalidValueError, NotFoundError
        from vcli.resources import stored_job

        if not isinstance(resource_name, str) or not resource_name:
            raise TypeError(f"resource_name must be a job id or a resource name, not {resource_name!r}")
        note_unused(f"{cls.__name__}.get()", project=project, location=location, credentials=credentials)
        from vcli.store import Store

        try:
            row = stored_job(Store(), resource_name, cls._kind)
        except NotFoundError as e:
            raise NotFound(str(e)) from None
        except InvalidValueError as e:
            raise ValueError(f"resource_name: {e.message}") from None
        return cls._attached(row)

    @classmethod
    def list(cls: type[J], filter: str | None = None, order_by: str | None = None,
             project: str | None = None, location: str | None = None, credentials: Any = None) -> list[J]:
        """Every job of this kind (a study's trial jobs left out, as `vcli ... list` does), oldest
        first. `filter` and `order_by` are Vertex's (`display_name="x" AND state="JOB_STATE_SUCCEEDED"`,
        `labels.team="a"`, `create_time desc`), read by the CLI's `--filter` and `--sort-by`."""
        from vcli.aiplatform.listing import select
        from vcli.store import Store

        note_unused(f"{cls.__name__}.list()", project=project, location=location, credentials=credentials)
        store = Store()
        rows = store.list_jobs(cls._kind)
        if filter or order_by:
            rows = select(store, rows, cls._kind, filter, order_by)
        return [cls._attached(row) for row in rows]

    @classmethod
    def _attached(cls: type[J], row: Any) -> J:
        """An object for the stored job `row`, as `run()` would have left it (it cannot run again)."""
        job = cls.__new__(cls)
        job.display_name = row.display_name
        job.labels = dict(row.record.get("labels") or {})
        job._job_id = row.id
        job._restore(row.record)
        return job

    def _restore(self, record: Mapping[str, Any]) -> None:
        """Set what the kind keeps besides the record (its spec) from the stored `record`."""

    # ------------------------------------------------------------------ the record

    def _store(self) -> Any:
        from vcli.store import Store

        return Store()

    def _row(self) -> Any:
        if self._job_id is None:
            raise RuntimeError(f"{self._noun} resource has not been created.")
        row = self._store().get_job(self._job_id)
        if row is None:
            raise RuntimeError(f"{self._noun} [{self._job_id}] is no longer in vcli's store.")
        return row

    @property
    def name(self) -> str:
        """The job's id (Vertex: the last segment of `resource_name`)."""
        self._row()
        return str(self._job_id)

    @property
    def resource_name(self) -> str:
        return resource_name(self._collection, self.name)

    @property
    def state(self) -> JobState:
        return JobState(self._row().state)

    @property
    def error(self) -> Mapping[str, Any] | None:
        """Why it FAILED or was CANCELLED (`code`, `message`), as Vertex's `error`; None otherwise."""
        return self._row().error

    @property
    def create_time(self) -> datetime:
        """When it was recorded (a UTC datetime, as Vertex's SDK gives it)."""
        return _datetime(self._row().create_time)  # type: ignore[return-value]

    @property
    def start_time(self) -> datetime | None:
        return _datetime(self._row().start_time)

    @property
    def end_time(self) -> datetime | None:
        """When it ended; None while it runs."""
        return _datetime(self._row().end_time)

    def done(self) -> bool:
        return self.state.is_final()

    def to_dict(self) -> dict[str, Any]:
        """The job as Vertex's REST resource, as `vcli ... describe --format=json` prints it."""
        from vcli import resources

        make = resources.custom_job_resource if self._kind == JobKind.CUSTOM_JOB else resources.hp_tuning_job_resource
        return make(self._store(), self._row())

    # ------------------------------------------------------------------ lifecycle

    def wait(self) -> None:
        """Block until the job ends; RuntimeError if it FAILED or was CANCELLED, or if the vcli
        process that runs it is gone (killed, crashed): it would never end then."""
        from vcli.control.liveness import controller_alive

        said = None
        while True:
            row = self._row()
            state = JobState(row.state)
            if state != said:
                _say(f"{self._noun} {self.resource_name} current state: {state.value}")
                said = state
            if state.is_final():
                break
            if not controller_alive(row) and not JobState(self._row().state).is_final():  # re-read: it may just have ended
                raise RuntimeError(
                    f"{self._noun} {self.resource_name} is {state.value} but the vcli process that ran it (pid "
                    f"{row.controller_pid}) is gone: `vcli {self._group} resume {self.name}` takes it over, "
                    f"`vcli {self._group} cancel {self.name}` stops it.")
            time.sleep(POLL_SECONDS)
        if state != JobState.JOB_STATE_SUCCEEDED:
            raise RuntimeError(f"Job failed with:\n{_status_text(row.error, state)}\n"
                               f"{self._noun} {self.resource_name} ended {state.value}.")
        _say(f"{self._noun} run completed. Resource name: {self.resource_name}")

    def wait_for_completion(self) -> None:
        """Vertex's name for `wait()`: block until the job ends; RuntimeError naming the state
        and the error if it did not succeed."""
        self.wait()

    def wait_for_resource_creation(self) -> None:
        """Return once the job is recorded (at once: `run(sync=False)` and `submit()` return
        after recording it); RuntimeError for an object that was never run."""
        if self._job_id is None:
            raise RuntimeError(f"{self._noun} resource is not scheduled to be created: call run() or submit() first.")
        self._row()

    def cancel(self) -> None:
        """Ask the job to stop (its controller stops every replica; one that died is cleaned
        up here, as `vcli ... cancel` does). Returns at once, as Vertex's does."""
        from vcli.control import cancel, liveness

        store, row = self._store(), self._row()
        if cancel.request_cancel(store, row) and not liveness.controller_alive(row):
            cancel.stop_orphaned(store, row, on_warning=lambda msg: _say(f"WARNING: {msg}"))

    def _not_yet_run(self) -> None:
        """Refuse a second run()/submit() on one object: it started another job or study and
        the object then spoke only of the new one, the first left running unseen (Vertex's
        training jobs refuse it as well)."""
        if self._job_id is not None:
            raise RuntimeError(f"{self._noun} [{self._job_id}] has already been run: make a new "
                               f"{type(self).__name__} to run it again.")

    def _created(self, job_id: str) -> None:
        self._job_id = job_id
        _say(f"{self._noun} created. Resource name: {self.resource_name}")
        _say(f"View its logs: vcli {self._group} stream-logs {job_id}  (describe: vcli {self._group} describe {job_id})")

    @staticmethod
    def _tracking(display_name: str, experiment: str | None, experiment_run: str | None) -> Any:
        from vcli import tracking

        return tracking.settings(config["tracking_uri"], display_name=display_name,
                                 experiment=experiment or config["experiment"], experiment_run=experiment_run)


def _output_dir(base_output_dir: str | None, staging_bucket: str | None) -> str | None:
    """The job's output directory: as given, else Vertex's default, a folder per job in the
    staging bucket (`gs://bucket/aiplatform-custom-job-<time>`)."""
    bucket = staging_bucket or config["staging_bucket"]
    for name, value in (("base_output_dir", base_output_dir), ("staging_bucket", bucket)):
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{name} must be a string, not {type(value).__name__}")
    if base_output_dir is None and bucket:
        return f"{bucket.rstrip('/')}/aiplatform-custom-job-{time.strftime('%Y-%m-%d-%H:%M:%S')}"
    return base_output_dir


def _scheduling(timeout: float | None, restart: bool, disable_retries: bool, strategy: Any,
                max_wait: float | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in (("timeout", timeout), ("max_wait_duration", max_wait)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise TypeError(f"{name} must be a number of seconds, not {value!r}")
    if timeout:  # 0 or None: no timeout, as Vertex's SDK reads it (0s failed the job at once)
        out["timeout"] = f"{float(timeout):g}s"
    if restart:
        out["restartJobOnWorkerRestart"] = True
    if disable_retries:
        out["disableRetries"] = True
    if strategy is not None:
        out["strategy"] = getattr(strategy, "name", strategy)
    if max_wait:
        out["maxWaitDuration"] = f"{float(max_wait):g}s"
    return out



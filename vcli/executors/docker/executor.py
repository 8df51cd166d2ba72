"""The Docker executor: one container per replica on this machine's Docker engine.

Containers use the host network, bind-mount the replica's output dir, `launch.mounts` and its
checkpoint dir (`host_dirs`) at the same path (and the gs:// storage root at `/gcs` when the replica names it), and carry the labels `vcli.job`, `vcli.trial` and `vcli.task`, so
`cleanup_job(job_id)` in any process finds a job's containers and never another job's.
Output is streamed from the engine into the replica's log file in `vcli.logs` format, with
the values of `launch.secret_env` replaced by `<redacted>` (as the local executor does).

`prepare` builds images for `local-package-path` pools (`autopackage`) and with packageUris
installed (`installs`), tagged by content hashes: unchanged code is a cache hit. A container has
a filesystem of its own, so its working directory is private; the host directories it can write
are its output dir, `mounts` and the storage root.

The Docker SDK (`docker`) is imported lazily inside functions: importing this module is cheap.
Engine and image problems become one-line `ExecutorError`s.
"""

from __future__ import annotations

import math
import os
import socket
import threading
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from vcli import packages
from vcli.errors import ExecutorError, InvalidValueError
from vcli.executors import (
    ExecutorBase,
    Placement,
    ReplicaHandle,
    ReplicaLaunch,
    ReplicaStatus,
    place_seed_dirs,
    read_replica_file,
)
from vcli.executors.docker.autopackage import build_package
from vcli.executors.docker.container import LABEL_JOB, LABEL_TASK, container_create_kwargs, container_name
from vcli.executors.docker.engine import (
    connect,
    engine_down,
    engine_url,
    ensure_image,
    has_registry_host,
    image_missing_message,
    sdk,
    wrap_error,
)
from vcli.executors.docker.installs import build_installs
from vcli.executors.docker.output import iter_log_lines, parse_docker_timestamp, secret_values, status_from_state
from vcli.executors.leases import held_leases, keep_container_leases
from vcli.executors.supervisor import masker
from vcli.logs import LogWriter, last_times

if TYPE_CHECKING:  # pragma: no cover
    import docker as docker_sdk

__all__ = ["DockerExecutor", "cleanup_job"]

#: How long poll() keeps reporting "running" after the engine says a container exited while
#: its log is still being drained, so that "not running" implies "log complete".
_LOG_DRAIN_SECONDS = 5.0


# ============================================================================ the executor


@dataclass
class _Watch:
    """Per-container state of containers this executor started."""

    task_name: str
    writer: LogWriter
    #: Values of the launch's secret variables, longest first: replaced in every log line.
    secrets: tuple[str, ...] = ()
    done: threading.Event = field(default_factory=threading.Event)
    final: ReplicaStatus | None = None
    exited_at: float | None = None
    thread: threading.Thread | None = None
    #: For an adopted container: the last timestamp already in the log, per stream.
    after: dict[str, float] = field(default_factory=dict)
    #: Replaces the secrets in a line (`supervisor.masker`).
    mask: Callable[[str], str] = field(init=False)

    def __post_init__(self) -> None:
        self.mask = masker(self.secrets)


def cleanup_job(job_id: str, *, base_url: str | None = None) -> int:
    """Remove every container labelled with `job_id` (running or not); returns how many."""
    return DockerExecutor(base_url=base_url).cleanup_job(job_id)


class DockerExecutor(ExecutorBase):
    """Runs each replica as a container of the local (or $DOCKER_HOST) Docker engine.

    Options: `base_url` (default $DOCKER_HOST, else the local socket), `mem_limit` (a memory
    limit for every container, e.g. "4g"; unset = none), `timeout` (seconds per engine call).
    """

    name = "docker"
    #: Whether `start` creates the output dir and mounts on this machine: False for an engine
    #: on another host (the SSH executor's Docker bridge), whose paths are that host's.
    create_local_dirs = True

    def __init__(self, base_url: str | None = None, *, mem_limit: str | int | None = None, timeout: float = 120) -> None:
        self.base_url = base_url
        self.mem_limit = mem_limit
        self.timeout = timeout
        self._client_obj: docker_sdk.DockerClient | None = None
        self._lock = threading.Lock()
        self._watches: dict[str, _Watch] = {}
        self._stopped: set[str] = set()

    # ------------------------------------------------------------------ engine access

    @property
    def url(self) -> str:
        return engine_url(self.base_url)

    def client(self) -> docker_sdk.DockerClient:
        """The SDK client, connected on first use (ExecutorError if the engine is down)."""
        with self._lock:
            if self._client_obj is None:
                self._client_obj = connect(self.base_url, self.timeout)
            return self._client_obj

    def _wrap(self, error: Exception, what: str) -> ExecutorError:
        """A one-line ExecutorError for an SDK/HTTP failure during `what`."""
        return wrap_error(error, what, self.url)

    def command_for(self, launch: ReplicaLaunch) -> list[str]:
        """The container's command; empty means the image's own ENTRYPOINT/CMD."""
        return list(launch.argv)

    def check(self, launches: Sequence[ReplicaLaunch]) -> None:
        """Every replica has an image to run (the spec's business; the engine is not asked)."""
        for launch in launches:
            self._image_of(launch)

    def ready(self, launches: Sequence[ReplicaLaunch]) -> None:
        """The engine answers and every image that will not be built is present locally (or
        names a registry to pull from)."""
        docker = sdk()

        client = self.client()
        for launch in launches:
            image = self._image_of(launch)
            try:
                client.images.get(image)
            except docker.errors.ImageNotFound:
                if not has_registry_host(image):
                    raise ExecutorError(image_missing_message(image)) from None
            except docker.errors.DockerException as e:
                raise self._wrap(e, f"looking up image [{image}]") from e

    @staticmethod
    def _image_of(launch: ReplicaLaunch) -> str:
        image = launch.image_uri
        if launch.local_package is not None:
            image = launch.image_uri or launch.local_package.executor_image_uri
            if not image:
                raise InvalidValueError(
                    "--worker-pool-spec", "Key [executor-image-uri] is required when `local-package-path` is specified."
                )
        if not image:
            raise InvalidValueError("--worker-pool-spec", f"{launch.task_name} has no image to run: give container-image-uri.")
        return image

    # ------------------------------------------------------------------ prepare / build

    def prepare(
        self,
        launches: Sequence[ReplicaLaunch],
        *,
        cancelled: threading.Event,
        progress: Callable[[str], None],
    ) -> list[ReplicaLaunch]:
        """Check the engine and images; build autopackaged images; install packageUris.

        Launches with `local_package` (base image: `image_uri`, else the package's
        executor_image_uri) get the built image, an empty command (the image's ENTRYPOINT
        runs), their `args` unchanged, workdir None and local_package None. Launches with
        `package_uris` get an image derived from theirs with those installed
        (`vcli.executors.docker.installs`). If `cancelled` is set meanwhile, returns promptly
        with the launches as given (nothing built); the caller checks `cancelled`.
        """
        self.client()
        built: dict[tuple[Any, ...], str] = {}
        checked: set[str] = set()
        out: list[ReplicaLaunch] = []
        for launch in launches:
            if cancelled.is_set():
                return list(launches)
            if launch.local_package is None:
                if launch.image_uri and launch.image_uri not in checked and not launch.package_uris:
                    ensure_image(self.client(), launch.image_uri, self.url, cancelled, progress)
                    checked.add(launch.image_uri)
                ready = launch
            else:
                base = launch.image_uri or launch.local_package.executor_image_uri
                if not base:
                    raise InvalidValueError(
                        "--worker-pool-spec", "Key [executor-image-uri] is required when `local-package-path` is specified."
                    )
                key = (launch.local_package, base)
                if key not in built:
                    tag = build_package(self.client(), launch.local_package, base, base_url=self.base_url,
                                        timeout=self.timeout, cancelled=cancelled, progress=progress)
                    if tag is None:  # cancelled
                        return list(launches)
                    built[key] = tag
                ready = replace(launch, image_uri=built[key], command=(), workdir=None, local_package=None)
            if ready.package_uris and ready.image_uri:
                installs = packages.installs_for(package_uris=ready.package_uris)
                key = (installs, ready.image_uri)
                if key not in built:
                    tag = build_installs(self.client(), ready.image_uri, installs, base_url=self.base_url,
                                         timeout=self.timeout, cancelled=cancelled, progress=progress,
                                         label=f" for {launch.task_name}")
                    if tag is None:
                        return list(launches)
                    built[key] = tag
                ready = replace(ready, image_uri=built[key])
            out.append(ready)
        return out

    # ------------------------------------------------------------------ replicas

    def reserve_port(self, placement: Placement) -> int:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])

    def start(self, launch: ReplicaLaunch) -> ReplicaHandle:
        docker = sdk()

        client = self.client()
        kwargs = container_create_kwargs(launch, mem_limit=self.mem_limit)
        if self.create_local_dirs:
            _make_mount_sources(launch, kwargs)
        try:
            container = self._create(client, kwargs)
        except docker.errors.ImageNotFound as e:
            raise ExecutorError(image_missing_message(kwargs["image"])) from e
        except docker.errors.DockerException as e:
            raise self._wrap(e, f"creating the container of replica {launch.task_name}") from e
        except OSError as e:
            raise engine_down(self.url) from e
        try:
            leases = held_leases(launch)  # before it runs: a GPU leased by another replica is refused
        except ExecutorError:
            _remove_quietly(client, container.id)
            raise
        writer = LogWriter(launch.log_path)
        watch = _Watch(task_name=launch.task_name, writer=writer, secrets=secret_values(launch))
        with self._lock:
            self._watches[container.id] = watch
        try:
            container.start()
        except docker.errors.APIError as e:
            # The replica fails (like a process whose binary is missing); the job decides.
            _not_started(client, container.id, e, launch.task_name, watch)
        else:
            try:
                self._keep_leases(launch, container.id, leases)
            except ExecutorError:
                _remove_quietly(client, container.id)  # never a container running on GPUs nothing holds
                with self._lock:
                    self._watches.pop(container.id, None)
                writer.close()
                raise
            watch.thread = threading.Thread(
                target=self._watch, args=(container.id, watch), name=f"vcli-docker-{launch.task_name}", daemon=True
            )
            watch.thread.start()
        return ReplicaHandle(executor=self.name, host=launch.placement.host, ref=container.id, task_name=launch.task_name)

    def _keep_leases(self, launch: ReplicaLaunch, cid: str, leases: Sequence[Any] | None = None) -> None:
        """Hand the container's GPU leases to a keeper that lives until it stops (see
        `vcli.executors.leases.keep_container_leases`)."""
        keep_container_leases(launch, cid, self.url, leases)

    def _create(self, client: Any, kwargs: dict[str, Any]) -> Any:
        docker = sdk()

        try:
            return client.containers.create(**kwargs)
        except docker.errors.APIError as e:
            if e.status_code != 409:  # 409: the name is in use
                raise
        # An earlier incarnation of this very replica (same job, trial, task): replace it.
        try:
            client.api.remove_container(kwargs["name"], force=True)
        except docker.errors.NotFound:
            pass
        return client.containers.create(**kwargs)

    def find(self, launch: ReplicaLaunch) -> ReplicaHandle | None:
        """The replica's container (by its name, checked against its job and task labels) if it
        was ever started; one only created is left for `start` to replace."""
        docker = sdk()

        try:
            info = self.client().api.inspect_container(container_name(launch))
        except docker.errors.NotFound:
            return None
        except docker.errors.DockerException as e:
            raise self._wrap(e, f"looking for the container of replica {launch.task_name}") from e
        labels = (info.get("Config") or {}).get("Labels") or {}
        started = str((info.get("State") or {}).get("StartedAt") or "")
        if labels.get(LABEL_JOB) != launch.job_id or labels.get(LABEL_TASK) != launch.task_name \
                or not started or started.startswith("0001-"):
            return None
        return ReplicaHandle(executor=self.name, host=launch.placement.host, ref=info["Id"], task_name=launch.task_name)

    def adopt(self, handle: ReplicaHandle, launch: ReplicaLaunch) -> None:
        """Stream an adopted container's output into its log again, after the last line there."""
        with self._lock:
            if handle.ref in self._watches:
                return
            watch = _Watch(task_name=launch.task_name, writer=LogWriter(launch.log_path),
                           secrets=secret_values(launch), after=last_times(launch.log_path))
            self._watches[handle.ref] = watch
        watch.thread = threading.Thread(target=self._watch, args=(handle.ref, watch),
                                        name=f"vcli-docker-{launch.task_name}", daemon=True)
        watch.thread.start()

    def _watch(self, cid: str, watch: _Watch) -> None:
        """Stream stdout and stderr into the log, then record the exit."""
        streams = [
            threading.Thread(target=self._stream, args=(cid, name, watch), name=f"vcli-docker-{name}", daemon=True)
            for name in ("stdout", "stderr")
        ]
        for t in streams:
            t.start()
        for t in streams:
            t.join()
        docker = sdk()

        try:
            api = self.client().api
            api.wait(cid)
            state = api.inspect_container(cid)["State"]
            final = status_from_state(state, watch.task_name, stopped=cid in self._stopped)
        except docker.errors.NotFound:
            final = ReplicaStatus(running=False, exit_code=None, message=f"replica {watch.task_name}: its container was removed")
        except Exception as e:  # engine gone mid-run
            final = ReplicaStatus(running=False, exit_code=None, message=f"replica {watch.task_name}: lost the Docker engine ({e})")
        # The job's end line ("Task completed. Exit code (N). ...") says how a plain exit ended;
        # only what it cannot say (out of memory, never started, the engine lost) gets a line here.
        if final.message and final.message != f"replica {watch.task_name} exited with code {final.exit_code}":
            watch.writer.write("vcli", final.message)
        watch.writer.close()
        watch.final = final
        watch.done.set()

    def _stream(self, cid: str, name: str, watch: _Watch) -> None:
        after = watch.after.get(name)
        try:
            for ts, line in iter_log_lines(self._frames(cid, name), watch.secrets):
                if after is not None and ts is not None and ts <= after + 1e-6:  # the log keeps µs
                    continue  # already in the log (an adopted container)
                watch.writer.write(name, watch.mask(line), ts)
        except Exception:  # the container was removed / engine went away
            pass

    def _frames(self, cid: str, name: str) -> Iterator[bytes]:
        """Log frames of one stream: followed live, then a catch-up read after the exit.

        The engine's follow mode ends without the last message when it is a partial line
        (output not ending in a newline); a plain read afterwards has it. Timestamps are
        fixed-width (RFC3339NanoFixed), so they compare as bytes.
        """
        api = self.client().api
        which = {"stdout": name == "stdout", "stderr": name == "stderr", "timestamps": True}
        last = b""
        for frame in api.logs(cid, stream=True, follow=True, **which):
            last = frame.split(b" ", 1)[0]
            yield frame
        since = int(parse_docker_timestamp(last.decode()) or 0) if last else None
        extra = {"since": since} if since else {}
        for frame in api.logs(cid, stream=True, follow=False, **which, **extra):
            if frame.split(b" ", 1)[0] > last:
                yield frame

    def poll(self, handle: ReplicaHandle) -> ReplicaStatus:
        docker = sdk()

        watch = self._watches.get(handle.ref)
        if watch is not None and watch.final is not None:
            return watch.final
        try:
            state = self.client().api.inspect_container(handle.ref)["State"]
        except docker.errors.NotFound:
            return ReplicaStatus(running=False, exit_code=None, message=f"replica {handle.task_name}: its container no longer exists")
        except docker.errors.DockerException as e:
            raise self._wrap(e, f"inspecting replica {handle.task_name}") from e
        except OSError as e:
            raise engine_down(self.url) from e
        status = status_from_state(state, handle.task_name, stopped=handle.ref in self._stopped)
        if not status.running and watch is not None and not watch.done.is_set():
            # Exited, but its log is still being drained: report the exit once it is complete.
            now = time.monotonic()
            if watch.exited_at is None:
                watch.exited_at = now
            if now - watch.exited_at < _LOG_DRAIN_SECONDS and not watch.done.wait(0.05):
                return ReplicaStatus(running=True)
            if watch.final is not None:
                return watch.final
        return status

    def stop(self, handles: Sequence[ReplicaHandle], *, grace_seconds: float) -> None:
        """SIGTERM, `grace_seconds`, SIGKILL (docker stop), all containers at once."""
        docker = sdk()

        grace = max(0, math.ceil(grace_seconds))
        api = self.client().api
        errors: list[Exception] = []

        def stop_one(handle: ReplicaHandle) -> None:
            self._stopped.add(handle.ref)
            try:
                api.stop(handle.ref, timeout=grace)
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as e:
                if e.status_code != 304:  # 304: already stopped
                    errors.append(e)
            except Exception as e:
                errors.append(e)

        _in_parallel(stop_one, handles)
        if errors:
            raise self._wrap(errors[0], "stopping replicas") from errors[0]

    def fetch_dir(self, handle: ReplicaHandle, path: str, dest: str) -> bool:
        """The contract's copy (the directory is bind-mounted at the same path here), with the
        container paused for it (`docker pause`, undone even if this process dies:
        `vcli.executors.freeze`), so a trainer that rewrites its checkpoint fast still gives
        a consistent copy."""
        from vcli.executors import copy_dir_atomically
        from vcli.executors.freeze import container_pids, copy_still, paused

        try:
            api = self.client().api
            running = bool(api.inspect_container(handle.ref)["State"].get("Running"))
        except Exception:  # gone, or the engine is down: copy what the files are
            running = False
        if not running:
            return copy_dir_atomically(path, dest)
        with paused(api, self.url, handle.ref) as (stop, cont):
            return copy_still(container_pids(api, handle.ref), stop, cont, path, dest)

    def read_file(self, handle: ReplicaHandle, path: str) -> str | None:
        # Every path a replica is told about (output dir, mounts) is bind-mounted at the same path.
        return read_replica_file(path)

    def release(self, handles: Sequence[ReplicaHandle]) -> None:
        docker = sdk()

        api = self.client().api
        errors: list[Exception] = []

        def remove(handle: ReplicaHandle) -> None:
            try:
                api.remove_container(handle.ref, force=True, v=True)
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as e:
                if e.status_code != 409:  # 409: removal already in progress
                    errors.append(e)
            except Exception as e:
                errors.append(e)
            watch = self._watches.get(handle.ref)
            if watch is not None and watch.thread is not None:
                watch.thread.join(timeout=5)

        _in_parallel(remove, handles)
        if errors:
            raise self._wrap(errors[0], "removing replica containers") from errors[0]

    # ------------------------------------------------------------------ whole jobs

    def job_containers(self, job_id: str) -> list[str]:
        """Ids of every container (running or not) labelled with `job_id`."""
        try:
            found = self.client().api.containers(all=True, quiet=True, filters={"label": f"{LABEL_JOB}={job_id}"})
        except Exception as e:
            raise self._wrap(e, f"listing the containers of job {job_id}") from e
        return [c["Id"] for c in found]

    def cleanup_job(self, job_id: str) -> int:
        """Remove every container of job `job_id` (force: running ones are killed)."""
        ids = self.job_containers(job_id)
        self.release([ReplicaHandle(executor=self.name, host="local", ref=cid, task_name="") for cid in ids])
        return len(ids)


def _in_parallel(fn: Callable[[ReplicaHandle], None], handles: Sequence[ReplicaHandle]) -> None:
    """Run `fn` for every handle at once (engine calls block for seconds each); one inline."""
    if len(handles) <= 1:
        for h in handles:
            fn(h)
        return
    threads = [threading.Thread(target=fn, args=(h,), daemon=True) for h in handles]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _make_mount_sources(launch: ReplicaLaunch, kwargs: dict[str, Any]) -> None:
    """Create the local sources of the container's writable volumes and bind mounts (else the
    engine creates them, owned by root, or refuses a Mount without its source), and place
    the seed directories, bind-mounted at the same path."""
    for path, volume in kwargs["volumes"].items():
        if volume["mode"] == "rw":
            os.makedirs(path, exist_ok=True)
    for mount in kwargs.get("mounts", ()):
        os.makedirs(mount["Source"], exist_ok=True)
    place_seed_dirs(launch)


def _remove_quietly(client: Any, cid: str) -> None:
    """Force-remove container `cid`, on a path that is already failing: an engine error here
    would hide the error being raised."""
    docker = sdk()
    try:
        client.api.remove_container(cid, force=True)
    except docker.errors.DockerException:
        pass


def _not_started(client: Any, cid: str, error: Any, task_name: str, watch: _Watch) -> None:
    """Close `watch` with the final status of a container whose start the engine refused
    (`error`, an APIError): the engine's own state when it has one, else exit code 127."""
    docker = sdk()
    try:
        state = client.api.inspect_container(cid)["State"]
        if not state.get("Error"):
            state = dict(state, Error=str(error.explanation or error), Status="created")
    except docker.errors.DockerException:
        state = {"Status": "created", "Error": str(error.explanation or error), "ExitCode": 127}
    final = status_from_state(state, task_name)
    watch.writer.write("vcli", final.message or f"{task_name} could not start")
    watch.writer.close()
    watch.final = final
    watch.done.set()

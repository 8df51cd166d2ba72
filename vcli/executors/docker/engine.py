"""Access to a Docker engine: connecting, one-line errors, and finding or pulling images.

Shared by the executor (`executor.py`) and the image builder (`autopackage.py`). The Docker
SDK is imported inside functions, so importing this module is cheap.
"""

from __future__ import annotations

import os
import re
import threading
from typing import TYPE_CHECKING, Any, Callable, Sequence

from vcli.errors import ExecutorError, MissingExtraError

if TYPE_CHECKING:  # pragma: no cover
    import docker as docker_sdk

#: The example trainer image of this repository (Dockerfile at the repository root).
TRAINER_IMAGE = "vcli-trainer:latest"
DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"


def sdk() -> Any:
    """The Docker SDK module (`import docker`); without the `docker` extra, one clear line
    (exit 3) instead of a traceback."""
    try:
        import docker
    except ImportError:
        raise MissingExtraError("The docker executor", "docker", "the Docker SDK for Python") from None
    return docker


def docker_name(text: str, *, lower: bool = False) -> str:
    """`text` with every run of characters Docker rejects in names and tags replaced by `-`."""
    out = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-.") or "x"
    return out.lower() if lower else out


def engine_url(base_url: str | None) -> str:
    """The engine an executor with `base_url` talks to: it, else $DOCKER_HOST, else the socket."""
    return base_url or os.environ.get("DOCKER_HOST") or DEFAULT_DOCKER_HOST


def engine_down(url: str) -> ExecutorError:
    return ExecutorError(
        f"Cannot connect to the Docker engine at {url}: is dockerd running? "
        "Start it with `sudo systemctl start docker` (or `dockerd &`)."
    )


def connect(base_url: str | None, timeout: float) -> docker_sdk.DockerClient:
    """A pinged SDK client of `base_url`'s engine; ExecutorError (one line) if it does not answer."""
    docker = sdk()

    url = engine_url(base_url)
    try:
        if base_url:
            client = docker.DockerClient(base_url=base_url, version="auto", timeout=int(timeout), max_pool_size=256)
        else:
            client = docker.from_env(version="auto", timeout=int(timeout), max_pool_size=256)
        client.ping()
    except docker.errors.DockerException as e:
        raise engine_down(url) from e
    except OSError as e:
        raise engine_down(url) from e
    return client


def wrap_error(error: Exception, what: str, url: str) -> ExecutorError:
    """A one-line ExecutorError for an SDK/HTTP failure during `what` on the engine at `url`."""
    docker = sdk()
    import requests

    if isinstance(error, (requests.exceptions.ConnectionError, ConnectionError)):
        return engine_down(url)
    if isinstance(error, docker.errors.APIError):
        detail = error.explanation or str(error)
        if isinstance(detail, bytes):
            detail = detail.decode("utf-8", errors="replace")
        return ExecutorError(f"Docker engine error while {what}: {str(detail).strip().splitlines()[0] if detail else error}")
    return ExecutorError(f"Docker error while {what}: {error}")


def cannot_run_images(images: Sequence[str], base_url: str | None = None, timeout: float = 5.0) -> str | None:
    """Why the engine at `base_url` cannot run these images now (no Docker SDK, the engine does
    not answer, an image neither present nor pullable), or None. A local socket is asked
    directly over HTTP (a few ms; the SDK costs a quarter of a second to import); other
    engines through the SDK."""
    import importlib.util

    if importlib.util.find_spec("docker") is None:
        return str(MissingExtraError("The docker executor", "docker", "the Docker SDK for Python"))
    url = engine_url(base_url)
    local = [i for i in images if not has_registry_host(i)]
    if not url.startswith("unix://") or os.environ.get("DOCKER_TLS_VERIFY"):
        try:
            client = connect(base_url, timeout)
        except ExecutorError as e:
            return str(e)
        try:
            for image in local:
                try:
                    client.images.get(image)
                except sdk().errors.ImageNotFound:
                    return image_missing_message(image)
        except Exception as e:  # any other engine error means "not here"
            return f"the Docker engine did not answer about images: {e}"
        finally:
            client.close()
        return None
    import http.client
    import socket
    from urllib.parse import quote

    class _Unix(http.client.HTTPConnection):
        def connect(self) -> None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(timeout)
            self.sock.connect(url[len("unix://"):])

    def status(path: str) -> int:
        conn = _Unix("localhost", timeout=timeout)
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            resp.read()
            return resp.status
        finally:
            conn.close()

    try:
        if status("/_ping") != 200:
            return str(engine_down(url))
        for image in local:
            if status(f"/images/{quote(image, safe='/:@')}/json") != 200:
                return image_missing_message(image)
    except OSError:
        return str(engine_down(url))
    return None


def has_registry_host(image: str) -> bool:
    """`gcr.io/p/i:t`, `localhost:5000/i` yes; `vcli-trainer:latest`, `library/python` no."""
    first, sep, _ = image.partition("/")
    return bool(sep) and ("." in first or ":" in first or first == "localhost")


def image_missing_message(image: str) -> str:
    if image == TRAINER_IMAGE or image.startswith(TRAINER_IMAGE.split(":")[0] + ":"):
        how = f"build it with `docker build -t {image} .` in the vcli repository (or run .ci/docker-setup.sh)"
    else:
        how = f"build it (`docker build -t {image} <dir>`) or load it (`docker load`); vcli pulls only images with a registry host"
    return f"Image [{image}] is not in the local Docker engine: {how}."


def split_tag(image: str) -> tuple[str, str | None]:
    """(repository, tag) as the pull API wants them; tag None for a digest reference."""
    if "@" in image:
        return image, None
    name, _, last = image.rpartition("/")
    if ":" in last:
        repo_last, tag = last.rsplit(":", 1)
        return (f"{name}/{repo_last}" if name else repo_last), tag
    return image, "latest"


def ensure_image(
    client: Any,
    image: str,
    url: str,
    cancelled: threading.Event | None,
    progress: Callable[[str], None] | None,
) -> str:
    """The id of `image` in the engine, pulling it only if it names a registry host.

    ExecutorError if it is absent and cannot be pulled; "" if `cancelled` is set mid-pull.
    """
    docker = sdk()

    try:
        return str(client.images.get(image).id)
    except docker.errors.ImageNotFound:
        pass
    except docker.errors.DockerException as e:
        raise wrap_error(e, f"looking up image [{image}]", url) from e
    if not has_registry_host(image):
        raise ExecutorError(image_missing_message(image))
    repo, tag = split_tag(image)
    if progress:
        progress(f"Pulling image [{image}] ...")
    try:
        for chunk in client.api.pull(repo, tag=tag, stream=True, decode=True):
            if cancelled is not None and cancelled.is_set():
                return ""
            if "error" in chunk:
                raise ExecutorError(f"Cannot pull image [{image}]: {str(chunk['error']).strip().splitlines()[0]}")
        return str(client.images.get(image).id)
    except ExecutorError:
        raise
    except docker.errors.DockerException as e:
        detail = getattr(e, "explanation", None) or str(e)
        raise ExecutorError(f"Cannot pull image [{image}]: {str(detail).strip().splitlines()[0]}") from e

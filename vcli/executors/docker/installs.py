"""pythonPackageSpec.packageUris in containers: an image derived from the executor image.

Vertex's prebuilt training containers `pip install` every packageUris distribution before
`python -m <pythonModule>` runs. Here the same install happens once, in a local `docker build`
of a small image on top of the executor image (no registry): `FROM <executor image>`, the
distributions copied in, one install step. Its tag is `vcli-env/<image name>:<key>`, where the
key is `vcli.packages.Installs.key` of what is installed and of the executor image's id, and
the key is also the image's `LABEL_PACKAGE_HASH`: a second job with the same packages on the
same image reuses the image without a build.

The install step uses the image's `python3 -m pip` (as Vertex does; the build argument
PIP_BREAK_SYSTEM_PACKAGES lets it install into a Debian-managed interpreter, and is not part of
the image's environment). An image whose python3 has no pip gets a virtual environment,
`/opt/vcli-env` (`--system-site-packages`, so the image's own packages stay visible), first on
PATH. Every replica's container still has a filesystem of its own: nothing here is shared at
run time.

The Docker SDK is imported inside functions, so importing this module is cheap.
"""

from __future__ import annotations

import io
import json
import os
import posixpath
import shlex
import tarfile
import tempfile
import threading
import time
from typing import Any, Callable

from vcli import packages
from vcli.executors.docker.autopackage import LABEL_PACKAGE_HASH, build_ca_file, run_build
from vcli.executors.docker.engine import docker_name, engine_url, ensure_image, sdk, wrap_error

__all__ = ["ENV_REPOSITORY", "VENV_IN_IMAGE", "build_installs", "installs_dockerfile"]

#: Repository of images with packageUris installed (tag: the installs' key).
ENV_REPOSITORY = "vcli-env"
#: The virtual environment made in an image whose python3 has no pip.
VENV_IN_IMAGE = "/opt/vcli-env"
#: Where the distributions are copied in the image (and in the build context).
_FILES_IN_IMAGE = "/tmp/vcli-packages"
_CTX_FILES = "packages"
_CTX_DOCKERFILE = ".vcli-build/Dockerfile"  # where `autopackage.run_build` looks for it
_BUILD_CA_IN_IMAGE = "/tmp/vcli-build-ca.crt"
_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _in_image(index: int, path: str) -> str:
    """A distribution's path in the image: a directory per entry keeps equal file names apart
    and keeps the file name itself (pip reads a wheel's tags from it)."""
    return f"{_FILES_IN_IMAGE}/{index}/{os.path.basename(path.rstrip('/'))}"


def installs_dockerfile(base_image: str, installs: packages.Installs, *, build_ca: bool = False) -> str:
    """The Dockerfile that installs `installs.packages` (local paths) on `base_image`."""
    targets = [_in_image(i, p) for i, p in enumerate(installs.packages)]
    py = f"{VENV_IN_IMAGE}/bin/python3"
    install = (
        "set -e; "
        "if python3 -m pip --version >/dev/null 2>&1; then py=python3; "
        f"else python3 -m venv --system-site-packages {VENV_IN_IMAGE}; py={py}; fi; "
        '"$py" -m pip install --no-cache-dir --no-input ' + " ".join(shlex.quote(t) for t in targets)
        + f"; rm -rf {_FILES_IN_IMAGE}"
    )
    out = [
        f"FROM {base_image}\n",
        f"COPY {json.dumps([_CTX_FILES, _FILES_IN_IMAGE])}\n",
        # Build arguments are in the RUN step's environment only, never in the image's.
        "ARG PIP_BREAK_SYSTEM_PACKAGES=1\n",
        "ARG PIP_DISABLE_PIP_VERSION_CHECK=1\n",
    ]
    if build_ca:
        out.append(f"COPY {json.dumps(['.vcli-build/ca.crt', _BUILD_CA_IN_IMAGE])}\n")
        out.append(f"ARG PIP_CERT={_BUILD_CA_IN_IMAGE}\n")
    out.append(f"RUN {install}\n")
    # Harmless where no environment was made; `python3 -m` finds the one that was.
    out.append(f"ENV PATH={VENV_IN_IMAGE}/bin:${{PATH:-{_DEFAULT_PATH}}}\n")
    return "".join(out)


def _write_context(installs: packages.Installs, dockerfile: str, ca_file: str | None, out: Any) -> None:
    with tarfile.open(fileobj=out, mode="w") as tar:
        for i, path in enumerate(installs.packages):
            rel = _in_image(i, path)[len(_FILES_IN_IMAGE) + 1:]
            tar.add(path, arcname=f"{_CTX_FILES}/{rel}", recursive=True)
        data = dockerfile.encode()
        info = tarfile.TarInfo(_CTX_DOCKERFILE)
        info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
        tar.addfile(info, io.BytesIO(data))
        if ca_file:
            tar.add(ca_file, arcname=posixpath.join(posixpath.dirname(_CTX_DOCKERFILE), "ca.crt"), recursive=False)


def build_installs(
    client: Any,
    base: str,
    installs: packages.Installs,
    *,
    base_url: str | None,
    timeout: float,
    cancelled: threading.Event,
    progress: Callable[[str], None],
    label: str = "",
) -> str | None:
    """The tag of `base` with `installs` installed, built unless an image of that key exists;
    None if cancelled. A failed install raises ExecutorError `Cannot install ...: <pip's line>`."""
    docker = sdk()

    from vcli.errors import ExecutorError

    url = engine_url(base_url)
    base_id = ensure_image(client, base, url, cancelled, progress)
    if cancelled.is_set():
        return None
    key = installs.key(f"docker-image\0{base_id}")
    name = docker_name(base.rsplit("/", 1)[-1].split(":", 1)[0].split("@", 1)[0], lower=True) or "image"
    tag = f"{ENV_REPOSITORY}/{name}:{key[:20]}"
    what = installs.describe()
    try:
        if (client.images.get(tag).labels or {}).get(LABEL_PACKAGE_HASH) == key:
            progress(f"Using the container image [{tag}] with {what} installed{label}.")
            return tag
    except docker.errors.ImageNotFound:
        pass
    except docker.errors.DockerException as e:
        raise wrap_error(e, f"looking up image [{tag}]", url) from e
    started = time.monotonic()
    progress(f"Installing {what}{label} into the container image [{tag}] (executor image [{base}]) ...")
    ca_file = build_ca_file()
    dockerfile = installs_dockerfile(base, installs, build_ca=ca_file is not None)
    lines: list[str] = []

    def keep(line: str) -> None:
        lines.append(line)  # pip's own output: the reason of a failure is in it

    try:
        with tempfile.TemporaryFile(prefix="vcli-build-") as context:
            _write_context(installs, dockerfile, ca_file, context)
            context.seek(0)
            ok = run_build(client, context, tag, key, base_url=base_url, timeout=timeout, cancelled=cancelled,
                           progress=keep)
    except ExecutorError as e:
        reason = packages.error_line(lines) or str(e)
        raise ExecutorError(f"Cannot install {what}{label}: {reason}") from None
    if not ok:
        return None
    progress(f"Installed {what}{label} in {time.monotonic() - started:.1f}s.")
    return tag

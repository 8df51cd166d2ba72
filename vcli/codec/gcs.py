"""`gs://` locations on the machines vcli runs on: a local storage root stands for Cloud Storage.

`gs://bucket/path` is `<root>/bucket/path`, where the root is the property `storage/gcs-root`
(`vcli config set storage/gcs-root DIR`), default `<vcli home>/gcs`. The mapping is a
bijection, so a path under the root names exactly one gs:// URI (`gcs_mappings` relies on it).

Where each kind of location goes (decoding maps them, so the spec only holds local paths):
- `baseOutputDirectory.outputUriPrefix` and `packageUris`: the local path under the root.
- gs:// URIs in args (and command): Vertex trainers read those through Cloud Storage FUSE at
  `/gcs/<bucket>/<path>`, so they become `/gcs/bucket/path` when `/gcs` exists on this machine,
  else the local path under the root. Containers see the root at `/gcs` and at its own path
  (the Docker executor mounts both), so either spelling works there.
"""

from __future__ import annotations

import os
import re
from typing import Iterable

from vcli.spec import CustomJobSpec

#: Where Vertex's Cloud Storage FUSE shows buckets inside a replica.
FUSE_ROOT = "/gcs"
SCHEME = "gs://"
#: A gs:// URI at the start of an arg value or after `=`, `,` or `:` (`--data=gs://b/x`).
_IN_ARG = re.compile(r"(^|[=,:])gs://")


def storage_root() -> str:
    """The local directory that holds every bucket (absolute; it may not exist yet)."""
    from vcli import properties

    configured = properties.get("storage/gcs-root")
    if configured:
        return os.path.abspath(os.path.expanduser(configured))
    from vcli.store import default_home

    return os.path.abspath(str(default_home() / "gcs"))


def local_path(uri: str, root: str | None = None) -> str:
    """`gs://bucket/path` -> `<root>/bucket/path` (no trailing slash). ValueError: no bucket."""
    rest = uri[len(SCHEME):].strip("/")
    if not rest or rest.startswith("."):
        raise ValueError(f"[{uri}] names no bucket: use gs://BUCKET/PATH")
    return os.path.join(root or storage_root(), os.path.normpath(rest))


def missing_package(uri: str) -> str | None:
    """Why a packageUris entry (as the spec holds it: a local path, a file:// URI, or a path
    mapped from gs://) is not there now, or None. Other schemes are the installing
    executor's to judge."""
    local = uri[len("file://"):] if uri.startswith("file://") else uri
    if re.match(r"^[a-z][a-z0-9+.-]+://", local):
        return None
    there = os.path.expanduser(local)
    if os.path.isfile(there) or os.path.isdir(there):
        return None
    if os.path.exists(there):  # a FIFO blocks the install for ever, a device never ends
        return f"the package [{local}] is not a file or a directory (an sdist, a wheel or a package directory)"
    root = storage_root().rstrip("/") + "/"
    gs = f" (gs://{local[len(root):]} under storage/gcs-root)" if local.startswith(root) else ""
    return f"the package [{local}]{gs} is not found"


def arg_root(root: str | None = None) -> str:
    """What gs:// in args becomes: `/gcs` when it exists here (as on Vertex), else the root."""
    return FUSE_ROOT if os.path.isdir(FUSE_ROOT) else (root or storage_root())


def map_args(values: Iterable[str], root: str | None = None) -> tuple[str, ...]:
    """Args (or a command) with each gs:// URI replaced by its path under `arg_root()`."""
    values = tuple(values)
    if not any(SCHEME in v for v in values):
        return values
    prefix = arg_root(root).rstrip("/") + "/"
    return tuple(_IN_ARG.sub(lambda m: m.group(1) + prefix, v) for v in values)


def refers_to_storage(texts: Iterable[str], root: str) -> bool:
    """Whether any text (an env value, an arg, a path) names a path under `root` or `/gcs`."""
    pattern = re.compile(rf"(^|[=,:])({re.escape(root.rstrip('/'))}|{FUSE_ROOT})(/|$)")
    return any(pattern.search(t) for t in texts)


def _uri_of(path: str, root: str) -> str | None:
    for base in (root.rstrip("/"), FUSE_ROOT):
        if path == base or not path.startswith(base + "/"):
            continue
        rest = path[len(base) + 1:]
        return SCHEME + rest if rest else None
    return None


def gcs_mappings(spec: CustomJobSpec, root: str | None = None) -> list[tuple[str, str]]:
    """The (gs:// URI, local path) pairs a decoded job uses, in job order, each once.

    For the caller to say once per run what was mapped where: the base output directory, the
    package URIs and the arg values that lie under the storage root (or `/gcs`).
    """
    root = root or storage_root()
    found: dict[str, str] = {}

    def note(path: str | None) -> None:
        uri = _uri_of(path, root) if path else None
        if uri and uri not in found:
            found[uri] = local_path(uri, root)

    note(spec.base_output_directory)
    for pool in spec.worker_pool_specs:
        ps, cs = pool.python_package_spec, pool.container_spec
        for uri in ps.package_uris if ps else ():
            note(uri)
        for value in (*(cs.command if cs else ()), *(cs.args if cs else ()), *(ps.args if ps else ())):
            for m in re.finditer(rf"(?:^|[=,:])((?:{re.escape(root.rstrip('/'))}|{FUSE_ROOT})/[^,=:]+)", value):
                note(m.group(1))
    return list(found.items())


def gcs_notice(spec: CustomJobSpec, root: str | None = None) -> str | None:
    """One line saying what was mapped where, or None when the job names no gs:// location."""
    root = root or storage_root()
    pairs = gcs_mappings(spec, root)
    if not pairs:
        return None
    where = ", ".join(f"{uri} -> {path}" for uri, path in pairs)
    fuse = (f"containers see it at {FUSE_ROOT}" if os.path.isdir(FUSE_ROOT)
            else f"containers see it at {FUSE_ROOT}; {FUSE_ROOT} does not exist here, so args name {root} directly")
    return f"Cloud Storage is the local root {root} (vcli config set storage/gcs-root DIR): {where}; {fuse}."

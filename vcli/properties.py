"""User properties, like `gcloud config`: a small JSON file in the user's config dir.

Known properties: `executor` (local|docker|ssh|ray: the default for --executor), `hosts` (default
--hosts), `ray/address` (the Ray cluster of --executor=ray: `ray://HOST:10001`, `HOST:PORT` or
`auto`; default $RAY_ADDRESS, else `auto`), `python` (the interpreter the local executor runs
`python -m` modules and `.py` scripts with; $VCLI_PYTHON wins; default: the one running vcli), `storage/gcs-root` (the local
directory that stands for Cloud Storage: gs://BUCKET/PATH is DIR/BUCKET/PATH; default
`<vcli home>/gcs`; see `vcli.codec.gcs`), `gpu/lease-dir` (this machine's host-wide GPU lease
directory; $VCLI_GPU_LEASE_DIR wins; default /tmp/vcli-gpu-leases; every vcli user of the machine
must use the same one), `gpu/exclude-busy` (true|false, default true: a GPU whose memory a
process vcli did not start holds is busy, on machines with nvidia-smi), `slurm/partition`,
`slurm/account`, `slurm/qos` (what --executor=slurm asks sbatch for; default Slurm's) and
`slurm/shared-dir` (the directory every Slurm node sees at the same path, for vcli's own files
there; default `<vcli home>/slurm`). `tracking/uri` (the MLflow
tracking URI that turns experiment tracking on; $MLFLOW_TRACKING_URI wins; see `vcli.tracking`).
Path: $VCLI_CONFIG_DIR/properties.json,
else $XDG_CONFIG_HOME/vcli/properties.json (~/.config/vcli/properties.json).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from vcli.errors import InvalidValueError, UsageError
from vcli.spec import ExecutorKind

#: property -> its allowed values (None: any text).
KNOWN = {
    "executor": tuple(k.value for k in ExecutorKind),
    "hosts": None,
    "python": None,
    "ray/address": None,
    "storage/gcs-root": None,
    "gpu/lease-dir": None,
    "gpu/exclude-busy": ("true", "false"),
    "slurm/partition": None,
    "slurm/account": None,
    "slurm/qos": None,
    "slurm/shared-dir": None,
    "tracking/uri": None,
}

#: property -> how a value is stored: a directory is made absolute when set, so that it does
#: not depend on where later commands run.
_NORMALIZE = {"storage/gcs-root": lambda v: os.path.abspath(os.path.expanduser(v)),
              "python": lambda v: os.path.abspath(os.path.expanduser(v)) if os.sep in v else v,
              "gpu/lease-dir": lambda v: os.path.abspath(os.path.expanduser(v)),
              "slurm/shared-dir": lambda v: os.path.abspath(os.path.expanduser(v))}


def config_dir() -> Path:
    env = os.environ.get("VCLI_CONFIG_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(xdg) / "vcli"


def _path() -> Path:
    return config_dir() / "properties.json"


def load() -> dict[str, str]:
    try:
        with open(_path(), encoding="utf-8") as f:
            data = json.load(f)
        return {str(k): str(v) for k, v in data.items()}
    except (FileNotFoundError, ValueError):
        return {}


def _check(prop: str) -> None:
    if prop not in KNOWN:
        raise UsageError(f"argument PROPERTY: unknown property [{prop}]; valid: [{', '.join(sorted(KNOWN))}]")


def get(prop: str, check: bool = False) -> str | None:
    if check:
        _check(prop)
    return load().get(prop)


def set_(prop: str, value: str) -> None:
    _check(prop)
    choices = KNOWN[prop]
    if choices and value not in choices:
        raise InvalidValueError(prop, f"[{value}] is not one of [{', '.join(choices)}]")
    if prop in _NORMALIZE:
        if not value.strip():
            raise InvalidValueError(prop, "must not be empty")
        value = _NORMALIZE[prop](value)
    if prop == "python":
        import shutil

        if shutil.which(value) is None:
            raise InvalidValueError(prop, f"[{value}] is not an executable file (nor a command on PATH)")
    data = load()
    data[prop] = value
    _write(data)


def unset(prop: str) -> None:
    _check(prop)
    data = load()
    data.pop(prop, None)
    _write(data)


def _write(data: dict[str, str]) -> None:
    path = _path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, sort_keys=True)
    os.replace(tmp, path)


def gpu_lease_dir() -> str:
    """This machine's GPU lease directory: $VCLI_GPU_LEASE_DIR, else `gpu/lease-dir`, else
    `/tmp/vcli-gpu-leases` (see `vcli.placement.gpulease`)."""
    from vcli.placement.gpulease import DEFAULT_DIR, ENV_DIR

    return os.environ.get(ENV_DIR) or get("gpu/lease-dir") or DEFAULT_DIR


def gpu_exclude_busy() -> bool:
    """`gpu/exclude-busy` (default true): a GPU that a process vcli did not start uses (by the
    host's nvidia-smi) is busy and not placed."""
    return (get("gpu/exclude-busy") or "true").lower() not in ("false", "0", "no", "off")

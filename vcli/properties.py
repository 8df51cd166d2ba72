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
`tuning/suggestion-wait` (seconds a free trial slot waits for the model's suggestion before it
takes one the model prepared ahead; default 0.3; see `vcli.control.suggesting`).
Path: $VCLI_CONFIG_DIR/properties.json,
else $XDG_CONFIG_HOME/vcli/properties.json (~/.config/vcli/properties.json).
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Iterator

from vcli.enums import ExecutorKind
from vcli.errors import ConfigError, InvalidValueError, UsageError

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
    "tuning/suggestion-wait": None,
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
    """The properties set. An absent file is none; a file vcli cannot read or that is not a
    JSON object of strings is a ConfigError naming it (read as "nothing set", it would run
    jobs with other settings, and the next `config set` would erase the rest)."""
    path = _path()
    try:
        with open(path, "rb") as f:
            raw = f.read(1 << 20)  # a few hundred bytes; bounded whatever the file is
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise ConfigError(f"vcli's properties file {path} cannot be read: {e.strerror}.") from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        why = "nested too deeply" if isinstance(e, RecursionError) else str(e).splitlines()[0]
        raise ConfigError(f"vcli's properties file {path} is damaged ({why}): correct it, or "
                          "remove it to go back to the defaults.") from None
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise ConfigError(f"vcli's properties file {path} is damaged (not a JSON object of strings): correct it, "
                          "or remove it to go back to the defaults.")
    return {str(k): v for k, v in data.items()}


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
    if any(ord(c) < 32 or ord(c) == 127 for c in value):  # a newline forged a line of `config list`
        raise InvalidValueError(prop, "must not contain control characters (newlines, tabs, escapes)")
    if prop == "hosts":
        import re

        bad = [n for n in value.split(",") if not re.fullmatch(r"[A-Za-z0-9._-]{1,63}", n.strip())]
        if bad:
            raise InvalidValueError(prop, f"[{bad[0]}] is not a host name of the inventory (letters, digits, '.', '_' "
                                          "or '-'); give names separated by commas")
    if prop == "tuning/suggestion-wait" and _seconds(value) is None:
        raise InvalidValueError(prop, f"[{value}] is not a number of seconds (0 or more)")
    if prop in _NORMALIZE:
        if not value.strip():
            raise InvalidValueError(prop, "must not be empty")
        value = _NORMALIZE[prop](value)
    if prop == "python":
        import shutil

        if shutil.which(value) is None:
            raise InvalidValueError(prop, f"[{value}] is not an executable file (nor a command on PATH)")
        _check_python(value)
    with _locked():
        data = load()
        data[prop] = value
        _write(data)


def _check_python(value: str) -> None:
    """`python` must run Python 3 (`/bin/true` was taken: every local job then SUCCEEDED without
    running its trainer)."""
    import subprocess

    try:
        out = subprocess.run([value, "-c", "import sys; print('vcli-python', sys.version_info[0])"],
                             stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        raise InvalidValueError("python", f"[{value}] could not be run: {e}") from None
    if "vcli-python 3" not in out.stdout:
        raise InvalidValueError("python", f"[{value}] is not a Python 3 interpreter (it did not run "
                                          "`python -c 'import sys; print(sys.version_info[0])'`)")


def unset(prop: str) -> None:
    _check(prop)
    with _locked():
        data = load()
        data.pop(prop, None)
        _write(data)


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    """Hold the config directory's lock for a read-modify-write of the properties: two
    `config set` at once (two terminals, two CI jobs) each keep their property."""
    import fcntl

    try:
        config_dir().mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(config_dir() / ".properties.lock", os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as e:
        raise ConfigError(f"vcli's config directory {config_dir()} cannot be used ($VCLI_CONFIG_DIR): "
                          f"{e.strerror}.") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _write(data: dict[str, str]) -> None:
    """Replace the properties file atomically (a private temporary file, then a rename)."""
    import tempfile

    path = _path()
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".properties.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f, indent=2, sort_keys=True)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except OSError as e:
        raise ConfigError(f"vcli's properties file {path} cannot be written: {e.strerror}.") from None


def gpu_lease_dir() -> str:
    """This machine's GPU lease directory: $VCLI_GPU_LEASE_DIR, else `gpu/lease-dir`, else
    `/tmp/vcli-gpu-leases` (see `vcli.placement.gpulease`)."""
    from vcli.placement.gpulease import DEFAULT_DIR, ENV_DIR

    return os.environ.get(ENV_DIR) or get("gpu/lease-dir") or DEFAULT_DIR


def gpu_exclude_busy() -> bool:
    """`gpu/exclude-busy` (default true): a GPU that a process vcli did not start uses (by the
    host's nvidia-smi) is busy and not placed."""
    return (get("gpu/exclude-busy") or "true").lower() not in ("false", "0", "no", "off")


def _seconds(value: str) -> float | None:
    try:
        v = float(value.strip().removesuffix("s"))
    except ValueError:
        return None
    return v if 0 <= v < float("inf") else None


def suggestion_wait() -> float | None:
    """`tuning/suggestion-wait` in seconds; None when unset (`vcli.control.suggesting.DEFAULT_WAIT`)."""
    return _seconds(get("tuning/suggestion-wait") or "")

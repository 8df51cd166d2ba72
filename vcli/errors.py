"""vcli's error tree and exit codes. Standard library only.

Every error a user can cause is a `VcliError`; the CLI prints it as one line in gcloud's style
(`ERROR: (vcli.custom-jobs.create) <message>`) and exits with the class's code. A failed job is
an outcome, not an exception: the CLI maps the final job state to an exit code.
"""

from __future__ import annotations

import os
from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    #: Invalid values (gcloud's InvalidArgumentException) and jobs that did not succeed.
    INVALID = 1
    #: Usage errors: unknown flag or key, missing required flag (argparse level in gcloud).
    USAGE = 2
    #: The executor (Docker engine, SSH host) cannot be reached or refused the work.
    EXECUTOR_UNAVAILABLE = 3
    #: A job or host named on the command line does not exist.
    NOT_FOUND = 4
    #: The job or study was cancelled.
    CANCELLED = 5
    #: The job or study ran and ended FAILED.
    JOB_FAILED = 6
    #: vcli's home (VCLI_HOME: the job store, logs, outputs) cannot be read or written.
    STORE_UNAVAILABLE = 7
    #: Another live vcli process already runs (controls) this job.
    CONTROLLER_CONFLICT = 8
    #: The feature asked for needs an optional part of vcli that is not installed (the line
    #: names the extra and the command that installs it).
    MISSING_EXTRA = 9
    #: A bug in vcli: an exception it did not expect (sysexits' EX_SOFTWARE).
    INTERNAL = 70
    INTERRUPTED = 130


def stopped_by(error: BaseException, what: str) -> dict[str, object]:
    """The error a job or study (`what`) is recorded FAILED with when vcli stops it because
    `error` happened under its controller: the store failing (Vertex's PERMISSION_DENIED, 7),
    else a bug in vcli (INTERNAL, 13)."""
    if isinstance(error, StoreError):
        return {"code": 7, "message": f"The {what} was stopped: {error}"}
    return {"code": 13, "message": f"The {what} was stopped: vcli's controller failed: {type(error).__name__}: {error}"}


class VcliError(Exception):
    """A user-facing error: `str(error)` is the one line that is printed."""

    exit_code: ExitCode = ExitCode.INVALID


class InvalidValueError(VcliError):
    """`Invalid value for [--flag]: message`, as gcloud prints it (exit 1)."""

    exit_code = ExitCode.INVALID

    def __init__(self, flag: str, message: str) -> None:
        self.flag = flag
        self.message = message
        super().__init__(f"Invalid value for [{flag}]: {message}")


class UsageError(VcliError):
    """An argparse-level error in gcloud (unknown dict key, missing required flag): exit 2."""

    exit_code = ExitCode.USAGE


class ConfigError(VcliError):
    """A bad `--config` file: names the file and the field path.

    `path` is the document's field path (`studySpec.metrics[0].goal`; "" for the document or
    the file as a whole) and `message` what is wrong there, for callers that report the error
    under the flag that wrote that field instead of the file."""

    exit_code = ExitCode.INVALID

    def __init__(self, text: str, *, path: str = "", message: str | None = None) -> None:
        super().__init__(text)
        self.path = path
        self.message = text if message is None else message


class NotFoundError(VcliError):
    exit_code = ExitCode.NOT_FOUND


#: Each extra's packages, for `pipx inject` (which takes packages, not extras). pyproject.toml's
#: [project.optional-dependencies] is the source; tests/test_packages.py holds them equal.
EXTRA_PACKAGES: dict[str, tuple[str, ...]] = {
    "tune": ("scikit-optimize==0.10.2", "scikit-learn>=1.3"),
    "docker": ("docker>=7", "requests>=2.31"),
    "ssh": ("paramiko>=3.4,<6",),
    "export": ("pyarrow>=14", "optuna>=4"),
    "ray": ("ray>=2.60,<3",),
    "plot": ("matplotlib>=3.8", "scikit-learn>=1.3", "numpy>=1.26"),
    "tensorboard": ("tensorboard>=2.16",),
    "mlflow": ("mlflow>=3,<4",),
    "mcp": ("mcp>=2,<3",),
}


def install_command(extra: str) -> str:
    """How to add vcli's `extra` to the installation running now: `pipx inject` under pipx
    (where `pip install` would go to another environment), else pip in this interpreter."""
    import shlex
    import sys

    if f"{os.sep}pipx{os.sep}venvs{os.sep}" in sys.prefix + os.sep and extra in EXTRA_PACKAGES:
        return "pipx inject vcli " + " ".join(shlex.quote(p) for p in EXTRA_PACKAGES[extra])
    return f"{sys.executable} -m pip install 'vcli[{extra}]'"


class MissingExtraError(VcliError):
    """`feature` needs `module`, which vcli's `extra` installs: one line naming both and the
    command that installs it, exit code 9 (whatever the feature)."""

    exit_code = ExitCode.MISSING_EXTRA

    def __init__(self, feature: str, extra: str, module: str) -> None:
        super().__init__(f"{feature} needs {module}, which the [{extra}] extra installs: {install_command(extra)}")
        self.extra = extra
        self.module = module


class ExecutorError(VcliError):
    """The executor cannot run replicas (engine down, image missing, host unreachable)."""

    exit_code = ExitCode.EXECUTOR_UNAVAILABLE


class WaitExpiredError(VcliError):
    """A job's `scheduling.maxWaitDuration` ran out before its GPUs were free: it is recorded
    FAILED, so the exit code is a failed job's (as a study's whose trial waited as long)."""

    exit_code = ExitCode.JOB_FAILED


class QueuedJobFailed(VcliError):
    """What ended a job's wait for GPUs after it was recorded QUEUED (its executor lost, say):
    the job is recorded FAILED with it, so the exit code is a failed job's."""

    exit_code = ExitCode.JOB_FAILED


class StoreError(VcliError):
    """vcli's home cannot be used: unwritable, on a read-only file system, or full."""

    exit_code = ExitCode.STORE_UNAVAILABLE


class ControllerConflictError(VcliError):
    """The job has a live controller already (two controllers never drive one job)."""

    exit_code = ExitCode.CONTROLLER_CONFLICT

"""`vcli gpu run | shell`: any program holds GPUs of this machine the way a replica does.

A notebook kernel, a script started by hand or an inference server takes host-wide GPU leases
(`vcli.placement.gpulease`) for its lifetime: it waits in the host's queue like jobs and trials
(first come or fair share, under the host's lease policy), shows up in `vcli hosts gpus` under
its user and command, and its GPUs are given back when it exits, however it ends (`kill -9`
too): vcli replaces itself with the program (exec), and the program holds the lock files.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import time
from typing import Annotated, Any, List, Optional

import typer

from vcli.cli.gcloud_flags import GcloudCommand, GcloudGroup
from vcli.cli.support import command as _command
from vcli.cli.support import err as _err

gpu_app = typer.Typer(
    cls=GcloudGroup,
    help="Hold GPUs of this machine for any program, as replicas hold them (host-wide leases).",
    no_args_is_help=True,
)

#: How often a waiting `gpu run` tries again (seconds).
TRY_SECONDS = 0.25
#: The exit code of a program that cannot be started (as a shell says it).
NOT_RUNNABLE = 127

_GPUS = typer.Option(1, "--gpus", min=1, help="How many whole GPUs of this machine to hold.")
_FRACTION = typer.Option(None, "--fraction", min=0.001, max=0.999,
                         help="Hold a share of one GPU instead (0.25, 0.5), shared as the host's lease policy's "
                         "gpu_sharing says (mps or shared).")
_MAX_WAIT = typer.Option(None, "--max-wait", help="Give up when the GPUs are not free within this long "
                         "(e.g. 30s, 10m; 0s: do not wait). Default: wait until they are.")
_EXTRA = {"allow_extra_args": True, "ignore_unknown_options": True}


@gpu_app.command("run", cls=GcloudCommand, context_settings=_EXTRA)
@_command("gpu.run")
def gpu_run(
    command: Annotated[List[str], typer.Argument(help="The program and its arguments (after --).")],
    gpus: int = _GPUS,
    fraction: Optional[float] = _FRACTION,
    max_wait: Optional[str] = _MAX_WAIT,
) -> None:
    """Run COMMAND holding GPUs of this machine until it exits.

    Waits in the host's queue while the GPUs are held by others, saying by whom; then runs
    COMMAND with CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES naming the leased GPUs. The
    exit code is COMMAND's (127 when it cannot be started). Example:
    `vcli gpu run --gpus=2 -- python serve.py --port 8080`."""
    _run(list(command), gpus, max_wait, fraction)


@gpu_app.command("shell", cls=GcloudCommand)
@_command("gpu.shell")
def gpu_shell(gpus: int = _GPUS, fraction: Optional[float] = _FRACTION, max_wait: Optional[str] = _MAX_WAIT) -> None:
    """Start an interactive shell ($SHELL) holding GPUs of this machine until it exits."""
    _run([os.environ.get("SHELL") or "/bin/sh"], gpus, max_wait, fraction)


def _run(argv: list[str], gpus: int, max_wait: Optional[str], fraction: Optional[float] = None) -> None:
    from vcli.codec.flags import parse_duration
    from vcli.errors import InvalidValueError

    if not argv:
        raise InvalidValueError("COMMAND", "nothing to run: give the program after --, e.g. `vcli gpu run -- python "
                                "train.py`")
    wait = None if max_wait is None else parse_duration(max_wait, "--max-wait")
    if shutil.which(argv[0]) is None:
        raise InvalidValueError("COMMAND", f"[{argv[0]}] is not a program that can be run (not found, or not "
                                "executable)")
    leases, indices, env = _hold(argv, gpus, wait, fraction)
    _exec(argv, leases, indices, env)


def _hold(argv: list[str], gpus: int, wait: Optional[float],
          fraction: Optional[float]) -> tuple[Any, tuple[int, ...], dict[str, str]]:
    """Lease `gpus` GPUs of this machine (or a `fraction` of one) for `argv`, waiting in the
    host's queue (up to `wait` seconds; None: until they are free): the lease directory, the
    indices, and the sharing mechanism's variables for a fraction."""
    from vcli import properties
    from vcli.errors import InvalidValueError
    from vcli.placement import hosts as H
    from vcli.placement.gpulease import base_record
    from vcli.placement.gpus import GpuAllocator, GpusBusyError, local_leases

    indices, gpu_type = H.local_host().gpus()
    if not indices:
        raise InvalidValueError("--gpus", "this machine declares no GPUs (nvidia-smi finds none; declare them with "
                                "$VCLI_LOCAL_GPUS or an inventory host `local`)")
    leases = local_leases(properties.gpu_lease_dir())
    allocator = GpuAllocator({H.LOCAL: leases}, nvidia_check=properties.gpu_exclude_busy())
    allocator.declare(H.LOCAL, indices=indices, accelerator_type=gpu_type)
    if gpus > len(indices):
        raise InvalidValueError("--gpus", f"this machine has {len(indices)} GPU{'s' if len(indices) > 1 else ''}, "
                                f"not {gpus}")
    record = {"command": _shown(argv), "gpus": fraction or gpus}
    deadline = None if wait is None else time.monotonic() + wait
    entry, said = None, ""
    try:
        while True:
            try:
                if fraction:
                    index, env = allocator.allocate_share(H.LOCAL, fraction, record=record)
                    return leases, (index,), env
                return leases, allocator.allocate(H.LOCAL, gpus, timeout=0, record=record), {}
            except GpusBusyError as e:
                if entry is None:
                    entry = leases.queue(base_record(**record))
                else:
                    entry.touch()  # still trying: keeps its place in the queue
                why = _why_waiting(allocator, H.LOCAL) or str(e)
                if deadline is not None and time.monotonic() >= deadline:
                    raise GpusBusyError(f"{_wanted(gpus, fraction)} of this machine did not come free "
                                        f"within --max-wait: {why}") from None
                if why != said:
                    _err(f"Waiting for {_wanted(gpus, fraction)} of this machine: {why}")
                    said = why
                time.sleep(TRY_SECONDS)
    finally:
        if entry is not None:
            entry.close()


def _wanted(gpus: int, fraction: Optional[float]) -> str:
    return f"a {fraction:g} share of a GPU" if fraction else f"{gpus} GPU{'s' if gpus > 1 else ''}"


def _why_waiting(allocator: Any, host: str) -> str:
    """`GPU 0 held by job 123… started by alice 3m ago; GPU 1 kept for …`."""
    reasons = {**allocator.kept_for_others(host), **allocator.busy_elsewhere(host)}
    return "; ".join(f"GPU {i} {why}" for i, why in sorted(reasons.items()))


def _shown(argv: list[str]) -> str:
    text = shlex.join(argv)
    return text if len(text) <= 200 else text[:199] + "…"


def _exec(argv: list[str], leases: Any, indices: tuple[int, ...], share_env: dict[str, str]) -> None:
    """Become `argv`, the leases of `indices` inherited: they end when the program does."""
    from vcli.placement.gpulease import current_user
    from vcli.placement.gpus import visible_devices_env

    for i in indices:
        lease = leases.held_here(i) or leases.held_share(i, user=current_user(), pid=os.getpid())
        if lease is not None:
            os.set_inheritable(lease.fd, True)
    env = {**os.environ, **visible_devices_env(indices), **share_env}
    shown = ",".join(str(i) for i in indices)
    _err(f"Leased GPU{'s' if len(indices) > 1 else ''} {shown} of this machine for `{_shown(argv)}` until it exits.")
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as e:
        _err(f"ERROR: (vcli.gpu.run) Cannot run [{argv[0]}]: {e.strerror}.")
        raise typer.Exit(NOT_RUNNABLE) from None

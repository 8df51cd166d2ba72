"""Holding a replica on its Slurm node still while a directory of it is copied (the Slurm side
of `vcli.executors.freeze`: a PBT exploit copies a donor's checkpoint while the donor trains).

The copy itself reads the shared filesystem; the hold runs on the node, where the trainer's
processes are: `srun --overlap` starts a step of one task in the replica's own allocation (its
component's, for a heterogeneous job) on the replica's node, running `freeze.HOLD_PROGRAM`. It
stops the replica's trainer tree (the processes carrying its VCLI_REPLICA tag but vcli's
supervisor) at a moment none of them writes under the directory, says `held`, and continues
the tree when its stdin closes. srun forwards that end: the copy finished, or the controller
died (even `kill -9`: srun reads end-of-file from the controller's side of the pipe); a step
cancelled by Slurm is sent SIGTERM first, which also continues the tree. A replica never
stays stopped.
"""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import time
from typing import Iterator, Sequence

from vcli.executors.freeze import HOLD_PROGRAM
from vcli.executors.slurm import client

#: How long the hold's step may take to start and hold the tree before the copy goes ahead
#: with it running (as the contract's settle rule allows).
HOLD_SECONDS = 10.0


@contextlib.contextmanager
def held(target: Sequence[str], node: str, tag: str, directory: str) -> Iterator[bool]:
    """Hold replica `tag` on `node` still while the block runs; yields whether it is held.
    `target` names the allocation (`--jobid=...` and, for a heterogeneous job's component,
    `--het-group=...`)."""
    argv = ["srun", *target, "--overlap", "-w", node, "-N1", "-n1", "--job-name=vcli-hold", "--quiet",
            "python3", "-S", "-c", HOLD_PROGRAM, "tree", tag, directory]
    try:
        # Its own session: a Ctrl-C at the controller's terminal must not reach srun (twice,
        # it would cancel the step at once, before the hold continues the tree).
        proc = subprocess.Popen(argv, env=client.client_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError:
        yield False
        return
    try:
        yield _answer(proc) == b"held"
    finally:
        _end(proc)


def _answer(proc: subprocess.Popen[bytes]) -> bytes:
    """The hold's one-line answer (b"held" or b"running"), or b"" when none came in time."""
    assert proc.stdout is not None
    answer, deadline = b"", time.monotonic() + HOLD_SECONDS
    fd = proc.stdout.fileno()
    while not answer.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            break
        data = os.read(fd, 64)
        if not data:
            break
        answer += data
    return answer.strip()


def _end(proc: subprocess.Popen[bytes]) -> None:
    """Close the hold's stdin (the tree is continued on the node) and reap srun, bounded."""
    for stream in (proc.stdin, proc.stdout):
        try:
            if stream is not None:
                stream.close()
        except OSError:
            pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.terminate()  # srun forwards SIGTERM to the step: the hold continues the tree
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

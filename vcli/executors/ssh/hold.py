"""Holding a replica on an SSH host still while a directory of it is downloaded (the SSH side
of `vcli.executors.freeze`: a PBT exploit copies a donor's checkpoint while the donor trains).

A small standard-library program runs on the host over its own SSH channel: it stops the
replica's trainer tree (every process carrying the replica's VCLI_REPLICA tag except vcli's
supervisor and wrapper, which keep watching; a container is paused with the host's docker
CLI) at a moment when none of them holds a file of the directory open for writing, says
`held`, and continues the tree when its stdin closes.
The channel closing is that end: the download finished, the controller died (even `kill -9`:
sshd closes the channel), or the connection broke. A replica never stays stopped.
"""

from __future__ import annotations

import contextlib
import shlex
import time
from typing import TYPE_CHECKING, Iterator

from vcli.executors.freeze import HOLD_PROGRAM as HOLD

if TYPE_CHECKING:
    from vcli.executors.ssh.link import HostLink


#: How long the host may take to hold the tree before the copy goes ahead with it running.
HOLD_SECONDS = 10.0


@contextlib.contextmanager
def held(link: HostLink, tag: str, directory: str, *, container: str | None = None) -> Iterator[bool]:
    """Hold the replica `tag` (or its `container`, paused) on the link's host still while the
    block copies `directory`;
    yields whether it is held (False: the copy goes ahead live, as the contract's settle rule
    allows). The replica is continued when the block ends, or when this process dies."""
    try:
        conn, chan = link.open_session()
    except Exception:  # no session now: copy as it is
        yield False
        return
    try:
        what = ("docker", container) if container else ("tree", tag)
        chan.exec_command(" ".join(shlex.quote(a) for a in (link.host.python, "-S", "-c", HOLD, *what, directory)))
        answer, deadline = b"", time.monotonic() + HOLD_SECONDS
        while not answer.endswith(b"\n") and time.monotonic() < deadline:
            chan.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                data = chan.recv(64)
            except TimeoutError:
                break
            if not data:
                break
            answer += data
        yield answer.strip() == b"held"
    finally:
        try:
            chan.shutdown_write()  # stdin closes: the host continues the tree
            # ... and the hold ends once it has (its exit status is back): a hold still ending
            # on the host would continue the replica in the middle of the next one
            chan.status_event.wait(HOLD_SECONDS)
            chan.close()
        except Exception:
            pass
        conn.channels = max(0, conn.channels - 1)

"""Ctrl-C while a controller winds down: noted, never raised.

The first Ctrl-C (or SIGTERM, SIGHUP) cancels a job or study; the controller then stops its
replicas and writes their final states. A Ctrl-C raised in the middle of that (a third one,
0.1 s after the second) escaped the handler and left the job CANCELLING and its trials
STOPPING for good, with nobody to finish them. While `deferred()` is active, they only set a flag, which the
wind-down loop reads (`again()`) to kill the replicas at once instead of after the grace
period. Only the main thread receives signals; elsewhere (an SDK job in a thread) it is a
no-op and a KeyboardInterrupt cannot arrive.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Any, Iterator


class Deferred:
    """How many Ctrl-Cs arrived since the last `again()` (and the last signal's number)."""

    def __init__(self) -> None:
        self.count = 0
        self.signum = 0

    def note(self, signum: int = 0, *_: Any) -> None:
        self.count += 1
        self.signum = signum

    def again(self) -> bool:
        """True once per batch of Ctrl-Cs that arrived since the last call."""
        hit, self.count = self.count > 0, 0
        return hit


#: What a wind-down defers: Ctrl-C, and SIGTERM and SIGHUP where they raise KeyboardInterrupt as
#: Ctrl-C does (a foreground vcli: `cli.support.interrupt_on_signals`). A second SIGTERM 50 ms
#: after the first (a process manager signalling vcli, then its group) ended vcli mid-wind-down,
#: the job CANCELLING for good and a trainer that ignores SIGTERM still running.
WIND_DOWN = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def deferred(signals: tuple[int, ...] = WIND_DOWN) -> Iterator[Deferred]:
    """`signals` set a flag instead of raising KeyboardInterrupt, until the block ends. Of the
    default ones, a SIGTERM or SIGHUP whose handler is the system's (an SDK program that set
    none) keeps it: the process ends as it would have."""
    flag = Deferred()
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return
    if signals is WIND_DOWN:
        signals = tuple(sig for sig in signals if sig == signal.SIGINT or callable(signal.getsignal(sig)))
    previous = {sig: signal.signal(sig, flag.note) for sig in signals}
    try:
        yield flag
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

"""What every tracker shares: runs kept up to date by a background thread that never lets the
tracking server decide how a job or study goes.

A tracker (`vcli.tracking.study`, `vcli.tracking.job`) records what should be in MLflow (the
latest state of each trial or job) and wakes its `Syncer`; the syncer's thread brings the
runs up to date (`Tracker.step`), each request bounded in time (`vcli.tracking.backend`).

Contract:
- the controller's thread never waits on the network, except when a trial or job starts and
  its run does not exist yet: it waits for the run at most `RUN_WAIT_SECONDS` (then the
  replicas start without MLFLOW_RUN_ID, and the end names them), and not at all while the
  tracker is known to be down;
- the first failure is one `WARNING:` line naming the tracker and the error; from then on
  everything waits in memory and is retried every 2 s, doubling to 30 s; when the tracker
  answers again one line says so and the runs are brought up to date (nothing twice: each
  run's logged steps, tags and end are remembered);
- `close()` tries once more within `CLOSE_SECONDS`; whatever is still not logged is named in
  one `Note:` line (the job's own record in vcli's store always has it all).
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

#: How long a trial or job start waits for its run to exist (MLflow's import included).
RUN_WAIT_SECONDS = 15.0
#: How long the end of a job or study waits for the last updates to be logged.
CLOSE_SECONDS = 15.0
#: Retry delays while the tracker is down: the first, and the longest.
RETRY_FIRST, RETRY_MAX = 2.0, 30.0


@dataclass
class RunState:
    """What vcli has logged to one run (so a retry or a `resume` logs nothing twice)."""

    run_id: str | None = None
    #: metric key -> steps logged.
    steps: dict[str, set[int]] = field(default_factory=dict)
    #: tags logged, with their values.
    tags: dict[str, str] = field(default_factory=dict)
    #: Whether the logged steps were read back (a run found again, after a `resume`).
    checked: bool = True
    #: Whether vcli ended the run (its final state, metrics and status are logged).
    ended: bool = False


def short_error(error: BaseException) -> str:
    """One short phrase for a failed request (MLflow's messages run to several lines)."""
    text = str(error)
    for pattern in (r"\[Errno -?\d+\][^'\")]*", r"Read timed out[^'\")]*", r"timed out"):
        found = re.search(pattern, text)
        if found:
            return found.group(0).strip().rstrip(".")
    first = text.strip().splitlines()[0] if text.strip() else type(error).__name__
    return first[:200]


class Syncer:
    """The background thread of one tracker: runs `step` whenever woken, retries it with a
    growing delay while it fails, and says the first failure and the recovery once each."""

    def __init__(self, step: Callable[[], None], *, target: str, say: Callable[[str], None], what: str) -> None:
        self._step = step
        self.target = target
        self._say = say
        self._what = what
        self.down: str | None = None
        self._wake = threading.Event()
        self._closing = False
        self._cond = threading.Condition()
        self._rounds = 0
        self._thread = threading.Thread(target=self._loop, name="vcli-tracking", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def poke(self) -> None:
        """Something changed: sync soon (at once, unless the tracker is down and waits to retry)."""
        self._wake.set()

    def wait(self, ready: Callable[[], bool], timeout: float) -> bool:
        """Wait until `ready()` or `timeout`; at once False while the tracker is down."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not ready():
                left = deadline - time.monotonic()
                if self.down is not None or left <= 0:
                    return ready()
                self._cond.wait(min(left, 0.5))
        return True

    def close(self, timeout: float = CLOSE_SECONDS) -> bool:
        """Sync a last time (within `timeout`) and stop the thread; True if it ended in sync."""
        self._closing = True
        self._wake.set()
        self._thread.join(timeout)
        return not self._thread.is_alive() and self.down is None

    def _loop(self) -> None:
        delay = RETRY_FIRST
        while True:
            if not self._closing:
                self._wake.wait(timeout=None if self.down is None else delay)
            self._wake.clear()
            closing = self._closing
            try:
                self._step()
            except Exception as e:  # the tracker's failure must never reach the study
                self._failed(e)
                delay = min(delay * 2, RETRY_MAX) if self._rounds > 1 else RETRY_FIRST
            else:
                if self.down is not None:
                    self._say(f"MLflow tracking at {self.target} answers again: the {self._what} runs are brought up to date.")
                self.down, delay, self._rounds = None, RETRY_FIRST, 0
            with self._cond:
                self._cond.notify_all()
            if closing:
                return

    def _failed(self, error: BaseException) -> None:
        self._rounds += 1
        first = self.down is None
        self.down = short_error(error)
        if first:
            self._say(f"WARNING: MLflow tracking at {self.target} failed ({self.down}); the {self._what} goes on, and "
                      f"what is not logged is retried (every {RETRY_FIRST:g}-{RETRY_MAX:g} s) and named at the end.")

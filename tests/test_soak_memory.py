"""A long study does not make its controller grow: 1,000 trials in-process (the real
controller, store, placement and suggester; replicas on the fake executor), the Python memory
the controller holds after trial 1,000 is within `PER_TRIAL_BYTES` a trial of what it held
after the warm-up (trial 200). What a study keeps per trial (its record: parameters,
measurements, state, and the ids its paths intern) is about 3 KB; keeping each replica's
launch and log writer as well (a leak of that kind) makes it about 10 KB, which fails.

Measured with tracemalloc (Python's allocations, numpy's included), not RSS: the process's
RSS also holds the allocator's free lists, which move with whatever else runs."""

from __future__ import annotations

import gc
import tracemalloc
from pathlib import Path

from tests.fakes import FakeClock, FakeWorld
from tests.kit import Recorder, study
from vcli.spec import Algorithm
from vcli.store import Store
from vcli.tuning.events import Trial

#: The documented bound on the controller's growth per finished trial (docs/pages/guide/studies.md;
#: bench/bench_controller_memory.py measures a real study's).
PER_TRIAL_BYTES = 6144
TRIALS, WARM_UP = 1000, 200


class _Meter(Recorder):
    """Records the traced memory once WARM_UP trials have ended (on the controller's thread)."""

    def __init__(self) -> None:
        super().__init__()
        self.ended = 0
        self.at_warm_up = 0

    def trial_ended(self, trial: Trial) -> None:
        self.ended += 1
        if self.ended == WARM_UP:
            gc.collect()
            self.at_warm_up = tracemalloc.get_traced_memory()[0]

    def progress(self, message: str) -> None:
        pass  # a status line per trial is not what is measured


def test_a_thousand_trial_study_holds_flat_memory_after_warm_up(tmp_path: Path) -> None:
    store = Store(tmp_path / "home")
    world = FakeWorld(FakeClock(), forget_released=True)
    meter = _Meter()
    run, _ = study(store, world, "sleep:3", "metric:acc=%x@1", "metric:acc=%x@2", "exit:0", max_trials=TRIALS,
                   parallel=8, algorithm=Algorithm.RANDOM_SEARCH)
    run.listener = meter
    tracemalloc.start(1)
    try:
        assert run.run().value == "JOB_STATE_SUCCEEDED"
        gc.collect()
        at_end = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
        store.close()
    assert meter.ended == TRIALS and meter.at_warm_up > 0
    per_trial = (at_end - meter.at_warm_up) / (TRIALS - WARM_UP)
    assert per_trial < PER_TRIAL_BYTES, f"{per_trial:.0f} bytes per trial after the warm-up"

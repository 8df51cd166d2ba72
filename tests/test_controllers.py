"""The job and study controllers, in-process: a fake executor on a fake clock, the real store.

Every ending of `JobRun` (success, replica failure, worker drain, timeout, cancel from this
process and from another terminal, a start-up error) and of `StudyRun` (all trials done, the
failure budget, the goal value, the study's time budget, cancel, the grid exhausted, no trial
with the metric) is reached in milliseconds; the real end-to-end runs live in
test_custom_jobs.py / test_hp_tuning.py.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

import pytest

from tests.fakes import SIGKILL_EXIT, SIGTERM_EXIT, FakeClock, FakeExecutor, FakeWorld
from tests.kit import X, job_spec, pool, study
from vcli.control.jobs import STOP_GRACE_SECONDS, WORKER_DRAIN_SECONDS, JobRun, local_placer, plan_job, run_job
from vcli.control.study import StudyRun
from vcli.errors import ExecutorError
from vcli.executors import Placement
from vcli.spec import (
    Algorithm,
    AshaStoppingSpec,
    CategoricalValueSpec,
    CustomJobSpec,
    DiscreteValueSpec,
    DoubleValueSpec,
    Goal,
    JobKind,
    JobState,
    MachineSpec,
    MeasurementSelectionType,
    MetricSpec,
    ParameterSpec,
    ReplicaState,
    Scheduling,
    Trial,
    TrialState,
)
from vcli.store import Store
from vcli.tuning.suggesters import get_suggester


@pytest.fixture
def world() -> FakeWorld:
    return FakeWorld(FakeClock())


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(tmp_path / "home")
    yield s
    s.close()


def job_run(store: Store, executor: FakeExecutor, spec: CustomJobSpec, **kw: Any) -> JobRun:
    row = store.create_job(kind=JobKind.CUSTOM_JOB.value, display_name="t", record={},
                           state=JobState.JOB_STATE_QUEUED.value)
    plan = plan_job(spec, job_id=row.id, job_dir=store.home / "jobs" / row.id, executor=executor)
    return JobRun(store=store, executor=executor, plan=plan, clock=executor.clock,
                  timeout_seconds=spec.scheduling.timeout_seconds if spec.scheduling else None, **kw)


def drive(run: JobRun) -> JobState:
    return run_job(run)


def replica_states(store: Store, run: JobRun) -> dict[str, str]:
    return {r.task_name: r.state for r in store.replicas(run.job_id)}


# =========================================================================== JobRun


def test_job_succeeds_when_every_replica_exits_zero(store: Store, world: FakeWorld) -> None:
    run = job_run(store, FakeExecutor(world), job_spec(pool("sleep:5", "exit:0"), pool("sleep:3", replicas=2)))
    assert drive(run) == JobState.JOB_STATE_SUCCEEDED
    assert replica_states(store, run) == {"workerpool0-0": "SUCCEEDED", "workerpool1-0": "SUCCEEDED",
                                          "workerpool1-1": "SUCCEEDED"}
    assert store.get_job(run.job_id).state == "JOB_STATE_SUCCEEDED"
    assert world.stopped == []  # nothing had to be stopped
    assert sorted(world.released) == sorted(world.started)  # everything released
    assert world.running() == []


def test_a_replica_that_ends_at_once_is_never_left_running_in_the_store(store: Store, world: FakeWorld) -> None:
    """The start thread records a replica RUNNING; poll() records its end. A replica that ends
    before its RUNNING row is written must still end SUCCEEDED in the store (CI once saw a
    finished trial's replica left RUNNING)."""

    class SlowStartRecord(Store):
        def upsert_replica(self, job_id: str, task_name: str, **fields: Any) -> None:
            if fields.get("state") == ReplicaState.RUNNING.value:
                time.sleep(0.3)  # poll() runs meanwhile, and sees the replica exit
            super().upsert_replica(job_id, task_name, **fields)

    slow = SlowStartRecord(store.home)
    run = job_run(slow, FakeExecutor(world), job_spec(pool("exit:0")))
    assert drive(run) == JobState.JOB_STATE_SUCCEEDED
    assert replica_states(slow, run) == {"workerpool0-0": "SUCCEEDED"}


def test_a_failing_replica_fails_the_job_and_stops_its_siblings(store: Store, world: FakeWorld) -> None:
    run = job_run(store, FakeExecutor(world), job_spec(pool("sleep:100"), pool("sleep:2", "exit:3")))
    assert drive(run) == JobState.JOB_STATE_FAILED
    row = store.get_job(run.job_id)
    assert row.error["code"] == 13
    assert "workerpool1-0 exited with a non-zero status of 3" in row.error["message"]
    assert replica_states(store, run) == {"workerpool0-0": "STOPPED", "workerpool1-0": "FAILED"}
    assert world.running() == []
    assert world.clock.now() - 1000 < 10  # failed fast, not after the chief's 100 s


def test_a_failing_chief_fails_the_job(store: Store, world: FakeWorld) -> None:
    run = job_run(store, FakeExecutor(world), job_spec(pool("exit:1"), pool("sleep:50")))
    assert drive(run) == JobState.JOB_STATE_FAILED
    # The worker is stopped, or never started if the chief failed before its turn came.
    assert replica_states(store, run)["workerpool1-0"] in ("STOPPED", "NOT_STARTED")
    assert world.running() == []


def test_workers_get_a_drain_period_after_the_chief_succeeds(store: Store, world: FakeWorld) -> None:
    run = job_run(store, FakeExecutor(world), job_spec(pool("exit:0"), pool("sleep:10", "exit:0")))
    assert drive(run) == JobState.JOB_STATE_SUCCEEDED
    assert replica_states(store, run)["workerpool1-0"] == "SUCCEEDED"  # finished on its own
    assert world.stopped == []


def test_a_worker_that_never_finishes_is_stopped_after_the_drain(store: Store, world: FakeWorld) -> None:
    run = job_run(store, FakeExecutor(world), job_spec(pool("exit:0"), pool("sleep:10000")))
    assert drive(run) == JobState.JOB_STATE_SUCCEEDED
    assert replica_states(store, run)["workerpool1-0"] == "STOPPED"
    took = world.clock.now() - 1000
    assert WORKER_DRAIN_SECONDS <= took < WORKER_DRAIN_SECONDS + 5


def test_parameter_servers_are_not_waited_for(store: Store, world: FakeWorld) -> None:
    run = job_run(store, FakeExecutor(world), job_spec(pool("exit:0"), pool("exit:0"), pool("sleep:10000")))
    assert drive(run) == JobState.JOB_STATE_SUCCEEDED
    assert replica_states(store, run)["workerpool2-0"] == "STOPPED"
    assert world.clock.now() - 1000 < 5


def test_scheduling_timeout_fails_the_job(store: Store, world: FakeWorld) -> None:
    run = job_run(store, FakeExecutor(world), job_spec(pool("sleep:1000"), timeout=20))
    assert drive(run) == JobState.JOB_STATE_FAILED
    row = store.get_job(run.job_id)
    assert row.error["code"] == 4 and "scheduling.timeout of 20s" in row.error["message"]
    assert 20 <= world.clock.now() - 1000 < 25
    assert world.running() == []


def test_cancel_from_this_process(store: Store, world: FakeWorld) -> None:
    run = job_run(store, FakeExecutor(world), job_spec(pool("sleep:1000"), pool("sleep:1000")))
    run.start()
    while run.poll() is None and world.clock.now() < 1005:
        world.clock.sleep(0.1)
    run.cancel()
    assert store.get_job(run.job_id).state == "JOB_STATE_CANCELLING"
    # The replicas are stopped in the background; polls report nothing until that is done.
    while (state := run.poll()) is None:
        world.clock.sleep(0.01)
    assert state == JobState.JOB_STATE_CANCELLED
    assert set(replica_states(store, run).values()) == {"STOPPED"}
    assert world.running() == []


def test_cancel_from_another_terminal_through_the_store(store: Store, world: FakeWorld) -> None:
    run = job_run(store, FakeExecutor(world), job_spec(pool("sleep:1000")))
    run.start()
    other = Store(store.home)  # another vcli process
    other.request_cancel(run.job_id)
    assert drive_started(run, world) == JobState.JOB_STATE_CANCELLED
    assert store.get_job(run.job_id).error == {"code": 1, "message": "CANCELED"}


def drive_started(run: JobRun, world: FakeWorld) -> JobState:
    while True:
        state = run.poll()
        if state is not None:
            return state
        world.clock.sleep(0.1)


def test_a_signal_while_the_first_unwinds_is_noted_for_the_wind_down_not_raised() -> None:
    """Two signals 0-5 ms apart (found by a probe): the second arrived while the first one's
    KeyboardInterrupt unwound to the wind-down, before `deferred()` took the signals over, and
    ended vcli with nothing stopped. Real signals, sent to this process."""
    import os
    import signal

    from vcli.control import interrupts

    firsts: list[int] = []
    handler = interrupts.raise_once(firsts.append)
    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the signal interrupts this
        os.kill(os.getpid(), signal.SIGHUP)  # as the first unwinds: noted, not raised
        time.sleep(0.05)
        with interrupts.deferred() as again:
            assert again.again()  # the wind-down sees it: it kills at once, as after a second Ctrl-C
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
            assert again.again()
        assert firsts == [signal.SIGTERM]
        with interrupts.deferred() as early:  # as a study's start-up defers: the first signal's code is kept
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
        assert early.count == 2 and early.signum == signal.SIGINT
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def test_a_signal_deferred_at_start_up_is_the_first_one_later_ones_never_raise() -> None:
    """A study's start-up defers signals (`hp_tuning_jobs._run_in_foreground`) and then cancels;
    a signal after that block re-armed nothing raised yet, so a third one raised
    KeyboardInterrupt in the run and its number became the exit code (found by a probe)."""
    import os
    import signal

    from vcli.control import interrupts

    firsts: list[int] = []
    handler = interrupts.raise_once(firsts.append)
    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with interrupts.deferred() as early:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
        assert early.count == 1
        interrupts.taken(early.signum)
        os.kill(os.getpid(), signal.SIGTERM)  # noted, not raised
        time.sleep(0.05)
        with interrupts.deferred() as wind_down:  # the wind-down sees it: a second signal
            assert wind_down.again() and wind_down.signum == signal.SIGTERM
        assert firsts == []
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def test_ctrl_c_cancels_and_reraises(store: Store, world: FakeWorld) -> None:
    run = job_run(store, FakeExecutor(world), job_spec(pool("sleep:1000")))
    ticks = 0

    def on_tick() -> None:
        nonlocal ticks
        ticks += 1
        if ticks == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_job(run, on_tick=on_tick)
    assert store.get_job(run.job_id).state == "JOB_STATE_CANCELLED"
    assert world.running() == []


def test_a_replica_that_ignores_sigterm_is_killed_after_the_grace(store: Store, world: FakeWorld) -> None:
    run = job_run(store, FakeExecutor(world), job_spec(pool("ignore-term", "sleep:1000"), pool("sleep:1", "exit:2")))
    assert drive(run) == JobState.JOB_STATE_FAILED
    chief = next(r for r in store.replicas(run.job_id) if r.task_name == "workerpool0-0")
    assert chief.state == "STOPPED" and chief.exit_code == SIGKILL_EXIT
    assert world.clock.now() - 1000 >= STOP_GRACE_SECONDS


def test_a_polite_replica_is_stopped_without_waiting(store: Store, world: FakeWorld) -> None:
    run = job_run(store, FakeExecutor(world), job_spec(pool("sleep:1000"), pool("sleep:1", "exit:2")))
    assert drive(run) == JobState.JOB_STATE_FAILED
    chief = next(r for r in store.replicas(run.job_id) if r.task_name == "workerpool0-0")
    assert chief.exit_code == SIGTERM_EXIT


def test_a_startup_error_fails_the_job_with_its_text(store: Store, world: FakeWorld) -> None:
    ex = FakeExecutor(world, prepare_error=ExecutorError("The Docker engine is not running."))
    run = job_run(store, ex, job_spec(pool("exit:0"), pool("exit:0")))
    assert drive(run) == JobState.JOB_STATE_FAILED
    assert isinstance(run.startup_error, ExecutorError)
    row = store.get_job(run.job_id)
    assert row.error == {"code": 3, "message": "The Docker engine is not running."}
    assert set(replica_states(store, run).values()) == {"NOT_STARTED"}


def test_a_replica_that_cannot_start_stops_those_already_started(store: Store, world: FakeWorld) -> None:
    ex = FakeExecutor(world, start_error=lambda l: ExecutorError("no such host") if l.replica.pool_index == 1 else None)
    run = job_run(store, ex, job_spec(pool("sleep:1000"), pool("exit:0")))
    assert drive(run) == JobState.JOB_STATE_FAILED
    assert replica_states(store, run) == {"workerpool0-0": "STOPPED", "workerpool1-0": "NOT_STARTED"}
    assert world.running() == []


def test_placement_is_released_however_the_job_ends(store: Store, world: FakeWorld) -> None:
    released: list[str] = []

    class Placer:
        def __call__(self, replicas: Sequence[Any], **_: Any) -> list[Placement]:
            return local_placer(replicas)

        def release(self, job_id: str) -> None:
            released.append(job_id)

    ex = FakeExecutor(world)
    row = store.create_job(kind="customJob", display_name="t", record={}, state="JOB_STATE_QUEUED")
    plan = plan_job(job_spec(pool("exit:4")), job_id=row.id, job_dir=store.home / "jobs" / row.id, executor=ex,
                    placer=Placer())
    assert drive(JobRun(store=store, executor=ex, plan=plan, clock=world.clock)) == JobState.JOB_STATE_FAILED
    assert released == [row.id]


def test_plan_marks_secret_environment_names(store: Store, world: FakeWorld) -> None:
    from vcli.spec import EnvVar

    spec = job_spec(replace(pool("exit:0"), container_spec=replace(
        pool("exit:0").container_spec, env=(EnvVar(name="WANDB_API_KEY", value="k"), EnvVar(name="MODE", value="a")))))
    plan = plan_job(spec, job_id="j", job_dir=store.home / "jobs" / "j", executor=FakeExecutor(world))
    assert "WANDB_API_KEY" in plan.launches[0].secret_env and "MODE" not in plan.launches[0].secret_env


# =========================================================================== StudyRun


def states(run: StudyRun) -> list[str]:
    return [run.trials[k].state.value for k in sorted(run.trials, key=int)]


def test_study_runs_every_trial_and_picks_the_best(store: Store, world: FakeWorld) -> None:
    run, events = study(store, world, "sleep:3", "metric:acc=%x@1", "exit:0", max_trials=5, parallel=2)
    assert run.run() == JobState.JOB_STATE_SUCCEEDED
    assert states(run) == ["SUCCEEDED"] * 5
    best = run.best_trial()
    values = {t.id: t.parameters["x"] for t in run.trials.values()}
    assert best is not None and best.id == max(values, key=values.get)
    assert best.final_measurement.metrics["acc"] == pytest.approx(values[best.id])
    assert events[-1] == ("study-finished", best.id)
    assert [e for e, _ in events].count("started") == 5
    stored = store.trial_records(run.study_id)
    assert [t["state"] for t in stored] == ["SUCCEEDED"] * 5
    assert store.get_job(run.study_id).record["bestTrialId"] == best.id
    assert world.running() == []


def test_study_never_exceeds_its_parallel_trial_count(store: Store, world: FakeWorld) -> None:
    peak = 0

    class Watching(FakeExecutor):
        def start(self, launch: Any) -> Any:
            nonlocal peak
            handle = super().start(launch)
            peak = max(peak, len(self.world.running()))
            return handle

    run, _ = study(store, world, "sleep:5", "metric:acc=%x@1", max_trials=7, parallel=3, executor=Watching(world))
    assert run.run() == JobState.JOB_STATE_SUCCEEDED
    assert peak == 3
    assert len(run.trials) == 7


def test_failed_trials_beyond_the_budget_fail_the_study(store: Store, world: FakeWorld) -> None:
    run, _ = study(store, world, "sleep:1", "exit:1", max_trials=10, parallel=2, failures=2)
    assert run.run() == JobState.JOB_STATE_FAILED
    assert run.error["code"] == 9 and "more than the budget of 2" in run.error["message"]
    assert set(states(run)) == {"INFEASIBLE"}
    assert 3 <= len(run.trials) <= 4  # stopped launching at the third failure
    assert all(run.trials[k].infeasible_reason for k in run.trials)
    assert world.running() == []


def test_a_trial_without_the_metric_is_infeasible_and_all_infeasible_fails(store: Store, world: FakeWorld) -> None:
    run, _ = study(store, world, "out:no metric here", "exit:0", max_trials=2, parallel=1, failures=5)
    assert run.run() == JobState.JOB_STATE_FAILED
    assert states(run) == ["INFEASIBLE", "INFEASIBLE"]
    assert "No trial reported the metric [acc]" in run.error["message"]


def test_reaching_the_goal_value_stops_the_study_and_its_other_trials(store: Store, world: FakeWorld) -> None:
    """The trial that reached the goal finishes on its own (it holds the model); the rest stop."""
    run, events = study(store, world, "metric:acc=%x@1", "sleep:100", max_trials=50, parallel=2, goal_value=0.0)
    assert run.run() == JobState.JOB_STATE_SUCCEEDED
    assert "goal" in store.get_job(run.study_id).record["stopReason"]
    assert len(run.trials) == 2  # the first trial reached it; nothing more launched
    assert states(run) == ["SUCCEEDED", "SUCCEEDED"]  # each with its measurement
    assert ("stopping", "2") in events and ("stopping", "1") not in events
    assert 100 <= world.clock.now() - 1000 < 110  # trial 1 ran to its end
    assert world.running() == []


def test_the_study_time_budget_stops_running_trials(store: Store, world: FakeWorld) -> None:
    run, _ = study(store, world, "sleep:5", "metric:acc=%x@1", "sleep:1000", max_trials=10, parallel=2,
                   study_timeout_seconds=60)
    assert run.run() == JobState.JOB_STATE_SUCCEEDED
    assert "time budget" in store.get_job(run.study_id).record["stopReason"]
    assert states(run) == ["SUCCEEDED", "SUCCEEDED"]
    assert 60 <= world.clock.now() - 1000 < 70


def test_a_stopped_trial_without_a_measurement_is_infeasible(store: Store, world: FakeWorld) -> None:
    run, _ = study(store, world, "sleep:1000", max_trials=2, parallel=2, study_timeout_seconds=10)
    assert run.run() == JobState.JOB_STATE_FAILED  # no trial has the metric
    assert states(run) == ["INFEASIBLE", "INFEASIBLE"]


def test_cancel_from_another_terminal_stops_every_trial(store: Store, world: FakeWorld) -> None:
    run, _ = study(store, world, "sleep:1000", max_trials=6, parallel=3)
    thread_started = threading.Event()

    def cancel_soon() -> None:
        thread_started.set()
        Store(store.home).request_cancel(run.study_id)

    t = threading.Thread(target=cancel_soon)
    t.start()
    thread_started.wait()
    t.join()
    assert run.run() == JobState.JOB_STATE_CANCELLED
    assert run.error == {"code": 1, "message": "CANCELED"}
    assert world.running() == []
    assert all(j.state in ("JOB_STATE_CANCELLED", "JOB_STATE_QUEUED") or j.state.endswith("CANCELLED")
               for j in store.child_jobs(run.study_id))


@pytest.mark.parametrize("actions, says", [
    (("sleep:1", "exit:0"), "they reported nothing. Report it with cloudml-hypertune"),
    (("metric:Acc=%x@1", "sleep:1", "exit:0"), "they reported [Acc] instead. The metricId and the trainer's tag"),
    (("metric:loss=%x@1", "sleep:1", "exit:0"), "they reported [loss] instead. Report it with cloudml-hypertune"),
])
def test_a_study_whose_trainers_never_report_its_metric_stops_after_three_trials(
        store: Store, world: FakeWorld, actions: tuple[str, ...], says: str) -> None:
    """A missing cloudml-hypertune or a misspelt tag made every trial INFEASIBLE until the
    failure budget ran out: the first three trials to end without the metric stop the study,
    in one line that names the cause and the fix."""
    run, _ = study(store, world, *actions, max_trials=20, parallel=2, failures=20)
    assert run.run() == JobState.JOB_STATE_FAILED
    message = run.error["message"]
    assert message.startswith("The first 3 trials finished without reporting the metric [acc], so the study stops:")
    assert says in message and "\n" not in message
    assert len(run.trials) <= 4 and world.running() == []


def test_one_trial_that_reports_keeps_a_study_of_silent_trials_going() -> None:
    """The rule is for trainers that never report: once a trial reported the metric (or ended
    some other way), later silent trials only count towards the failure budget, as on Vertex;
    and a study of at most three trials never needs it."""
    from vcli.control.active import SilentTrainers
    from vcli.metrics import MetricReader

    silent = Trial(id="2", parameters={}, state=TrialState.INFEASIBLE,
                   infeasible_reason="The trial finished without reporting the metric [acc] (report it ...).")
    reported = MetricReader("acc")
    reported.feed_stdout_line("acc=0.5 step=1", 1.0)
    watch = SilentTrainers(("acc",), max_trial_count=20)
    assert watch.ended(Trial(id="1", parameters={}, state=TrialState.SUCCEEDED), reported) is None
    assert all(watch.ended(silent, MetricReader("acc")) is None for _ in range(10))
    failed = Trial(id="1", parameters={}, state=TrialState.INFEASIBLE, infeasible_reason="The trial's custom job ended ...")
    other = SilentTrainers(("acc",), max_trial_count=20)
    assert other.ended(failed, MetricReader("acc")) is None
    assert all(other.ended(silent, MetricReader("acc")) is None for _ in range(10))
    small = SilentTrainers(("acc",), max_trial_count=3)
    assert all(small.ended(silent, MetricReader("acc")) is None for _ in range(3))
    three = SilentTrainers(("acc",), max_trial_count=20)
    assert [three.ended(silent, MetricReader("acc")) is None for _ in range(3)] == [True, True, False]


def test_a_study_asks_the_store_once_per_tick_for_all_its_trials(store: Store, world: FakeWorld) -> None:
    """The study beats and asks for cancel requests for itself and every running trial's job in
    one query each per tick (it was one per trial job, 320 a second at 64 trials); a cancel
    asked for one trial's job (`custom-jobs cancel` of it) still stops that trial alone."""
    run, _ = study(store, world, "metric:acc=%x@1", "sleep:30", "exit:0", max_trials=6, parallel=4, failures=1)
    asked: list[int] = []
    beats: list[int] = []
    ticks = 0
    real_asked, real_beat, real_tick = store.cancels_requested, store.beat_all, run._tick

    def cancels_requested(job_ids: list[str]) -> set[str]:
        asked.append(len(job_ids))
        running = [j for j in store.child_jobs(run.study_id) if j.state == "JOB_STATE_RUNNING"]
        if len(running) == 4 and not any(j.cancel_requested for j in store.child_jobs(run.study_id)):
            store.request_cancel(running[0].id)  # another terminal cancels one trial's job
        return real_asked(job_ids)

    def tick() -> JobState | None:
        nonlocal ticks
        ticks += 1
        return real_tick()

    store.cancels_requested = cancels_requested  # type: ignore[method-assign]
    store.beat_all = lambda job_ids: (beats.append(len(job_ids)), real_beat(job_ids))[1]  # type: ignore[method-assign]
    store.cancel_requested = lambda job_id: pytest.fail("a trial job asked the store itself")  # type: ignore[method-assign]
    store.beat = lambda job_id: pytest.fail("a trial job beat itself")  # type: ignore[method-assign]
    run._tick = tick  # type: ignore[method-assign]
    assert run.run() == JobState.JOB_STATE_SUCCEEDED, (run.error, states(run))
    assert len(asked) <= ticks and max(asked) == 5 and beats and max(beats) == 5  # the study and 4 trials
    jobs = store.child_jobs(run.study_id)
    assert sorted(j.state for j in jobs).count("JOB_STATE_CANCELLED") == 1 and len(jobs) == 6


def test_ctrl_c_cancels_the_study_and_reraises(store: Store, world: FakeWorld) -> None:
    run, _ = study(store, world, "sleep:1000", max_trials=4, parallel=2)
    orig = world.clock.sleep
    calls = 0

    def sleep(seconds: float) -> None:
        nonlocal calls
        calls += 1
        if calls == 20:
            raise KeyboardInterrupt
        orig(seconds)

    world.clock.sleep = sleep  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        run.run()
    world.clock.sleep = orig  # type: ignore[method-assign]
    assert store.get_job(run.study_id).state == "JOB_STATE_CANCELLED"
    assert world.running() == []


def test_grid_search_ends_when_the_grid_is_exhausted(store: Store, world: FakeWorld) -> None:
    grid = ParameterSpec(parameter_id="opt", value_spec=CategoricalValueSpec(values=("adam", "sgd", "rmsprop")))
    run, _ = study(store, world, "metric:acc=0.5@1", max_trials=10, parallel=2, algorithm=Algorithm.GRID_SEARCH,
                   parameters=(grid,))
    progress = run.listener.lines
    assert run.run() == JobState.JOB_STATE_SUCCEEDED
    assert sorted(t.parameters["opt"] for t in run.trials.values()) == ["adam", "rmsprop", "sgd"]
    assert any("search space is exhausted after 3 trial(s) (maxTrialCount 10)" in m for m in progress), progress
    assert "exhausted after 3 trials" in store.get_job(run.study_id).record["stopReason"]


def test_measurement_selection_best_and_last(store: Store, world: FakeWorld) -> None:
    actions = ("metric:acc=0.9@1", "sleep:1", "metric:acc=0.4@2", "exit:0")
    last, _ = study(store, world, *actions, max_trials=1, parallel=1)
    assert last.run() == JobState.JOB_STATE_SUCCEEDED
    assert last.trials["1"].final_measurement.metrics["acc"] == 0.4
    assert [m.step_count for m in last.trials["1"].measurements] == [1, 2]
    best, _ = study(store, world, *actions, max_trials=1, parallel=1, selection=MeasurementSelectionType.BEST_MEASUREMENT)
    assert best.run() == JobState.JOB_STATE_SUCCEEDED
    assert best.trials["1"].final_measurement.metrics["acc"] == 0.9


GRID_X = ParameterSpec(parameter_id="x", value_spec=DiscreteValueSpec(values=(0.1, 0.2, 0.3, 0.4, 0.5)))


def test_a_trial_stopped_early_succeeds_and_frees_its_slot_at_once(store: Store, world: FakeWorld) -> None:
    """ASHA (rungs at steps 1, 2, 4): grid order makes every trial worse than the first
    (acc = -x), so each later one stops at rung 1. Its replica ignores SIGTERM, so stopping
    takes the whole grace period: the next trial starts meanwhile, not after it."""
    run, events = study(
        store, world, "ignore-term", "metric:acc=-%x@1", "sleep:5", "metric:acc=-%x@2", "sleep:5",
        "metric:acc=-%x@3", "sleep:5", "metric:acc=-%x@4", "exit:0",
        max_trials=5, parallel=1, algorithm=Algorithm.GRID_SEARCH, parameters=(GRID_X,),
        stopping=AshaStoppingSpec(reduction_factor=2, min_step_count=1, max_step_count=4),
    )
    assert run.run() == JobState.JOB_STATE_SUCCEEDED
    assert states(run) == ["SUCCEEDED"] * 5
    first, *rest = (run.trials[k] for k in sorted(run.trials, key=int))
    assert first.early_stopping_rule is None and first.final_measurement.step_count == 4
    for t in rest:  # stopped at rung 1, SUCCEEDED with the measurement it had
        assert t.early_stopping_rule == "asha" and t.stop_reason.startswith("ASHA: at rung step 1,")
        # What it reported during its grace period still counts: the last measurement is final.
        assert t.final_measurement == t.measurements[-1] and t.final_measurement.step_count < 4
    # Trial 3 started while trial 2 was still stopping (it finished after trial 3 started).
    order = [e for e in events if e[0] in ("started", "stopping", "finished")]
    assert order.index(("started", "3")) < order.index(("finished", "2"))
    assert order.index(("stopping", "2")) < order.index(("started", "3"))
    stored = {t["id"]: t for t in store.trial_records(run.study_id)}
    assert stored["2"]["earlyStoppingRule"] == "asha" and "stopReason" in stored["2"]
    assert world.running() == []


def test_a_metric_printed_after_more_than_a_polls_read_at_the_end_is_not_lost(store: Store, world: FakeWorld) -> None:
    """A poll reads at most 4 MiB of a log, and the read before a trial is concluded read no
    more: a trainer that printed 14 MB and then its metrics in its last moment lost them."""
    run, _ = study(store, world, "sleep:1", "chatter:60000", "out:acc=0.9 step=1", "out:acc=0.95 step=2", "exit:0",
                   max_trials=1, parallel=1)
    state = run.run()
    [trial] = run.trials.values()
    assert state == JobState.JOB_STATE_SUCCEEDED, trial.infeasible_reason
    assert trial.final_measurement.metrics == {"acc": 0.95} and len(trial.measurements) == 2


def test_a_bug_under_a_running_study_stops_its_trials_and_records_it_failed(store: Store, world: FakeWorld) -> None:
    """An exception vcli did not expect (a PBT factor made an integer inf) killed the
    controller and left the study RUNNING, its trials running with nobody watching."""

    class Buggy(FakeExecutor):
        polls = 0

        def poll(self, handle: Any) -> Any:
            Buggy.polls += 1
            if Buggy.polls == 30:
                raise OverflowError("cannot convert float infinity to integer")
            return super().poll(handle)

    run, _ = study(store, world, "metric:acc=%x@1", "sleep:100", "exit:0", max_trials=4, parallel=2,
                   executor=Buggy(world))
    with pytest.raises(OverflowError):
        run.run()
    assert world.running() == []  # both trials' replicas were stopped
    row = store.get_job(run.study_id)
    assert row.state == JobState.JOB_STATE_FAILED.value
    assert row.error == {"code": 13, "message": "The study was stopped: vcli's controller failed: OverflowError: "
                                                "cannot convert float infinity to integer"}
    assert {t.state for t in store.trials(run.study_id)} == {TrialState.INFEASIBLE}


@pytest.mark.parametrize("elapsed", [False, True], ids=["steps-then-a-final-report-without-one", "elapsed-no-steps"])
def test_early_stopping_still_stops_when_reports_end_without_a_step_or_count_none(store: Store, world: FakeWorld,
                                                                                  elapsed: bool) -> None:
    """The guard "a trial as far as those that ran to their end is finishing" compared each
    finished trial's LAST report's step: a final report without a step (step 0) made every
    running trial "finishing", and with useElapsedDuration steps were compared while the rule
    read seconds (all 0 for a trainer counting none): the rule never stopped anything."""
    if elapsed:  # reports at 1.5 s, 3 s, 4.5 s and 6 s of each trial, none with a step
        actions = ["sleep:1.5", "metric:acc=-%x", "sleep:1.5", "metric:acc=-%x", "sleep:1.5", "metric:acc=-%x",
                   "sleep:1.5", "metric:acc=-%x", "exit:0"]
    else:  # steps 1-4, then the final evaluation reported once more without a step
        actions = ["metric:acc=-%x@1", "sleep:5", "metric:acc=-%x@2", "sleep:5", "metric:acc=-%x@3", "sleep:5",
                   "metric:acc=-%x@4", "metric:acc=-%x", "exit:0"]
    run, _ = study(store, world, *actions, max_trials=4, parallel=1, algorithm=Algorithm.GRID_SEARCH,
                   parameters=(GRID_X,),
                   stopping=AshaStoppingSpec(reduction_factor=2, min_step_count=1, max_step_count=4,
                                             use_elapsed_duration=elapsed))
    assert run.run() == JobState.JOB_STATE_SUCCEEDED
    first, *rest = (run.trials[k] for k in sorted(run.trials, key=int))
    assert first.early_stopping_rule is None
    assert [t.early_stopping_rule for t in rest] == ["asha"] * 3, [t.stop_reason for t in rest]


def test_a_multi_objective_study_keeps_its_pareto_front(store: Store, world: FakeWorld) -> None:
    """acc = x and cost = x: maximising both has one optimum; maximising acc while minimising
    cost makes every trial a trade-off, so all of them are on the front."""
    both = (MetricSpec(metric_id="acc", goal=Goal.MAXIMIZE), MetricSpec(metric_id="cost", goal=Goal.MAXIMIZE))
    run, events = study(store, world, "metric:acc=%x@1", "metric:cost=%x@1", "exit:0", max_trials=4, metrics=both)
    assert run.run() == JobState.JOB_STATE_SUCCEEDED
    best = max(run.trials.values(), key=lambda t: t.parameters["x"])
    assert [t.id for t in run.optimal_trials()] == [best.id]
    assert store.get_job(run.study_id).record["optimalTrialIds"] == [best.id]
    assert events[-1] == ("study-finished", None)
    assert all(set(t.final_measurement.metrics) == {"acc", "cost"} for t in run.trials.values())

    trade = (MetricSpec(metric_id="acc", goal=Goal.MAXIMIZE), MetricSpec(metric_id="cost", goal=Goal.MINIMIZE))
    run, _ = study(store, world, "metric:acc=%x@1", "metric:cost=%x@1", "exit:0", max_trials=4, metrics=trade)
    assert run.run() == JobState.JOB_STATE_SUCCEEDED
    assert [t.id for t in run.optimal_trials()] == ["1", "2", "3", "4"]


def test_a_multi_objective_trial_missing_a_metric_is_infeasible(store: Store, world: FakeWorld) -> None:
    both = (MetricSpec(metric_id="acc", goal=Goal.MAXIMIZE), MetricSpec(metric_id="cost", goal=Goal.MINIMIZE))
    run, _ = study(store, world, "metric:acc=%x@1", "exit:0", max_trials=2, failures=5, metrics=both)
    assert run.run() == JobState.JOB_STATE_FAILED
    assert states(run) == ["INFEASIBLE", "INFEASIBLE"]
    assert "[cost]" in run.trials["1"].infeasible_reason and "every metric" in run.trials["1"].infeasible_reason
    assert "every metric of [acc, cost]" in run.error["message"]


def test_trials_wait_for_capacity(store: Store, world: FakeWorld) -> None:
    """A placer with no room now: the trial waits (nothing recorded) and starts once there is."""
    from vcli.placement import NoCapacityError

    busy_until = world.clock.now() + 30

    class Placer:
        def __call__(self, replicas: Sequence[Any], **_: Any) -> list[Placement]:
            if world.clock.now() < busy_until:
                raise NoCapacityError("all 1 GPUs are in use")
            return local_placer(replicas)

        def release(self, job_id: str) -> None:
            pass

    run, _ = study(store, world, "metric:acc=%x@1", max_trials=2, parallel=2, placer=Placer())
    assert run.run() == JobState.JOB_STATE_SUCCEEDED
    assert len(run.trials) == 2
    assert all(t.start_time for t in run.trials.values())
    assert world.clock.now() >= busy_until


def test_trial_environment_and_args(store: Store, world: FakeWorld) -> None:
    run, _ = study(store, world, "env:CLOUD_ML_TRIAL_ID", "metric:acc=%x@1", max_trials=1, parallel=1)
    assert run.run() == JobState.JOB_STATE_SUCCEEDED
    [child] = store.child_jobs(run.study_id)
    [rep] = store.replicas(child.id)
    from vcli.logs import read_records

    assert "CLOUD_ML_TRIAL_ID=1" in [r.message for r in read_records(rep.log_path, rep.task_name)]
    assert child.trial_id == "1" and child.state == "JOB_STATE_SUCCEEDED"
    assert run.trials["1"].state == TrialState.SUCCEEDED
    assert ReplicaState(rep.state) == ReplicaState.SUCCEEDED


def test_measurements_keep_their_own_elapsed_time(store: Store, world: FakeWorld) -> None:
    run, _ = study(store, world, "sleep:1", "metric:acc=0.1@1", "sleep:5", "metric:acc=0.2@2", "sleep:3", "exit:0",
                   max_trials=1, parallel=1)
    assert run.run() == JobState.JOB_STATE_SUCCEEDED
    trial = run.trials["1"]
    first, second = (m.elapsed_seconds for m in trial.measurements)
    # Elapsed counts from the trial's start (start-up included), so only the gap is exact.
    assert first >= 1 and second - first == pytest.approx(5, abs=0.3)
    assert trial.final_measurement.elapsed_seconds == second  # LAST: the second report, its own time


# =========================================================================== resume


class Crash(BaseException):
    """The controller dies here: nothing is cleaned up, replicas keep running."""


class CrashingStore(Store):
    """A store whose controller dies right after a trial's job ended, before the trial is recorded."""

    armed = True

    def save_trial(self, study_id: str, trial: Any, specs: Any) -> None:
        if self.armed and trial.state == "SUCCEEDED":
            self.armed = False
            raise Crash
        super().save_trial(study_id, trial, specs)


class CrashingSuggester:
    """Dies during the `after`-th suggestion."""

    def __init__(self, inner: Any, after: int) -> None:
        self.inner, self.after, self.calls = inner, after, 0

    def ask(self, count: int) -> Any:
        self.calls += 1
        if self.calls == self.after:
            raise Crash
        return self.inner.ask(count)

    def tell(self, trial: Any) -> None:
        self.inner.tell(trial)


def crash_after_sleeps(world: FakeWorld, n: int) -> Any:
    orig, calls = world.clock.sleep, 0

    def sleep(seconds: float) -> None:
        nonlocal calls
        calls += 1
        if calls == n:
            world.clock.sleep = orig  # type: ignore[method-assign]
            raise Crash
        orig(seconds)

    world.clock.sleep = sleep  # type: ignore[method-assign]
    return orig


ACTIONS = ("sleep:10", "metric:acc=%x@1", "sleep:10", "metric:acc=%x@2", "exit:0")


def resumed(store: Store, world: FakeWorld, first: StudyRun, placer: Any = local_placer) -> StudyRun:
    """A new controller for `first`'s study: fresh suggester with the same seed, then resume."""
    # A dead process's threads die with it; here they must be let finish what they started.
    for active in first.active.values():
        if active.run._worker is not None:
            active.run._worker.join()
    second = StudyRun(store=Store(store.home), executor=FakeExecutor(world), spec=first.spec, study_id=first.study_id,
                      display_name="s", suggester=get_suggester(first.spec.study_spec, seed=7), clock=world.clock,
                      placer=placer)
    second.resume()
    return second


def assert_study_completed_once(run: StudyRun, world: FakeWorld, trials: int = 8) -> None:
    assert run.run() == JobState.JOB_STATE_SUCCEEDED
    assert sorted(run.trials, key=int) == [str(i) for i in range(1, trials + 1)]
    assert states(run) == ["SUCCEEDED"] * trials
    assert len(world.started) == trials, "a trial was started twice"
    for t in run.trials.values():
        assert [m.step_count for m in t.measurements] == [1, 2], t
    assert world.running() == []


@pytest.mark.parametrize("sleeps", [1, 150, 400])
def test_a_study_resumes_after_its_controller_dies_mid_trial(store: Store, world: FakeWorld, sleeps: int) -> None:
    first, _ = study(store, world, *ACTIONS, max_trials=8, parallel=2)
    crash_after_sleeps(world, sleeps)
    with pytest.raises(Crash):
        first.run()
    running_before = set(world.running())
    second = resumed(store, world, first)
    assert set(second.active) == {t for t, a in first.active.items()}  # the same trials, re-attached
    assert_study_completed_once(second, world)
    assert running_before <= set(world.started[: len(running_before) + 8])


def test_a_study_resumes_after_dying_between_a_trial_exit_and_its_record(tmp_path: Path, world: FakeWorld) -> None:
    store = CrashingStore(tmp_path / "home")
    first, _ = study(store, world, *ACTIONS, max_trials=8, parallel=2)
    with pytest.raises(Crash):
        first.run()
    assert [t["state"] for t in store.trial_records(first.study_id)].count("SUCCEEDED") == 0
    assert_study_completed_once(resumed(store, world, first), world)


def test_a_study_resumes_after_dying_during_a_suggestion(store: Store, world: FakeWorld) -> None:
    first, _ = study(store, world, *ACTIONS, max_trials=8, parallel=2)
    first.suggester = CrashingSuggester(first.suggester, after=4)
    with pytest.raises(Crash):
        first.run()
    assert_study_completed_once(resumed(store, world, first), world)


def test_a_study_resumes_after_dying_before_any_trial(store: Store, world: FakeWorld) -> None:
    first, _ = study(store, world, *ACTIONS, max_trials=8, parallel=2)
    first.suggester = CrashingSuggester(first.suggester, after=1)
    with pytest.raises(Crash):
        first.run()
    assert store.trial_records(first.study_id) == []
    assert_study_completed_once(resumed(store, world, first), world)


def test_resumed_suggestions_are_the_ones_the_study_would_have_made(tmp_path: Path) -> None:
    """Replaying the stored trials puts the suggester where it was: the same 8 points."""
    world_a, world_b = FakeWorld(FakeClock()), FakeWorld(FakeClock())
    straight, _ = study(Store(tmp_path / "a"), world_a, *ACTIONS, max_trials=8, parallel=2)
    assert straight.run() == JobState.JOB_STATE_SUCCEEDED
    store_b = Store(tmp_path / "b")
    first, _ = study(store_b, world_b, *ACTIONS, max_trials=8, parallel=2)
    crash_after_sleeps(world_b, 300)
    with pytest.raises(Crash):
        first.run()
    second = resumed(store_b, world_b, first)
    assert second.run() == JobState.JOB_STATE_SUCCEEDED
    assert [straight.trials[k].parameters for k in sorted(straight.trials, key=int)] == \
           [second.trials[k].parameters for k in sorted(second.trials, key=int)]


def test_a_custom_job_is_reattached_not_restarted(store: Store, world: FakeWorld) -> None:
    spec = job_spec(pool("sleep:20", "exit:0"), pool("sleep:15", "exit:0", replicas=2))
    run = job_run(store, FakeExecutor(world), spec)
    run.start()
    while len(world.started) < 3:
        run.poll()
        world.clock.sleep(0.1)
    run._worker.join()
    world.clock.sleep(5)  # the controller dies here, replicas keep running
    rows = {r.task_name: r for r in store.replicas(run.job_id)}
    again = JobRun(store=store, executor=FakeExecutor(world), plan=run.plan, clock=world.clock)
    again.attach(rows)
    assert drive_started(again, world) == JobState.JOB_STATE_SUCCEEDED
    assert len(world.started) == 3  # nothing started twice
    assert replica_states(store, again) == {"workerpool0-0": "SUCCEEDED", "workerpool1-0": "SUCCEEDED",
                                            "workerpool1-1": "SUCCEEDED"}


def test_a_trial_that_waits_longer_than_max_wait_duration_is_infeasible_not_the_study(store: Store,
                                                                                     world: FakeWorld) -> None:
    """Each trial whose wait runs out fails as a trial (it failed the whole study, the trial
    never recorded); here every one does, so the study ends FAILED without a result."""
    from vcli.placement import NoCapacityError

    class Full:
        def __call__(self, replicas: Sequence[Any], **_: Any) -> list[Placement]:
            raise NoCapacityError("all 1 GPUs are in use")

        def release(self, job_id: str) -> None:
            pass

    run, _ = study(store, world, "metric:acc=%x@1", max_trials=2, parallel=1, placer=Full(), failures=5,
                   scheduling=Scheduling(max_wait_seconds=60))
    assert run.run() == JobState.JOB_STATE_FAILED
    assert "No trial reported the metric" in run.error["message"]
    trials = store.trials(run.study_id)
    assert [t.state for t in trials] == [TrialState.INFEASIBLE] * 2
    assert all(f"Trial {t.id} found no capacity within scheduling.maxWaitDuration (60s): all 1 GPUs are in use"
               == t.infeasible_reason for t in trials), trials
    assert 120 <= world.clock.now() - 1000 < 124


@pytest.mark.parametrize("ending", ["goal_value", "study_timeout_seconds"])
def test_a_study_that_stops_launching_while_a_trial_waits_for_capacity_ends(store: Store, world: FakeWorld,
                                                                            ending: str) -> None:
    """One slot's worth of GPUs, two trials at a time: the second waits. The goal reached (or
    the time budget used up) meanwhile left the study RUNNING for ever, waiting for that trial,
    its entry in the hosts' GPU queue holding other users' jobs back (found by a probe)."""
    from vcli.placement import NoCapacityError

    class OneSlot:
        def __init__(self) -> None:
            self.placed: set[str] = set()
            self.stopped_waiting = 0

        def __call__(self, replicas: Sequence[Any], job_id: str | None = None, **_: Any) -> list[Placement]:
            if self.placed:
                raise NoCapacityError("1 of 1 GPUs in use")
            self.placed.add(str(job_id))
            return [Placement() for _ in replicas]

        def release(self, job_id: str) -> None:
            self.placed.discard(job_id)

        def stop_waiting(self) -> None:
            self.stopped_waiting += 1

    placer = OneSlot()
    limits = {"goal_value": 0.0} if ending == "goal_value" else {"study_timeout_seconds": 5}
    run, _ = study(store, world, "metric:acc=%x@1", "sleep:20", max_trials=4, parallel=2, placer=placer, **limits)
    assert run.run() == JobState.JOB_STATE_SUCCEEDED
    assert [t.state for t in run.trials.values()] == [TrialState.SUCCEEDED]  # the waiting one never started
    assert not run.queued and placer.stopped_waiting == 1
    assert world.clock.now() - 1000 < 60


@pytest.mark.parametrize("crash_at", [30, 60])  # both are crashes after which the trial on GPU 1 ends first
def test_a_resumed_study_never_gives_a_reattached_trials_gpu_to_a_new_trial(store: Store, world: FakeWorld,
                                                                            crash_at: int) -> None:
    """One host with 2 GPUs, one GPU per trial, 2 at a time. The replacement controller's
    placer is a fresh one (a new process): the re-attached trials' GPUs must count as held, so
    the next trial waits for one to end rather than share its GPU."""
    from vcli.placement import JobPlacer
    from vcli.placement.scheduler import HostCapacity, Scheduler

    def gpu_placer() -> JobPlacer:
        inner = JobPlacer(Scheduler([HostCapacity(name="box", address="127.0.0.1", gpu_indices=(0, 1))]))

        class Checked(JobPlacer):
            def __call__(self, replicas: Sequence[Any], **kw: Any) -> list[Placement]:
                got = inner(replicas, **kw)
                busy = {world.replicas[ref].launch.placement.gpu_indices for ref in world.running()}
                assert all(p.gpu_indices not in busy for p in got), (got, busy)
                return got

            def release(self, job_id: str) -> None:
                inner.release(job_id)

            def hold(self, job_id: str, replicas: Sequence[Any], spec: Any, placements: Sequence[Placement]) -> None:
                inner.hold(job_id, replicas, spec, placements)

        return Checked(inner.scheduler)

    # Durations vary with x, so re-attached trials end in either order.
    actions = ("sleep:%x", "sleep:%x", "metric:acc=%x@1", "sleep:%x", "sleep:%x", "metric:acc=%x@2", "exit:0")
    first, _ = study(store, world, *actions, max_trials=10, parallel=2, placer=gpu_placer())
    gpu_pool = replace(first.spec.trial_job_spec.worker_pool_specs[0], machine_spec=MachineSpec(
        machine_type="n1-standard-4", accelerator_type="NVIDIA_TESLA_T4", accelerator_count=1))
    first.spec = replace(first.spec, trial_job_spec=job_spec(gpu_pool))
    crash_after_sleeps(world, crash_at)
    with pytest.raises(Crash):
        first.run()
    for active in first.active.values():  # replicas its start threads had begun (CI, loaded, saw 1 of 2)
        if active.run._worker is not None:
            active.run._worker.join()
    assert len(world.running()) == 2
    second = resumed(store, world, first, gpu_placer())
    assert second.placer.scheduler.gpus.free("box") == ()  # held by the two re-attached trials
    assert second.run() == JobState.JOB_STATE_SUCCEEDED
    assert second.placer.scheduler.gpus.free("box") == (0, 1)
    assert states(second) == ["SUCCEEDED"] * 10 and len(world.started) == 10
    assert {world.replicas[ref].launch.placement.gpu_indices for ref in world.started} == {(0,), (1,)}


def test_a_resumed_study_keeps_its_time_budget_from_its_start(store: Store, world: FakeWorld) -> None:
    """--study-timeout is the study's budget, not each controller's: a study that ran 50 s of
    a 60 s budget before its controller died has 10 s left after `resume`."""
    first, _ = study(store, world, "sleep:5", "metric:acc=%x@1", "sleep:1000", max_trials=10, parallel=2,
                     study_timeout_seconds=60)
    crash_after_sleeps(world, 3)
    with pytest.raises(Crash):
        first.run()
    with sqlite3.connect(store.db_path) as db:  # as if the study had started 50 s ago
        db.execute("UPDATE jobs SET start_time = ? WHERE id = ?",
                   (time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 50)), first.study_id))
    second = resumed(store, world, first)
    began = world.clock.now()
    assert second.run() == JobState.JOB_STATE_SUCCEEDED
    assert "time budget" in store.get_job(first.study_id).record["stopReason"]
    assert 8 <= world.clock.now() - began < 20


def test_the_default_configuration_runs_as_trial_1_once(store: Store, world: FakeWorld) -> None:
    """Every parameter has a defaultValue: trial 1 runs exactly those values, the search goes on
    from there (the suggester is told it), and a resumed study does not run it again."""
    from vcli.spec import IntegerValueSpec

    lr = ParameterSpec(parameter_id="lr", value_spec=DoubleValueSpec(min_value=1e-4, max_value=0.1, default_value=0.01))
    units = ParameterSpec(parameter_id="units", value_spec=IntegerValueSpec(min_value=16, max_value=256, default_value=64))
    opt = ParameterSpec(parameter_id="opt", value_spec=CategoricalValueSpec(values=("adam", "sgd"), default_value="adam"))
    run, _ = study(store, world, "metric:acc=0.5@1", "exit:0", max_trials=5, parallel=2, parameters=(lr, units, opt))
    assert run.run() == JobState.JOB_STATE_SUCCEEDED
    trials = sorted(store.trials(run.study_id), key=lambda t: int(t.id))
    assert dict(trials[0].parameters) == {"lr": 0.01, "units": 64, "opt": "adam"}
    assert len(trials) == 5 and all(dict(t.parameters) != dict(trials[0].parameters) for t in trials[1:])
    again = StudyRun(store=Store(store.home), executor=FakeExecutor(world), spec=run.spec, study_id=run.study_id,
                     display_name="s", suggester=get_suggester(run.spec.study_spec, seed=7), clock=world.clock)
    again.resume()
    assert again.strategy.initial(again) is None  # a study with trials never runs its defaults again


def test_the_default_configuration_needs_every_active_parameter() -> None:
    from vcli.spec import ConditionalParameterSpec, IntegerValueSpec
    from vcli.tuning.defaults import default_configuration

    momentum = ParameterSpec(parameter_id="momentum", value_spec=DoubleValueSpec(min_value=0.0, max_value=0.9))
    opt = ParameterSpec(parameter_id="opt", value_spec=CategoricalValueSpec(values=("adam", "sgd"), default_value="adam"),
                        conditional_parameter_specs=(ConditionalParameterSpec(parameter_spec=momentum,
                                                                              parent_values=("sgd",)),))
    n = ParameterSpec(parameter_id="n", value_spec=IntegerValueSpec(min_value=1, max_value=4, default_value=2))
    assert default_configuration((opt, n)) == {"opt": "adam", "n": 2}  # momentum is inactive under adam
    sgd = ParameterSpec(parameter_id="opt", value_spec=CategoricalValueSpec(values=("adam", "sgd"), default_value="sgd"),
                        conditional_parameter_specs=opt.conditional_parameter_specs)
    assert default_configuration((sgd, n)) is None  # momentum is active and has no default
    assert default_configuration((opt, X)) is None  # x has no default
    outside = ParameterSpec(parameter_id="n", value_spec=IntegerValueSpec(min_value=1, max_value=4, default_value=9))
    assert default_configuration((outside,)) is None
    grid = ParameterSpec(parameter_id="d", value_spec=DiscreteValueSpec(values=(0.1, 0.2), default_value=0.2))
    assert default_configuration((grid,)) == {"d": 0.2} and default_configuration(()) is None


def test_enqueued_trials_run_first_in_order_and_a_resumed_study_runs_the_rest(store: Store, world: FakeWorld) -> None:
    """`--enqueue-trial` configurations run before any suggestion, in order; a study resumed
    after its first ran runs only the others (a configuration already run is not run again)."""
    run, _ = study(store, world, "metric:acc=%x@1", "exit:0", max_trials=4, parallel=1)
    run = replace(run, enqueued=({"x": 0.25}, {"x": 0.75}))
    assert run.run() == JobState.JOB_STATE_SUCCEEDED
    trials = sorted(store.trials(run.study_id), key=lambda t: int(t.id))
    assert [dict(t.parameters) for t in trials[:2]] == [{"x": 0.25}, {"x": 0.75}] and len(trials) == 4
    resumed = replace(run, trials={"1": trials[0]}, queued=[], active={})
    resumed.strategy = resumed._strategy()
    assert [p.parameters for p in resumed.strategy.initial(resumed) or []] == [{"x": 0.75}]

"""The study window: the live screen in a real pseudo-terminal (pyte), the pure screen
function at fixed sizes, and the plain lines for pipes."""

from __future__ import annotations

import fcntl
import io
import json
import math
import os
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pyte
import pytest

from tests.helpers import REPO, vcli, vcli_env
from vcli.spec import Goal, JobState, Measurement, MetricSpec, Trial, TrialState
from vcli.view import PlainStudyView, StudySnapshot, study_table


def _snapshot(now: float) -> StudySnapshot:
    """40 trials: 36 ended (every 7th INFEASIBLE with the trainer's error, trial 5 stopped
    early), 4 ACTIVE; the best is trial 20."""
    trials = {}
    for i in range(1, 41):
        state = TrialState.ACTIVE if i > 36 else TrialState.INFEASIBLE if i % 7 == 0 else TrialState.SUCCEEDED
        m = Measurement(step_count=3, metrics={"score": -((i - 20) ** 2) / 10})
        trials[str(i)] = Trial(
            id=str(i), parameters={"learning_rate": i / 700, "optimizer": "adam", "units": 32}, state=state,
            measurements=(m,), final_measurement=m if state == TrialState.SUCCEEDED else None,
            infeasible_reason=("The trial's custom job ended JOB_STATE_FAILED: The replica workerpool0-0 exited with a "
                               "non-zero status of 1. To find out more ... The trainer's last error line: "
                               "ValueError: loss is NaN") if state == TrialState.INFEASIBLE else None,
            early_stopping_rule="median" if i == 5 else None, stop_reason="median rule: worse" if i == 5 else None)
    return StudySnapshot("digits-hpt", [MetricSpec(metric_id="score", goal=Goal.MAXIMIZE)],
                         ["learning_rate", "optimizer", "units"], 40, trials,
                         {k: now - 100 + int(k) for k in trials}, {k: now - 50 + int(k) for k in trials if int(k) <= 36},
                         JobState.JOB_STATE_RUNNING, since=now - 120)


def _render(snap: StudySnapshot, width: int, height: int, **kw) -> list[str]:
    from rich.console import Console

    console = Console(width=width, height=height, record=True, file=io.StringIO(), force_terminal=True)
    console.print(study_table(snap, width=width, height=height, now=snap.since + 120, **kw))
    return console.export_text().splitlines()


@pytest.mark.parametrize("width", [90, 60, 150])
def test_the_screen_keeps_running_trials_and_the_best_in_view(width: int) -> None:
    now = time.monotonic()
    lines = _render(_snapshot(now), width, 24, messages=["Waiting for capacity to start trial 41: all GPUs busy"])
    text = "\n".join(lines)
    assert len(lines) <= 24 and all(len(line) <= width for line in lines), text
    rows = {m.group(1): line for line in lines if (m := re.match(r"\s*(\d+)\s+(ACTIVE|SUCCEEDED|INFEASIBLE)", line))}
    assert {"37", "38", "39", "40", "20"} <= rows.keys(), text  # every ACTIVE trial and the best one
    assert "ACTIVE" in rows["37"]
    assert lines[0].startswith("digits-hpt RUNNING  36/40 done · 4 active"), lines[0]
    assert "ETA ~" in lines[0] and ("elapsed 2m00s" in lines[0] or width < 90)
    assert lines[1].startswith("best trial 20  score=0 (step 3)")
    assert re.search(r"\.\.\. \d+ more \(\d+ SUCCEEDED, \d+ INFEASIBLE\)", text), text
    assert "score (max)" in text  # the metric always stays
    assert "Waiting for capacity" in lines[-1]
    assert "[/" not in text
    if width == 60:
        assert "not shown (narrow terminal): NOTE" in text and "TIME" in text
    if width == 150:
        assert "ValueError: loss is NaN" in rows["35"]  # why a trial failed, in its own words
        assert "learning_rate" in lines[2]


def test_a_population_based_study_shows_each_trials_member_and_origin() -> None:
    """PBT trials carry their population slot and, once exploited, the checkpoint they started
    from (`2@4`: trial 2's, at step 4); other studies have neither column."""
    from dataclasses import replace

    from vcli.spec import PbtLineage

    now = time.monotonic()
    plain = _snapshot(now)
    trials = {k: replace(t, lineage=PbtLineage(member=(int(k) - 1) % 4,
                                               parent_trial_id=str(int(k) - 4) if int(k) > 4 else None,
                                               start_step=3 if int(k) > 4 else 0))
              for k, t in plain.trials.items()}
    lines = _render(replace(plain, trials=trials), 150, 24)
    header = next(line for line in lines if line.lstrip().startswith("TRIAL"))
    assert "MEMBER" in header and "FROM" in header, header
    row = next(line for line in lines if re.match(r"\s*38\s+ACTIVE", line))
    cells = row.split()
    assert "34@3" in cells and "1" in cells, row  # trial 38: member 1, from trial 34 at step 3
    assert not any("MEMBER" in line for line in _render(plain, 150, 24))


def test_plain_lines_name_the_trial_its_parameters_and_why() -> None:
    out = io.StringIO()
    view = PlainStudyView(out, "s", [MetricSpec(metric_id="acc", goal=Goal.MAXIMIZE)], [], 3)
    m = Measurement(step_count=2, metrics={"acc": 0.5})
    view.trial_started(Trial(id="1", parameters={"lr": 0.1}, state=TrialState.ACTIVE))
    view.trial_stopping(Trial(id="1", parameters={"lr": 0.1}, state=TrialState.STOPPING, measurements=(m,),
                              stop_reason="median rule: best acc 0.5 by step 2 is worse than the median 0.7",
                              early_stopping_rule="median"))
    view.trial_ended(Trial(id="1", parameters={"lr": 0.1}, state=TrialState.SUCCEEDED, measurements=(m,),
                           final_measurement=m, early_stopping_rule="median"))
    view.trial_started(Trial(id="2", parameters={"lr": 0.2}, state=TrialState.ACTIVE))
    view.trial_ended(Trial(id="2", parameters={"lr": 0.2}, state=TrialState.INFEASIBLE,
                           infeasible_reason="see: vcli custom-jobs stream-logs 123"))
    lines = out.getvalue().splitlines()
    assert lines[0] == "trial 1 ACTIVE lr=0.1"
    assert lines[1] == "trial 1 STOPPING at step 2, stopped early (lr=0.1): median rule: best acc 0.5 by step 2 is worse than the median 0.7"
    assert re.fullmatch(r"trial 1 SUCCEEDED after \d+(\.\d)?s, stopped early by the median rule: acc=0.5 step=2 \(lr=0.1\)", lines[2])
    assert re.fullmatch(r"trial 2 INFEASIBLE after \d+(\.\d)?s \(lr=0.2\): see: vcli custom-jobs stream-logs 123", lines[4])


def test_plain_lines_print_every_measurement_reported_between_two_polls() -> None:
    out = io.StringIO()
    view = PlainStudyView(out, "s", [MetricSpec(metric_id="acc", goal=Goal.MAXIMIZE),
                                     MetricSpec(metric_id="loss", goal=Goal.MINIMIZE)], [], 3)
    ms = [Measurement(step_count=s, metrics={"acc": s / 10, "loss": 1 - s / 10}) for s in (1, 2, 3)]
    half = Measurement(step_count=4, metrics={"acc": 0.4})

    def measured(*measurements: Measurement) -> list[str]:
        before = len(out.getvalue().splitlines())
        view.trial_measured(Trial(id="7", parameters={"lr": 0.1}, state=TrialState.ACTIVE,
                                  measurements=tuple(measurements)))
        return [line.split(" (")[0] for line in out.getvalue().splitlines()[before:]]

    # three steps in one poll: three lines (only step 3 was printed)
    assert measured(*ms) == ["trial 7 measurement step=1 acc=0.1 loss=0.9", "trial 7 measurement step=2 acc=0.2 loss=0.8",
                             "trial 7 measurement step=3 acc=0.3 loss=0.7"]
    assert measured(*ms, half) == ["trial 7 measurement step=4 acc=0.4"]
    # step 4's second metric came later: step 4 again, complete; nothing printed twice otherwise
    full = Measurement(step_count=4, metrics={"acc": 0.4, "loss": 0.6})
    assert measured(*ms, full) == ["trial 7 measurement step=4 acc=0.4 loss=0.6"]
    assert measured(*ms, full, Measurement(step_count=5, metrics={"acc": 0.5, "loss": 0.5})) == [
        "trial 7 measurement step=5 acc=0.5 loss=0.5"]


TRAINER = """
import sys, time
x = float([a for a in sys.argv if a.startswith("--x=")][0].split("=")[1])
time.sleep(0.3 + x / 10)
if x > 9.0:
    print("RuntimeError: diverged", file=sys.stderr)
    sys.exit(3)
print(f"score={-(x - 4) ** 2:.4f}", flush=True)
"""


def _run_in_pty(tmp_path: Path, width: int, height: int) -> list[str]:
    """Run a 40-trial study whose view is a real terminal of `width` x `height`; every screen
    (pyte's display) seen once the output paused (a frame a person could look at)."""
    script = tmp_path / "train.py"
    script.write_text(TRAINER)
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", height, width, 0, 0))
    env = vcli_env(tmp_path / f"home{width}", TERM="xterm-256color", COLUMNS=str(width), LINES=str(height))
    proc = subprocess.Popen(
        [sys.executable, "-m", "vcli", "hp-tuning-jobs", "create", "--display-name=pty-study", "--max-trial-count=40",
         "--parallel-trial-count=4", "--algorithm=random-search", "--seed=5", "--metric=metric-id=score,goal=maximize",
         "--parameter-spec=parameter-id=x,type=double,min=0,max=10", "--max-failed-trial-count=40",
         "--worker-pool-spec=machine-type=n1-standard-4,container-image-uri=x", f"--command=python3,{script}"],
        stdin=slave, stdout=slave, stderr=slave, env=env, cwd=REPO, start_new_session=True)
    os.close(slave)
    screen = pyte.Screen(width, height)
    stream = pyte.ByteStream(screen)
    frames: list[str] = []
    deadline = time.monotonic() + 400
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            stream.feed(chunk)
            if not select.select([master], [], [], 0.05)[0]:  # a whole redraw, not half of one
                frames.append("\n".join(screen.display))
        frames.append("\n".join(screen.display))
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    return frames


@pytest.mark.parametrize("width", [90, 60])
def test_live_view_in_a_real_terminal(tmp_path: Path, width: int) -> None:
    """Every frame a person sees shows each running trial and the best trial so far, and no
    markup; the last frame is the whole study's summary."""
    frames = _run_in_pty(tmp_path, width, 24)
    checked = 0
    for frame in frames:
        assert "[/" not in frame and "[green]" not in frame and "[cyan]" not in frame, frame
        lines = frame.splitlines()
        head = next((i for i, line in enumerate(lines) if line.startswith("pty-study ")), None)
        if head is None:
            continue
        summary = re.search(r"(\d+)/40 done · (\d+) active", lines[head])
        if summary is None or head + 1 >= len(lines):
            continue
        rows = [line.split() for line in lines[head + 3:] if re.match(r"\s*\d+\s+[A-Z]+", line)]
        active = [r[0] for r in rows if r[1] in ("ACTIVE", "STOPPING")]
        assert len(active) == int(summary.group(2)), frame  # every running trial is on screen
        best = re.match(r"best trial (\d+) ", lines[head + 1])
        if best is not None:
            assert best.group(1) in [r[0] for r in rows], frame  # and so is the best one
        checked += 1
    assert checked >= 20, f"only {checked} complete frames"
    ended = [f for f in frames if "pty-study SUCCEEDED  40/40 done · 0 active" in f]
    assert ended, frames[-1]
    assert "finished:JOB_STATE_SUCCEEDED" in re.sub(r"\s+", "", frames[-1])  # (wrapped at 60 columns)
    # The final screen folded trials into "... N more": the last line names the command listing them all.
    assert "All40trials:vclihp-tuning-jobstrials" in re.sub(r"\s+", "", frames[-1]), frames[-1]


def test_the_trials_command_lists_a_studys_trials(tmp_path: Path) -> None:
    """`trials ID`: the live table's rows for every trial; --sort-by and --limit choose them
    (the best 5 here, best first); --format gives Vertex's Trial resources."""
    home = tmp_path / "home"
    (tmp_path / "train.py").write_text(TRAINER)
    r = vcli(home, "hp-tuning-jobs", "create", "--display-name=t", "--max-trial-count=8", "--parallel-trial-count=4",
             "--algorithm=random-search", "--seed=5", "--metric=metric-id=score,goal=maximize",
             "--parameter-spec=parameter-id=x,type=double,min=0,max=8", "--max-failed-trial-count=8",
             "--worker-pool-spec=machine-type=n1-standard-4,container-image-uri=x",
             f"--command=python3,{tmp_path / 'train.py'}", "--format=value(name.basename())", timeout=300)
    assert r.returncode == 0, r.stderr
    study = r.stdout.strip()
    everything = vcli(home, "hp-tuning-jobs", "trials", study, timeout=60)
    assert everything.returncode == 0, everything.stderr
    assert [line.split()[0] for line in everything.stdout.splitlines() if re.match(r"\s*\d+\s+SUCCEEDED", line)] == \
        [str(i) for i in range(1, 9)]
    best = vcli(home, "hp-tuning-jobs", "trials", study, "--sort-by=~finalMeasurement.metrics[0].value", "--limit=5",
                timeout=60)
    scores = [float(line.split()[3]) for line in best.stdout.splitlines() if re.match(r"\s*\d+\s+SUCCEEDED", line)]
    assert len(scores) == 5 and scores == sorted(scores, reverse=True), best.stdout
    as_json = vcli(home, "hp-tuning-jobs", "trials", study, "--format=json", "--filter=state=SUCCEEDED", timeout=60)
    assert sorted(t["id"] for t in json.loads(as_json.stdout)) == sorted(str(i) for i in range(1, 9))


@pytest.mark.parametrize("stamp", ["nan", "inf", "1e300", "-1e20"])
def test_a_log_record_with_an_impossible_time_is_not_a_record(tmp_path, stamp) -> None:
    # stream-logs crashed on it (a traceback) and the dashboard's whole log page was a 500.
    from vcli.logs import Follower, read_records

    log = tmp_path / "replica.log"
    log.write_text(f"1700000000.5\tstdout\tbefore\n{stamp}\tstdout\tforged\n1700000001.5\tstdout\tafter\n")
    assert [r.message for r in read_records(str(log), "workerpool0-0")] == ["before", "after"]
    assert [r.message for r in Follower([("workerpool0-0", str(log))]).poll()] == ["before", "after"]


def test_short_durations_keep_their_tenths() -> None:
    # A trial of 0.9 s was "SUCCEEDED after 0s".
    from vcli.view.table import clock as _clock

    assert [_clock(x) for x in (-1, 0.94, 0.96, 9.96, 10.5, 185, 3725)] == ["0.0s", "0.9s", "0.9s", "9.9s", "10s",
                                                                             "3m05s", "1h02m"]


def test_plain_lines_go_on_when_a_long_trials_measurements_are_thinned() -> None:
    """A trial keeps at most 1,000 measurements: once thinned, the list is shorter than the
    count of lines printed, and the plain view printed nothing more until it grew past it."""
    out = io.StringIO()
    view = PlainStudyView(out, "s", [MetricSpec(metric_id="acc", goal=Goal.MAXIMIZE)], [], 3)

    def m(step: int) -> Measurement:
        return Measurement(step_count=step, metrics={"acc": step / 1e4}, elapsed_seconds=step / 100)

    view.trial_measured(Trial(id="1", parameters={}, state=TrialState.ACTIVE, measurements=tuple(m(s) for s in range(1, 11))))
    thinned = (*(m(s) for s in range(1, 11, 2)), m(11), m(12))  # step 10, printed last, thinned away
    view.trial_measured(Trial(id="1", parameters={}, state=TrialState.ACTIVE, measurements=thinned))
    view.trial_measured(Trial(id="1", parameters={}, state=TrialState.ACTIVE, measurements=(*thinned, m(13))))
    steps = [int(re.search(r"step=(\d+)", line).group(1)) for line in out.getvalue().splitlines()]
    assert steps == list(range(1, 14))


def test_plain_lines_spell_values_that_are_not_finite_as_describe_does() -> None:
    """Plain lines said `nan`, `inf`, `-inf` while `describe` says NaN, Infinity, -Infinity (found
    by a probe)."""
    out = io.StringIO()
    view = PlainStudyView(out, "s", [MetricSpec(metric_id="acc", goal=Goal.MAXIMIZE)], [], 3)
    ms = tuple(Measurement(step_count=s, metrics={"acc": v}) for s, v in ((1, math.nan), (2, math.inf), (3, -math.inf)))
    view.trial_measured(Trial(id="1", parameters={}, state=TrialState.ACTIVE, measurements=ms))
    assert [line.split(" (")[0] for line in out.getvalue().splitlines()] == [
        "trial 1 measurement step=1 acc=NaN", "trial 1 measurement step=2 acc=Infinity",
        "trial 1 measurement step=3 acc=-Infinity"]


def test_plain_lines_of_a_resumed_trial_start_after_what_it_measured_before() -> None:
    """`resume` printed again every measurement the dead controller had printed (found by a
    probe): a re-attached trial's lines start after its stored measurements."""
    out = io.StringIO()
    view = PlainStudyView(out, "s", [MetricSpec(metric_id="acc", goal=Goal.MAXIMIZE)], [], 3)
    ms = tuple(Measurement(step_count=s, metrics={"acc": s / 10}, elapsed_seconds=s / 2) for s in range(1, 5))
    view.trial_started(Trial(id="1", parameters={}, state=TrialState.ACTIVE, measurements=ms[:3]))
    view.trial_measured(Trial(id="1", parameters={}, state=TrialState.ACTIVE, measurements=ms))
    assert [line.split(" (")[0] for line in out.getvalue().splitlines()] == [
        "trial 1 ACTIVE ", "trial 1 measurement step=4 acc=0.4"]


def test_a_log_follower_opens_a_log_only_when_it_grew(tmp_path, monkeypatch) -> None:
    """Each tick of a study polls every running trial's log: a log of the size already read
    costs one stat, no open; what is appended later is read from where the last poll stopped."""
    import builtins

    from vcli.logs import Follower

    log = tmp_path / "replica.log"
    log.write_text("1700000000.5\tstdout\tfirst\n")
    follower = Follower([("workerpool0-0", str(log))])
    assert [r.message for r in follower.poll()] == ["first"]
    opened: list[str] = []
    real_open = builtins.open
    monkeypatch.setattr(builtins, "open", lambda f, *a, **k: (opened.append(str(f)), real_open(f, *a, **k))[1])
    assert follower.poll() == [] and follower.poll() == []
    assert opened == []
    with real_open(log, "a") as f:
        f.write("1700000001.5\tstdout\tsecond\n")
    assert [r.message for r in follower.poll()] == ["second"]
    assert opened == [str(log)]


def test_long_work_shows_its_steps(capsys) -> None:
    """`Steps`: piped, one line per step with the time it began at; on a terminal, nothing for
    work whose steps all come within QUIET_SECONDS (a flash of a status line is noise)."""
    from vcli.view.progress import Steps

    said: list[str] = []
    with Steps("Drawing", said.append, terminal=False) as step:
        step("one")
        step("two")
    assert [s.rsplit(" (at ", 1)[0] for s in said] == ["Drawing: one", "Drawing: two"]
    assert all(s.endswith(" s)") for s in said)
    quiet: list[str] = []
    with Steps("Drawing", quiet.append, terminal=True) as step:
        step("one")
    assert quiet == [] and capsys.readouterr().err == ""

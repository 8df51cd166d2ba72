"""MLflow tracking against a real tracking server (`mlflow server`, SQLite, loopback).

Real CLI, real trial processes; what vcli logged is read back with MlflowClient: a study with
early stopping and one with PBT (parent and child runs, params, metrics by step, states, stop
reasons, PBT lineage, the best trial), a trainer that logs into its own trial's run, `kill -9`
and `resume` (no duplicate runs nor points), a server stopped in mid-study (one WARNING, the
study SUCCEEDS), and a custom job's run (args, pools, exit codes, experiment names).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import describe, job_id_from_stderr, read_stderr_until, spawn, vcli, wait_for

pytest.importorskip("mlflow", reason="needs the mlflow extra: pip install 'vcli[mlflow]'")

from tests.harness.mlflow_server import MlflowServer

# accuracy(step) = (1 - x) * (1 - 0.5**step): a larger x is a worse config, visible at once.
# With --log=1 the trainer also logs into MLflow itself (the chief: its trial's run).
CURVE = """
import os, sys, time
args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:] if "=" in a)
x = float(args["x"]); steps = int(args.get("steps", 6)); pause = float(args.get("pause", 0.25))
chief = '"type": "workerpool0"' in os.environ.get("CLUSTER_SPEC", "")
if not chief and "MLFLOW_RUN_ID" in os.environ:
    sys.exit("a worker got MLFLOW_RUN_ID")
if args.get("log") == "1" and chief:
    import mlflow
    mlflow.log_param("trainer_x", args["x"])
for step in range(1, steps + 1):
    time.sleep(pause)
    if args.get("log") == "1" and chief:
        mlflow.log_metric("trainer_loss", x * 10 + step, step=step)
    print(f"accuracy={(1 - x) * (1 - 0.5 ** step):.6f} step={step}", flush=True)
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    s = MlflowServer(tmp_path_factory.mktemp("mlflow")).start()
    try:
        yield s
    finally:
        s.stop()


def _package(tmp_path: Path) -> Path:
    pkg = tmp_path / "curve"
    pkg.mkdir(exist_ok=True)
    (pkg / "curve.py").write_text(CURVE)
    return pkg


def _study_args(name: str, pkg: Path, xs: list[float], *extra: str, workers: int = 0) -> list[str]:
    pool = f"--worker-pool-spec=machine-type=n1-standard-4,local-package-path={pkg},script=curve.py"
    return ["hp-tuning-jobs", "create", f"--display-name={name}", "--metric=metric-id=accuracy,goal=maximize",
            f"--parameter-spec=parameter-id=x,type=discrete,values={';'.join(map(str, xs))}", pool,
            *([f"--worker-pool-spec=machine-type=n1-standard-4,replica-count={workers}"] if workers else []),
            "--algorithm=grid-search", f"--max-trial-count={len(xs)}", *extra]


def _runs(server: MlflowServer, experiment: str) -> tuple[Any, dict[str, Any]]:
    """(the study's parent run, trial id -> child run) of an experiment that holds one study."""
    client = server.client()
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None, experiment
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    parents = [r for r in runs if "vcli.trial_id" not in r.data.tags]
    assert len(parents) == 1, [r.info.run_name for r in parents]
    children = {}
    for r in runs:
        if "vcli.trial_id" in r.data.tags:
            assert r.data.tags["vcli.trial_id"] not in children, "two runs for one trial"
            children[r.data.tags["vcli.trial_id"]] = r
    return parents[0], children


def _history(server: MlflowServer, run: Any, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in server.client().get_metric_history(run.info.run_id, key))


def _measured(trial: dict[str, Any]) -> list[tuple[int, float]]:
    return sorted((int(m["stepCount"]), m["metrics"][0]["value"]) for m in trial.get("measurements", []))


def test_a_study_with_early_stopping_is_a_parent_run_with_a_child_per_trial(tmp_path: Path, server: MlflowServer) -> None:
    home, pkg = tmp_path / "home", _package(tmp_path)
    xs = [0.05, 0.35, 0.65, 0.95]
    r = vcli(home, *_study_args("asha-study", pkg, xs, "--parallel-trial-count=2", "--args=--steps=6",
                                "--early-stopping=asha,reduction-factor=2,min-step-count=1,max-step-count=6"),
             timeout=300, MLFLOW_TRACKING_URI=server.uri)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "WARNING" not in r.stderr, r.stderr
    study_id = job_id_from_stderr(r.stderr)
    study = describe(home, "hp-tuning-jobs", study_id)
    parent, children = _runs(server, "asha-study")

    # The parent: the study's settings, its state, and its best trial.
    assert study["tracking"]["runId"] == parent.info.run_id and study["tracking"]["uri"] == server.uri
    assert parent.info.run_name == "asha-study" and parent.info.status == "FINISHED"
    tags, params = parent.data.tags, parent.data.params
    assert tags["vcli.study_id"] == study_id and tags["vcli.state"] == "JOB_STATE_SUCCEEDED"
    assert params["algorithm"] == "GRID_SEARCH" and params["space.x"].startswith("DISCRETE [0.05, 0.35")
    assert params["early_stopping"] == "AshaStoppingSpec"
    best = next(t for t in study["trials"] if t["id"] == study["bestTrialId"])
    assert tags["vcli.best_trial_id"] == best["id"]
    assert tags["vcli.best_trial_run_id"] == children[best["id"]].info.run_id
    assert parent.data.metrics["best/accuracy"] == best["finalMeasurement"]["metrics"][0]["value"]
    assert study["tracking"]["trialRuns"] == {i: run.info.run_id for i, run in children.items()}

    # A child per trial: its parameter, every measurement at its step, its end, why it stopped.
    assert set(children) == {t["id"] for t in study["trials"]}
    stopped = [t for t in study["trials"] if t.get("earlyStoppingRule")]
    assert stopped, "the ASHA rule stopped no trial"
    for trial in study["trials"]:
        run = children[trial["id"]]
        assert run.info.run_name == f"trial-{trial['id']}"
        assert run.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert run.data.params["x"] == str(trial["parameters"][0]["value"])
        assert _history(server, run, "accuracy") == _measured(trial)
        assert run.data.tags["vcli.state"] == trial["state"] == "SUCCEEDED"
        assert run.info.status == "FINISHED" and run.info.end_time >= run.info.start_time
        final = trial["finalMeasurement"]
        assert _history(server, run, "final/accuracy") == [(int(final["stepCount"]), final["metrics"][0]["value"])]
        assert run.data.metrics["duration_seconds"] > 0
        if trial.get("earlyStoppingRule"):
            assert run.data.tags["vcli.early_stopping_rule"] == "asha"
            assert run.data.tags["vcli.stop_reason"] == trial["stopReason"]
        else:
            assert "vcli.early_stopping_rule" not in run.data.tags
    assert children[best["id"]].data.tags.get("vcli.best") == "true"
    assert sum(run.data.tags.get("vcli.best") == "true" for run in children.values()) == 1


def test_a_pbt_study_records_each_exploit_and_its_lineage(tmp_path: Path, server: MlflowServer) -> None:
    from tests.kit import PBT_STUDY, PBT_TOY

    script = tmp_path / "toy.py"
    script.write_text(PBT_TOY)
    config = tmp_path / "pbt.yaml"
    config.write_text(PBT_STUDY.format(max_trials=10, population=4, python=sys.executable, script=script, extra=""))
    home = tmp_path / "home"
    r = vcli(home, "hp-tuning-jobs", "create", f"--config={config}", "--display-name=pbt-tracked", "--seed=3",
             f"--tracking-uri={server.uri}", timeout=400)
    assert r.returncode == 0, r.stderr[-3000:]
    study = describe(home, "hp-tuning-jobs", job_id_from_stderr(r.stderr))
    parent, children = _runs(server, "pbt-tracked")
    assert parent.data.params["algorithm"] == "POPULATION_BASED_TRAINING"
    assert parent.data.params["pbt.population_size"] == "4"
    exploited = [t for t in study["trials"] if (t.get("populationBasedTraining") or {}).get("parentTrialId")]
    assert exploited, "no exploit happened"
    for trial in study["trials"]:
        run = children[trial["id"]]
        pbt = trial["populationBasedTraining"]
        assert run.data.tags["vcli.pbt.member"] == str(pbt["member"])
        assert _history(server, run, "score") == sorted(
            (int(m["stepCount"]), m["metrics"][0]["value"]) for m in trial.get("measurements", []))
        if trial.get("earlyStoppingRule") == "pbt":  # replaced by an exploit: stopped, with why
            assert run.data.tags["vcli.early_stopping_rule"] == "pbt"
            assert run.data.tags["vcli.stop_reason"] == trial["stopReason"]
    for trial in exploited:
        tags = children[trial["id"]].data.tags
        donor = trial["populationBasedTraining"]["parentTrialId"]
        assert tags["vcli.pbt.parent_trial_id"] == donor
        assert tags["vcli.pbt.parent_run_id"] == children[donor].info.run_id
        assert tags["vcli.pbt.start_step"] == str(trial["populationBasedTraining"]["startStep"])
    assert parent.data.tags["vcli.best_trial_id"] == study["bestTrialId"]


def test_a_pbt_trials_start_step_tag_follows_its_first_report(tmp_path: Path, server: MlflowServer) -> None:
    """The donor may save a newer checkpoint between the exploit and the copy: the trial's first
    report corrects its start step (CI saw the tag keep the exploit's step: 3 against 4)."""
    import yaml

    from tests.kit import PBT_STUDY
    from vcli.codec.study import hp_tuning_job_from_document
    from vcli.spec import JobState, Measurement, PbtLineage, Trial, TrialState
    from vcli.tracking.study import StudyTracker

    doc = yaml.safe_load(PBT_STUDY.format(max_trials=8, population=2, python=sys.executable, script="toy.py", extra=""))
    spec, _, _ = hp_tuning_job_from_document(doc, "pbt.yaml")
    said: list[str] = []
    tracker = StudyTracker({"uri": server.uri, "experiment": "pbt-start-step", "runName": "pbt-start-step"}, study_id="7",
                           display_name="pbt-start-step", spec=spec, say=said.append, persist=lambda settings: None)
    tracker.open()
    donor = Trial(id="1", parameters={"lr": 0.01}, state=TrialState.ACTIVE, lineage=PbtLineage(member=0))
    tracker.trial_started(donor)
    lineage = PbtLineage(member=1, parent_trial_id="1", start_step=3, inherited_parameters={"lr": 0.01})
    child = Trial(id="2", parameters={"lr": 0.012}, state=TrialState.ACTIVE, lineage=lineage)
    tracker.trial_started(child)
    assert tracker.syncer.wait(lambda: tracker._run_id("2") is not None, 30), said
    corrected = Trial(id="2", parameters={"lr": 0.012}, state=TrialState.SUCCEEDED,
                      measurements=(Measurement(step_count=5, metrics={"score": 0.5}),),
                      final_measurement=Measurement(step_count=5, metrics={"score": 0.5}),
                      lineage=PbtLineage(member=1, parent_trial_id="1", start_step=4, inherited_parameters={"lr": 0.01}))
    tracker.trial_ended(corrected)
    tracker.trial_ended(Trial(id="1", parameters={"lr": 0.01}, state=TrialState.SUCCEEDED, lineage=PbtLineage(member=0)))
    tracker.study_ended(JobState.JOB_STATE_SUCCEEDED, None, [])
    assert said and said[-1].startswith("MLflow: experiment [pbt-start-step]"), said
    _, children = _runs(server, "pbt-start-step")
    assert children["2"].data.tags["vcli.pbt.start_step"] == "4"
    assert children["2"].data.tags["vcli.pbt.parent_run_id"] == children["1"].info.run_id


def test_a_trainer_logs_into_its_trials_run_and_only_the_chief_gets_it(tmp_path: Path, server: MlflowServer) -> None:
    home, pkg = tmp_path / "home", _package(tmp_path)
    r = vcli(home, *_study_args("trainer-logs", pkg, [0.2, 0.6], "--parallel-trial-count=2", "--args=--steps=3,--log=1",
                                workers=1),
             timeout=300, MLFLOW_TRACKING_URI=server.uri)
    assert r.returncode == 0, r.stderr[-3000:]
    study = describe(home, "hp-tuning-jobs", job_id_from_stderr(r.stderr))
    assert all(t["state"] == "SUCCEEDED" for t in study["trials"])  # the workers saw no MLFLOW_RUN_ID
    parent, children = _runs(server, "trainer-logs")  # no stray run: the trainers logged into the trials' runs
    for trial in study["trials"]:
        x = trial["parameters"][0]["value"]
        run = children[trial["id"]]
        assert run.data.params["trainer_x"] == str(x)
        assert _history(server, run, "trainer_loss") == [(s, x * 10 + s) for s in (1, 2, 3)]
        assert _history(server, run, "accuracy") == _measured(trial)
        assert run.info.status == "FINISHED"  # vcli's end, after the trainer's own end_run


def test_kill_9_and_resume_continue_the_same_runs(tmp_path: Path, server: MlflowServer) -> None:
    home, pkg = tmp_path / "home", _package(tmp_path)
    xs = [0.1, 0.3, 0.5, 0.7]
    proc = spawn(home, *_study_args("resumed", pkg, xs, "--parallel-trial-count=2", "--args=--steps=8,--pause=0.4"),
                 MLFLOW_TRACKING_URI=server.uri)
    try:
        study_id = job_id_from_stderr(read_stderr_until(proc, "submitted successfully", 60))

        def measured_twice() -> bool:
            trials = describe(home, "hp-tuning-jobs", study_id).get("trials", [])
            return sum(len(t.get("measurements", [])) >= 2 for t in trials) >= 2

        wait_for(measured_twice, 120, "two trials with measurements")
        time.sleep(1.0)  # the tracker logs them
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the controller dies; its trials' replicas run on
        proc.wait()
    r = vcli(home, "hp-tuning-jobs", "resume", study_id, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    study = describe(home, "hp-tuning-jobs", study_id)
    assert study["state"] == "JOB_STATE_SUCCEEDED" and len(study["trials"]) == len(xs)
    parent, children = _runs(server, "resumed")  # one parent, one run per trial: nothing made twice
    assert parent.info.run_id == study["tracking"]["runId"] and parent.info.status == "FINISHED"
    assert set(children) == {t["id"] for t in study["trials"]}
    for trial in study["trials"]:
        history = _history(server, children[trial["id"]], "accuracy")
        assert history == _measured(trial), trial["id"]  # every step once
        assert children[trial["id"]].info.status == "FINISHED"


def test_a_tracker_that_stops_in_mid_study_is_one_warning_and_the_study_succeeds(tmp_path: Path) -> None:
    down = MlflowServer(tmp_path / "mlflow").start()
    home, pkg = tmp_path / "home", _package(tmp_path)
    try:
        proc = spawn(home, *_study_args("tracker-down", pkg, [0.1, 0.3, 0.5, 0.7], "--parallel-trial-count=1",
                                        "--args=--steps=4,--pause=0.3"), MLFLOW_TRACKING_URI=down.uri)
        try:
            read_stderr_until(proc, "submitted successfully", 60)

            def first_trial_run() -> bool:
                exp = down.client().get_experiment_by_name("tracker-down")
                return exp is not None and len(down.client().search_runs([exp.experiment_id])) >= 2

            wait_for(first_trial_run, 60, "the first trial's run")
            down.stop()
            out, err = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    finally:
        down.stop()
    assert proc.returncode == 0, err[-3000:]
    warnings = [line for line in err.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 1 and warnings[0].startswith(f"WARNING: MLflow tracking at {down.uri} failed"), err
    assert "finished: JOB_STATE_SUCCEEDED" in err
    note = next(line for line in err.splitlines() if line.startswith("Note: MLflow tracking at"))
    assert "not logged: trial(s)" in note and "the study's end" in note


CUSTOM_JOB = """
experiment: projects/p/locations/us-central1/metadataStores/default/contexts/digits-exp
experimentRun: projects/p/locations/us-central1/metadataStores/default/contexts/digits-exp-run-1
workerPoolSpecs:
- machineSpec: {{machineType: n1-standard-4}}
  replicaCount: 1
  containerSpec: {{imageUri: toy, command: [{python}, {script}], args: [--x=0.25, --steps=2, --log=1]}}
- machineSpec: {{machineType: n1-standard-8}}
  replicaCount: 1
  containerSpec: {{imageUri: toy, command: [{python}, {script}], args: [--x=0.25, --steps=2]}}
"""


def test_a_custom_job_is_one_run_with_its_args_pools_and_exit_codes(tmp_path: Path, server: MlflowServer) -> None:
    pkg = _package(tmp_path)
    config = tmp_path / "job.yaml"
    config.write_text(CUSTOM_JOB.format(python=sys.executable, script=pkg / "curve.py"))
    home = tmp_path / "home"
    r = vcli(home, "custom-jobs", "create", "--display-name=tracked-job", f"--config={config}",
             f"--tracking-uri={server.uri}", timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "experiment" not in "".join(line for line in r.stderr.splitlines() if line.startswith("Note:"))
    job_id = job_id_from_stderr(r.stderr)
    job = describe(home, "custom-jobs", job_id)
    client = server.client()
    exp = client.get_experiment_by_name("digits-exp")
    (run,) = client.search_runs([exp.experiment_id])
    assert job["tracking"]["runId"] == run.info.run_id and run.info.run_name == "digits-exp-run-1"
    assert run.info.status == "FINISHED" and run.data.tags["vcli.state"] == "JOB_STATE_SUCCEEDED"
    assert run.data.tags["vcli.job_id"] == job_id
    assert run.data.params["args"] == "--x=0.25 --steps=2 --log=1"
    assert run.data.params["workerpool1.machine_type"] == "n1-standard-8"
    assert run.data.params["workerpool1.replica_count"] == "1"
    assert run.data.tags["vcli.exit_code.workerpool0-0"] == "0"
    assert run.data.tags["vcli.exit_code.workerpool1-0"] == "0"
    assert _history(server, run, "trainer_loss") == [(1, 3.5), (2, 4.5)]  # the chief's own logging


def test_tracking_is_off_by_default_and_without_mlflow_imported(tmp_path: Path) -> None:
    """No tracking URI anywhere: no `tracking` record, and MLflow is never imported (the
    controller runs in the CLI process: a probe lists what it imported)."""
    pkg = _package(tmp_path)
    home = tmp_path / "home"
    probe = ("import sys, runpy\nsys.argv = ['vcli', *sys.argv[1:]]\n"
             "try:\n    runpy.run_module('vcli', run_name='__main__')\nexcept SystemExit as e:\n    code = e.code\n"
             "print('MLFLOW-IMPORTED' if 'mlflow' in sys.modules else 'MLFLOW-NOT-IMPORTED', file=sys.stderr)\n"
             "sys.exit(code)\n")
    from tests.helpers import vcli_env

    env = {k: v for k, v in vcli_env(home).items() if k != "MLFLOW_TRACKING_URI"}
    r = subprocess.run([sys.executable, "-c", probe, *_study_args("untracked", pkg, [0.5], "--args=--steps=1")],
                       env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "MLFLOW-NOT-IMPORTED" in r.stderr
    assert "tracking" not in describe(home, "hp-tuning-jobs", job_id_from_stderr(r.stderr))


def test_a_tracker_that_never_answers_times_out_and_the_study_succeeds(tmp_path: Path) -> None:
    """A server that accepts connections and never answers (a hung proxy): vcli's requests
    time out (5 s), one WARNING says so, the trial starts without a run, the study SUCCEEDS."""
    import socket
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def hold() -> None:  # accept and never answer
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    home, pkg = tmp_path / "home", _package(tmp_path)
    try:
        started = time.monotonic()
        r = vcli(home, *_study_args("hung", pkg, [0.5], "--args=--steps=1"), timeout=180,
                 MLFLOW_TRACKING_URI=f"http://127.0.0.1:{listener.getsockname()[1]}")
        elapsed = time.monotonic() - started
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        listener.close()
    assert r.returncode == 0, r.stderr[-3000:]
    warnings = [line for line in r.stderr.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 1 and "timed out" in warnings[0], r.stderr
    assert "trial(s) 1 started before their MLflow run existed" in r.stderr
    assert elapsed < 60, elapsed
    # The trial starts once the wait for its run is over: its recorded span was the wait's 5 s
    # more than its trainer's (describe, export and the timeline showed a trial reporting at
    # 0.3 s that ran 5.5 s), and its line said "SUCCEEDED after 5.5s".
    from vcli.store import iso_seconds

    [trial] = describe(home, "hp-tuning-jobs", job_id_from_stderr(r.stderr))["trials"]
    span = iso_seconds(trial["endTime"]) - iso_seconds(trial["startTime"])
    last = float(trial["measurements"][-1]["elapsedDuration"].rstrip("s"))
    assert span < last + 4, (span, trial)


def test_two_studies_starting_at_once_on_a_new_sqlite_store_are_both_tracked_quietly(tmp_path: Path) -> None:
    """Two controllers creating one new SQLite store at once race in MLflow's schema migration:
    the loser ran its whole study untracked ("cannot start"). MLflow's INFO lines and vcli's
    "MLflow: experiment ..." line came through --no-user-output-enabled."""
    from mlflow.tracking import MlflowClient

    pkg, uri = _package(tmp_path), f"sqlite:///{tmp_path}/mlruns.db"
    procs = [spawn(tmp_path / f"home{i}", *_study_args(f"racer{i}", pkg, [0.1, 0.3], "--args=--steps=1,--pause=0"),
                   f"--tracking-uri={uri}", "--no-user-output-enabled") for i in range(2)]
    try:
        outs = [p.communicate(timeout=300) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    for p, (_out, err) in zip(procs, outs):
        assert p.returncode == 0 and err == "", err[-3000:]
    client = MlflowClient(tracking_uri=uri)
    for i in range(2):
        exp = client.get_experiment_by_name(f"racer{i}")
        assert exp is not None and len(client.search_runs([exp.experiment_id])) == 3, f"racer{i} untracked"


def test_mlflow_database_errors_are_one_warning_never_its_tracebacks(tmp_path: Path) -> None:
    """`--tracking-uri=sqlite:///` (no database) printed MLflow's own ERROR records with their
    tracebacks, once per retry: 137 lines for one job (found by a probe)."""
    pkg = _package(tmp_path)
    r = vcli(tmp_path / "home", "custom-jobs", "create", "--display-name=nodb", "--tracking-uri=sqlite:///",
             f"--worker-pool-spec=machine-type=n1-standard-4,local-package-path={pkg},script=curve.py",
             "--args=--x=0.5,--steps=1,--pause=0", timeout=120)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr and " ERROR " not in r.stderr, r.stderr
    warnings = [line for line in r.stderr.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 1 and warnings[0].startswith("WARNING: MLflow tracking at sqlite:/// failed"), r.stderr

"""`from vcli import aiplatform` finds its way back to a job: a job or study created by the CLI
(or by another Python process) is got back in a fresh interpreter, as a notebook after a kernel
restart, by id or resource name (`get`), listed (`list`, Vertex's filter and order_by), waited
for (`wait_for_completion` raises as Vertex's SDK does for a failed job) and read (`state`,
`error`, `create_time`, `end_time`, `trials`, `to_dict()` = `describe`). `CustomTrainingJob` and
`CustomContainerTrainingJob` run as vcli custom jobs and refuse what vcli cannot do (models,
datasets) by name; Vertex Experiments' runs logged in one process are read in another.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers import describe, vcli, vcli_env

#: A trial (or job) that reports `accuracy` through the metric file; with `--gate=PATH`, once
#: PATH exists (at most 60 s), so a test decides when the job may end.
REPORT = """
import json, os, sys, time
args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:] if "=" in a)
deadline = time.time() + 60
while args.get("gate") and not os.path.exists(args["gate"]) and time.time() < deadline:
    time.sleep(0.05)
print("trained lr=" + args.get("lr", "-"), flush=True)
if args.get("fail"):
    sys.exit("the trainer failed on purpose")
if "lr" in args:
    with open(os.environ["CLOUD_ML_HP_METRIC_FILE"], "a") as f:
        f.write(json.dumps({"accuracy": str(1 - abs(float(args["lr"]) - 0.01)), "global_step": "1"}) + "\\n")
"""


def _python(tmp_path: Path, cells: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The cells in a fresh interpreter (a restarted kernel) with the test's vcli home."""
    full = {k: v for k, v in vcli_env(tmp_path / "home").items() if not k.startswith("MLFLOW_")}
    full.update(env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(cells)], cwd=tmp_path, env=full,
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


def _values(out: str) -> dict[str, str]:
    return {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in out.splitlines() if " " in line and line[:1].isupper()}


def _create(home: Path, group: str, *args: str) -> str:
    r = vcli(home, group, "create", *args, "--executor=local", "--format=value(name.basename())", timeout=120)
    assert r.stdout.strip(), r.stderr
    return r.stdout.strip()


def test_jobs_and_a_study_the_cli_created_are_got_back_in_another_process(tmp_path: Path) -> None:
    (tmp_path / "task.py").write_text(REPORT)
    home = tmp_path / "home"
    pool = "--worker-pool-spec=machine-type=n1-standard-4,replica-count=1,container-image-uri=python"
    command = f"--command={sys.executable},{tmp_path / 'task.py'}"
    gate = tmp_path / "gate"
    slow = _create(home, "custom-jobs", "--display-name=cli-slow", pool, command, f"--args=--gate={gate}",
                   "--labels=team=a", "--async")
    failed = _create(home, "custom-jobs", "--display-name=cli-fails", pool, command, "--args=--fail=1")
    study = _create(home, "hp-tuning-jobs", "--display-name=cli-study", pool, command, "--async",
                    "--parameter-spec=parameter-id=lr,type=double,min=0.001,max=0.1",
                    "--metric=metric-id=accuracy,goal=maximize", "--max-trial-count=2", "--parallel-trial-count=2")
    r = _python(tmp_path, f"""
        import json
        from vcli import aiplatform

        job = aiplatform.CustomJob.get("{slow}")
        print("RUNNING", job.state.name, job.end_time)              # it cannot end before the gate opens
        job.wait_for_resource_creation()
        open("{gate}", "w").close()
        job.wait_for_completion()
        print("STATE", job.state.name, job.display_name, json.dumps(job.labels), job.error)
        print("TIMES", job.create_time < job.end_time, job.end_time.tzname())
        print("DICT", json.dumps(job.to_dict()))
        by_name = aiplatform.CustomJob.get("projects/my-project/locations/us-central1/customJobs/{slow}")
        print("BYNAME", by_name.name, by_name.resource_name)

        bad = aiplatform.CustomJob.get("{failed}")
        try:
            bad.wait_for_completion()
        except RuntimeError as e:
            print("RAISED", json.dumps(str(e)))
        print("ERROR", json.dumps(bad.error))

        print("LIST", [j.name for j in aiplatform.CustomJob.list()])
        print("NEWEST", [j.name for j in aiplatform.CustomJob.list(order_by="create_time desc")])
        print("FILTER", [j.name for j in aiplatform.CustomJob.list(filter='display_name="cli-slow" AND labels.team="a"')])
        print("FAILED", [j.name for j in aiplatform.CustomJob.list(filter='state="JOB_STATE_FAILED"')])

        hp = aiplatform.HyperparameterTuningJob.get("{study}")
        hp.wait_for_completion()
        print("STUDY", hp.state.name, len(hp.trials), sorted(t.state.name for t in hp.trials))
        print("TRIALS", json.dumps([t.to_dict() for t in hp.trials]))
        print("STUDIES", [s.name for s in aiplatform.HyperparameterTuningJob.list()])

        for ref in ("1234567890", "projects/p/locations/l/hyperparameterTuningJobs/{slow}"):
            try:
                aiplatform.CustomJob.get(ref)
            except (aiplatform.NotFound, ValueError) as e:
                print("MISSING", type(e).__name__, getattr(e, "code", "-"), e)
        try:
            aiplatform.HyperparameterTuningJob.get("{slow}")
        except aiplatform.NotFound as e:
            print("NOTASTUDY", e)
        try:
            job.run()
        except RuntimeError as e:
            print("AGAIN", e)
    """)
    assert r.returncode == 0, r.stderr[-3000:]
    got = _values(r.stdout)
    state_then, end_then = got["RUNNING"].split()
    assert state_then in ("JOB_STATE_QUEUED", "JOB_STATE_PENDING", "JOB_STATE_RUNNING") and end_then == "None", got
    assert got["STATE"] == 'JOB_STATE_SUCCEEDED cli-slow {"team": "a"} None'
    assert got["TIMES"] == "True UTC"
    assert json.loads(got["DICT"]) == describe(home, "custom-jobs", slow)
    assert got["BYNAME"] == f"{slow} projects/local/locations/local/customJobs/{slow}"
    raised = json.loads(got["RAISED"])
    assert raised.startswith('Job failed with:\ncode: 13\nmessage: "The replica workerpool0-0 exited with a non-zero '
                             'status of 1.'), raised
    assert raised.endswith(f"CustomJob projects/local/locations/local/customJobs/{failed} ended JOB_STATE_FAILED.")
    assert json.loads(got["ERROR"]) == describe(home, "custom-jobs", failed)["error"]
    assert got["LIST"] == str([slow, failed])  # oldest first; the study's trial jobs are not listed
    assert got["NEWEST"] == str([failed, slow])
    assert got["FILTER"] == str([slow]) and got["FAILED"] == str([failed])
    assert got["STUDY"] == "JOB_STATE_SUCCEEDED 2 ['SUCCEEDED', 'SUCCEEDED']"
    assert json.loads(got["TRIALS"]) == describe(home, "hp-tuning-jobs", study)["trials"]
    assert got["STUDIES"] == str([study])
    cli = vcli(home, "custom-jobs", "describe", "1234567890")
    cli_line = cli.stderr.strip().split(") ", 1)[1]
    missing = [line.split(" ", 3)[1:] for line in r.stdout.splitlines() if line.startswith("MISSING ")]
    assert missing[0] == ["NotFound", "404", cli_line], (missing, cli.stderr)  # the CLI's own line
    assert missing[1][0] == "ValueError" and missing[1][2].startswith("resource_name: [projects/p/locations/l/"), missing
    assert got["NOTASTUDY"] == f"HyperparameterTuningJob [{slow}] was not found. List jobs with `vcli hp-tuning-jobs list`."
    assert got["AGAIN"].startswith(f"CustomJob [{slow}] has already been run")


def test_training_jobs_run_as_custom_jobs_and_another_process_reattaches(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("import os, sys\nprint('args', sys.argv[1:], os.environ['GREETING'], flush=True)\n")
    r = _python(tmp_path, """
        import sys
        from vcli import aiplatform

        aiplatform.init(project="my-project", location="us-central1")
        job = aiplatform.CustomTrainingJob(display_name="script-training", script_path="train.py",
                                           container_uri="us-docker.pkg.dev/vertex-ai/training/tf-cpu.2-12.py310:latest",
                                           labels={"team": "t"})
        model = job.run(args=["--epochs", 3], environment_variables={"GREETING": "hello"}, replica_count=2,
                        tpu_topology="2x2")
        print("RAN", model, job.state.name, job.name)

        box = aiplatform.CustomContainerTrainingJob(display_name="container-training", container_uri="python:3.11",
                                                    command=[sys.executable, "-c", "import sys; print(sys.argv[1:])"])
        print("ASYNC", box.run(args=["--lr", 0.5], sync=False))
        box.wait_for_resource_creation()
        box.wait_for_completion()
        print("BOX", box.state.name, box.name)
    """)
    assert r.returncode == 0, r.stderr[-3000:]
    got = _values(r.stdout)
    model, state, job_id = got["RAN"].split()
    assert (model, state) == ("None", "JOB_STATE_SUCCEEDED") and got["ASYNC"] == "None"
    box_state, box_id = got["BOX"].split()
    assert box_state == "JOB_STATE_SUCCEEDED"
    assert "tpu_topology has no effect" in r.stderr
    home = tmp_path / "home"
    logs = vcli(home, "custom-jobs", "stream-logs", job_id).stdout
    assert "workerpool0-0\targs ['--epochs', '3'] hello" in logs and "workerpool1-0\targs ['--epochs', '3'] hello" in logs
    assert "['--lr', '0.5']" in vcli(home, "custom-jobs", "stream-logs", box_id).stdout
    # A second process (a restarted kernel) finds both again.
    again = _python(tmp_path, f"""
        from vcli import aiplatform
        job = aiplatform.CustomJob.get("{job_id}")
        job.wait_for_completion()
        print("GOT", job.display_name, job.state.name, job.labels["team"], job.job_spec.worker_pool_specs[1].replica_count)
        print("NAMES", sorted(j.display_name for j in aiplatform.CustomJob.list()))
    """)
    assert again.returncode == 0, again.stderr[-3000:]
    assert _values(again.stdout)["GOT"] == "script-training JOB_STATE_SUCCEEDED t 1"
    assert _values(again.stdout)["NAMES"] == "['container-training', 'script-training']"


def test_training_job_arguments_vcli_cannot_honour_are_refused_by_name(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print('never runs')\n")
    r = _python(tmp_path, """
        from vcli import aiplatform
        def script(**kw):
            return aiplatform.CustomTrainingJob(display_name="t", script_path="train.py", container_uri="python:3.11", **kw)
        def box(**kw):
            return aiplatform.CustomContainerTrainingJob(display_name="t", container_uri="python:3.11", **kw)
        cases = {
            "serving-image": lambda: script(model_serving_container_image_uri="us-docker.pkg.dev/x/y:latest"),
            "box-serving": lambda: box(model_description="a model"),
            "dataset": lambda: script().run(dataset=object()),
            "split": lambda: box(command=["true"]).run(training_fraction_split=0.8),
            "model-name": lambda: script().run(model_display_name="m"),
            "default-version": lambda: script().run(is_default_version=False),
            "bigquery": lambda: box(command=["true"]).run(bigquery_destination="bq://p"),
            "command": lambda: box(command="python train.py"),
            "not-run": lambda: script().wait_for_resource_creation(),
        }
        for name, make in cases.items():
            try:
                make()
                print("CASE", name, "accepted")
            except (TypeError, ValueError, RuntimeError) as e:
                print("CASE", name, type(e).__name__, str(e))
    """)
    assert r.returncode == 0, r.stderr[-3000:]
    got = {line.split(" ", 2)[1]: line.split(" ", 2)[2] for line in r.stdout.splitlines() if line.startswith("CASE ")}
    no_model = "is not supported: vcli has no Model registry: run() uploads no model and returns None"
    no_data = "is not supported: vcli has no managed datasets"
    expected = {
        "serving-image": f"ValueError CustomTrainingJob(): model_serving_container_image_uri {no_model}",
        "box-serving": f"ValueError CustomContainerTrainingJob(): model_description {no_model}",
        "dataset": f"ValueError CustomTrainingJob.run(): dataset {no_data}",
        "split": f"ValueError CustomContainerTrainingJob.run(): training_fraction_split {no_data}",
        "model-name": f"ValueError CustomTrainingJob.run(): model_display_name {no_model}",
        "default-version": f"ValueError CustomTrainingJob.run(): is_default_version {no_model}",
        "bigquery": f"ValueError CustomContainerTrainingJob.run(): bigquery_destination {no_data}",
        "command": "TypeError command must be a list of strings, not 'python train.py'",
        "not-run": "RuntimeError CustomJob resource is not scheduled to be created: call run() or submit() first.",
    }
    assert set(got) == set(expected), got
    wrong = {k: v for k, v in got.items() if not v.startswith(expected[k])}
    assert not wrong, wrong
    listed = vcli(tmp_path / "home", "custom-jobs", "list", "--format=value(name)")
    assert listed.returncode == 0 and listed.stdout.strip() == "", listed.stdout  # nothing was recorded


#: A stand-in for pandas (not installed here): what get_experiment_df hands it.
FAKE_PANDAS = "class DataFrame:\n    def __init__(self, data, columns):\n        self.data, self.columns = data, columns\n"


def test_experiment_runs_logged_in_one_process_are_read_in_another(tmp_path: Path) -> None:
    logged = _python(tmp_path, """
        from vcli import aiplatform
        aiplatform.init(experiment="exp-1")
        aiplatform.start_run(run="run-1")
        aiplatform.log_params({"learning_rate": 0.1, "optimizer": "adam"})
        aiplatform.log_metrics({"accuracy": 0.9})
        aiplatform.start_run(run="run-2")                     # ends run-1
        aiplatform.log_params({"learning_rate": 0.2})
        aiplatform.log_metrics({"accuracy": 0.95})
        aiplatform.log_metrics({"accuracy": 0.96})            # replaced
        cases = {
            "again": lambda: aiplatform.start_run("run-1"),
            "name": lambda: aiplatform.start_run("Run_3"),
            "metric": lambda: aiplatform.log_metrics({"accuracy": "high"}),
            "missing": lambda: aiplatform.start_run("run-9", resume=True),
        }
        for name, make in cases.items():
            try:
                make()
                print("CASE", name, "accepted")
            except Exception as e:
                print("CASE", name, type(e).__name__, str(e))
        print("CURRENT", aiplatform.ExperimentRun("run-2").state)  # a refused start_run ended nothing
    """)
    assert logged.returncode == 0, logged.stderr[-3000:]
    cases = {line.split(" ", 2)[1]: line.split(" ", 2)[2] for line in logged.stdout.splitlines() if line.startswith("CASE ")}
    assert cases["again"] == ("ValueError Run [run-1] of experiment [exp-1] already exists: start_run(run, resume=True) "
                              "continues it.")
    assert cases["name"].startswith("ValueError run [Run_3] must be lowercase letters, digits and '-'")
    assert cases["metric"] == "TypeError metrics['accuracy'] must be a number, not 'high'"
    assert cases["missing"] == "NotFound Run [run-9] of experiment [exp-1] was not found."
    assert _values(logged.stdout)["CURRENT"] == "RUNNING"  # the process exits without end_run: run-2 stays RUNNING
    record = json.loads((tmp_path / "home" / "experiments" / "exp-1" / "run-1.json").read_text())
    assert record["params"] == {"learning_rate": 0.1, "optimizer": "adam"} and record["state"] == "COMPLETE"

    (tmp_path / "fake" / "pandas").mkdir(parents=True)
    (tmp_path / "fake" / "pandas" / "__init__.py").write_text(FAKE_PANDAS)
    read = _python(tmp_path, """
        import json, sys
        from vcli import aiplatform
        aiplatform.init(experiment="exp-1")
        with aiplatform.start_run("run-2", resume=True) as run:
            run.log_metrics({"loss": 0.1})
        df = aiplatform.get_experiment_df()
        print("COLUMNS", json.dumps(df.columns))
        print("ROWS", json.dumps(df.data))
        print("RUN", aiplatform.ExperimentRun("run-2", "exp-1").get_metrics())
        try:
            aiplatform.get_experiment_df("exp-none")
        except aiplatform.NotFound as e:
            print("NONE", e)
        sys.modules["pandas"] = None                          # pandas missing: the error names it
        try:
            aiplatform.get_experiment_df()
        except Exception as e:
            print("NOPANDAS", type(e).__name__, str(e).split(":")[0])
    """, PYTHONPATH=f"{tmp_path / 'fake'}:{vcli_env(tmp_path)['PYTHONPATH']}")
    assert read.returncode == 0, read.stderr[-3000:]
    got = _values(read.stdout)
    assert json.loads(got["COLUMNS"]) == ["experiment_name", "run_name", "run_type", "state", "param.learning_rate",
                                          "param.optimizer", "metric.accuracy", "metric.loss"]
    assert json.loads(got["ROWS"]) == [
        {"experiment_name": "exp-1", "run_name": "run-1", "run_type": "system.ExperimentRun", "state": "COMPLETE",
         "param.learning_rate": 0.1, "param.optimizer": "adam", "metric.accuracy": 0.9},
        {"experiment_name": "exp-1", "run_name": "run-2", "run_type": "system.ExperimentRun", "state": "COMPLETE",
         "param.learning_rate": 0.2, "metric.accuracy": 0.96, "metric.loss": 0.1},
    ]
    assert got["RUN"] == "{'accuracy': 0.96, 'loss': 0.1}"
    assert got["NONE"] == "Experiment [exp-none] was not found: it has no run."
    assert got["NOPANDAS"] == "MissingExtraError get_experiment_df() needs pandas, which the [mlflow] extra installs"


def test_experiment_runs_go_to_mlflow_when_tracking_is_on(tmp_path: Path) -> None:
    pytest.importorskip("mlflow")
    pytest.importorskip("pandas")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    logged = _python(tmp_path, f"""
        from vcli import aiplatform
        aiplatform.init(experiment="exp-m", tracking_uri="{uri}")
        aiplatform.start_run("run-1")
        aiplatform.log_params({{"lr": 0.1}})
        aiplatform.log_metrics({{"accuracy": 0.9}})
        aiplatform.end_run()
    """)
    assert logged.returncode == 0, logged.stderr[-3000:]
    read = _python(tmp_path, f"""
        import mlflow
        from vcli import aiplatform
        aiplatform.init(experiment="exp-m", tracking_uri="{uri}")
        df = aiplatform.get_experiment_df()
        print("ROW", df.iloc[0]["run_name"], df.iloc[0]["state"], df.iloc[0]["param.lr"], df.iloc[0]["metric.accuracy"])
        run = mlflow.MlflowClient("{uri}").search_runs(
            [mlflow.MlflowClient("{uri}").get_experiment_by_name("exp-m").experiment_id])[0]
        print("MLFLOW", run.info.run_name, run.info.status, run.data.metrics["accuracy"])
    """)
    assert read.returncode == 0, read.stderr[-3000:]
    assert _values(read.stdout)["ROW"] == "run-1 COMPLETE 0.1 0.9"
    assert _values(read.stdout)["MLFLOW"] == "run-1 FINISHED 0.9"
    assert not (tmp_path / "home" / "experiments").exists()

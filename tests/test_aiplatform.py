"""`from vcli import aiplatform`: notebook cells written as Vertex's samples write them, with
only the import changed, run in a fresh interpreter (as a notebook kernel) against a private
vcli home: a two-replica custom job and a small tuning study reach SUCCEEDED through vcli's
own controllers (`vcli custom-jobs list` shows the job), `.trials` is what `vcli
hp-tuning-jobs describe` says, `run(sync=False)` returns at once and `.wait()` waits, a failed
job raises as Vertex's SDK does, and arguments that mean nothing here are named once.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.helpers import describe, vcli, vcli_env
from vcli.codec.flags import TRAINING_REGIONS

TRAIN = """
import json, os, sys, time
args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:] if "=" in a)
task = json.loads(os.environ["CLUSTER_SPEC"])["task"]
print(f"replica {task['type']}-{task['index']} epochs={args.get('epochs')}", flush=True)
if args.get("fail"):
    sys.exit("the trainer failed on purpose")
if "lr" in args:
    import hypertune
    hpt = hypertune.HyperTune()
    lr, units = float(args["lr"]), int(args["units"])
    bonus = float(args.get("momentum", 0)) / 10
    for step in (1, 2, 3):
        time.sleep(float(args.get("pause", 0.5)))
        hpt.report_hyperparameter_tuning_metric(hyperparameter_metric_tag="accuracy",
                                                metric_value=(1 - abs(lr - 0.01)) * units / 64 * step / 3 + bonus,
                                                global_step=step)
"""


def _notebook(tmp_path: Path, cells: str) -> subprocess.CompletedProcess[str]:
    """Run the cells in a fresh interpreter with the test's vcli home, from the test's folder."""
    env = {k: v for k, v in vcli_env(tmp_path / "home").items() if not k.startswith("MLFLOW_")}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(cells)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL)


def _value(out: str, key: str) -> str:
    return next(line.split(" ", 1)[1] for line in out.splitlines() if line.startswith(key + " "))


def test_a_two_replica_custom_job_from_a_notebook(tmp_path: Path) -> None:
    (tmp_path / "trainer").mkdir()
    (tmp_path / "trainer" / "task.py").write_text(TRAIN)
    r = _notebook(tmp_path, """
        from vcli import aiplatform

        aiplatform.init(project="my-project", location="us-central1", staging_bucket="gs://my-bucket",
                        network="projects/123/global/networks/default")

        job = aiplatform.CustomJob.from_local_script(
            display_name="notebook-two-replicas",
            script_path="trainer/task.py",
            container_uri="us-docker.pkg.dev/vertex-ai/training/tf-cpu.2-12.py310:latest",
            args=["--epochs=2"],
            replica_count=2,
            machine_type="n1-standard-4",
        )
        job.run(service_account="trainer@my-project.iam.gserviceaccount.com", network="default")

        print("STATE", job.state.name)
        print("RESOURCE", job.resource_name)
        print("ID", job.name)
        print("DONE", job.done(), job.state == aiplatform.gapic.JobState.JOB_STATE_SUCCEEDED)
    """)
    assert r.returncode == 0, r.stderr[-3000:]
    assert _value(r.stdout, "STATE") == "JOB_STATE_SUCCEEDED" and _value(r.stdout, "DONE") == "True True"
    job_id = _value(r.stdout, "ID")
    assert _value(r.stdout, "RESOURCE") == f"projects/my-project/locations/us-central1/customJobs/{job_id}"
    # Cloud-only arguments: accepted and named, each once (network was given twice).
    notes = [line for line in r.stderr.splitlines() if line.startswith("Note: vcli.aiplatform")]
    assert sum("network" in line for line in notes) == 1 and any("service_account" in line for line in notes), r.stderr
    # The job is vcli's like any other: listed, described, both replicas ran and exited 0.
    home = tmp_path / "home"
    listed = vcli(home, "custom-jobs", "list", "--format=value(name.basename())")
    assert job_id in listed.stdout.split()
    job = describe(home, "custom-jobs", job_id)
    assert [x["taskName"] for x in job["replicas"]] == ["workerpool0-0", "workerpool1-0"]
    assert all(x["exitCode"] == 0 for x in job["replicas"])
    assert job["outputDirectory"].startswith(str(home / "gcs" / "my-bucket" / "aiplatform-custom-job-"))
    assert job["jobSpec"]["serviceAccount"] == "trainer@my-project.iam.gserviceaccount.com"
    logs = vcli(home, "custom-jobs", "stream-logs", job_id)
    assert "replica workerpool0-0 epochs=2" in logs.stdout and "replica workerpool1-0 epochs=2" in logs.stdout


def test_a_tuning_study_from_a_notebook_runs_async_and_its_trials_match_describe(tmp_path: Path) -> None:
    (tmp_path / "task.py").write_text(TRAIN)
    r = _notebook(tmp_path, f"""
        import json, time
        from vcli import aiplatform
        from vcli.aiplatform import hyperparameter_tuning as hpt

        aiplatform.init(project="my-project", location="us-central1")

        worker_pool_specs = [{{
            "machine_spec": {{"machine_type": "n1-standard-4"}},
            "replica_count": 1,
            "container_spec": {{
                "image_uri": "toy",
                "command": ["{sys.executable}", "{tmp_path / 'task.py'}"],
                "args": ["--epochs=1"],
            }},
        }}]
        custom_job = aiplatform.CustomJob(display_name="toy-trial", worker_pool_specs=worker_pool_specs)

        hp_job = aiplatform.HyperparameterTuningJob(
            display_name="notebook-study",
            custom_job=custom_job,
            metric_spec={{"accuracy": "maximize"}},
            parameter_spec={{
                "lr": hpt.DoubleParameterSpec(min=0.001, max=0.1, scale="log"),
                "units": hpt.IntegerParameterSpec(min=8, max=64, scale="linear"),
                "optimizer": hpt.CategoricalParameterSpec(
                    values=["adam", "sgd"],
                    conditional_parameter_spec={{
                        "momentum": hpt.DoubleParameterSpec(min=0.0, max=0.9, scale="linear", parent_values=["sgd"]),
                    }},
                ),
                "batch": hpt.DiscreteParameterSpec(values=[16, 32, 64], scale="linear"),
            }},
            max_trial_count=4,
            parallel_trial_count=2,
            search_algorithm="random",
        )

        started = time.monotonic()
        hp_job.run(sync=False)
        print("RETURNED", round(time.monotonic() - started, 2), hp_job.state.name)
        hp_job.wait()
        print("WAITED", round(time.monotonic() - started, 2))
        print("STATE", hp_job.state.name)
        print("ID", hp_job.name)
        for trial in hp_job.trials:
            params = {{p.parameter_id: p.value for p in trial.parameters}}
            print("TRIAL", trial.id, trial.state.name, json.dumps(params, separators=(",", ":")),
                  trial.final_measurement.metrics[0].value)
        print("TRIALS", json.dumps([t.to_dict() for t in hp_job.trials]))
        try:  # a second run() started another study and the object forgot the first
            hp_job.run(sync=False)
        except RuntimeError as e:
            print("AGAIN", e)
        print("STILL", hp_job.name)
    """)
    assert r.returncode == 0, r.stderr[-3000:]
    returned, state_then = _value(r.stdout, "RETURNED").split()
    assert float(returned) < 10 and state_then in ("JOB_STATE_QUEUED", "JOB_STATE_PENDING", "JOB_STATE_RUNNING")
    assert float(_value(r.stdout, "WAITED")) > float(returned) + 1.5  # three 0.5 s steps per trial, at least
    assert _value(r.stdout, "STATE") == "JOB_STATE_SUCCEEDED"
    study = describe(tmp_path / "home", "hp-tuning-jobs", _value(r.stdout, "ID"))
    assert json.loads(_value(r.stdout, "TRIALS")) == study["trials"]
    trial_lines = [line.split(" ", 4) for line in r.stdout.splitlines() if line.startswith("TRIAL ")]
    assert len(trial_lines) == 4 and all(state == "SUCCEEDED" for _, _, state, _, _ in trial_lines)
    for _, _, _, params, _ in trial_lines:
        p = json.loads(params)
        assert 0.001 <= p["lr"] <= 0.1 and 8 <= p["units"] <= 64 and p["batch"] in (16, 32, 64)
        assert ("momentum" in p) == (p["optimizer"] == "sgd")  # the conditional parameter
    assert study["studySpec"]["algorithm"] == "RANDOM_SEARCH"
    assert study["studySpec"]["measurementSelectionType"] == "BEST_MEASUREMENT"  # Vertex SDK's default
    study_id = _value(r.stdout, "ID")
    assert _value(r.stdout, "AGAIN") == (f"HyperparameterTuningJob [{study_id}] has already been run: "
                                         "make a new HyperparameterTuningJob to run it again.")
    assert _value(r.stdout, "STILL") == study_id
    listed = vcli(tmp_path / "home", "hp-tuning-jobs", "list", "--format=value(name)")
    assert [name.rsplit("/", 1)[-1] for name in listed.stdout.split()] == [study_id], listed.stdout


def test_a_failed_job_raises_as_vertex_does_and_import_stays_light(tmp_path: Path) -> None:
    (tmp_path / "task.py").write_text(TRAIN)
    r = _notebook(tmp_path, """
        import sys
        from vcli import aiplatform
        heavy = sorted(m for m in sys.modules if m.split(".")[0] in
                       {"tensorflow", "docker", "paramiko", "ray", "mlflow", "sklearn", "matplotlib"})
        print("HEAVY", heavy)
        job = aiplatform.CustomJob.from_local_script(display_name="fails", script_path="task.py",
                                                     container_uri="python:3.11", args=["--fail=1"])
        try:
            job.run()
        except RuntimeError as e:
            print("RAISED", str(e).splitlines()[0])
        print("STATE", job.state.name)
        try:
            job.submit()
        except RuntimeError as e:
            print("AGAIN", e)
    """)
    assert r.returncode == 0, r.stderr[-3000:]
    assert _value(r.stdout, "HEAVY") == "[]"
    assert _value(r.stdout, "RAISED") == "Job failed with:"
    assert _value(r.stdout, "STATE") == "JOB_STATE_FAILED"
    assert _value(r.stdout, "AGAIN").endswith("has already been run: make a new CustomJob to run it again.")


def test_arguments_a_notebook_gets_wrong_are_clear_errors_before_anything_runs(tmp_path: Path) -> None:
    """An empty pool list made run() wait for ever; a string for args or requirements became
    one argument (or one package) per character; a number for display_name was a TypeError
    from deep inside the codec."""
    (tmp_path / "task.py").write_text(TRAIN)
    r = _notebook(tmp_path, """
        from vcli import aiplatform
        pool = {"machine_spec": {"machine_type": "n1-standard-4"}, "replica_count": 1,
                "container_spec": {"image_uri": "python:3.11", "command": ["true"]}}
        cases = {
            "empty": lambda: aiplatform.CustomJob(display_name="j", worker_pool_specs=[]),
            "one-dict": lambda: aiplatform.CustomJob(display_name="j", worker_pool_specs=pool),
            "none": lambda: aiplatform.CustomJob(display_name="j", worker_pool_specs=None),
            "name": lambda: aiplatform.CustomJob(display_name=123, worker_pool_specs=[pool]),
            "labels": lambda: aiplatform.CustomJob(display_name="j", worker_pool_specs=[pool], labels=["x"]),
            "label-key": lambda: aiplatform.CustomJob(display_name="j", worker_pool_specs=[pool], labels={"A B": "x"}),
            "location": lambda: aiplatform.init(location="mars-central1"),
            "args": lambda: aiplatform.CustomJob.from_local_script(display_name="j", script_path="task.py",
                                                                   container_uri="python:3.11", args="--x=1"),
            "requirements": lambda: aiplatform.CustomJob.from_local_script(
                display_name="j", script_path="task.py", container_uri="python:3.11", requirements="numpy"),
        }
        for name, make in cases.items():
            try:
                make()
                print("CASE", name, "accepted")
            except (TypeError, ValueError) as e:
                print("CASE", name, type(e).__name__, str(e))
    """)
    assert r.returncode == 0, r.stderr[-3000:]
    got = {line.split(" ", 2)[1]: line.split(" ", 2)[2] for line in r.stdout.splitlines() if line.startswith("CASE ")}
    assert got == {
        "empty": "ValueError worker_pool_specs is empty: give at least the chief's pool",
        "one-dict": "TypeError worker_pool_specs must be a list of dicts, one per pool, not dict",
        "none": "TypeError worker_pool_specs must be a list of dicts, one per pool, not NoneType",
        "name": "TypeError display_name must be a non-empty string, not 123",
        "labels": "TypeError labels must be a dict of strings, not list",
        "label-key": "ValueError labels: Only lowercase letters, digits, '_' and '-' are allowed in keys, which must "
                     "start with a letter and be at most 63 characters: [A B].",
        "location": "ValueError location: Available values are [local, " + ", ".join(TRAINING_REGIONS) +
                    "], but found [mars-central1].",
        "args": "TypeError args must be a list of strings, not a string: [--x=1]",
        "requirements": "TypeError requirements must be a list of strings, not a string: [numpy]",
    }, got


def test_study_arguments_are_refused_not_changed(tmp_path: Path) -> None:
    """The SDK quietly changed what it was given: values="abc" ran over the categories a, b
    and c; measurement_selection="median" became LAST; an integer spec's min of 0.5 ran from 0."""
    (tmp_path / "task.py").write_text(TRAIN)
    r = _notebook(tmp_path, """
        from vcli import aiplatform
        from vcli.aiplatform import hyperparameter_tuning as hpt
        job = aiplatform.CustomJob.from_local_script(display_name="t", script_path="task.py", container_uri="python:3.11")
        def study(spec, **extra):
            return aiplatform.HyperparameterTuningJob(display_name="h", custom_job=job, metric_spec={"accuracy": "maximize"},
                                                      parameter_spec=spec, max_trial_count=1, parallel_trial_count=1, **extra)
        cases = {
            "categories": lambda: study({"x": hpt.CategoricalParameterSpec(values="abc")}),
            "selection": lambda: study({"x": hpt.DoubleParameterSpec(min=0, max=1)}, measurement_selection="median"),
            "integer": lambda: study({"x": hpt.IntegerParameterSpec(min=0.5, max=3)}).run(),
            "not-a-spec": lambda: study({"lr": 5}),
        }
        for name, make in cases.items():
            try:
                make()
                print("CASE", name, "accepted")
            except Exception as e:
                print("CASE", name, type(e).__name__, str(e).splitlines()[0])
    """)
    assert r.returncode == 0, r.stderr[-3000:]
    got = {line.split(" ", 2)[1]: line.split(" ", 2)[2] for line in r.stdout.splitlines() if line.startswith("CASE ")}
    assert got["categories"] == "TypeError values must be a list, not str: 'abc'"
    assert got["selection"] == "ValueError measurement_selection must be 'best' or 'last', not 'median'"
    assert got["not-a-spec"] == ("TypeError parameter_spec must map parameter ids to hyperparameter_tuning specs "
                                 "(DoubleParameterSpec, ...), not 'lr': int")
    assert got["integer"].startswith("ValueError studySpec.parameters[0].integerValueSpec.minValue") \
        and "expected an integer, found [0.5]" in got["integer"], got["integer"]


def test_every_bad_argument_is_a_type_or_value_error_naming_it(tmp_path: Path) -> None:
    """A probe's cases: raw AttributeErrors and TypeErrors from inside vcli naming no argument;
    a display name or a pool field refused as `vcli.errors` types (not ValueError) saying
    `Invalid value for [--config]`; `parent_values=[1.5]` of an INTEGER parent ran with 1; an
    env name `A=B` from from_local_script was recorded, killed the job's runner and left
    run() waiting for ever."""
    (tmp_path / "task.py").write_text(TRAIN)
    r = _notebook(tmp_path, """
        from vcli import aiplatform
        from vcli.aiplatform import hyperparameter_tuning as hpt
        job = aiplatform.CustomJob.from_local_script(display_name="t", script_path="task.py", container_uri="python:3.11")
        def script(**kw):
            return aiplatform.CustomJob.from_local_script(display_name="t", script_path="task.py",
                                                          container_uri="python:3.11", **kw)
        def study(spec=None, **kw):
            args = dict(display_name="h", custom_job=job, metric_spec={"accuracy": "maximize"},
                        parameter_spec=spec or {"x": hpt.DoubleParameterSpec(min=0, max=1)}, max_trial_count=1,
                        parallel_trial_count=1)
            return aiplatform.HyperparameterTuningJob(**{**args, **kw})
        child = hpt.DoubleParameterSpec(min=0, max=1, parent_values=[1.5])
        cases = {
            "metric-none": lambda: study(metric_spec=None),
            "job-none": lambda: study(custom_job=None),
            "conditional": lambda: study({"x": hpt.CategoricalParameterSpec(values=["a"], conditional_parameter_spec={"y": 3})}),
            "parent-int": lambda: study({"x": hpt.IntegerParameterSpec(min=0, max=3, conditional_parameter_spec={"y": child})}).run(sync=False),
            "discrete": lambda: study({"x": hpt.DiscreteParameterSpec(values=["a"])}).run(sync=False),
            "replicas": lambda: script(replica_count="2"),
            "args": lambda: script(args=[1, 2]),
            "env-list": lambda: script(environment_variables=["A"]),
            "env-name": lambda: script(environment_variables={"A=B": "x"}),
            "nul-arg": lambda: script(args=["a\\x00b"]),
            "script": lambda: aiplatform.CustomJob.from_local_script(display_name="t", script_path=None, container_uri="x"),
            "bucket": lambda: aiplatform.init(staging_bucket=123),
            "experiment": lambda: job.submit(experiment=object()),
            "timeout": lambda: job.submit(timeout="abc"),
            "long-name": lambda: aiplatform.CustomJob.from_local_script(display_name="x" * 129, script_path="task.py",
                                                                        container_uri="x"),
        }
        for name, make in cases.items():
            try:
                make()
                print("CASE", name, "accepted")
            except (TypeError, ValueError) as e:
                print("CASE", name, type(e).__name__, str(e).splitlines()[0])
            except Exception as e:
                print("CASE", name, "WRONG", type(e).__name__, str(e).splitlines()[0])
    """)
    assert r.returncode == 0, r.stderr[-3000:]
    got = {line.split(" ", 2)[1]: line.split(" ", 2)[2] for line in r.stdout.splitlines() if line.startswith("CASE ")}
    expected = {
        "metric-none": "TypeError metric_spec must be a dict of metric ids to 'maximize' or 'minimize', not None",
        "job-none": "TypeError custom_job must be an aiplatform.CustomJob, not NoneType",
        "conditional": "TypeError conditional_parameter_spec must map parameter ids to hyperparameter_tuning specs "
                       "(DoubleParameterSpec, ...), not {'y': 3}",
        "parent-int": "ValueError studySpec.parameters[0].conditionalParameterSpecs[0].parentIntValues.values[0]",
        "discrete": "ValueError studySpec.parameters[0].discreteValueSpec.values[0]",
        "replicas": "TypeError replica_count must be an integer, not '2'",
        "args": "TypeError args must be a list of strings, not [1, 2]",
        "env-list": "TypeError environment_variables must be a dict of names to values, not ['A']",
        "env-name": "ValueError workerPoolSpecs[0].containerSpec.env[0].name: must be a C identifier",
        "nul-arg": "ValueError workerPoolSpecs[0].containerSpec.args[0]: contains a NUL character",
        "script": "TypeError script_path must be a path, not NoneType",
        "bucket": "TypeError staging_bucket must be a string, not int",
        "experiment": "TypeError experiment must be a string, not object",
        "timeout": "TypeError timeout must be a number of seconds, not 'abc'",
        "long-name": "ValueError display_name: ",
    }
    assert set(got) == set(expected), got
    wrong = {k: v for k, v in got.items() if not v.startswith(expected[k])}
    assert not wrong, wrong
    assert not (tmp_path / "home" / "jobs").exists() or not any((tmp_path / "home" / "jobs").iterdir()), \
        "nothing may be recorded for a refused job"


def test_wait_raises_when_the_jobs_runner_is_gone_and_timeout_0_is_no_timeout(tmp_path: Path) -> None:
    """wait() (and run()) waited for ever on a job whose runner had been killed; timeout=0 failed
    the job at once ("exceeded its scheduling.timeout of 0s"), where Vertex's SDK sets none."""
    (tmp_path / "slow.py").write_text("import time\nprint('started', flush=True)\ntime.sleep(60)\n")
    (tmp_path / "task.py").write_text(TRAIN)
    r = _notebook(tmp_path, """
        import os, signal, time
        from vcli import aiplatform
        quick = aiplatform.CustomJob.from_local_script(display_name="q", script_path="task.py", container_uri="python:3.11")
        quick.run(timeout=0)
        print("QUICK", quick.state.name, quick.to_dict()["jobSpec"].get("scheduling"))
        job = aiplatform.CustomJob.from_local_script(display_name="s", script_path="slow.py", container_uri="python:3.11")
        job.run(sync=False)
        deadline = time.time() + 60
        while job.to_dict().get("controller", {}).get("pid") is None or job.state.name != "JOB_STATE_RUNNING":
            assert time.time() < deadline
            time.sleep(0.2)
        os.kill(job.to_dict()["controller"]["pid"], signal.SIGKILL)
        started = time.time()
        try:
            job.wait()
            print("WAIT returned")
        except RuntimeError as e:
            print("WAIT", round(time.time() - started), str(e))
        job.cancel()
        print("CANCELLED", job.state.name)
    """)
    assert r.returncode == 0, r.stderr[-3000:]
    assert _value(r.stdout, "QUICK") == "JOB_STATE_SUCCEEDED None", r.stdout
    seconds, message = _value(r.stdout, "WAIT").split(" ", 1)
    assert int(seconds) < 10, r.stdout
    assert "is JOB_STATE_RUNNING but the vcli process that ran it" in message and "custom-jobs resume" in message, message
    assert _value(r.stdout, "CANCELLED") == "JOB_STATE_CANCELLED", r.stdout

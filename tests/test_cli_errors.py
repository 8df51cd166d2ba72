"""Bad input through the real CLI: one `ERROR: (vcli.GROUP.COMMAND) ...` line, the right exit code.

Exit codes (vcli.errors.ExitCode, gcloud §3.6): 1 invalid value, 2 usage, 4 not found.
Also: --validate-only launches nothing, `list` on an empty home, and print-env.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from tests.helpers import REPO as REPO_ROOT
from tests.helpers import PeakRss

IMG = "us-docker.pkg.dev/p/r/trainer:1"
EXE = "us-docker.pkg.dev/vertex-ai/training/tf-cpu.2-4:latest"
POOL = f"--worker-pool-spec=machine-type=n1,executor-image-uri={EXE},python-module=trainer.task"
CREATE = "ERROR: (vcli.custom-jobs.create) "


def one_error_line(result, prefix: str = CREATE) -> str:
    lines = result.stderr.splitlines()
    assert len(lines) == 1, f"expected one stderr line, got:\n{result.stderr}"
    assert lines[0].startswith(prefix), lines[0]
    assert "Traceback" not in result.stderr and result.stdout == ""
    return lines[0][len(prefix):]


@pytest.mark.parametrize(
    "args,code,message",
    [
        ([POOL], 2, "argument --display-name: Must be specified."),
        (["--display-name=j"], 2, "{group}"),
        (["--display-name=j", "--worker-pool-spec=machine-type=n1,disk-size=100"], 2,
         "argument --worker-pool-spec: valid keys are [accelerator-count, accelerator-type, container-image-uri, "
         "executor-image-uri, extra-dirs, extra-packages, local-package-path, machine-type, output-image-uri, "
         "python-module, replica-count, requirements, script]; received: disk-size"),
        (["--display-name=j", "--worker-pool-spec=machine-type=n1,container-image-uri"], 2,
         "argument --worker-pool-spec: Bad syntax for dict arg: [container-image-uri]."),
        (["--display-name=j", f"--worker-pool-spec=machine-type=n1,replica-count=two,container-image-uri={IMG}"], 2,
         "argument --worker-pool-spec:"),
        (["--display-name=j", POOL, f"--worker-pool-spec=machine-type=n1,replica-count=-1,container-image-uri={IMG}"], 1,
         "Invalid value for [--worker-pool-spec]: Key [replica-count]"),
        (["--display-name=j", "--worker-pool-spec=", POOL], 1,
         "Invalid value for [--worker-pool-spec]: Empty value is not allowed for the first `--worker-pool-spec` flag."),
        (["--display-name=j", f"--worker-pool-spec=container-image-uri={IMG}"], 1,
         "Invalid value for [--worker-pool-spec]: Key [machine-type] required in dict arg but not provided."),
        (["--display-name=j", f"--worker-pool-spec=machine-type=n1,accelerator-type=T4,container-image-uri={IMG}"], 1,
         "Invalid value for [--worker-pool-spec]: Found invalid value of [accelerator-type]: T4. Available values are [NVIDIA_A100_80GB, "),
        (["--display-name=j", f"--worker-pool-spec=machine-type=n1,container-image-uri={IMG},executor-image-uri={EXE}"], 1,
         "Invalid value for [--worker-pool-spec]: Exactly one of keys [executor-image-uri, container-image-uri] is required."),
        (["--display-name=j", "--worker-pool-spec=machine-type=n1,local-package-path=/nonexistent/vcli-pkg,python-module=m"], 1,
         "Invalid value for [--worker-pool-spec]: Directory '/nonexistent/vcli-pkg' is not found."),
        (["--display-name=j", POOL, "--executor=bogus"], 2, "argument --executor: invalid choice: 'bogus'"),
        (["--display-name=j", POOL, "--labels=Team=x"], 1, "Invalid value for [--labels]:"),
        (["--display-name=j", POOL, "--format=xml", "--validate-only"], 2, "argument --format:"),
    ],
)
def test_create_flag_errors(run_vcli, vcli_home, args, code, message):
    r = run_vcli("custom-jobs", "create", *args)
    assert r.returncode == code, r.stderr
    line = one_error_line(r)
    if message == "{group}":  # gcloud's wording for the required (--config | --worker-pool-spec) group
        assert "(--config | --worker-pool-spec)" in line and line.endswith("must be specified.")
    else:
        assert line.startswith(message)
    assert not (vcli_home / "jobs").exists()


@pytest.mark.parametrize(
    "text,code,fragment",
    [
        (None, 1, "does not exist"),
        ("workerPoolSpecs: [\n", 1, "line 2, column 1"),
        ("workerPoolSpecs: [{machineSpec: {machineType: n1, foo: 1}, containerSpec: {imageUri: x}}]", 1,
         "[workerPoolSpecs[0].machineSpec.foo]"),
        ("worker_pool_specs: []", 1, "[workerPoolSpecs]"),
        ("workerPoolSpecs: [{machineSpec: {machineType: n1}, containerSpec: {imageUri: x}}]\n"
         "baseOutputDirectory: {outputUriPrefix: 's3://b/o'}", 1, "[s3://b/o] is not a local directory"),
        ("workerPoolSpecs: [{machineSpec: {machineType: n1}}]", 1,
         "Exactly one of fields [pythonPackageSpec, containerSpec] is required"),
        ("serviceAccount: a@b.c", 2, "argument --config:"),
    ],
)
def test_create_config_errors(run_vcli, vcli_home, tmp_path, text, code, fragment):
    path = tmp_path / "job.yaml"
    if text is not None:
        path.write_text(text)
    r = run_vcli("custom-jobs", "create", "--display-name=j", f"--config={path}")
    assert r.returncode == code, r.stderr
    assert fragment in one_error_line(r)
    assert not (vcli_home / "jobs").exists()


def test_image_only_pool_on_local_executor_fails_before_creating_a_job(run_vcli, vcli_home):
    # The local executor runs processes: a container pool without --command cannot run. That is
    # bad input, known before anything starts: one line, exit 1, and no job left in the store.
    r = run_vcli("custom-jobs", "create", "--display-name=j", f"--worker-pool-spec=machine-type=n1,container-image-uri={IMG}",
                 "--executor=local")
    assert r.returncode == 1
    assert "no command" in one_error_line(r)
    r = run_vcli("custom-jobs", "list", "--format=json")
    assert json.loads(r.stdout) == []


@pytest.mark.parametrize("command", ["describe", "cancel", "stream-logs"])
def test_unknown_job_is_not_found(run_vcli, command):
    r = run_vcli("custom-jobs", command, "1234567890")
    assert r.returncode == 4, r.stderr
    assert "[1234567890] was not found" in one_error_line(r, f"ERROR: (vcli.custom-jobs.{command}) ")


@pytest.mark.parametrize("group,ref,arg", [
    ("custom-jobs", "projects/local/locations/local/hyperparameterTuningJobs/1234567890", "CUSTOM_JOB"),
    ("custom-jobs", "../1234567890", "CUSTOM_JOB"),
    ("custom-jobs", "1234567890/", "CUSTOM_JOB"),
    ("hp-tuning-jobs", "projects/p/locations/us-central1/customJobs/1234567890", "HP_TUNING_JOB"),
])
@pytest.mark.parametrize("command", ["describe", "cancel", "stream-logs", "resume"])
def test_a_job_reference_of_another_collection_or_shape_is_refused(run_vcli, group, ref, arg, command):
    # Only the last part of a reference was read: any prefix found the job (another collection's too).
    r = run_vcli(group, command, ref)
    assert r.returncode == 1, r.stderr
    collection = "customJobs" if group == "custom-jobs" else "hyperparameterTuningJobs"
    assert one_error_line(r, f"ERROR: (vcli.{group}.{command}) ") == (
        f"Invalid value for [{arg}]: [{ref}] is neither a job id nor a resource name "
        f"projects/PROJECT/locations/REGION/{collection}/ID.")


@pytest.mark.parametrize("extra", ["--validate-only", "--executor=local"])
def test_args_no_replica_could_start_with_are_refused_before_anything_runs(run_vcli, vcli_home, tmp_path, extra):
    # 140 KB of args passed --validate-only, then every start failed with exit 3 (an executor
    # error): CLUSTER_SPEC carries the job spec, and Linux caps one variable at 128 KiB.
    flags = tmp_path / "flags.json"
    flags.write_text(json.dumps({"--args": [f"--p{i}={'y' * 2000}" for i in range(70)]}))
    r = run_vcli("custom-jobs", "create", "--display-name=big", POOL, "--command=true", f"--flags-file={flags}", extra)
    assert r.returncode == 1, r.stderr
    assert one_error_line(r, "ERROR: (vcli.custom-jobs.create) ").startswith(
        "Invalid value for [workerPoolSpecs]: the replicas' CLUSTER_SPEC would be 14")
    assert json.loads(run_vcli("custom-jobs", "list", "--format=json").stdout) == []
    flags.write_text(json.dumps({"--args": [f"--x={'z' * 140000}"]}))  # one argument too long, whatever the env
    r = run_vcli("custom-jobs", "create", "--display-name=big", POOL, "--command=true", f"--flags-file={flags}", extra)
    assert r.returncode == 1 and "would be" in r.stderr, r.stderr


@pytest.mark.parametrize("group", ["custom-jobs", "hp-tuning-jobs"])
@pytest.mark.parametrize("size", ["-5", "0"])
def test_a_page_size_below_one_is_refused_as_gcloud_does(run_vcli, group, size):
    r = run_vcli(group, "list", f"--page-size={size}")
    assert r.returncode == 2, r.stderr
    assert one_error_line(r, f"ERROR: (vcli.{group}.list) ") == (
        f"argument --page-size: Value must be greater than or equal to 1; received: {size}")


def test_unknown_flag_is_a_usage_error_without_traceback(run_vcli):
    r = run_vcli("custom-jobs", "create", "--display-name=j", POOL, "--disk-size=100")
    assert r.returncode == 2
    assert "--disk-size" in r.stderr and "Traceback" not in r.stderr


def test_validate_only_prints_the_job_and_launches_nothing(run_vcli, vcli_home):
    r = run_vcli(
        "custom-jobs", "create", "--display-name=check", POOL,
        f"--worker-pool-spec=machine-type=n1,replica-count=2,executor-image-uri={EXE},python-module=trainer.task",
        "--args=--epochs=1", "--labels=team=x", "--validate-only", "--format=json",
    )
    assert r.returncode == 0, r.stderr
    job = json.loads(r.stdout)
    assert job["displayName"] == "check" and job["labels"] == {"team": "x"}
    pools = job["jobSpec"]["workerPoolSpecs"]
    assert [p["replicaCount"] for p in pools] == ["1", "2"]
    assert all(p["pythonPackageSpec"]["args"] == ["--epochs=1"] for p in pools)
    assert [x["taskName"] for x in job["replicas"]] == ["workerpool0-0", "workerpool1-0", "workerpool1-1"]
    assert "Traceback" not in r.stderr
    # Default format: YAML of the same resource.
    r = run_vcli("custom-jobs", "create", "--display-name=check", POOL, "--validate-only")
    assert r.returncode == 0 and yaml.safe_load(r.stdout)["displayName"] == "check"
    # Nothing was recorded or launched.
    r = run_vcli("custom-jobs", "list")
    assert r.returncode == 0 and r.stdout == "" and "Listed 0 items." in r.stderr
    assert not (vcli_home / "jobs").exists() or not any((vcli_home / "jobs").iterdir())


def test_list_on_an_empty_home(run_vcli):
    r = run_vcli("custom-jobs", "list")
    assert r.returncode == 0
    assert r.stdout == ""
    assert r.stderr.strip() == "Listed 0 items."


def test_print_env_shows_tf_config_for_a_two_pool_job(run_vcli):
    r = run_vcli(
        "custom-jobs", "print-env", POOL,
        f"--worker-pool-spec=machine-type=n1,replica-count=2,executor-image-uri={EXE},python-module=trainer.task",
        "--format=json",
    )
    assert r.returncode == 0, r.stderr
    replicas = json.loads(r.stdout)
    assert [x["taskName"] for x in replicas] == ["workerpool0-0", "workerpool1-0", "workerpool1-1"]
    chief, w0, w1 = (x["env"]["TF_CONFIG"] for x in replicas)
    assert chief["task"] == {"type": "chief", "index": 0}
    assert w1["task"] == {"type": "worker", "index": 1}
    assert chief["cluster"]["chief"] == [replicas[0]["address"]]
    assert chief["cluster"]["worker"] == [replicas[1]["address"], replicas[2]["address"]]
    assert chief["cluster"] == w0["cluster"] == w1["cluster"]
    assert replicas[1]["env"]["CLUSTER_SPEC"]["task"] == {"type": "workerpool1", "index": 0}
    assert replicas[0]["command"][-2:] == ["-m", "trainer.task"]
    # Default output is YAML, and a single-replica job has no TF_CONFIG.
    r = run_vcli("custom-jobs", "print-env", POOL)
    (only,) = yaml.safe_load_all(r.stdout)
    assert "TF_CONFIG" not in only["env"] and "CLUSTER_SPEC" in only["env"]


@pytest.mark.parametrize(
    "argv,line",
    [
        (["custom-jobs", "create", "--display-name=j", POOL, "--executor", "bogus"],
         "ERROR: (vcli.custom-jobs.create) argument --executor: invalid choice: 'bogus' (choose from local, docker, ssh, ray, slurm)"),
        (["custom-jobs", "print-env", POOL, "--executor=Local"],
         "ERROR: (vcli.custom-jobs.print-env) argument --executor: invalid choice: 'Local' (choose from local, docker, ssh, ray, slurm)"),
        (["hp-tuning-jobs", "create", "--display-name=s", "--algorithm=bayes"],
         "ERROR: (vcli.hp-tuning-jobs.create) argument --algorithm: Invalid choice: 'bayes'. "
         "Valid choices are [algorithm-unspecified, grid-search, population-based-training, random-search, tpe]."),
        (["hp-tuning-jobs", "create", "--measurement-selection=first"],
         "ERROR: (vcli.hp-tuning-jobs.create) argument --measurement-selection: Invalid choice: 'first'. Valid choices are [best, last]."),
        (["hp-tuning-jobs", "create", "--bayesian-backend=tpe"],
         "ERROR: (vcli.hp-tuning-jobs.create) argument --bayesian-backend: Invalid choice: 'tpe'. Valid choices are [gp, skopt]."),
        (["--verbosity=loud", "custom-jobs", "list"],
         "ERROR: (vcli) argument --verbosity: Invalid choice: 'loud'. "
         "Valid choices are [critical, debug, error, info, none, warning]."),
    ],
)
def test_bad_choice_is_one_error_line_before_anything_runs(run_vcli, vcli_home, argv, line):
    r = run_vcli(*argv)
    assert r.returncode == 2, r.stderr
    assert r.stderr == line + "\n" and r.stdout == ""
    assert not (vcli_home / "jobs").exists()


def test_help_lists_the_choices(run_vcli):
    r = run_vcli("hp-tuning-jobs", "create", "--help")
    assert r.returncode == 0, r.stderr
    for choices in ("local|docker|ssh", "algorithm-unspecified|grid-search|random-search", "last|best", "gp|skopt"):
        assert choices in r.stdout
    r = run_vcli("custom-jobs", "list", "--help")  # a group's help names the wide flags; a command's describes them
    assert "debug|info|warning|error|critical|none" in r.stdout


def test_validate_only_judges_the_job_and_reports_readiness_apart(run_vcli, vcli_home, tmp_path):
    """An image-only pool is valid Vertex (it runs as a container); an engine that is down is a
    readiness problem: a warning at --validate-only, exit 3 at create, and no job recorded."""
    config = tmp_path / "job.yaml"
    config.write_text("workerPoolSpecs:\n  machineSpec: {machineType: n1-standard-4}\n  replicaCount: 1\n"
                      "  containerSpec: {imageUri: vcli-base:bookworm}\n")
    down = {"DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}
    r = run_vcli("custom-jobs", "create", "--display-name=j", f"--config={config}", "--validate-only", env=down)
    assert r.returncode == 0, r.stderr
    assert "The job is valid" in r.stderr and "WARNING: the docker executor cannot run it now" in r.stderr
    r = run_vcli("custom-jobs", "create", "--display-name=j", f"--config={config}", env=down)
    assert r.returncode == 3
    assert "Cannot connect to the Docker engine" in one_error_line(r)
    assert json.loads(run_vcli("custom-jobs", "list", "--format=json").stdout) == []


def test_without_the_docker_sdk_a_container_job_is_one_line_naming_the_extra(run_vcli, vcli_home, tmp_path):
    """The README's demo installs `.[trainer]` only: a container pool then needs `vcli[docker]`,
    said in one line (a warning at --validate-only, exit 3 at create), never a traceback."""
    shadow = tmp_path / "shadow" / "docker"
    shadow.mkdir(parents=True)  # a `docker` that fails to import, first on the path: as if not installed
    (shadow / "__init__.py").write_text("raise ImportError('No module named docker')\n")
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path / "shadow"), str(REPO_ROOT)])}
    pool = "--worker-pool-spec=machine-type=n1-standard-4,container-image-uri=vcli-trainer:latest"
    r = run_vcli("custom-jobs", "create", "--display-name=j", pool, "--validate-only", env=env)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert "WARNING: the docker executor cannot run it now" in r.stderr and "pip install 'vcli[docker]'" in r.stderr
    r = run_vcli("custom-jobs", "create", "--display-name=j", pool, env=env)
    assert r.returncode == 9, r.stderr  # a missing extra, whichever it is
    assert "which the [docker] extra installs: " in one_error_line(r) and "pip install 'vcli[docker]'" in r.stderr


def test_an_accelerator_this_machine_lacks_is_never_silent(run_vcli, vcli_home):
    pool = "--worker-pool-spec=machine-type=n1-standard-4,replica-count=1,accelerator-type=NVIDIA_TESLA_T4,accelerator-count=1"
    args = ("custom-jobs", "create", "--display-name=g", f"{pool},container-image-uri=x", "--command=true",
            "--validate-only", "--format=none")
    r = run_vcli(*args, env={"VCLI_LOCAL_GPUS": ""})
    assert r.returncode == 0, r.stderr
    warnings = [l for l in r.stderr.splitlines() if l.startswith("WARNING: workerpool0 asks for 1 NVIDIA_TESLA_T4")]
    assert len(warnings) == 1, r.stderr
    r = run_vcli(*args, env={"VCLI_LOCAL_GPUS": "2"})
    assert "WARNING" not in r.stderr


# --------------------------------------------------------------------------- hostile documents

_VALID_JOB = "workerPoolSpecs: [{machineSpec: {machineType: n1-standard-4}, containerSpec: {imageUri: x}}]\n"


@pytest.mark.parametrize(
    "content,fragment",
    [
        (b"\x80\x81workerPoolSpecs: []", "is not UTF-8 text (byte 0x80 at offset 0)"),
        (b"[" * 100_000, "nests lists or mappings more than 64 levels deep"),
        (b'{"a":' * 50_000 + b"1" + b"}" * 50_000, "nests lists or mappings more than 64 levels deep"),
        (_VALID_JOB.encode() + b"labels: " + b"{a: " * 3000 + b"b" + b"}" * 3000,
         "nests lists or mappings more than 64 levels deep"),
        (_VALID_JOB.encode() + b"labels: {a: " + b"7" * 5000 + b"}", "an integer of 5000 digits is out of range"),
        # nine lines of aliases name 387 million values: refused at the bound, in well under a second
        (b"a: &a [x, x, x, x, x, x, x, x, x]\n" + b"".join(
            f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n".encode() for p, n in zip("abcdefg", "bcdefgh"))
         + b"workerPoolSpecs: [*h, *h, *h, *h, *h, *h, *h, *h, *h]\n",
         "holds more than 1,000,000 values once its aliases are expanded"),
        (b"workerPoolSpecs:\n- machineSpec: {machineType: n1-standard-4}\n  replicaCount: 1\n  replicaCount: 2\n"
         b"  containerSpec: {imageUri: x}\n",
         "(line 4, column 3): the key [replicaCount] appears twice in one mapping"),
        (b'workerPoolSpecs: [{machineSpec: {machineType: n1}, containerSpec: {imageUri: x, command: ["python3\\0"]}}]',
         "at [workerPoolSpecs[0].containerSpec.command[0]]: contains a NUL character"),
        (b'workerPoolSpecs: [{machineSpec: {machineType: n1}, containerSpec: {imageUri: x, env: [{name: "A=B", value: v}]}}]',
         "at [workerPoolSpecs[0].containerSpec.env[0].name]: must be a C identifier"),
        (b"workerPoolSpecs: [{machineSpec: {machineType: n1}, containerSpec: {imageUri: x, env: ["
         + b", ".join(f"{{name: V{i}, value: v}}".encode() for i in range(101)) + b"]}}]",
         "at [workerPoolSpecs[0].containerSpec.env]: at most 100 variables, found 101"),
        (_VALID_JOB.encode().replace(b"}]\n", b"}, {machineSpec: {machineType: n1}, replicaCount: 9223372036854775807, "
                                              b"containerSpec: {imageUri: x}}]\n"),
         "at [workerPoolSpecs[1].replicaCount]: must be at most 1000"),
    ],
    ids=["invalid-utf8", "deep-list", "deep-json", "deep-labels", "huge-integer", "alias-bomb", "duplicate-key",
         "nul-in-command", "env-name", "101-env-vars", "huge-replica-count"],
)
def test_a_hostile_config_is_one_line_never_a_traceback(run_vcli, vcli_home, tmp_path, content, fragment):
    path = tmp_path / "job.yaml"
    path.write_bytes(content)
    r = run_vcli("custom-jobs", "create", "--display-name=j", f"--config={path}", "--validate-only")
    assert r.returncode == 1, r.stderr[-2000:]
    assert fragment in one_error_line(r)
    assert "Traceback" not in r.stderr


def test_aliases_and_merge_keys_still_work(run_vcli, vcli_home, tmp_path):
    """The alias bound and the duplicate-key rule leave YAML's sharing alone: a pool copied by
    alias with a merge key (which overrides what it merges) is read as written."""
    path = tmp_path / "job.yaml"
    path.write_text("workerPoolSpecs:\n- &p {machineSpec: {machineType: n1-standard-4}, replicaCount: 1, "
                    "containerSpec: {imageUri: x, command: ['true']}}\n- <<: *p\n  replicaCount: 2\n")
    r = run_vcli("custom-jobs", "create", "--display-name=j", f"--config={path}", "--validate-only", "--format=json",
                 "--executor=local")
    assert r.returncode == 0, r.stderr[-2000:]
    pools = json.loads(r.stdout)["jobSpec"]["workerPoolSpecs"]
    assert [p["replicaCount"] for p in pools] == ["1", "2"] and pools[1]["containerSpec"]["command"] == ["true"]


def test_a_huge_replica_count_flag_is_refused_before_planning(run_vcli, vcli_home):
    # 1e11 replicas once hung --validate-only, which names every replica.
    r = run_vcli("custom-jobs", "create", "--display-name=j", f"--worker-pool-spec=machine-type=n1,container-image-uri={IMG}",
                 f"--worker-pool-spec=machine-type=n1,replica-count=100000000000,container-image-uri={IMG}",
                 "--command=true", "--validate-only", timeout=30)
    assert r.returncode == 1
    assert "Key [replica-count] must be at most 1000" in one_error_line(r)


def test_a_nul_in_a_flags_file_is_refused(run_vcli, vcli_home, tmp_path):
    # The shell cannot pass a NUL; a flags file can, and the replica then failed at start.
    path = tmp_path / "flags.yaml"
    path.write_text(f'--display-name: j\n--worker-pool-spec: "machine-type=n1,container-image-uri={IMG}"\n'
                    '--command: python3\n--args: ["a\\0b"]\n')
    r = run_vcli("custom-jobs", "create", f"--flags-file={path}", "--validate-only")
    assert r.returncode == 1
    assert "the value of [--args] contains a NUL character" in one_error_line(r)
    assert not (vcli_home / "jobs").exists()


@pytest.mark.parametrize("content,fragment", [
    ("hots:\n  gpu1: {address: 10.0.0.5}\n", "unknown key(s) hots; the file holds `hosts:`"),  # was: no hosts
    ("hosts:\n  gpu1: {address: 10.0.0.5, gpus: {count: 1.9}}\n",
     "hosts.gpu1.gpus.count: expected a whole number, found [1.9]"),  # was 1 GPU
    ("hosts:\n  gpu1: {address: 10.0.0.5, gpus: true}\n", "hosts.gpu1.gpus: expected a whole number, found [True]"),
    ("hosts:\n  gpu1: {address: 10.0.0.5, port: 22.7}\n", "hosts.gpu1.port: expected a whole number, found [22.7]"),
    ("hosts:\n  local: {gpus: {count: 1, tpye: NVIDIA_TESLA_T4}}\n", "hosts.local.gpus: unknown key(s) tpye"),
    ("hosts:\n  gpu1: {address: 10.0.0.5, gpus: two}\n", "hosts.gpu1.gpus: expected a whole number, found [two]"),
    ("hosts:\n  gpu1: {address: 10.0.0.5, gpus: {count: 2, indices: [0, 0]}}\n",
     "hosts.gpu1.gpus.indices: each GPU index once, found [0, 0]"),  # `hosts gpus` listed GPU 0 twice, FREE
], ids=["top-key", "fraction", "bool", "port", "gpus-key", "words", "same-index"])
def test_an_inventory_read_loosely_before_is_one_line_naming_the_key(run_vcli, vcli_home, tmp_path, content, fragment):
    # Each was taken silently (a misspelt top key emptied the inventory, numbers were cut) or
    # was Python's int() text naming no key (found by a probe).
    path = tmp_path / "hosts.yaml"
    path.write_text(content)
    r = run_vcli("hosts", "list", env={"VCLI_HOSTS_FILE": str(path)}, timeout=30)
    assert r.returncode == 1, r.stderr[-2000:]
    assert fragment in one_error_line(r, "ERROR: (vcli.hosts.list) "), r.stderr


@pytest.mark.parametrize(
    "content,fragment",
    [
        (b"hosts:\n  h1: {address: 1.2.3.4\n  h2: [\n", "is not valid YAML or JSON (line 3, column 5)"),
        (b"\x80\x81", "is not UTF-8 text (byte 0x80 at offset 0)"),
        (b"hosts:\n  h1: {address: a}\n  h1: {address: b}\n", "the key [h1] appears twice in one mapping"),
        (b"a: &a [x, x, x, x, x, x, x, x, x]\n" + b"".join(
            f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n".encode() for p, n in zip("abcdefg", "bcdefgh"))
         + b"hosts: {h1: {address: a, tags: [*h, *h, *h, *h, *h, *h, *h, *h, *h]}}\n",
         "holds more than 1,000,000 values"),
        (None, "cannot be read: Is a directory."),
    ],
    ids=["bad-yaml", "not-utf8", "duplicate-host", "alias-bomb", "a-directory"],
)
def test_a_broken_host_inventory_is_one_line(run_vcli, vcli_home, tmp_path, content, fragment):
    # `hosts list` read the inventory with PyYAML's defaults: a multi-line error, a traceback
    # on bytes that are not UTF-8.
    path = tmp_path / "hosts.yaml"
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    r = run_vcli("hosts", "list", env={"VCLI_HOSTS_FILE": str(path)}, timeout=30)
    assert r.returncode == 1, r.stderr[-2000:]
    line = one_error_line(r, "ERROR: (vcli.hosts.list) ")
    assert line.startswith(f"The host inventory {path}") and fragment in line, line


def test_a_utf16_config_with_its_byte_order_mark_is_read(run_vcli, vcli_home, tmp_path):
    path = tmp_path / "job.yaml"
    path.write_bytes(_VALID_JOB.encode("utf-16"))
    r = run_vcli("custom-jobs", "create", "--display-name=j", f"--config={path}", "--validate-only")
    assert r.returncode == 0, r.stderr[-2000:]


@pytest.mark.parametrize("flag", ["--config", "--flags-file"])
def test_an_endless_file_is_refused_after_16_mib_in_bounded_memory(vcli_home, flag):
    """`/dev/zero` once grew vcli to 15 GB: now reading stops at the limit, with one line (the
    peak resident size of that very process is measured: `PeakRss`)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.Popen([sys.executable, "-m", "vcli", "custom-jobs", "create", "--display-name=j",
                             f"{flag}=/dev/zero", "--validate-only"], env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = PeakRss(proc.pid)  # its own peak (wait4's starts at this test process's size)
    assert proc.stderr is not None
    err = proc.stderr.read().decode()
    _, status, _ = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode in (1, 2, 3), err[-2000:]
    lines = err.splitlines()
    assert len(lines) == 1 and "is larger than 16 MiB" in lines[0], err[-2000:]
    resident = peak.stop()
    assert 0 < resident < 400 * 1024, f"vcli grew to {resident // 1024} MiB"


def test_a_bad_filter_regex_is_one_usage_line(run_vcli, vcli_home):
    r = run_vcli("custom-jobs", "list", "--filter=displayName~(")
    assert r.returncode == 2, r.stderr
    assert "argument --filter: [displayName~(] is not a valid regular expression" in one_error_line(
        r, "ERROR: (vcli.custom-jobs.list) ")


def test_an_unreachable_ray_cluster_is_one_line_at_once(run_vcli, vcli_home):
    """Ray retries an unreachable GCS for ever (a stale cluster file, a wrong --ray-address):
    vcli asks the address first and says so in one line, exit 3, even with --validate-only."""
    import socket
    import time

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    pool = "--worker-pool-spec=machine-type=n1-standard-4,container-image-uri=x"
    for extra, env in (([f"--ray-address=127.0.0.1:{port}"], None), ([], {"RAY_ADDRESS": f"127.0.0.1:{port}"})):
        t0 = time.monotonic()
        r = run_vcli("custom-jobs", "create", "--display-name=r", pool, "--command=python3,-c,pass", "--executor=ray",
                     *extra, "--validate-only", env=env, timeout=60)
        assert r.returncode == 3, r.stderr[-2000:]
        assert f"Cannot connect to the Ray cluster at 127.0.0.1:{port}" in one_error_line(r)
        assert time.monotonic() - t0 < 30


def test_the_ray_address_flag_wins_over_the_property_and_the_environment(run_vcli, vcli_home):
    """`--ray-address` is the job's own cluster: `vcli config set ray/address` and $RAY_ADDRESS
    name others, and the flag's is the one vcli asks (and names when nothing answers there)."""
    import socket

    ports = []
    for _ in range(3):  # ports nothing listens on
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    flag, prop, env = ports
    assert run_vcli("config", "set", "ray/address", f"127.0.0.1:{prop}").returncode == 0
    r = run_vcli("custom-jobs", "create", "--display-name=r", "--worker-pool-spec=machine-type=n1-standard-4,"
                 "container-image-uri=x", "--command=python3,-c,pass", "--executor=ray", f"--ray-address=127.0.0.1:{flag}",
                 "--validate-only", env={"RAY_ADDRESS": f"127.0.0.1:{env}"}, timeout=60)
    assert r.returncode == 3, r.stderr[-2000:]
    assert f"Cannot connect to the Ray cluster at 127.0.0.1:{flag}" in one_error_line(r)


@pytest.mark.parametrize("answer", ["http", "silent"])
def test_a_ray_address_that_is_not_a_ray_cluster_is_one_line_at_once(run_vcli, vcli_home, answer):
    """A port that accepts connections but is no GCS (an HTTP server, such as Ray's own
    dashboard on 8265, or one that never says a word) hung create and --validate-only for
    more than 5 minutes, printing Ray's warnings, deaf to Ctrl-C."""
    import http.server
    import socket
    import threading
    import time

    if answer == "http":
        server = http.server.HTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        port, close = server.server_address[1], server.shutdown
    else:
        silent = socket.socket()
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port, close = silent.getsockname()[1], silent.close
    try:
        t0 = time.monotonic()
        r = run_vcli("custom-jobs", "create", "--display-name=r", "--command=python3,-c,pass", "--executor=ray",
                     "--worker-pool-spec=machine-type=n1-standard-4,container-image-uri=x",
                     f"--ray-address=127.0.0.1:{port}", "--validate-only", timeout=90)
    finally:
        close()
    assert r.returncode == 3, r.stderr[-2000:]
    assert one_error_line(r).endswith(
        f"127.0.0.1:{port} accepts connections but is not a Ray cluster (its GCS, or a ray:// client server, speaks "
        "gRPC; this does not): the GCS listens on port 6379 unless `ray start --head --port` said otherwise.")
    assert time.monotonic() - t0 < 40


@pytest.mark.parametrize(
    "pool,fragment",
    [
        ("machine-type==n1-standard-4,container-image-uri=x", "received: [=n1-standard-4]"),
        ("machine-type=" + "a" * 10_000 + ",container-image-uri=x", "... (10000 characters)]"),
        ("machine-type=n1-standard-4,accelerator-type=NVIDIA_TESLA_T4,accelerator-count=1e308,container-image-uri=x",
         "Key [accelerator-count] must be at most 64"),
    ],
    ids=["equals-sign", "10000-characters", "1e308-gpus"],
)
def test_garbage_machine_types_and_counts_are_refused_by_validate_only(run_vcli, vcli_home, pool, fragment):
    r = run_vcli("custom-jobs", "create", "--display-name=j", f"--worker-pool-spec={pool}", "--validate-only")
    assert r.returncode == 1, r.stderr[-2000:]
    assert fragment in one_error_line(r)


def test_unfilled_shell_placeholders_are_warned_about_at_validate(run_vcli, vcli_home, tmp_path):
    """`imageUri: $IMAGE` and an output prefix `$JOB_DIR/` (a folder literally named `$JOB_DIR`
    otherwise) get one WARNING line each; `$` in args is the trainer's business."""
    config = tmp_path / "job.yaml"
    config.write_text("workerPoolSpecs: [{machineSpec: {machineType: n1-standard-4}, containerSpec: "
                      "{imageUri: $IMAGE, command: [python3, -c, '0'], args: ['--x=$HOME']}}]\n"
                      f"baseOutputDirectory: {{outputUriPrefix: '{tmp_path}/${{JOB_DIR}}/out'}}\n")
    r = run_vcli("custom-jobs", "create", "--display-name=j", f"--config={config}", "--executor=local",
                 "--validate-only")
    assert r.returncode == 0, r.stderr
    warnings = [line for line in r.stderr.splitlines() if line.startswith("WARNING: [")]
    assert warnings == [
        "WARNING: [workerPoolSpecs[0].containerSpec.imageUri] holds $IMAGE, an unfilled shell variable ([$IMAGE]): "
        "vcli takes it literally; export the variable or write the value.",
        f"WARNING: [baseOutputDirectory] holds ${{JOB_DIR}}, an unfilled shell variable ([{tmp_path}/${{JOB_DIR}}/out]): "
        "vcli takes it literally; export the variable or write the value.",
    ], r.stderr


@pytest.mark.parametrize("key", ["script=/etc/passwd", "script=../../outside.py", "python-module=trainer,extra-dirs=../../..",
                                 "python-module=trainer,extra-packages=/etc/hosts"])
def test_package_paths_outside_the_package_are_refused(run_vcli, vcli_home, tmp_path, key):
    """`script=/etc/passwd` or `extra-dirs=../../..` would run or ship files from outside the
    package (Docker autopackaging would put them into the build context): one line, exit 1."""
    pkg = tmp_path / "pkg"
    (pkg / "trainer").mkdir(parents=True)
    (pkg / "trainer" / "__init__.py").write_text("")
    (tmp_path / "outside.py").write_text("")
    r = run_vcli("custom-jobs", "create", "--display-name=j", "--executor=local", "--validate-only",
                 f"--worker-pool-spec=machine-type=n1-standard-4,executor-image-uri=x,local-package-path={pkg},{key}")
    assert r.returncode == 1, r.stderr
    assert "must name a path inside the package" in one_error_line(r)


def test_strategies_and_disk_spec_without_local_effect_are_named(run_vcli, tmp_path):
    cfg = tmp_path / "job.yaml"
    pool = ("workerPoolSpecs:\n  - machineSpec: {machineType: n1-standard-4}\n    replicaCount: 1\n"
            "    diskSpec: {bootDiskType: pd-ssd, bootDiskSizeGb: 200}\n"
            "    pythonPackageSpec: {executorImageUri: python:3.11, pythonModule: trainer.task}\n")
    for strategy, named in (("SPOT", True), ("FLEX_START", False)):
        cfg.write_text(pool + f"scheduling:\n  strategy: {strategy}\n")
        r = run_vcli("custom-jobs", "create", "--display-name=x", f"--config={cfg}", "--validate-only", "--format=none")
        assert r.returncode == 0, r.stderr
        note = next(line for line in r.stderr.splitlines() if line.startswith("Note: [--config]"))
        assert "workerPoolSpecs[0].diskSpec" in note
        assert ("scheduling.strategy" in note) is named


def test_flex_start_waits_24_hours_by_default() -> None:
    from vcli.spec import Scheduling

    assert Scheduling(strategy="FLEX_START").wait_limit_seconds == 24 * 3600
    assert Scheduling(strategy="FLEX_START", max_wait_seconds=0).wait_limit_seconds is None
    assert Scheduling(strategy="FLEX_START", max_wait_seconds=60).wait_limit_seconds == 60
    assert Scheduling(max_wait_seconds=0).wait_limit_seconds is None
    assert Scheduling().wait_limit_seconds is None


@pytest.mark.parametrize("region", ["#", "moon-1", "us-central", "x" * 500])
def test_a_region_vertex_does_not_serve_is_refused(run_vcli, region):
    r = run_vcli("custom-jobs", "list", f"--region={region}")
    assert r.returncode == 1, r.stderr
    line = one_error_line(r, "ERROR: (vcli.custom-jobs.list) ")
    assert line.startswith("Invalid value for [region]: Available values are [local, africa-south1,")
    assert line.endswith(f"but found [{region[:60]}{'...' if len(region) > 60 else ''}].")
    assert run_vcli("custom-jobs", "list", "--region=europe-west4").returncode == 0
    assert run_vcli("custom-jobs", "list", "--region=local").returncode == 0


def test_validate_only_finds_a_package_uri_that_maps_to_nothing(run_vcli, vcli_home, tmp_path):
    cfg = tmp_path / "study.yaml"
    cfg.write_text("displayName: t\nmaxTrialCount: 2\nstudySpec:\n  metrics: [{metricId: score, goal: MAXIMIZE}]\n"
                   "  parameters: [{parameterId: x, doubleValueSpec: {minValue: 0, maxValue: 1}}]\n"
                   "trialJobSpec:\n  workerPoolSpecs:\n  - machineSpec: {machineType: n1-standard-4}\n    replicaCount: 1\n"
                   "    pythonPackageSpec: {executorImageUri: python:3.11, pythonModule: x.y, "
                   "packageUris: [gs://bucket/trainer-0.1.tar.gz]}\n")
    r = run_vcli("hp-tuning-jobs", "create", f"--config={cfg}", "--validate-only", "--format=none")
    assert r.returncode == 1, r.stderr
    line = one_error_line(r, "ERROR: (vcli.hp-tuning-jobs.create) ")
    assert line.startswith("Invalid value for [trialJobSpec.workerPoolSpecs[0].pythonPackageSpec.packageUris[0]]: the package [")
    assert line.endswith("/gcs/bucket/trainer-0.1.tar.gz] (gs://bucket/trainer-0.1.tar.gz under storage/gcs-root) is not found")
    (vcli_home / "gcs" / "bucket").mkdir(parents=True)
    (vcli_home / "gcs" / "bucket" / "trainer-0.1.tar.gz").write_bytes(b"")
    assert run_vcli("hp-tuning-jobs", "create", f"--config={cfg}", "--validate-only", "--format=none").returncode == 0
    r = run_vcli("custom-jobs", "create", "--display-name=j", "--validate-only", "--python-package-uris=./nope.whl",
                 "--worker-pool-spec=machine-type=n1-standard-4,executor-image-uri=python:3.11,python-module=x.y")
    assert r.returncode == 1 and "packageUris[0]]: the package [./nope.whl] is not found" in r.stderr


@pytest.mark.parametrize("labels,why", [
    ({f"k{i}": "v" for i in range(65)}, "at most 64 labels are allowed, found 65."),
    ({"Team": "x"}, "allowed in keys, which must start with a letter and be at most 63 characters: [Team]."),
    ({"team": "X Y"}, "allowed in values, at most 63 characters: [X Y]."),
])
def test_a_study_document_s_labels_follow_vertex_s_rules(run_vcli, tmp_path, labels, why):
    import json as _json

    doc = {"displayName": "t", "maxTrialCount": 2, "labels": labels,
           "studySpec": {"metrics": [{"metricId": "m", "goal": "MAXIMIZE"}],
                         "parameters": [{"parameterId": "x", "doubleValueSpec": {"minValue": 0, "maxValue": 1}}]},
           "trialJobSpec": {"workerPoolSpecs": [{"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": 1,
                                                 "containerSpec": {"imageUri": "x", "command": ["true"]}}]}}
    cfg = tmp_path / "study.json"
    cfg.write_text(_json.dumps(doc))
    r = run_vcli("hp-tuning-jobs", "create", f"--config={cfg}", "--validate-only", "--format=none")
    assert r.returncode == 1, r.stderr
    line = one_error_line(r, "ERROR: (vcli.hp-tuning-jobs.create) ")
    assert " at [labels]: " in line and line.endswith(why), line


# --------------------------------------------------------------------------- environment and properties


@pytest.mark.parametrize("name", ["VCLI_LOCAL_GPUS", "VCLI_GPUS"])
@pytest.mark.parametrize("value", ["abc", "1.5", "99999999999", "0,,1", "-1"])
def test_a_gpu_variable_that_names_no_gpus_is_one_line(run_vcli, vcli_home, name, value):
    # int() on it was a traceback, and 1e11 a MemoryError; $VCLI_GPUS=abc silently meant no GPUs.
    env = {name: value}
    if name == "VCLI_GPUS":
        env["VCLI_LOCAL_GPUS"] = ""
    r = run_vcli("hosts", "gpus", env=env, timeout=30)
    assert r.returncode == 1, r.stderr
    line = one_error_line(r, "ERROR: (vcli.hosts.gpus) ")
    assert line.startswith(f"Invalid value for [{name}]: [{value}]: a GPU count such as 4"), line


@pytest.mark.parametrize(
    "content,fragment",
    [
        ('{"executor": "local", "storage/gcs-root": "/tmp/gcs"}\n,', "is damaged (Extra data: line 2 column 1"),
        ("[1, 2]", "is damaged (not a JSON object of strings)"),
        ('{"executor": 5}', "is damaged (not a JSON object of strings)"),
        ("[" * 100_000, "is damaged (nested too deeply)"),
    ],
    ids=["stray-byte", "a-list", "a-number", "nested-too-deeply"],
)
def test_a_damaged_properties_file_is_one_line_and_never_overwritten(run_vcli, vcli_home, content, fragment):
    # It was read as "nothing set" (jobs ran with other settings), and the next `config set`
    # replaced it, erasing every other property.
    path = vcli_home.parent / "vcli-config" / "properties.json"
    path.write_text(content)
    for args in (("config", "list"), ("config", "set", "gpu/exclude-busy", "false"),
                 ("custom-jobs", "create", "--display-name=j", f"--worker-pool-spec=machine-type=n1,container-image-uri={IMG}",
                  "--command=true", "--validate-only")):
        r = run_vcli(*args)
        assert r.returncode == 1, r.stderr
        line = one_error_line(r, f"ERROR: (vcli.{'.'.join(a for a in args[:2] if not a.startswith('-'))}) ")
        assert line.startswith(f"vcli's properties file {path} {fragment}"), line
    assert path.read_text() == content


def test_concurrent_config_sets_keep_every_property(vcli_home):
    """Two processes that each set their own property 200 times at once: each keeps its last
    value. Without the lock, one's read-modify-write erased the other's property, and both
    wrote the same temporary file (a rename then failed)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
    loop = "import sys\nfrom vcli import properties\nfor i in range(200):\n    properties.set_(sys.argv[1], f'v{i}')\n"
    procs = [subprocess.Popen([sys.executable, "-c", loop, prop], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True) for prop in ("slurm/partition", "slurm/account")]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-2000:]
    data = json.loads((vcli_home.parent / "vcli-config" / "properties.json").read_text())
    assert data == {"slurm/partition": "v199", "slurm/account": "v199"}


def test_concurrent_hosts_adds_keep_every_host(tmp_path):
    """Two processes adding 40 hosts each to one inventory at once: every host is kept. Two
    `hosts add` loops lost 3 of 40 hosts (one reported added) and one died with a traceback on
    the shared `hosts.yaml.tmp` (found by a probe)."""
    inventory = tmp_path / "hosts.yaml"
    env = dict(os.environ, VCLI_HOSTS_FILE=str(inventory),
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
    loop = ("import sys\nfrom vcli.placement import hosts\nfor i in range(40):\n"
            "    hosts.put_host(hosts.Host(name=f'{sys.argv[1]}{i}', address=f'10.0.{sys.argv[2]}.{i + 1}'))\n")
    procs = [subprocess.Popen([sys.executable, "-c", loop, prefix, net], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True) for prefix, net in (("a", "1"), ("b", "2"))]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-2000:]
    from vcli.placement import hosts

    assert sorted(hosts.load_inventory(inventory)) == sorted(f"{p}{i}" for p in "ab" for i in range(40))
    assert sorted(f.name for f in tmp_path.iterdir()) == ["hosts.yaml", "hosts.yaml.lock"]  # no temporary file left


def test_a_config_dir_that_is_a_file_is_one_line(run_vcli, vcli_home, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    r = run_vcli("config", "set", "executor", "local", env={"VCLI_CONFIG_DIR": str(blocker)})
    assert r.returncode == 1, r.stderr
    assert f"vcli's config directory {blocker} cannot be used ($VCLI_CONFIG_DIR)" in one_error_line(r, "ERROR: (vcli.config.set) ")


@pytest.mark.parametrize("name,fragment", [
    ("a\nb", "must not contain control characters (newlines, tabs, escapes), received [a\\nb]."),
    ("x\x1b[31mred", "must not contain control characters"),
    ("x" * 129, "at most 128 characters (Vertex's limit), received 129."),
], ids=["newline", "escape", "129-characters"])
def test_a_display_name_vertex_would_refuse_is_one_line(run_vcli, vcli_home, name, fragment):
    # A newline in a display name forged a row in `list`'s table; 100,000 characters were taken.
    r = run_vcli("custom-jobs", "create", f"--display-name={name}", f"--worker-pool-spec=machine-type=n1,container-image-uri={IMG}",
                 "--command=true", "--validate-only")
    assert r.returncode == 1, r.stderr
    assert one_error_line(r) == f"Invalid value for [--display-name]: {fragment}" or fragment in one_error_line(r)


def test_an_id_with_a_newline_is_named_on_one_line(run_vcli, vcli_home):
    r = run_vcli("custom-jobs", "describe", "a\nb")
    assert r.returncode == 4, r.stderr
    assert one_error_line(r, "ERROR: (vcli.custom-jobs.describe) ").startswith("CustomJob [a\\nb] was not found.")


@pytest.mark.parametrize("extra", [[], ["--validate-only"]], ids=["create", "validate-only"])
def test_a_negative_seed_is_refused_before_the_study_is_recorded(run_vcli, vcli_home, extra):
    # -1 passed --validate-only, then crashed the controller of a study left RUNNING.
    r = run_vcli("hp-tuning-jobs", "create", "--display-name=s", "--seed=-1", "--executor=local",
                 "--worker-pool-spec=machine-type=n1,container-image-uri=x", "--command=true",
                 "--parameter-spec=parameter-id=x,type=double,min=0,max=1", "--metric=metric-id=m,goal=maximize",
                 "--max-trial-count=1", *extra)
    assert r.returncode == 1, r.stderr
    line = one_error_line(r, "ERROR: (vcli.hp-tuning-jobs.create) ")
    assert line == "Invalid value for [--seed]: must be an integer from 0 to 9223372036854775807, received -1.", line
    assert run_vcli("hp-tuning-jobs", "list", "--format=value(name)").stdout == ""


@pytest.mark.parametrize("flag,fragment", [
    ("--goal-value=nan", "Invalid value for [--goal-value]: must be a finite number; received: nan."),
    ("--goal-value=inf", "Invalid value for [--goal-value]: must be a finite number; received: inf."),
    ("--study-timeout=", "Invalid value for [--study-timeout]: must not be empty"),
    ("--study-timeout=0s", "Invalid value for [--study-timeout]: must be longer than 0s; received: 0s."),
])
def test_study_flags_that_would_be_silently_ignored_are_refused(run_vcli, vcli_home, flag, fragment):
    # NaN is never reached and an empty or zero timeout meant "no budget": all were accepted.
    r = run_vcli("hp-tuning-jobs", "create", "--display-name=s", flag, "--executor=local",
                 "--worker-pool-spec=machine-type=n1,container-image-uri=x", "--command=true",
                 "--parameter-spec=parameter-id=x,type=double,min=0,max=1", "--metric=metric-id=m,goal=maximize",
                 "--max-trial-count=1", "--validate-only")
    assert r.returncode == 1, r.stderr
    assert one_error_line(r, "ERROR: (vcli.hp-tuning-jobs.create) ").startswith(fragment)


_PBT = """
maxTrialCount: 8
parallelTrialCount: 2
studySpec:
  algorithm: POPULATION_BASED_TRAINING
  metrics: [{metricId: score, goal: MAXIMIZE}]
  parameters: [{parameterId: x, doubleValueSpec: {minValue: 0.1, maxValue: 1}}]
  populationBasedTrainingSpec: {populationSize: SIZE, perturbationIntervalSteps: 2, maxStepCount: 4}
trialJobSpec:
  workerPoolSpecs:
  - machineSpec: {machineType: n1-standard-4}
    containerSpec: {imageUri: x, command: ["true"]}
"""


def test_pbt_says_parallel_trial_count_has_no_effect_and_bounds_its_population(run_vcli, vcli_home, tmp_path):
    # parallelTrialCount was silently ignored (populationSize members run at once), and a
    # population of 1e8 passed --validate-only.
    path = tmp_path / "pbt.yaml"
    path.write_text(_PBT.replace("SIZE", "4"))
    r = run_vcli("hp-tuning-jobs", "create", "--display-name=p", f"--config={path}", "--validate-only", "--format=none")
    assert r.returncode == 0, r.stderr
    assert ("WARNING: parallelTrialCount (2) has no effect with Population Based Training: its populationSize (4) "
            "members train at once.") in r.stderr.splitlines()
    path.write_text(_PBT.replace("SIZE", "100000000").replace("maxTrialCount: 8", "maxTrialCount: 400000000"))
    r = run_vcli("hp-tuning-jobs", "create", "--display-name=p", f"--config={path}", "--validate-only")
    assert r.returncode == 1, r.stderr
    assert "at [studySpec.populationBasedTrainingSpec.populationSize]: must be at most 1000" in \
        one_error_line(r, "ERROR: (vcli.hp-tuning-jobs.create) ")


def test_a_double_range_that_overflows_is_refused(run_vcli, vcli_home):
    # -1.7e308..1.7e308 is finite at both ends, but its width is not: every trial got 1.7e308.
    r = run_vcli("hp-tuning-jobs", "create", "--display-name=s", "--worker-pool-spec=machine-type=n1,container-image-uri=x",
                 "--command=true", "--parameter-spec=parameter-id=x,type=double,min=-1.7e308,max=1.7e308",
                 "--metric=metric-id=m,goal=maximize", "--validate-only")
    assert r.returncode == 1, r.stderr
    assert "doubleValueSpec]: maxValue - minValue must be a finite number" in one_error_line(r, "ERROR: (vcli.hp-tuning-jobs.create) ")


@pytest.mark.parametrize("spec,fragment", [
    ("min=0,max=1e30", "Invalid value for [--parameter-spec]: Key [max] of integer parameter [x] must be a 64-bit integer"),
    ("min=-9223372036854775809,max=0", "Key [min] of integer parameter [x] must be a 64-bit integer"),
    ("min=0,max=9223372036854775807", "integerValueSpec]: maxValue - minValue must be at most 2^53"),
])
def test_integer_ranges_beyond_what_the_suggesters_hold_are_refused(run_vcli, vcli_home, spec, fragment):
    # 1e30 was stored as 1000000000000000019884624838656 and broke the Parquet export; a range
    # wider than 2^53 made grid search skip 512 values at a time.
    r = run_vcli("hp-tuning-jobs", "create", "--display-name=s", "--worker-pool-spec=machine-type=n1,container-image-uri=x",
                 "--command=true", f"--parameter-spec=parameter-id=x,type=integer,{spec}", "--algorithm=grid-search",
                 "--metric=metric-id=m,goal=maximize", "--validate-only")
    assert r.returncode == 1, r.stderr
    assert fragment in one_error_line(r, "ERROR: (vcli.hp-tuning-jobs.create) ")


def test_a_categorical_value_with_a_control_character_is_refused(run_vcli, vcli_home, tmp_path):
    # A newline forged a `trial 99 SUCCEEDED` line in the study's event stream on stdout.
    forged = "a\ntrial 99 SUCCEEDED after 1s: acc=1000 (y=forged)"
    r = run_vcli("hp-tuning-jobs", "create", "--display-name=s", "--worker-pool-spec=machine-type=n1,container-image-uri=x",
                 "--command=true", f"--parameter-spec=parameter-id=y,type=categorical,values={forged};b",
                 "--metric=metric-id=m,goal=maximize", "--validate-only")
    assert r.returncode == 1, r.stderr
    assert ("categoricalValueSpec.values[0]]: must not contain control characters, found "
            "[a\\ntrial 99 SUCCEEDED after 1s: acc=1000 (y=forged)]") in one_error_line(r, "ERROR: (vcli.hp-tuning-jobs.create) ")


@pytest.mark.parametrize("port", ["-1", "70000"])
def test_tensorboard_refuses_a_port_that_is_not_one(run_vcli, vcli_home, port):
    # TensorBoard's own traceback (-1), exit 255 (70000); checked before the study is looked up.
    r = run_vcli("hp-tuning-jobs", "tensorboard", "123", f"--port={port}")
    assert r.returncode == 1, r.stderr
    assert one_error_line(r, "ERROR: (vcli.hp-tuning-jobs.tensorboard) ") == (
        f"Invalid value for [--port]: a port is a number from 0 to 65535 (0: any free port), not {port}.")


def test_grid_search_over_a_wide_integer_range_validates_in_bounded_memory(vcli_home):
    # The first grid point listed the whole domain: 3.8 GB then a MemoryError traceback.
    import resource

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    r = subprocess.run([sys.executable, "-m", "vcli", "hp-tuning-jobs", "create", "--display-name=s",
                        "--worker-pool-spec=machine-type=n1,container-image-uri=x", "--command=true",
                        "--parameter-spec=parameter-id=x,type=integer,min=0,max=9007199254740992",
                        "--algorithm=grid-search", "--metric=metric-id=m,goal=maximize", "--validate-only", "--format=none"],
                       env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, capture_output=True, text=True, timeout=60,
                       stdin=subprocess.DEVNULL, preexec_fn=cap)
    assert r.returncode == 0, r.stderr
    assert "The study is valid" in r.stderr


@pytest.mark.parametrize("args,fragment", [
    (["--address=10.0.0.5", "--gpus=1000000000000"], "Invalid value for [--gpus]: must be from 0 to 256"),
    (["--address=10.0.0.5", "--workdir=/x\ny"], "Invalid value for [--workdir]: must not contain control characters"),
    (["--address=10.0.0.5\r"], "Invalid value for [--address]: [10.0.0.5\\r] is not a host name or IP address"),
    (["--address=10.0.0.5", "--user=bob\r"], "Invalid value for [--user]: [bob\\r] is not a user name"),
    (["--address=10.0.0.5", "--cpus=nan"], "Invalid value for [--cpus]: must be a finite number > 0, received nan"),
    (["--address=10.0.0.5", "--memory-gb=inf"], "Invalid value for [--memory-gb]: must be a finite number > 0"),
    (["--address=http://x/y"], "Invalid value for [--address]: [http://x/y] is not a host name or IP address"),
    (["--address=host:22"], "Invalid value for [--address]: [host:22] is not a host name or IP address (the port is --port)"),
    (["--address=" + "a" * 300], "is not a host name or IP address"),
    (["--address=10.0.0.999"], "[10.0.0.999] is not a host name or IP address"),
    (["--address=::::"], "[::::] is not a host name or IP address"),
], ids=["gpus-1e12", "workdir-newline", "address-cr", "user-cr", "cpus-nan", "memory-inf", "url", "host-port", "300-chars",
        "ipv4-999", "colons"])
def test_a_host_vcli_could_not_use_is_refused_when_added(run_vcli, vcli_home, tmp_path, args, fragment):
    # Each was added; then `hosts list` died of a MemoryError (1e12 GPUs), forged a table row
    # (a newline), or printed NaN/Infinity, which is not JSON.
    hosts = tmp_path / "hosts.yaml"
    r = run_vcli("hosts", "add", "h1", *args, "--no-connect", env={"VCLI_HOSTS_FILE": str(hosts)})
    assert r.returncode == 1, r.stderr
    assert fragment in one_error_line(r, "ERROR: (vcli.hosts.add) ")
    assert not hosts.exists() or "h1" not in hosts.read_text()


@pytest.mark.parametrize("address", ["10.0.0.5", "gpu-box.example.com", "::1", "[fe80::1]", "localhost"])
def test_host_names_and_ip_addresses_are_taken(run_vcli, vcli_home, tmp_path, address):
    r = run_vcli("hosts", "add", "h1", f"--address={address}", "--no-connect",
                 env={"VCLI_HOSTS_FILE": str(tmp_path / "hosts.yaml")})
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("trial_id", ["../../etc", "", "abc", "-5", "1\n2"])
def test_print_env_takes_only_a_trial_number(run_vcli, vcli_home, trial_id):
    # `../../etc` showed an AIP_MODEL_DIR outside the job's directory that no trial can get.
    r = run_vcli("custom-jobs", "print-env", f"--worker-pool-spec=machine-type=n1,container-image-uri={IMG}",
                 "--command=true", f"--trial-id={trial_id}")
    assert r.returncode == 1, r.stderr
    assert "Invalid value for [--trial-id]:" in one_error_line(r, "ERROR: (vcli.custom-jobs.print-env) ")


@pytest.mark.parametrize("prop,value,fragment", [
    ("slurm/partition", "a\nb", "must not contain control characters"),
    ("hosts", "a b,/c", "[a b] is not a host name of the inventory"),
])
def test_config_set_refuses_values_that_would_forge_lines_or_name_no_host(run_vcli, vcli_home, prop, value, fragment):
    r = run_vcli("config", "set", prop, value)
    assert r.returncode == 1, r.stderr
    assert fragment in one_error_line(r, "ERROR: (vcli.config.set) ")
    assert run_vcli("config", "list").stdout == ""


def test_an_inventory_entry_that_breaks_the_rules_is_named_and_can_be_removed(run_vcli, vcli_home, tmp_path):
    """An entry `hosts add` would refuse (a hand edit, an older vcli's) is one line naming the
    file, the entry and its key, not the flag the user never typed; `hosts remove` removes it
    and keeps the others as written; removing several is all or none."""
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text("hosts:\n  g10: {address: 10.0.0.5, cpus: .nan}\n  ok1: {address: 10.0.0.6}\n")
    env = {"VCLI_HOSTS_FILE": str(hosts)}
    r = run_vcli("hosts", "list", env=env)
    assert r.returncode == 1, r.stderr
    assert one_error_line(r, "ERROR: (vcli.hosts.list) ") == (
        f"{hosts}: hosts.g10.cpus: must be a finite number > 0, received nan (correct the file, or `vcli hosts remove g10`)")
    r = run_vcli("hosts", "remove", "g10", "nosuch", env=env)
    assert r.returncode == 4 and "Host [nosuch] is not in the inventory" in r.stderr and "nothing was removed" in r.stderr
    assert "g10" in hosts.read_text()
    r = run_vcli("hosts", "remove", "g10", env=env)
    assert r.returncode == 0, r.stderr
    r = run_vcli("hosts", "list", "--format=value(name,address)", env=env)
    assert r.returncode == 0 and r.stdout == "ok1\t10.0.0.6\n", r.stderr


_SLOW_IMPORT = '''
import sys, time

class _Slow:
    """Holds `import vcli.cli.custom_jobs` for 3 s: Ctrl-C lands while vcli's modules import."""
    def find_spec(self, name, path=None, target=None):
        if name == "vcli.cli.custom_jobs":
            print("importing", file=sys.stderr, flush=True)
            time.sleep(3)
        return None

sys.meta_path.insert(0, _Slow())
'''


def test_ctrl_c_while_vcli_imports_is_one_line_and_exit_130(tmp_path):
    # It was a KeyboardInterrupt traceback from `from vcli.cli import run`, and death by SIGINT.
    import signal

    (tmp_path / "sitecustomize.py").write_text(_SLOW_IMPORT)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO_ROOT)]), VCLI_HOME=str(tmp_path / "h"))
    proc = subprocess.Popen([sys.executable, "-m", "vcli", "custom-jobs", "list"], env=env, stderr=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stderr.readline() == "importing\n"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert (proc.returncode, err) == (130, "ERROR: (vcli) Interrupted.\n")


def test_an_exception_vcli_does_not_expect_is_one_line_exit_70_its_traceback_kept(tmp_path, monkeypatch, capsys):
    """A bug in vcli printed Python's traceback (exit 1); now one line naming it and the file
    holding the traceback. Exits a command chooses (a failed job's 6) pass through."""
    import typer

    from vcli.cli.support import command

    monkeypatch.setenv("VCLI_HOME", str(tmp_path / "home"))

    @command("hp-tuning-jobs.create")
    def buggy() -> None:
        raise OverflowError("cannot convert float infinity to integer")

    @command("custom-jobs.create")
    def failed_job() -> None:
        raise typer.Exit(6)

    with pytest.raises(typer.Exit) as e:
        buggy()
    assert e.value.exit_code == 70
    err = capsys.readouterr().err
    head = ("ERROR: (vcli.hp-tuning-jobs.create) internal error, a bug in vcli: OverflowError: cannot convert float "
            "infinity to integer; its traceback is in ")
    assert err.startswith(head) and err.count("\n") == 1, err
    kept = err[len(head):].strip()
    assert os.path.dirname(kept) == str(tmp_path / "home" / "crashes")
    text = open(kept, encoding="utf-8").read()
    assert text.startswith("Traceback") and "in buggy" in text
    with pytest.raises(typer.Exit) as e:
        failed_job()
    assert e.value.exit_code == 6 and capsys.readouterr().err == ""


def test_a_missing_extra_is_said_one_way(monkeypatch) -> None:
    """Every feature that needs an extra raises `MissingExtraError`: one message shape, exit
    code 9, the install command for the Python running vcli (or `pipx inject` with the extra's
    packages under pipx); the packages are pyproject.toml's, and no other module spells an
    install command of its own."""
    import re
    import sys
    import tomllib

    from vcli.errors import EXTRA_PACKAGES, ExitCode, MissingExtraError, install_command

    extras = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert {k: tuple(extras[k]) for k in EXTRA_PACKAGES} == EXTRA_PACKAGES
    assert extras["insight"] == ["vcli[plot,export,tensorboard,mlflow]"]
    e = MissingExtraError("Drawing plots", "plot", "matplotlib")
    assert e.exit_code == ExitCode.MISSING_EXTRA == 9
    assert str(e) == f"Drawing plots needs matplotlib, which the [plot] extra installs: {sys.executable} -m pip install 'vcli[plot]'"
    monkeypatch.setattr(sys, "prefix", "/home/u/.local/pipx/venvs/vcli")
    assert install_command("plot") == "pipx inject vcli 'matplotlib>=3.8' 'scikit-learn>=1.3' 'numpy>=1.26'"
    import ast

    spelled = []
    for path in sorted((REPO_ROOT / "vcli").rglob("*.py")):
        if path.name == "errors.py":
            continue
        tree = ast.parse(path.read_text())
        docs = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
        spelled += [f"{path.relative_to(REPO_ROOT)}:{n.lineno}" for n in ast.walk(tree)
                    if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
                    and re.search(r"pip install '?vcli\[|pip install (pyarrow|optuna|tensorboard)\b", n.value)]
    assert not spelled, spelled  # messages only: docstrings may name the extra

"""gcloud's flags on vcli (issue 14): every flag `gcloud ai custom-jobs|hp-tuning-jobs create |
list | describe | cancel | stream-logs` accept parses, in every position gcloud allows;
`--flags-file` round-trips; `--project`/`--region` name the resources printed; the cloud-only
flags are named in one notice line.

Parsing is checked in process through typer's CliRunner (the real app, a few ms a run): a
flag vcli rejects is a usage error (exit 2); an accepted one lets the command run to its
normal end: `--validate-only` for create (0), an empty store for list (0), and "not found"
(4) for describe / cancel / stream-logs of an unknown id.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.helpers import job_id_from_stderr, vcli
from vcli.cli import app

EXE = "us-docker.pkg.dev/vertex-ai/training/tf-cpu.2-4:latest"
POOL = f"--worker-pool-spec=machine-type=n1-standard-4,executor-image-uri={EXE},python-module=trainer.task"
STUDY = f"""
displayName: toy
studySpec:
  metrics:
  - metricId: accuracy
    goal: MAXIMIZE
  parameters:
  - parameterId: lr
    doubleValueSpec: {{minValue: 0.001, maxValue: 0.1}}
trialJobSpec:
  workerPoolSpecs:
  - machineSpec: {{machineType: n1-standard-4}}
    replicaCount: 1
    pythonPackageSpec:
      executorImageUri: {EXE}
      pythonModule: trainer.task
"""
UNKNOWN = "1234567890"

#: gcloud's wide flags (`{dir}` is a folder of the test's own): each must parse anywhere.
WIDE_FLAGS = [
    ["--project=my-project"],
    ["--project", "my-project"],
    ["--quiet"],
    ["-q"],
    ["--verbosity=debug"],
    ["--verbosity", "info"],
    ["--flags-file={dir}/wide.yaml"],
    ["--account=someone@example.com"],
    ["--billing-project=billing"],
    ["--configuration=default"],
    ["--impersonate-service-account=sa@my-project.iam.gserviceaccount.com"],
    ["--access-token-file={dir}/token"],
    ["--log-http"],
    ["--no-log-http"],
    ["--user-output-enabled"],
    ["--no-user-output-enabled"],
    ["--trace-token=token"],
]

#: (group, command) -> (the arguments that make it run to its normal end, that exit code).
COMMANDS = {
    ("custom-jobs", "create"): (["--display-name=j", POOL, "--validate-only"], 0),
    ("custom-jobs", "list"): ([], 0),
    ("custom-jobs", "describe"): ([UNKNOWN], 4),
    ("custom-jobs", "cancel"): ([UNKNOWN], 4),
    ("custom-jobs", "stream-logs"): ([UNKNOWN], 4),
    ("hp-tuning-jobs", "create"): (["--display-name=s", "--config={dir}/study.yaml", "--validate-only"], 0),
    ("hp-tuning-jobs", "list"): ([], 0),
    ("hp-tuning-jobs", "describe"): ([UNKNOWN], 4),
    ("hp-tuning-jobs", "cancel"): ([UNKNOWN], 4),
    ("hp-tuning-jobs", "stream-logs"): ([UNKNOWN], 4),
}

#: The commands' own gcloud flags (reference §1.2, §3.1), given after the command.
CREATE_CLOUD = [
    ["--service-account=sa@my-project.iam.gserviceaccount.com"],
    ["--network=projects/12345/global/networks/vpc"],
    ["--enable-web-access"],
    ["--enable-dashboard-access"],
    ["--kms-key=projects/p/locations/l/keyRings/r/cryptoKeys/k"],
    ["--kms-key-name=projects/p/locations/l/keyRings/r/cryptoKeys/k"],
    ["--kms-key=k", "--kms-keyring=r", "--kms-location=l", "--kms-project=p"],
]
OWN_FLAGS = {
    ("custom-jobs", "create"): [
        ["--region=us-central1"], ["--labels=team=x"], ["--args=--epochs=1"], ["--command=python3,-m,trainer.task"],
        ["--python-package-uris={dir}/pkg.tar.gz"], ["--persistent-resource-id=pr"], ["--format=json"],
        ["--config={dir}/job.yaml"], *CREATE_CLOUD,
    ],
    ("hp-tuning-jobs", "create"): [
        ["--region=us-central1"], ["--labels=team=x"], ["--max-trial-count=2"], ["--parallel-trial-count=1"],
        ["--algorithm=random-search"], ["--format=json"], *CREATE_CLOUD,
    ],
    **{(group, "list"): [["--region=us-central1"], ["--filter=state=JOB_STATE_RUNNING"], ["--limit=5"],
                         ["--page-size=10"], ["--sort-by=~createTime"], ["--uri"], ["--format=json"]]
       for group in ("custom-jobs", "hp-tuning-jobs")},
    **{(group, "describe"): [["--region=us-central1"], ["--format=json"]] for group in ("custom-jobs", "hp-tuning-jobs")},
    **{(group, "cancel"): [["--region=us-central1"], ["--async"]] for group in ("custom-jobs", "hp-tuning-jobs")},
    **{(group, "stream-logs"): [["--region=us-central1"], ["--polling-interval=5"], ["--task-name=workerpool0-0"],
                                ["--allow-multiline-logs"]]
       for group in ("custom-jobs", "hp-tuning-jobs")},
}

POSITIONS = ["before the group", "after the group", "after the command"]


@pytest.fixture
def files(tmp_path: Path, vcli_home: Path) -> Path:
    """The files the flags name, in a folder of their own."""
    d = tmp_path / "files"
    d.mkdir()
    (d / "wide.yaml").write_text("--verbosity: info\n")
    (d / "token").write_text("not-a-token\n")
    (d / "pkg.tar.gz").write_bytes(b"")  # a packageUris entry must exist (checked at --validate-only)
    (d / "study.yaml").write_text(STUDY)
    (d / "job.yaml").write_text(textwrap.dedent(f"""
        workerPoolSpecs:
        - machineSpec: {{machineType: n1-standard-4}}
          replicaCount: 1
          pythonPackageSpec: {{executorImageUri: {EXE}, pythonModule: trainer.task}}
        """))
    return d


def run(*argv: str):
    """The real `vcli` app, in process; stdout and stderr apart."""
    return CliRunner().invoke(app, list(argv), catch_exceptions=False)


def _place(group: str, command: str, base: list[str], flag: list[str], position: str) -> list[str]:
    if position == "before the group":
        return [*flag, group, command, *base]
    if position == "after the group":
        return [group, *flag, command, *base]
    return [group, command, *base, *flag]


def _expect(result, code: int) -> None:
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
    if code == 4:
        assert f"[{UNKNOWN}] was not found" in result.stderr


@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("flag", WIDE_FLAGS, ids=lambda f: " ".join(f))
@pytest.mark.parametrize("group,command", list(COMMANDS), ids=lambda x: x)
def test_wide_flag_parses_in_every_position(files: Path, group: str, command: str, flag: list[str], position: str) -> None:
    base, code = COMMANDS[(group, command)]
    base = [a.format(dir=files) for a in base]
    flag = [a.format(dir=files) for a in flag]
    _expect(run(*_place(group, command, base, flag, position)), code)


@pytest.mark.parametrize(
    "group,command,flag",
    [(g, c, f) for (g, c), flags in OWN_FLAGS.items() for f in flags],
    ids=lambda x: " ".join(x) if isinstance(x, list) else x,
)
def test_command_flag_parses(files: Path, group: str, command: str, flag: list[str]) -> None:
    base, code = COMMANDS[(group, command)]
    base = [a.format(dir=files) for a in base]
    _expect(run(group, command, *base, *[a.format(dir=files) for a in flag]), code)


def test_all_wide_flags_at_once_in_all_positions(files: Path) -> None:
    argv = ["--project=p", "-q", "custom-jobs", "--verbosity=debug", "--account=a@b.c", "create",
            "--display-name=j", POOL, "--validate-only", "--billing-project=b", "--trace-token=t"]
    _expect(run(*argv), 0)


def test_an_unknown_flag_is_still_refused(files: Path) -> None:
    r = run("custom-jobs", "list", "--projekt=p")
    assert r.exit_code == 2 and "--projekt" in r.stderr


# --------------------------------------------------------------------------- what they do


def _resolved(*argv: str) -> dict:
    r = run(*argv, "--validate-only", "--format=json")
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def test_cloud_only_flags_are_recorded_in_the_job_spec(files: Path) -> None:
    job = _resolved("custom-jobs", "create", "--display-name=j", POOL, "--enable-web-access", "--enable-dashboard-access",
                    "--persistent-resource-id=pr", "--service-account=sa@p.iam.gserviceaccount.com", "--network=net")
    spec = job["jobSpec"]
    assert spec["enableWebAccess"] is True and spec["enableDashboardAccess"] is True
    assert spec["persistentResourceId"] == "pr" and spec["serviceAccount"] == "sa@p.iam.gserviceaccount.com"
    assert spec["network"] == "net"
    study = _resolved("hp-tuning-jobs", "create", f"--config={files}/study.yaml", "--enable-web-access",
                      "--service-account=sa@p.iam.gserviceaccount.com", "--network=net")
    trial = study["trialJobSpec"]
    assert trial["enableWebAccess"] is True and trial["serviceAccount"] == "sa@p.iam.gserviceaccount.com"
    assert trial["network"] == "net"


def test_a_kms_key_is_recorded_as_the_jobs_encryption_spec(files: Path) -> None:
    job = _resolved("custom-jobs", "create", "--display-name=j", POOL, "--kms-key=k", "--kms-keyring=r",
                    "--kms-location=l", "--kms-project=p")
    assert job["encryptionSpec"] == {"kmsKeyName": "projects/p/locations/l/keyRings/r/cryptoKeys/k"}
    study = _resolved("hp-tuning-jobs", "create", f"--config={files}/study.yaml",
                      "--kms-key-name=projects/p/locations/l/keyRings/r/cryptoKeys/k2")
    assert study["encryptionSpec"] == {"kmsKeyName": "projects/p/locations/l/keyRings/r/cryptoKeys/k2"}
    r = run("custom-jobs", "create", "--display-name=j", POOL, "--kms-key=k", "--validate-only")
    errors = [line for line in r.stderr.splitlines() if not line.startswith("Note:")]
    assert r.exit_code == 1 and len(errors) == 1 and "--kms-keyring, --kms-location, --kms-project" in errors[0]


@pytest.mark.parametrize("argv", [
    ["--format=value(name)", "custom-jobs", "list"],
    ["custom-jobs", "--format=value(name)", "list"],
    ["custom-jobs", "list", "--format=value(name)"],
])
def test_format_parses_before_and_after_the_command(files: Path, argv: list[str]) -> None:
    created = run("custom-jobs", "create", "--display-name=j",
                  "--worker-pool-spec=machine-type=n1-standard-4,replica-count=1,container-image-uri=x",
                  "--command=true", "--format=value(name)")
    assert created.exit_code == 0, created.stderr
    r = run(*argv)
    assert r.exit_code == 0, r.stderr
    assert r.stdout.strip() == created.stdout.strip().splitlines()[-1]


def test_flatten_gives_one_record_per_list_item(files: Path) -> None:
    pool = "--worker-pool-spec=machine-type=n1-standard-4,replica-count=1,container-image-uri=x"
    created = run("custom-jobs", "create", "--display-name=j", pool, pool, "--command=true", "--format=value(name.basename())")
    assert created.exit_code == 0, created.stderr
    job_id = created.stdout.strip().splitlines()[-1]
    for argv in (["custom-jobs", "describe", job_id, "--flatten=replicas"], ["--flatten=replicas", "custom-jobs", "list"]):
        r = run(*argv, "--format=value(name.basename(),replicas.taskName,replicas.exitCode)")
        assert r.exit_code == 0, r.stderr
        assert r.stdout.splitlines() == [f"{job_id}\tworkerpool0-0\t0", f"{job_id}\tworkerpool1-0\t0"]


@pytest.mark.parametrize("argv, line", [
    (["custom-jobs", "list", "--bogus"], "ERROR: (vcli.custom-jobs.list) unrecognized arguments: --bogus"),
    (["--bogus", "custom-jobs", "list"], "ERROR: (vcli) unrecognized arguments: --bogus"),
    (["custom-jobs", "describe"], "ERROR: (vcli.custom-jobs.describe) argument JOB: Must be specified."),
    (["custom-jobs", "lst"], "ERROR: (vcli.custom-jobs) No such command 'lst'."),
])
def test_usage_errors_are_one_line(files: Path, argv: list[str], line: str) -> None:
    r = run(*argv)
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and r.stderr.startswith(line), r.stderr


def _notes(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("Note:")]


def test_one_notice_line_names_the_flags_without_local_effect(files: Path) -> None:
    r = run("--account=a@b.c", "custom-jobs", "create", "--display-name=j", POOL, "--validate-only",
            "--kms-key-name=projects/p/locations/l/keyRings/r/cryptoKeys/k", "--enable-web-access")
    assert r.exit_code == 0, r.stderr
    assert _notes(r.stderr) == ["Note: --account, --kms-key-name, --enable-web-access have no effect on local runs."]
    r = run("hp-tuning-jobs", "list", "--log-http")
    assert _notes(r.stderr) == ["Note: --log-http has no effect on local runs."]
    # Flags that do something here (or nothing, as gcloud) are not named; no flags, no notice.
    r = run("--project=p", "custom-jobs", "list", "-q", "--verbosity=info", "--region=us-central1", "--page-size=5")
    assert r.exit_code == 0 and _notes(r.stderr) == []


def test_no_user_output_silences_status_lines_but_not_errors_or_output(files: Path) -> None:
    r = run("--no-user-output-enabled", "custom-jobs", "create", "--display-name=j", POOL, "--validate-only", "--format=json")
    assert r.exit_code == 0 and r.stderr == "", r.stderr
    assert json.loads(r.stdout)["displayName"] == "j"
    loud = run("custom-jobs", "create", "--display-name=j", POOL, "--validate-only", "--format=json")
    assert "The job is valid" in loud.stderr
    r = run("custom-jobs", "describe", UNKNOWN, "--no-user-output-enabled")
    assert r.exit_code == 4 and r.stderr.startswith("ERROR: (vcli.custom-jobs.describe)"), r.stderr


def test_the_notice_names_flags_from_a_flags_file(files: Path) -> None:
    (files / "cloud.yaml").write_text("--billing-project: b\n--network: net\n")
    r = run("custom-jobs", "create", "--display-name=j", POOL, "--validate-only", f"--flags-file={files}/cloud.yaml")
    assert _notes(r.stderr) == ["Note: --billing-project, --network have no effect on local runs."]


def test_the_notice_names_config_fields_without_local_effect(files: Path) -> None:
    # Vertex fields vcli accepts but does not model, and recorded cloud-only ones, are named
    # by their path in one line; fields that do something, false booleans and UNSPECIFIED
    # enums are not.
    (files / "cloud-job.yaml").write_text(textwrap.dedent(f"""
        workerPoolSpecs:
        - machineSpec: {{machineType: n1-standard-4, tpuTopology: 2x2}}
          replicaCount: 1
          nfsMounts: [{{server: s, path: /p, mountPoint: m}}]
          pythonPackageSpec: {{executorImageUri: {EXE}, pythonModule: trainer.task}}
        serviceAccount: sa@p.iam.gserviceaccount.com
        enableWebAccess: false
        """))
    r = run("custom-jobs", "create", "--display-name=j", f"--config={files}/cloud-job.yaml", "--validate-only")
    assert r.exit_code == 0, r.stderr
    assert _notes(r.stderr) == ["Note: [--config] workerPoolSpecs[0].machineSpec.tpuTopology, workerPoolSpecs[0].nfsMounts, "
                                "serviceAccount have no effect on local runs."]
    study = STUDY.replace("studySpec:\n", "studySpec:\n  observationNoise: HIGH\n", 1)
    assert study != STUDY
    (files / "noisy.yaml").write_text(study + "encryptionSpec: {kmsKeyName: k}\nlabels: {team: ml}\n")
    r = run("hp-tuning-jobs", "create", f"--config={files}/noisy.yaml", "--validate-only")
    assert r.exit_code == 0, r.stderr
    assert _notes(r.stderr) == ["Note: [--config] studySpec.observationNoise, encryptionSpec have no effect on local runs."]
    (files / "quiet.yaml").write_text(STUDY.replace("studySpec:\n", "studySpec:\n  observationNoise: OBSERVATION_NOISE_UNSPECIFIED\n", 1))
    for argv in ([f"--config={files}/quiet.yaml"], [f"--config={files}/noisy.yaml", "--verbosity=error"]):
        r = run("hp-tuning-jobs", "create", *argv, "--validate-only")
        assert r.exit_code == 0 and _notes(r.stderr) == [], r.stderr
    r = run("custom-jobs", "create", "--display-name=j", f"--config={files}/job.yaml", "--validate-only")
    assert r.exit_code == 0 and _notes(r.stderr) == [], r.stderr


def test_a_default_value_is_named_and_two_stopping_rules_are_refused(files: Path) -> None:
    # defaultValue was stored and used by nothing, silently (Vertex: Vizier only, "not
    # supported by HyperparameterTuningJob"); of two automated-stopping specs, members of one
    # oneof that Vertex's parser refuses, all but one were dropped without a word.
    study = STUDY.replace("{minValue: 0.001, maxValue: 0.1}", "{minValue: 0.001, maxValue: 0.1, defaultValue: 5}")
    assert study != STUDY
    (files / "default.yaml").write_text(study)
    r = run("hp-tuning-jobs", "create", f"--config={files}/default.yaml", "--validate-only")
    assert r.exit_code == 0, r.stderr
    assert _notes(r.stderr) == ["Note: [--config] studySpec.parameters[0].doubleValueSpec.defaultValue has no effect on "
                                "local runs."]  # 5 is outside [0.001, 0.1]: not a configuration to run
    (files / "used.yaml").write_text(STUDY.replace("{minValue: 0.001, maxValue: 0.1}",
                                                   "{minValue: 0.001, maxValue: 0.1, defaultValue: 0.01}"))
    r = run("hp-tuning-jobs", "create", f"--config={files}/used.yaml", "--validate-only")
    assert r.exit_code == 0 and _notes(r.stderr) == [], r.stderr  # every parameter's default: trial 1 runs them
    cases = {"  medianAutomatedStoppingSpec: {}\n  decayCurveStoppingSpec: {}\n":
             "medianAutomatedStoppingSpec, decayCurveStoppingSpec",
             "  ashaStoppingSpec: {reductionFactor: 2}\n  decayCurveStoppingSpec: {}\n":  # named in Vertex's field order
             "decayCurveStoppingSpec, ashaStoppingSpec"}
    for rules, named in cases.items():
        (files / "two.yaml").write_text(STUDY.replace("studySpec:\n", "studySpec:\n" + rules, 1))
        r = run("hp-tuning-jobs", "create", f"--config={files}/two.yaml", "--validate-only")
        assert r.exit_code == 1, r.stderr
        assert r.stderr.splitlines()[-1].endswith(f"at [studySpec]: only one of [{named}] may be set: they are one "
                                                  "choice of StudySpec"), r.stderr


def test_verbosity_after_the_command_shows_tracebacks(files: Path) -> None:
    r = run("custom-jobs", "describe", UNKNOWN, "--verbosity=debug")
    assert r.exit_code == 4 and "Traceback" in r.stderr
    r = run("custom-jobs", "--verbosity=debug", "describe", UNKNOWN, "--verbosity=warning")  # the last one wins
    assert r.exit_code == 4 and "Traceback" not in r.stderr


def test_flags_file_round_trips(files: Path) -> None:
    """A YAML file of flags resolves to the same job as the same flags on the command line."""
    wps = [f"machine-type=n1-standard-4,executor-image-uri={EXE},python-module=trainer.task",
           f"machine-type=n1-standard-4,replica-count=2,executor-image-uri={EXE},python-module=trainer.task"]
    (files / "flags.yaml").write_text(textwrap.dedent(f"""
        --display-name: from-file
        --worker-pool-spec:
        - machine-type: n1-standard-4
          executor-image-uri: {EXE}
          python-module: trainer.task
        - {wps[1]}
        --args: [--lr=0.1, "--layers=64,32"]
        --labels: {{team: x, env: dev}}
        --enable-web-access:
        --service-account: sa@p.iam.gserviceaccount.com
        """))
    from_file = _resolved("custom-jobs", "create", f"--flags-file={files}/flags.yaml")
    by_hand = _resolved("custom-jobs", "create", "--display-name=from-file", *[f"--worker-pool-spec={w}" for w in wps],
                        "--args=^|^--lr=0.1|--layers=64,32", "--labels=team=x,env=dev", "--enable-web-access",
                        "--service-account=sa@p.iam.gserviceaccount.com")
    assert from_file == by_hand
    assert from_file["jobSpec"]["workerPoolSpecs"][0]["pythonPackageSpec"]["args"] == ["--lr=0.1", "--layers=64,32"]
    assert [p["replicaCount"] for p in from_file["jobSpec"]["workerPoolSpecs"]] == ["1", "2"]
    # Before the group, too; and a flags file may name another (gcloud's nesting).
    (files / "outer.yaml").write_text(f"--flags-file: {files}/flags.yaml\n")
    assert _resolved("--flags-file", f"{files}/outer.yaml", "custom-jobs", "create") == from_file


def test_the_command_line_overrides_the_flags_file(files: Path) -> None:
    (files / "flags.yaml").write_text(textwrap.dedent(f"""
        --display-name: from-file
        --worker-pool-spec:
        - machine-type=n1-standard-4,executor-image-uri={EXE},python-module=trainer.task
        - machine-type=n1-standard-4,replica-count=3,executor-image-uri={EXE},python-module=trainer.task
        --args: --from-file
        --verbosity: debug
        """))
    # Whichever side of the file's flag the command line's stands on, and for a repeated flag
    # (--worker-pool-spec: the command line's pools replace the file's, not add to them).
    for flags_first in (True, False):
        own = ["--display-name=mine", POOL, "--args=--mine"]
        flags_file = [f"--flags-file={files}/flags.yaml"]
        job = _resolved("custom-jobs", "create", *(flags_file + own if flags_first else own + flags_file))
        assert job["displayName"] == "mine"
        assert len(job["jobSpec"]["workerPoolSpecs"]) == 1
        assert job["jobSpec"]["workerPoolSpecs"][0]["pythonPackageSpec"]["args"] == ["--mine"]
    # A wide flag given before the group also beats the file.
    (files / "debug.yaml").write_text("--verbosity: debug\n")
    r = run("custom-jobs", "describe", UNKNOWN, f"--flags-file={files}/debug.yaml")
    assert r.exit_code == 4 and "Traceback" in r.stderr
    r = run("--verbosity=warning", "custom-jobs", "describe", UNKNOWN, f"--flags-file={files}/debug.yaml")
    assert r.exit_code == 4 and "Traceback" not in r.stderr


@pytest.mark.parametrize(
    "text,fragment",
    [
        (None, "file [{path}] does not exist."),
        ("[1, 2]\n", "must be a mapping of --flag: value"),
        ("display-name: x\n", "[display-name] is not a flag name (write it as --display-name)"),
        ("--display-name: [unclosed\n", "is not valid YAML or JSON"),
        ("--flags-file: {path}\n", "includes itself"),
    ],
)
def test_a_bad_flags_file_is_one_error_line(files: Path, text: str | None, fragment: str) -> None:
    path = files / "bad.yaml"
    if text is not None:
        path.write_text(text.format(path=path))
    r = run("custom-jobs", "list", f"--flags-file={path}")
    assert r.exit_code == 1, r.stderr
    assert r.stderr.startswith("ERROR: (vcli.custom-jobs.list) Invalid value for [--flags-file]: ")
    assert fragment.format(path=path) in r.stderr and len(r.stderr.splitlines()) == 1


def test_an_unknown_flag_in_a_flags_file_is_refused(files: Path) -> None:
    (files / "typo.yaml").write_text("--projekt: p\n")
    r = run("custom-jobs", "list", f"--flags-file={files}/typo.yaml")
    assert r.exit_code == 2 and "--projekt" in r.stderr


def test_project_and_region_name_the_resources_printed(tmp_path: Path) -> None:
    """A real (tiny) job: create, describe, list and cancel print its name in --project/--region."""
    home = tmp_path / "home"
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "ok.py").write_text("print('ok')\n")
    r = vcli(home, "--project=my-project", "custom-jobs", "create", "--display-name=named",
             f"--worker-pool-spec=machine-type=n1-standard-4,local-package-path={pkg},script=ok.py",
             "--region=us-central1", timeout=120)
    assert r.returncode == 0, r.stderr
    job_id = job_id_from_stderr(r.stderr)
    assert f"CustomJob [projects/my-project/locations/us-central1/customJobs/{job_id}] is submitted" in r.stderr
    r = vcli(home, "custom-jobs", "describe", job_id, "--project=my-project", "--format=json", timeout=60)
    assert json.loads(r.stdout)["name"] == f"projects/my-project/locations/local/customJobs/{job_id}"
    r = vcli(home, "custom-jobs", "describe", job_id, "--format=json", timeout=60)  # the default stays local
    assert json.loads(r.stdout)["name"] == f"projects/local/locations/local/customJobs/{job_id}"
    r = vcli(home, "custom-jobs", "--project=p2", "list", "--uri", "--region=europe-west4", timeout=60)
    assert r.stdout.split() == [f"projects/p2/locations/europe-west4/customJobs/{job_id}"]
    # A name printed with another project still finds the job.
    r = vcli(home, "custom-jobs", "cancel", f"projects/p2/locations/europe-west4/customJobs/{job_id}", "--project=p2",
             timeout=60)
    assert r.returncode == 0 and f"[projects/p2/locations/local/customJobs/{job_id}]" in r.stderr


@pytest.mark.parametrize("group", [(), ("custom-jobs",), ("hp-tuning-jobs",), ("hosts",)], ids=lambda g: " ".join(g) or "vcli")
def test_a_groups_help_shows_its_commands_before_the_wide_flags(group: tuple[str, ...]) -> None:
    """A group's `--help` lists its commands first; gcloud's fourteen wide flags, the same on every
    group and command, follow as one paragraph naming them (each command's `--help` describes
    them), no flag cut in two by the wrapping."""
    r = run(*group, "--help")
    assert r.exit_code == 0, r.output
    out = r.output
    assert out.index("Commands:") < out.index("gcloud's wide flags (every command takes them):")
    wide = out[out.index("gcloud's wide flags"):]
    flags = " ".join(wide.split())
    for flag in ("--project", "--verbosity", "--flags-file", "--log-http", "--impersonate-service-account", "--format",
                 "--flatten", "--trace-token"):
        assert flag in flags, wide
    assert "gcloud: accepted; no effect" not in out  # the descriptions live on the commands' own help
    command = run(*(group or ("custom-jobs",)), "list", "--help")
    assert "--log-http" in command.output and "gcloud: accepted; no effect on local runs." in command.output

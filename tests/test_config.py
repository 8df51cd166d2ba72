"""`--worker-pool-spec` and `--config` decoding, as gcloud does it (gcloud-vertex.md §1.3-1.6, §4).

Most tests call `vcli.codec` directly; a few go through the real CLI (`run_vcli`) for what
only the command wires up: exit codes, `--config=-`, and flags overriding the file.
"""

from __future__ import annotations

import json
import textwrap

import pytest

from vcli import codec as cfg
from vcli.errors import ConfigError, ExitCode, InvalidValueError, UsageError
from vcli.spec import (
    ACCELERATOR_TYPES,
    Algorithm,
    CategoricalValueSpec,
    DiscreteValueSpec,
    DoubleValueSpec,
    IntegerValueSpec,
    ScaleType,
)

IMG = "us-docker.pkg.dev/p/r/trainer:1"
EXE = "us-docker.pkg.dev/vertex-ai/training/tf-cpu.2-4:latest"
WPS = "Invalid value for [--worker-pool-spec]: "

VALID_KEYS = (
    "accelerator-count, accelerator-type, container-image-uri, executor-image-uri, extra-dirs, "
    "extra-packages, local-package-path, machine-type, output-image-uri, python-module, replica-count, "
    "requirements, script"
)


def pools(*values: str):
    """The flag path: parse each `--worker-pool-spec` value, validate, build the pools."""
    return cfg.worker_pools_from_flags([cfg.parse_worker_pool_spec(v) for v in values])


def wps_error(*values: str) -> str:
    with pytest.raises(InvalidValueError) as info:
        pools(*values)
    assert info.value.exit_code == ExitCode.INVALID
    return str(info.value)


@pytest.fixture
def pkg(tmp_path):
    """A local package dir with a module and a script, for `local-package-path`."""
    root = tmp_path / "app"
    (root / "trainer").mkdir(parents=True)
    (root / "trainer" / "__init__.py").write_text("")
    (root / "trainer" / "task.py").write_text("print('hi')\n")
    (root / "run.sh").write_text("echo hi\n")
    (root / "data").mkdir()
    return root


# =========================================================================== flag grammar


def test_exactly_the_13_gcloud_keys():
    assert tuple(sorted(cfg.WORKER_POOL_SPEC_KEYS)) == tuple(VALID_KEYS.split(", "))
    assert len(cfg.WORKER_POOL_SPEC_KEYS) == 13


@pytest.mark.parametrize("key", ["disk-size", "disk-type", "env", "args", "command", "machine_type"])
def test_unknown_key_is_a_usage_error_listing_valid_keys(key):
    with pytest.raises(UsageError) as info:
        cfg.parse_worker_pool_spec(f"machine-type=n1,{key}=1")
    msg = str(info.value)
    assert msg.startswith(f"argument --worker-pool-spec: valid keys are [{VALID_KEYS}]; received: {key}")
    assert info.value.exit_code == ExitCode.USAGE


def test_pair_without_equals_is_bad_dict_syntax():
    with pytest.raises(UsageError) as info:
        cfg.parse_worker_pool_spec("machine-type=n1,oops")
    assert str(info.value).startswith("argument --worker-pool-spec: Bad syntax for dict arg: [oops].")


def test_first_equals_splits_key_and_value_and_semicolon_splits_lists():
    spec = cfg.parse_worker_pool_spec(
        "machine-type=n1,requirements=pandas==2.0;numpy>=1.26,extra-packages=a.tar.gz;b.whl,extra-dirs=data;conf"
    )
    assert spec == {
        "machine-type": "n1",
        "requirements": ["pandas==2.0", "numpy>=1.26"],
        "extra-packages": ["a.tar.gz", "b.whl"],
        "extra-dirs": ["data", "conf"],
    }
    # A value may itself contain '=' (only the first one splits).
    assert cfg.parse_worker_pool_spec("machine-type=n1,container-image-uri=img?a=b")["container-image-uri"] == "img?a=b"


def test_requirements_reach_the_local_package(pkg):
    (pool,) = pools(f"machine-type=n1,local-package-path={pkg},python-module=trainer.task,requirements=pandas==2.0;scipy")
    assert pool.local_package.requirements == ("pandas==2.0", "scipy")
    assert pool.local_package.python_module == "trainer.task"
    assert pool.local_package.path == str(pkg)


def test_defaults_replica_count_1_and_no_accelerator():
    (pool,) = pools(f"machine-type=n1-standard-4,container-image-uri={IMG}")
    assert pool.replica_count == 1
    assert pool.machine_spec.machine_type == "n1-standard-4"
    assert pool.machine_spec.accelerator_type is None
    assert pool.machine_spec.accelerator_count == 0
    assert pool.container_spec.image_uri == IMG
    assert pool.python_package_spec is None


def test_accelerator_count_defaults_to_1_only_with_a_type():
    (pool,) = pools(f"machine-type=n1,accelerator-type=NVIDIA_TESLA_T4,container-image-uri={IMG}")
    assert (pool.machine_spec.accelerator_type, pool.machine_spec.accelerator_count) == ("NVIDIA_TESLA_T4", 1)
    (pool,) = pools(f"machine-type=n1,accelerator-type=NVIDIA_L4,accelerator-count=4,container-image-uri={IMG}")
    assert (pool.machine_spec.accelerator_type, pool.machine_spec.accelerator_count) == ("NVIDIA_L4", 4)


def test_accelerator_names_are_the_v1_enum():
    expected = {
        "NVIDIA_TESLA_K80", "NVIDIA_TESLA_P100", "NVIDIA_TESLA_V100", "NVIDIA_TESLA_P4", "NVIDIA_TESLA_T4",
        "NVIDIA_TESLA_A100", "NVIDIA_A100_80GB", "NVIDIA_L4", "NVIDIA_H100_80GB", "NVIDIA_H100_MEGA_80GB",
        "NVIDIA_H200_141GB", "NVIDIA_B200", "NVIDIA_GB200", "NVIDIA_RTX_PRO_6000", "TPU_V2", "TPU_V3",
        "TPU_V4_POD", "TPU_V5_LITEPOD",
    }
    assert set(ACCELERATOR_TYPES) == expected
    for name in ("TPU_V2", "NVIDIA_H100_MEGA_80GB"):
        (pool,) = pools(f"machine-type=n1,accelerator-type={name},container-image-uri={IMG}")
        assert pool.machine_spec.accelerator_type == name


def test_python_package_spec_from_executor_image():
    (pool,) = pools(f"machine-type=e2-standard-4,executor-image-uri={EXE},python-module=trainer.task")
    assert pool.container_spec is None
    assert pool.python_package_spec.executor_image_uri == EXE
    assert pool.python_package_spec.python_module == "trainer.task"


def test_empty_placeholder_pools_for_pools_1_to_3():
    p = pools(
        f"machine-type=n1,container-image-uri={IMG}",
        "",
        f"machine-type=n1,replica-count=2,container-image-uri={IMG}",
        "",
    )
    assert len(p) == 4
    assert [x.replica_count for x in p] == [1, 0, 2, 0]
    assert p[1].is_empty and p[3].is_empty and not p[2].is_empty
    assert cfg.custom_job_spec_to_dict(cfg.CustomJobSpec(worker_pool_specs=p))["workerPoolSpecs"][1] == {}


def test_local_package_is_shared_by_every_pool(pkg):
    p = pools(
        f"machine-type=n1,local-package-path={pkg},script=run.sh,extra-dirs=data",
        "machine-type=n1,replica-count=3",
    )
    assert p[0].local_package is p[1].local_package or p[0].local_package == p[1].local_package
    assert p[1].local_package.script == "run.sh"
    assert p[1].replica_count == 3


# --------------------------------------------------------------------------- §1.5 texts, verbatim


def test_first_spec_empty():
    assert wps_error("", f"machine-type=n1,container-image-uri={IMG}") == (
        WPS + "Empty value is not allowed for the first `--worker-pool-spec` flag."
    )


def test_missing_machine_type():
    assert wps_error(f"container-image-uri={IMG}") == WPS + "Key [machine-type] required in dict arg but not provided."


def test_hardware_of_every_spec_is_checked_before_software():
    # gcloud checks machine-type/accelerators of all specs first (spec 0 has no image here).
    assert wps_error("machine-type=n1", "replica-count=2") == (
        WPS + "Key [machine-type] required in dict arg but not provided."
    )


def test_accelerator_count_without_type():
    assert wps_error(f"machine-type=n1,accelerator-count=2,container-image-uri={IMG}") == (
        WPS + "Key [accelerator-type] required as [accelerator-count] is specified."
    )


def test_bad_accelerator_name_lists_sorted_names():
    msg = wps_error(f"machine-type=n1,accelerator-type=nvidia_tesla_t4,container-image-uri={IMG}")
    assert msg == (
        WPS + "Found invalid value of [accelerator-type]: nvidia_tesla_t4. "
        f"Available values are [{', '.join(sorted(ACCELERATOR_TYPES))}]."
    )
    assert "ACCELERATOR_TYPE_UNSPECIFIED" not in msg
    assert "ACCELERATOR_TYPE_UNSPECIFIED" in wps_error(
        f"machine-type=n1,accelerator-type=ACCELERATOR_TYPE_UNSPECIFIED,container-image-uri={IMG}"
    )


@pytest.mark.parametrize(
    "value",
    [
        "machine-type=n1",
        f"machine-type=n1,container-image-uri={IMG},executor-image-uri={EXE},python-module=m",
        "machine-type=n1,python-module=m",
    ],
)
def test_exactly_one_image_kind(value):
    assert wps_error(value) == WPS + "Exactly one of keys [executor-image-uri, container-image-uri] is required."


def test_python_module_with_container_image():
    assert wps_error(f"machine-type=n1,container-image-uri={IMG},python-module=m") == (
        WPS + "Key [python-module] is not allowed together with key [container-image-uri]."
    )


def test_executor_image_without_python_module():
    assert wps_error(f"machine-type=n1,executor-image-uri={EXE}") == WPS + "Key [python-module] is required."


@pytest.mark.parametrize("module", [".task", ".", "x./etc", "a b", "trainer..task", "1st.task"])
def test_a_python_module_that_python_m_cannot_run_is_refused(pkg, tmp_path, module):
    # `x./etc` joined to the package path gave /etc, which exists: "found"; `.task` failed only
    # once the replica ran ("Relative module names not supported").
    why = f"Key [python-module] must be a Python module name (dotted identifiers, such as trainer.task), received: [{module}]."
    assert wps_error(f"machine-type=n1,executor-image-uri={EXE},python-module={module}") == WPS + why
    assert wps_error(f"machine-type=n1,local-package-path={pkg},python-module={module}") == WPS + why
    msg = config_error(tmp_path, f"""
        workerPoolSpecs:
          - machineSpec: {{machineType: n1-standard-4}}
            pythonPackageSpec: {{executorImageUri: "python:3", pythonModule: "{module}"}}
        """)
    assert msg.endswith(f"at [workerPoolSpecs[0].pythonPackageSpec.pythonModule]: must be a Python module name "
                        f"(dotted identifiers, such as trainer.task), received: [{module}]"), msg


def test_numbers_in_string_fields_reach_the_trainer_as_written(tmp_path):
    # They went through float and back: `2.10` became 2.1, `1e3` 1000.0 (int() refuses it),
    # `1e-400` 0.0 and `1e999` inf, in YAML and in JSON alike.
    args = ["--version", "2.10", "--steps", "1e3", "--eps", "1e-400", "--big", "1e999", "--hex", "0x1F", "--z", "007"]
    for name, text in (("job.yaml", "args: [" + ", ".join(args) + "]"),
                       ("job.json", "args: [" + ", ".join(a if a[0] != "-" else f'"{a}"' for a in args) + "]")):
        spec = load(tmp_path, f"""
            workerPoolSpecs:
              - machineSpec: {{machineType: n1-standard-4}}
                containerSpec:
                  imageUri: python:3
                  {text}
                  env: [{{name: A, value: 0.10}}]
                replicaCount: 1
            """, name)
        cs = spec.worker_pool_specs[0].container_spec
        assert list(cs.args) == args and cs.env[0].value == "0.10"
        assert type(spec.worker_pool_specs[0].replica_count) is int


def test_local_only_keys_without_local_package_path():
    assert wps_error(f"machine-type=n1,container-image-uri={IMG},script=x.py,requirements=a;b,extra-dirs=d") == (
        WPS + "Keys [extra-dirs, requirements, script] are not allowed: Only allow to specify together with "
        "`local-package-path` in the first `--worker-pool-spec` flag."
    )
    # Same rule in a later pool, and for extra-packages.
    assert wps_error(
        f"machine-type=n1,container-image-uri={IMG}",
        f"machine-type=n1,executor-image-uri={EXE},python-module=m,extra-packages=p.whl",
    ) == (
        WPS + "Keys [extra-packages] are not allowed: Only allow to specify together with "
        "`local-package-path` in the first `--worker-pool-spec` flag."
    )


def test_local_package_path_only_in_first_spec(pkg):
    assert wps_error(
        f"machine-type=n1,container-image-uri={IMG}",
        f"machine-type=n1,local-package-path={pkg},python-module=trainer.task",
    ) == WPS + "Key [local-package-path] is only allowed in the first `--worker-pool-spec` flag."


def test_software_keys_elsewhere_when_first_pool_has_a_local_package(pkg):
    assert wps_error(
        f"machine-type=n1,local-package-path={pkg},python-module=trainer.task",
        f"machine-type=n1,replica-count=2,python-module=other,container-image-uri={IMG}",
    ) == (
        WPS + "Keys [container-image-uri, python-module] are not allowed: A local package has been specified in "
        "the first `--worker-pool-spec` flag and to be used for all workers, do not specify these keys elsewhere."
    )


def test_local_package_dir_missing(tmp_path):
    missing = tmp_path / "nope"
    assert wps_error(f"machine-type=n1,local-package-path={missing},python-module=m") == (
        WPS + f"Directory '{missing}' is not found."
    )


def test_local_package_dir_is_made_absolute(pkg, monkeypatch):
    monkeypatch.chdir(pkg.parent)
    assert wps_error("machine-type=n1,local-package-path=nope,python-module=m") == (
        WPS + f"Directory '{pkg.parent / 'nope'}' is not found."
    )


@pytest.mark.parametrize("software", ["", "python-module=trainer.task,script=run.sh"])
def test_exactly_one_of_python_module_or_script(pkg, software):
    value = f"machine-type=n1,local-package-path={pkg}" + (f",{software}" if software else "")
    assert wps_error(value) == (
        WPS + "Exactly one of keys [python-module, script] is required when `local-package-path` is specified."
    )


def test_non_integer_replica_count_is_a_usage_error():
    with pytest.raises(UsageError) as info:
        cfg.parse_worker_pool_spec(f"machine-type=n1,replica-count=two,container-image-uri={IMG}")
    assert info.value.exit_code == ExitCode.USAGE
    assert "replica-count" in str(info.value) and "two" in str(info.value)
    with pytest.raises(UsageError) as info:
        cfg.parse_worker_pool_spec("machine-type=n1,accelerator-type=NVIDIA_L4,accelerator-count=one")
    assert "accelerator-count" in str(info.value) and "a share of a GPU, such as 0.5" in str(info.value)
    # A fraction parses (a share of a GPU; executors that cannot share one refuse it, tests/test_ray.py).
    assert cfg.parse_worker_pool_spec("machine-type=n1,accelerator-type=NVIDIA_L4,accelerator-count=1.5")["accelerator-count"] == 1.5
    assert type(cfg.parse_worker_pool_spec("machine-type=n1,accelerator-type=NVIDIA_L4,accelerator-count=2")["accelerator-count"]) is int


@pytest.mark.parametrize("key,value", [("replica-count", "0"), ("replica-count", "-1"), ("accelerator-count", "0"), ("accelerator-count", "-2")])
def test_zero_or_negative_counts_are_invalid_values(key, value):
    extra = "accelerator-type=NVIDIA_L4," if key == "accelerator-count" else ""
    specs = [f"machine-type=n1,container-image-uri={IMG}", f"machine-type=n1,{extra}{key}={value},container-image-uri={IMG}"]
    msg = wps_error(*specs)
    assert msg.startswith(WPS) and f"[{key}]" in msg and value in msg


def test_alternate_delimiter_in_args():
    assert cfg.split_arg_list("^:^--layers=64,32:--epochs=5") == ["--layers=64,32", "--epochs=5"]
    assert cfg.split_arg_list("--lr=0.1,--epochs=5") == ["--lr=0.1", "--epochs=5"]
    assert cfg.split_arg_list("") == []


def test_args_and_command_replace_on_every_pool():
    p = pools(
        f"machine-type=n1,container-image-uri={IMG}",
        f"machine-type=n1,replica-count=2,executor-image-uri={EXE},python-module=trainer.task",
    )
    spec = cfg.CustomJobSpec(worker_pool_specs=p)
    out = cfg.apply_args_and_command(spec, args=["--a=1", "--b"], command=["python3", "-m", "x"])
    assert out.worker_pool_specs[0].container_spec.args == ("--a=1", "--b")
    assert out.worker_pool_specs[0].container_spec.command == ("python3", "-m", "x")
    assert out.worker_pool_specs[1].python_package_spec.args == ("--a=1", "--b")


# =========================================================================== --config decoding


def write(tmp_path, text: str, name: str = "job.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def load(tmp_path, text: str, name: str = "job.yaml"):
    return cfg.load_custom_job_spec(write(tmp_path, text, name))


def config_error(tmp_path, text: str, name: str = "job.yaml") -> str:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, text, name)
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith("Invalid value for [--config]: ")
    assert info.value.exit_code == ExitCode.INVALID
    return msg


def test_camel_case_custom_job_spec(tmp_path, vcli_home):
    spec = load(
        tmp_path,
        f"""
        workerPoolSpecs:
          - machineSpec:
              machineType: a2-highgpu-1g
              acceleratorType: NVIDIA_TESLA_A100
              acceleratorCount: 2
            replicaCount: 1
            diskSpec:
              bootDiskType: pd-ssd
              bootDiskSizeGb: 200
            containerSpec:
              imageUri: {IMG}
              command: ["python", "-m", "trainer.task"]
              args: ["--epochs=10", "--batch_size=64"]
              env:
                - name: NCCL_DEBUG
                  value: INFO
          - machineSpec:
              machineType: n1-standard-8
            replicaCount: 3
            pythonPackageSpec:
              executorImageUri: {EXE}
              packageUris: ["gs://b/p.tar.gz"]
              pythonModule: trainer.task
          - {{}}
        baseOutputDirectory:
          outputUriPrefix: {tmp_path}/out
        scheduling:
          timeout: 86400s
          restartJobOnWorkerRestart: true
          strategy: STANDARD
        serviceAccount: sa@p.iam.gserviceaccount.com
        enableWebAccess: false
        """,
    )
    p0, p1, p2 = spec.worker_pool_specs
    assert p0.machine_spec.accelerator_type == "NVIDIA_TESLA_A100" and p0.machine_spec.accelerator_count == 2
    assert p0.disk_spec.boot_disk_size_gb == 200
    assert p0.container_spec.command == ("python", "-m", "trainer.task")
    assert p0.container_spec.args == ("--epochs=10", "--batch_size=64")
    assert [(e.name, e.value) for e in p0.container_spec.env] == [("NCCL_DEBUG", "INFO")]
    assert p1.replica_count == 3 and p1.python_package_spec.python_module == "trainer.task"
    assert p1.python_package_spec.package_uris == (f"{vcli_home}/gcs/b/p.tar.gz",)  # gs:// on the storage root
    assert p2.is_empty
    assert spec.base_output_directory == f"{tmp_path}/out"
    assert spec.scheduling.timeout_seconds == 86400
    assert spec.scheduling.restart_job_on_worker_restart is True
    assert spec.service_account == "sa@p.iam.gserviceaccount.com"


def test_json_is_accepted(tmp_path):
    doc = {"workerPoolSpecs": [{"machineSpec": {"machineType": "n1"}, "replicaCount": "1", "containerSpec": {"imageUri": IMG}}]}
    spec = load(tmp_path, json.dumps(doc), "job.json")
    assert spec.worker_pool_specs[0].container_spec.image_uri == IMG


def test_single_mapping_where_a_list_is_expected(tmp_path):
    spec = load(
        tmp_path,
        f"""
        workerPoolSpecs:
          machineSpec:
            machineType: n1
          replicaCount: 1
          containerSpec:
            imageUri: {IMG}
            args: --epochs=3
            command: python3
        """,
    )
    (pool,) = spec.worker_pool_specs
    assert pool.container_spec.args == ("--epochs=3",)
    assert pool.container_spec.command == ("python3",)


def test_int64_from_numeric_strings_and_durations(tmp_path):
    spec = load(
        tmp_path,
        f"""
        workerPoolSpecs:
          - machineSpec: {{machineType: n1}}
            replicaCount: '1'
            containerSpec: {{imageUri: {IMG}}}
          - machineSpec: {{machineType: n1, acceleratorType: NVIDIA_L4, acceleratorCount: '2'}}
            replicaCount: "4"
            containerSpec: {{imageUri: {IMG}}}
        scheduling:
          timeout: 8000s
        """,
    )
    assert [p.replica_count for p in spec.worker_pool_specs] == [1, 4]
    assert spec.worker_pool_specs[1].machine_spec.accelerator_count == 2
    assert spec.scheduling.timeout_seconds == 8000.0
    assert "expected an integer" in config_error(
        tmp_path, f"workerPoolSpecs: [{{machineSpec: {{machineType: n1}}, replicaCount: 'one', containerSpec: {{imageUri: {IMG}}}}}]"
    )
    msg = config_error(
        tmp_path, f"workerPoolSpecs: [{{machineSpec: {{machineType: n1}}, containerSpec: {{imageUri: {IMG}}}}}]\nscheduling: {{timeout: 2h}}"
    )
    assert "[scheduling.timeout]" in msg and "expected a duration" in msg and "[2h]" in msg


def test_exponent_numbers_are_numbers():
    assert cfg.parse_yaml("a: 1e-5\nb: 2E3\nc: '1e-5'", "x") == {"a": 1e-5, "b": 2000.0, "c": "1e-5"}


def test_underscore_key_names_field_path_and_camel_case(tmp_path):
    msg = config_error(
        tmp_path,
        f"""
        workerPoolSpecs:
          - machine_spec: {{machineType: n1}}
            containerSpec: {{imageUri: {IMG}}}
        """,
    )
    assert "[workerPoolSpecs[0].machine_spec]" in msg and "[machineSpec]" in msg
    msg = config_error(tmp_path, f"worker_pool_specs: [{{machineSpec: {{machineType: n1}}, containerSpec: {{imageUri: {IMG}}}}}]")
    assert "[worker_pool_specs]" in msg and "[workerPoolSpecs]" in msg


def test_unknown_field_names_its_full_path(tmp_path):
    msg = config_error(
        tmp_path,
        f"""
        workerPoolSpecs:
          - machineSpec: {{machineType: n1, foo: 1}}
            containerSpec: {{imageUri: {IMG}}}
        """,
    )
    assert "[workerPoolSpecs[0].machineSpec.foo]" in msg
    assert "unknown field of MachineSpec. Valid fields: [" in msg and "machineType" in msg
    # A near miss gets a suggestion.
    msg = config_error(tmp_path, f"workerPoolSpecs: [{{machineSpec: {{machineType: n1}}, containerSpec: {{imageUri: {IMG}, arg: [x]}}}}]")
    assert "[workerPoolSpecs[0].containerSpec.arg]" in msg and "did you mean [args]" in msg


@pytest.mark.parametrize(
    "text,line,column",
    [
        ("workerPoolSpecs: [a, b\n", 2, 1),
        ("workerPoolSpecs:\n  - machineSpec: {machineType: n1}\n\tcontainerSpec: x\n", 3, 1),
        ("a: b: c\n", 1, 5),
    ],
)
def test_malformed_yaml_is_one_line_with_line_and_column(tmp_path, text, line, column):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        cfg.load_custom_job_spec(path)
    msg = str(info.value)
    assert "\n" not in msg
    assert path in msg and f"line {line}, column {column}" in msg


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError) as info:
        cfg.load_custom_job_spec(str(tmp_path / "none.yaml"))
    assert "none.yaml" in str(info.value) and "does not exist" in str(info.value)


def test_gs_output_uri_maps_under_the_storage_root(tmp_path, vcli_home):
    spec = load(
        tmp_path,
        f"""
        workerPoolSpecs: [{{machineSpec: {{machineType: n1}}, containerSpec: {{imageUri: {IMG}}}}}]
        baseOutputDirectory: {{outputUriPrefix: gs://bucket/runs/}}
        """,
    )
    assert spec.base_output_directory == f"{vcli_home}/gcs/bucket/runs"


def test_other_remote_output_uris_are_refused_clearly(tmp_path):
    msg = config_error(
        tmp_path,
        f"""
        workerPoolSpecs: [{{machineSpec: {{machineType: n1}}, containerSpec: {{imageUri: {IMG}}}}}]
        baseOutputDirectory: {{outputUriPrefix: s3://bucket/runs/}}
        """,
    )
    assert "[baseOutputDirectory.outputUriPrefix]" in msg and "s3://bucket/runs/" in msg
    assert "file://" in msg and "gs://" in msg


def test_file_uri_output_is_accepted(tmp_path):
    spec = load(
        tmp_path,
        f"""
        workerPoolSpecs: [{{machineSpec: {{machineType: n1}}, containerSpec: {{imageUri: {IMG}}}}}]
        baseOutputDirectory: {{outputUriPrefix: "file://{tmp_path}/runs/"}}
        """,
    )
    assert spec.base_output_directory == f"{tmp_path}/runs"


def test_pool_needs_exactly_one_of_container_or_python_package(tmp_path):
    msg = config_error(tmp_path, "workerPoolSpecs: [{machineSpec: {machineType: n1}, replicaCount: 1}]")
    assert msg.endswith(
        "Exactly one of fields [pythonPackageSpec, containerSpec] is required for a [workerPoolSpecs] in the YAML config file."
    )


# --------------------------------------------------------------------------- through the CLI

POOL_ARGS = ["--display-name=j", "--validate-only", "--format=json"]


def _job(result):
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["jobSpec"]


def test_config_from_stdin(run_vcli):
    doc = {
        "workerPoolSpecs": [
            {"machineSpec": {"machineType": "n1"}, "pythonPackageSpec": {"executorImageUri": EXE, "pythonModule": "trainer.task"}},
            {"machineSpec": {"machineType": "n1"}, "replicaCount": 2,
             "pythonPackageSpec": {"executorImageUri": EXE, "pythonModule": "trainer.task"}},
        ]
    }
    job = _job(run_vcli("custom-jobs", "create", *POOL_ARGS, "--config=-", input=json.dumps(doc)))
    assert [p["replicaCount"] for p in job["workerPoolSpecs"]] == ["1", "2"]


def test_flags_override_the_file(run_vcli, tmp_path):
    path = write(
        tmp_path,
        f"""
        workerPoolSpecs:
          - machineSpec: {{machineType: file-machine}}
            pythonPackageSpec: {{executorImageUri: {EXE}, pythonModule: from.file, args: [--file-arg]}}
          - machineSpec: {{machineType: file-machine}}
            replicaCount: 3
            pythonPackageSpec: {{executorImageUri: {EXE}, pythonModule: from.file, args: [--file-arg]}}
        serviceAccount: file@p.iam.gserviceaccount.com
        scheduling: {{timeout: 600s}}
        """,
    )
    # --args replaces args on every pool of the file.
    job = _job(run_vcli("custom-jobs", "create", *POOL_ARGS, f"--config={path}", "--args=^:^--layers=64,32:--epochs=5"))
    assert [p["pythonPackageSpec"]["args"] for p in job["workerPoolSpecs"]] == [["--layers=64,32", "--epochs=5"]] * 2
    assert job["serviceAccount"] == "file@p.iam.gserviceaccount.com"
    # --worker-pool-spec replaces the file's pools; the rest of the file is kept.
    job = _job(run_vcli(
        "custom-jobs", "create", *POOL_ARGS, f"--config={path}",
        f"--worker-pool-spec=machine-type=flag-machine,executor-image-uri={EXE},python-module=from.flag",
    ))
    assert len(job["workerPoolSpecs"]) == 1
    assert job["workerPoolSpecs"][0]["machineSpec"]["machineType"] == "flag-machine"
    assert job["workerPoolSpecs"][0]["pythonPackageSpec"]["pythonModule"] == "from.flag"
    assert "args" not in job["workerPoolSpecs"][0]["pythonPackageSpec"]
    assert job["scheduling"]["timeout"] == "600s"
    assert job["serviceAccount"] == "file@p.iam.gserviceaccount.com"


def test_cli_exit_codes_for_spec_errors(run_vcli):
    r = run_vcli("custom-jobs", "create", "--display-name=j", "--worker-pool-spec=machine-type=n1,disk-size=100")
    assert r.returncode == 2 and f"valid keys are [{VALID_KEYS}]; received: disk-size" in r.stderr
    r = run_vcli("custom-jobs", "create", "--display-name=j", f"--worker-pool-spec=machine-type=n1,replica-count=x,container-image-uri={IMG}")
    assert r.returncode == 2, r.stderr
    r = run_vcli(
        "custom-jobs", "create", "--display-name=j", f"--worker-pool-spec=machine-type=n1,container-image-uri={IMG}",
        f"--worker-pool-spec=machine-type=n1,replica-count=0,container-image-uri={IMG}",
    )
    assert r.returncode == 1, r.stderr


# =========================================================================== hp-tuning documents

HPT_EXAMPLE = """\
displayName: lr-sweep            # replaced by --display-name
maxTrialCount: 20                # --max-trial-count overrides
parallelTrialCount: 4            # --parallel-trial-count overrides
maxFailedTrialCount: 5
studySpec:
  metrics:
    - metricId: accuracy
      goal: MAXIMIZE
  parameters:
    - parameterId: learning_rate
      doubleValueSpec:
        minValue: 0.00001
        maxValue: 0.1
      scaleType: UNIT_LOG_SCALE
    - parameterId: num_layers
      integerValueSpec:
        minValue: 1
        maxValue: 8
      scaleType: UNIT_LINEAR_SCALE
    - parameterId: batch_size
      discreteValueSpec:
        values: [32, 64, 128, 256]
      scaleType: UNIT_LINEAR_SCALE
    - parameterId: optimizer
      categoricalValueSpec:
        values: [adam, sgd]
      conditionalParameterSpecs:
        - parentCategoricalValues:
            values: [sgd]
          parameterSpec:
            parameterId: momentum
            doubleValueSpec:
              minValue: 0.0
              maxValue: 0.99
            scaleType: UNIT_LINEAR_SCALE
  algorithm: ALGORITHM_UNSPECIFIED      # or GRID_SEARCH / RANDOM_SEARCH; --algorithm=grid-search overrides
  measurementSelectionType: BEST_MEASUREMENT
  medianAutomatedStoppingSpec:
    useElapsedDuration: false
trialJobSpec:
  workerPoolSpecs:
    - machineSpec:
        machineType: n1-standard-8
        acceleratorType: NVIDIA_TESLA_T4
        acceleratorCount: 1
      replicaCount: 1
      containerSpec:
        imageUri: us-central1-docker.pkg.dev/my-proj/train/trainer:latest
        args: ["--epochs=20"]
  baseOutputDirectory:
    outputUriPrefix: OUTPUT_URI
"""


def hpt_doc(output: str = "file:///tmp/vcli-hpt/lr-sweep/") -> dict:
    return cfg.parse_yaml(HPT_EXAMPLE.replace("OUTPUT_URI", output), "hpt.yaml")


def hpt_error(doc) -> str:
    with pytest.raises(ConfigError) as info:
        cfg.hp_tuning_job_from_document(doc, "hpt.yaml")
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith("Invalid value for [--config]: hpt.yaml")
    return msg


def params(doc) -> list:
    return doc["studySpec"]["parameters"]


def test_reference_hpt_example_parses():
    spec, display_name, labels = cfg.hp_tuning_job_from_document(hpt_doc(), "hpt.yaml")
    assert display_name == "lr-sweep" and labels == {}
    assert (spec.max_trial_count, spec.parallel_trial_count, spec.max_failed_trial_count) == (20, 4, 5)
    study = spec.study_spec
    assert [m.metric_id for m in study.metrics] == ["accuracy"]
    lr, layers, batch, opt = study.parameters
    assert lr.value_spec == DoubleValueSpec(min_value=1e-5, max_value=0.1) and lr.scale_type == ScaleType.UNIT_LOG_SCALE
    assert layers.value_spec == IntegerValueSpec(min_value=1, max_value=8)
    assert batch.value_spec == DiscreteValueSpec(values=(32.0, 64.0, 128.0, 256.0))
    assert opt.value_spec == CategoricalValueSpec(values=("adam", "sgd"))
    (child,) = opt.conditional_parameter_specs
    assert child.parent_values == ("sgd",) and child.parameter_spec.parameter_id == "momentum"
    assert study.algorithm == Algorithm.ALGORITHM_UNSPECIFIED
    assert spec.trial_job_spec.worker_pool_specs[0].container_spec.args == ("--epochs=20",)
    assert spec.trial_job_spec.base_output_directory == "/tmp/vcli-hpt/lr-sweep"


def test_hpt_exponent_min_value_is_a_number():
    doc = hpt_doc()
    text = "minValue: 1e-5\nmaxValue: 1e-1\n"
    params(doc)[0]["doubleValueSpec"] = cfg.parse_yaml(text, "x")
    spec, _, _ = cfg.hp_tuning_job_from_document(doc, "hpt.yaml")
    assert spec.study_spec.parameters[0].value_spec.min_value == 1e-5


def test_hpt_gs_output_maps_under_the_storage_root(vcli_home):
    spec, _, _ = cfg.hp_tuning_job_from_document(hpt_doc("gs://my-bucket/hpt/lr-sweep/"), "hpt.yaml")
    assert spec.trial_job_spec.base_output_directory == f"{vcli_home}/gcs/my-bucket/hpt/lr-sweep"


def test_hpt_remote_output_is_refused():
    msg = hpt_error(hpt_doc("s3://my-bucket/hpt/lr-sweep/"))
    assert "trialJobSpec.baseOutputDirectory.outputUriPrefix" in msg


def test_hpt_min_greater_than_max():
    doc = hpt_doc()
    params(doc)[1]["integerValueSpec"] = {"minValue": 9, "maxValue": 8}
    msg = hpt_error(doc)
    assert "studySpec.parameters[1].integerValueSpec" in msg and "minValue (9)" in msg and "maxValue (8)" in msg


@pytest.mark.parametrize("low", [0.0, -1.0])
def test_hpt_log_scale_needs_positive_bounds(low):
    doc = hpt_doc()
    params(doc)[0]["doubleValueSpec"]["minValue"] = low
    msg = hpt_error(doc)
    assert "studySpec.parameters[0].scaleType" in msg and "UNIT_LOG_SCALE" in msg and "positive" in msg


def test_hpt_empty_categorical_list():
    doc = hpt_doc()
    params(doc)[3]["categoricalValueSpec"]["values"] = []
    del params(doc)[3]["conditionalParameterSpecs"]
    assert "studySpec.parameters[3].categoricalValueSpec.values" in hpt_error(doc)


@pytest.mark.parametrize("values", [[64, 32, 128], [32, 32, 64]])
def test_hpt_discrete_values_must_increase(values):
    doc = hpt_doc()
    params(doc)[2]["discreteValueSpec"]["values"] = values
    msg = hpt_error(doc)
    assert "studySpec.parameters[2].discreteValueSpec.values" in msg and "increasing" in msg


def test_hpt_duplicate_parameter_id():
    doc = hpt_doc()
    params(doc)[1]["parameterId"] = "learning_rate"
    msg = hpt_error(doc)
    assert "studySpec.parameters[1].parameterId" in msg and "duplicate" in msg and "learning_rate" in msg
    # A conditional child may not reuse a top-level id either.
    doc = hpt_doc()
    params(doc)[3]["conditionalParameterSpecs"][0]["parameterSpec"]["parameterId"] = "num_layers"
    assert "duplicate parameterId [num_layers]" in hpt_error(doc)


def test_hpt_metric_id_with_whitespace():
    doc = hpt_doc()
    doc["studySpec"]["metrics"][0]["metricId"] = "top 1 accuracy"
    msg = hpt_error(doc)
    assert "studySpec.metrics[0].metricId" in msg and "whitespace" in msg


def test_hpt_grid_search_over_double():
    doc = hpt_doc()
    doc["studySpec"]["algorithm"] = "GRID_SEARCH"
    msg = hpt_error(doc)
    assert "studySpec.algorithm" in msg and "GRID_SEARCH" in msg and "[learning_rate] is DOUBLE" in msg
    # A conditional DOUBLE child counts too.
    del params(doc)[0]
    assert "[momentum] is DOUBLE" in hpt_error(doc)


def test_hpt_grid_search_without_doubles_is_fine():
    doc = hpt_doc()
    doc["studySpec"]["algorithm"] = "GRID_SEARCH"
    doc["studySpec"]["parameters"] = params(doc)[1:3]
    spec, _, _ = cfg.hp_tuning_job_from_document(doc, "hpt.yaml")
    assert spec.study_spec.algorithm == Algorithm.GRID_SEARCH


def test_hpt_conditional_parent_values_must_be_in_parent_domain():
    doc = hpt_doc()
    params(doc)[3]["conditionalParameterSpecs"][0]["parentCategoricalValues"]["values"] = ["rmsprop"]
    msg = hpt_error(doc)
    assert "studySpec.parameters[3].conditionalParameterSpecs[0].parentCategoricalValues.values" in msg
    assert "[rmsprop]" in msg and "[optimizer]" in msg
    # Integer parent: out of [1, 8].
    doc = hpt_doc()
    params(doc)[1]["conditionalParameterSpecs"] = [
        {"parentIntValues": {"values": [2, 9]},
         "parameterSpec": {"parameterId": "width", "integerValueSpec": {"minValue": 1, "maxValue": 4}}}
    ]
    assert "[9] is not in the domain of the parent parameter [num_layers]" in hpt_error(doc)
    # Discrete parent: 100 is not one of the values.
    doc = hpt_doc()
    params(doc)[2]["conditionalParameterSpecs"] = [
        {"parentDiscreteValues": {"values": [64, 100]},
         "parameterSpec": {"parameterId": "accum", "integerValueSpec": {"minValue": 1, "maxValue": 4}}}
    ]
    assert "[100" in hpt_error(doc)


@pytest.mark.parametrize(
    "mutate,path,camel",
    [
        (lambda d: params(d)[0]["doubleValueSpec"].update(min_value=0.1), "studySpec.parameters[0].doubleValueSpec.min_value", "minValue"),
        (lambda d: d.update(max_trial_count=3), "max_trial_count", "maxTrialCount"),
        (lambda d: d["trialJobSpec"]["workerPoolSpecs"][0].update(replica_count=1), "trialJobSpec.workerPoolSpecs[0].replica_count", "replicaCount"),
    ],
)
def test_hpt_underscore_keys_name_their_path(mutate, path, camel):
    doc = hpt_doc()
    mutate(doc)
    msg = hpt_error(doc)
    assert f"[{path}]" in msg and f"[{camel}]" in msg


def test_hpt_unknown_key_names_its_path():
    doc = hpt_doc()
    params(doc)[3]["conditionalParameterSpecs"][0]["parameterSpec"]["doubleValueSpec"]["step"] = 0.1
    msg = hpt_error(doc)
    assert "[studySpec.parameters[3].conditionalParameterSpecs[0].parameterSpec.doubleValueSpec.step]" in msg
    assert "unknown field of DoubleValueSpec" in msg


def test_plain_scalars_follow_yaml_1_2_core_schema(tmp_path):
    # YAML 1.1 would turn these into booleans, 90, 8 and a date; Vertex's JSON has no such types.
    spec = load(
        tmp_path,
        f"""
        workerPoolSpecs:
          - machineSpec: {{machineType: n1}}
            containerSpec:
              imageUri: {IMG}
              args: [--amp, on, --resume, no, --every, 1:30, --since, 2024-01-01, --lr, 1e-5]
              env: [{{name: TF_ENABLE_ONEDNN_OPTS, value: off}}]
        enableWebAccess: true
        """,
    )
    cs = spec.worker_pool_specs[0].container_spec
    assert cs.args[:8] == ("--amp", "on", "--resume", "no", "--every", "1:30", "--since", "2024-01-01")
    assert cs.args[9] in ("1e-5", "1e-05")
    assert cs.env[0].value == "off"
    assert spec.enable_web_access is True
    assert cfg.parse_yaml("[0o17, 0x1F, 009, -5, .inf, true, null]", "x") == [15, 31, 9, -5, float("inf"), True, None]


def test_the_python_property_is_the_interpreter_of_local_modules(tmp_path):
    """`vcli config set python PATH` is what the local executor runs `python -m` with (it was
    accepted and ignored); a path that is not a Python 3 interpreter is refused when set."""
    import sys

    from tests.helpers import vcli

    home = tmp_path / "home"
    marker = tmp_path / "used"
    python = tmp_path / "my-python"
    python.write_text(f"#!/bin/sh\necho yes > {marker}\nexec {sys.executable} \"$@\"\n")
    python.chmod(0o755)
    bad = vcli(home, "config", "set", "python", str(tmp_path / "missing"))
    assert bad.returncode != 0 and "is not an executable file" in bad.stderr and bad.stderr.count("\n") == 1
    true = vcli(home, "config", "set", "python", "/bin/true")  # taken: every job SUCCEEDED without its trainer
    assert true.returncode != 0 and "[/bin/true] is not a Python 3 interpreter" in true.stderr, true.stderr
    assert true.stderr.count("\n") == 1
    assert vcli(home, "config", "set", "python", str(python)).returncode == 0
    marker.unlink()  # `set` ran it once, to check it
    pkg = tmp_path / "pkg"
    (pkg / "trainer").mkdir(parents=True)
    (pkg / "trainer" / "__init__.py").write_text("")
    (pkg / "trainer" / "task.py").write_text("print('trained')\n")
    r = vcli(home, "custom-jobs", "create", "--display-name=p",
             f"--worker-pool-spec=machine-type=n1-standard-4,executor-image-uri=x,local-package-path={pkg},"
             "python-module=trainer.task", "--executor=local", timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert marker.read_text().strip() == "yes"

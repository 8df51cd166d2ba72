"""gs:// locations on the storage root (`storage/gcs-root`), and CLUSTER_SPEC's Vertex-only job.

End to end with real processes and the real Docker engine through the CLI: a job whose base
output directory, package URI and args are gs:// URIs runs against files under the root, and
a container sees the root at /gcs as Vertex's Cloud Storage FUSE shows buckets. The codec
and the Docker mounts are also checked directly.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers import REPO, job_id_from_stderr, vcli, vcli_env
from vcli import codec, properties
from vcli.codec import Decoder, gcs
from vcli.errors import ConfigError, InvalidValueError
from vcli.executors import Placement, ReplicaLaunch
from vcli.executors.docker.container import container_create_kwargs
from vcli.spec import ReplicaId

#: Reads the file its --data arg names, writes a model to $AIP_MODEL_DIR, and reports what it
#: saw (the job inside CLUSTER_SPEC, /gcs) as one JSON line.
TRAINER = textwrap.dedent("""
    import json, os, sys
    args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:] if "=" in a)
    with open(args["data"]) as f:
        data = f.read().strip()
    os.makedirs(os.environ["AIP_MODEL_DIR"], exist_ok=True)
    model = os.path.join(os.environ["AIP_MODEL_DIR"], "model.txt")
    with open(model, "w") as f:
        f.write("trained on " + data)
    fuse = "/gcs/my-bucket/run1/model/model.txt"
    print("REPORT " + json.dumps({
        "data_arg": args["data"],
        "model_dir": os.environ["AIP_MODEL_DIR"],
        "pool0": json.loads(os.environ["CLUSTER_SPEC"])["job"]["workerPoolSpecs"][0],
        "fuse_model": open(fuse).read() if os.path.exists(fuse) else None,
        "fuse_data": open("/gcs/my-bucket/data/in.txt").read().strip() if os.path.exists("/gcs/my-bucket") else None,
    }), flush=True)
""")


def _report(stdout: str) -> dict:
    [line] = [ln for ln in stdout.splitlines() if "REPORT " in ln]
    return json.loads(line.split("REPORT ", 1)[1])


def _root_with_data(tmp_path: Path) -> Path:
    root = tmp_path / "storage"
    (root / "my-bucket" / "data").mkdir(parents=True)
    (root / "my-bucket" / "data" / "in.txt").write_text("digits\n")
    return root


def _set_root(home: Path, root: Path) -> None:
    r = vcli(home, "config", "set", "storage/gcs-root", str(root), timeout=60)
    assert r.returncode == 0, r.stderr


# --------------------------------------------------------------------------- end to end


def _sdist(tmp_path: Path) -> Path:
    """A `setup.py sdist` of a `trainer` package whose `trainer.task` is TRAINER."""
    src = tmp_path / "src"
    (src / "trainer").mkdir(parents=True)
    (src / "trainer" / "__init__.py").write_text("")
    (src / "trainer" / "task.py").write_text(TRAINER)
    (src / "setup.py").write_text("from setuptools import setup\nsetup(name='trainer', version='0.1', packages=['trainer'])\n")
    subprocess.run([sys.executable, "setup.py", "-q", "sdist", "--formats=gztar"], cwd=src, check=True,
                   capture_output=True, timeout=120)
    return src / "dist" / "trainer-0.1.tar.gz"


def test_gs_package_output_and_args_map_to_the_storage_root_for_processes(tmp_path: Path) -> None:
    root = _root_with_data(tmp_path)
    (root / "my-bucket" / "pkgs").mkdir()
    shutil.copy(_sdist(tmp_path), root / "my-bucket" / "pkgs" / "trainer-0.1.tar.gz")
    config = tmp_path / "job.yaml"
    config.write_text(textwrap.dedent("""
        workerPoolSpecs:
          - machineSpec: {machineType: n1-standard-4}
            replicaCount: 1
            pythonPackageSpec:
              executorImageUri: us-docker.pkg.dev/vertex-ai/training/tf-cpu.2-12.py310:latest
              packageUris: [gs://my-bucket/pkgs/trainer-0.1.tar.gz]
              pythonModule: trainer.task
              args: [--data=gs://my-bucket/data/in.txt]
        baseOutputDirectory: {outputUriPrefix: gs://my-bucket/run1}
        """))
    home = tmp_path / "home"
    _set_root(home, root)
    # Run from an empty directory with only vcli importable: the trainer comes from the package.
    shim, empty = tmp_path / "vcli-only", tmp_path / "empty"
    shim.mkdir()
    empty.mkdir()
    (shim / "vcli").symlink_to(REPO / "vcli")
    env = vcli_env(home)
    env["PYTHONPATH"] = str(shim)
    r = subprocess.run([sys.executable, "-m", "vcli", "custom-jobs", "create", "--executor=local", "--display-name=gs",
                        f"--config={config}"], cwd=empty, env=env, capture_output=True, text=True, timeout=300,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (root / "my-bucket" / "run1" / "model" / "model.txt").read_text() == "trained on digits"
    report = _report(r.stdout)
    assert report["model_dir"] == f"{root}/my-bucket/run1/model/"
    fuse = "/gcs" if os.path.isdir("/gcs") else str(root)
    assert report["data_arg"] == f"{fuse}/my-bucket/data/in.txt"
    assert report["pool0"]["pythonPackageSpec"]["packageUris"] == [f"{root}/my-bucket/pkgs/trainer-0.1.tar.gz"]


@pytest.mark.docker
def test_gs_output_is_visible_at_gcs_in_a_container(tmp_path: Path) -> None:
    from tests.harness.docker_env import ensure_docker

    client = ensure_docker()
    root = _root_with_data(tmp_path)
    config = tmp_path / "job.yaml"
    config.write_text(textwrap.dedent(f"""
        workerPoolSpecs:
          - machineSpec: {{machineType: n1-standard-4}}
            replicaCount: 1
            containerSpec:
              imageUri: vcli-base:bookworm
              command: [python3, -c, {json.dumps(TRAINER)}]
              args: [--data=gs://my-bucket/data/in.txt]
        baseOutputDirectory: {{outputUriPrefix: gs://my-bucket/run1/}}
        """))
    home = tmp_path / "home"
    _set_root(home, root)
    r = vcli(home, "custom-jobs", "create", "--executor=docker", "--display-name=gs", f"--config={config}", timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (root / "my-bucket" / "run1" / "model" / "model.txt").read_text() == "trained on digits"
    report = _report(r.stdout)
    assert report["model_dir"] == f"{root}/my-bucket/run1/model/"  # the same path inside and out
    assert report["fuse_model"] == "trained on digits"  # and the root is at /gcs, as on Vertex
    assert report["fuse_data"] == "digits"
    job_id = job_id_from_stderr(r.stderr)
    assert not client.containers.list(all=True, filters={"label": f"vcli.job={job_id}"})


def test_cluster_spec_job_has_no_vcli_only_fields(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "task.py").write_text(
        "import json, os\nprint('POOL0 ' + json.dumps(json.loads(os.environ['CLUSTER_SPEC'])['job']['workerPoolSpecs'][0]))\n"
    )
    home = tmp_path / "home"
    r = vcli(home, "custom-jobs", "create", "--executor=local", "--display-name=clean",
             f"--worker-pool-spec=machine-type=n1-standard-4,replica-count=1,executor-image-uri=python:3.12,"
             f"local-package-path={pkg},script=task.py", timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    [line] = [ln for ln in r.stdout.splitlines() if "POOL0 " in ln]
    pool0 = json.loads(line.split("POOL0 ", 1)[1])
    assert "localPackage" not in pool0 and "containerSpec" not in pool0
    assert pool0["machineSpec"] == {"machineType": "n1-standard-4"} and pool0["replicaCount"] == "1"


# --------------------------------------------------------------------------- the codec


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("VCLI_CONFIG_DIR", str(tmp_path / "config"))
    properties.set_("storage/gcs-root", str(tmp_path / "storage"))
    return tmp_path / "storage"


def _decode(text: str):
    decoder = Decoder("job.yaml")
    return codec.custom_job_spec_from_dict(decoder.decode_message(codec.parse_yaml(text, "job.yaml"), codec.CustomJobSpec, ""), decoder)


def test_decoding_maps_every_gs_location(root: Path) -> None:
    spec = _decode(textwrap.dedent("""
        workerPoolSpecs:
          - machineSpec: {machineType: n1}
            pythonPackageSpec:
              executorImageUri: img
              pythonModule: trainer.task
              packageUris: [gs://b/pkgs/t.tar.gz, /local/t2.tar.gz]
              args: [--train=gs://b/data/train.csv, "--files=gs://b/x,gs://c/y", gs://b/plain, --url=https://gs://no, --n=1]
        baseOutputDirectory: {outputUriPrefix: gs://b/runs/one/}
        """))
    fuse = "/gcs" if os.path.isdir("/gcs") else str(root)
    ps = spec.worker_pool_specs[0].python_package_spec
    assert spec.base_output_directory == f"{root}/b/runs/one"
    assert ps.package_uris == (f"{root}/b/pkgs/t.tar.gz", "/local/t2.tar.gz")
    assert ps.args == (f"--train={fuse}/b/data/train.csv", f"--files={fuse}/b/x,{fuse}/c/y", f"{fuse}/b/plain",
                       "--url=https://gs://no", "--n=1")
    # Decoding a stored record again changes nothing (the spec holds local paths only).
    assert codec.custom_job_spec_from_stored(codec.custom_job_spec_to_dict(spec)) == spec
    assert codec.gcs_mappings(spec) == [
        ("gs://b/runs/one", f"{root}/b/runs/one"),
        ("gs://b/pkgs/t.tar.gz", f"{root}/b/pkgs/t.tar.gz"),
        ("gs://b/data/train.csv", f"{root}/b/data/train.csv"),
        ("gs://b/x", f"{root}/b/x"),
        ("gs://c/y", f"{root}/c/y"),
        ("gs://b/plain", f"{root}/b/plain"),
    ]
    notice = codec.gcs_notice(spec)
    assert notice is not None and "\n" not in notice
    assert f"gs://b/runs/one -> {root}/b/runs/one" in notice and "storage/gcs-root" in notice and "/gcs" in notice


def test_flags_map_gs_package_uris_and_args(root: Path) -> None:
    pools = codec.worker_pools_from_flags([codec.parse_worker_pool_spec(
        "machine-type=n1,executor-image-uri=img,python-module=trainer.task")])
    spec = codec.apply_args_and_command(codec.CustomJobSpec(worker_pool_specs=pools), args=["--data=gs://b/d"],
                                        command=None, python_package_uris=["gs://b/p.tar.gz"])
    ps = spec.worker_pool_specs[0].python_package_spec
    fuse = "/gcs" if os.path.isdir("/gcs") else str(root)
    assert ps.package_uris == (f"{root}/b/p.tar.gz",) and ps.args == (f"--data={fuse}/b/d",)
    with pytest.raises(InvalidValueError, match="--python-package-uris"):
        codec.apply_args_and_command(codec.CustomJobSpec(worker_pool_specs=pools), args=None, command=None,
                                     python_package_uris=["gs://"])


def test_a_gs_uri_without_a_bucket_is_refused_with_its_field(root: Path) -> None:
    with pytest.raises(ConfigError, match=r"baseOutputDirectory.outputUriPrefix.*names no bucket"):
        _decode("workerPoolSpecs: [{machineSpec: {machineType: n1}, containerSpec: {imageUri: i}}]\n"
                "baseOutputDirectory: {outputUriPrefix: 'gs:///'}\n")


def test_the_default_root_is_under_the_vcli_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VCLI_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("VCLI_HOME", str(tmp_path / "home"))
    assert codec.storage_root() == str(tmp_path / "home" / "gcs")
    monkeypatch.chdir(tmp_path)
    properties.set_("storage/gcs-root", "rel/dir")  # stored absolute: later commands run anywhere
    assert properties.get("storage/gcs-root") == str(tmp_path / "rel" / "dir")
    assert gcs.local_path("gs://b/a/../c") == str(tmp_path / "rel" / "dir" / "b" / "c")


def test_cluster_spec_encoding_leaves_out_vcli_fields() -> None:
    pools = codec.worker_pools_from_flags([codec.parse_worker_pool_spec(
        f"machine-type=n1,executor-image-uri=img,local-package-path={REPO / 'tests'},script=helpers.py")])
    spec = codec.CustomJobSpec(worker_pool_specs=pools)
    shown = codec.custom_job_spec_to_dict(spec)["workerPoolSpecs"][0]
    vertex = codec.custom_job_spec_to_dict(spec, vertex_only=True)["workerPoolSpecs"][0]
    assert "localPackage" in shown and shown["containerSpec"] == {}  # describe and the store keep them
    assert vertex == {k: v for k, v in shown.items() if k not in ("localPackage", "containerSpec")}


def _launch(tmp_path: Path, **kw) -> ReplicaLaunch:
    out = str(tmp_path / "out")
    base = dict(job_id="1", trial_id=None, replica=ReplicaId(pool_index=0, index=0), placement=Placement(),
                image_uri="img", command=(), args=(), env={}, workdir=None, output_dir=out,
                log_path=f"{out}/replica.log", metric_file=f"{out}/m")
    return ReplicaLaunch(**{**base, **kw})


def test_containers_get_the_root_at_gcs_only_when_they_name_it(root: Path, tmp_path: Path) -> None:
    assert "mounts" not in container_create_kwargs(_launch(tmp_path, args=("--data=/elsewhere/x",)))
    for launch in (
        _launch(tmp_path, env={"AIP_MODEL_DIR": f"{root}/b/run/model/"}, mounts=(f"{root}/b/run",)),
        _launch(tmp_path, args=("--data=/gcs/b/x",)),
    ):
        mounts = container_create_kwargs(launch)["mounts"]
        assert sorted((m["Target"], m["Source"], m["Type"]) for m in mounts) == sorted(
            [("/gcs", str(root), "bind"), (str(root), str(root), "bind")])

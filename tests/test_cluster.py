"""The Vertex replica environment: CLUSTER_SPEC, TF_CONFIG, AIP_*, PyTorch variables (§5).

Golden files under tests/golden/ hold the complete environment vcli adds to every replica of a
few layouts built with fixed fake addresses. `VCLI_UPDATE_GOLDENS=1` rewrites them; review any
rewrite against gcloud-vertex.md §5 before committing. Independent assertions below restate
the §5 rules so a wrong golden cannot pass silently.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from vcli import cluster
from vcli.codec import custom_job_spec_to_dict
from vcli.control.jobs import plan_job
from vcli.executors.kinds import get_executor
from vcli.spec import ContainerSpec, CustomJobSpec, MachineSpec, PythonPackageSpec, WorkerPoolSpec

GOLDEN_DIR = Path(__file__).parent / "golden"
UPDATE = os.environ.get("VCLI_UPDATE_GOLDENS") == "1"
JOB_PLACEHOLDER = "<CustomJobSpec of the job: checked separately>"


def make_spec(*replica_counts: int, base: str | None = None) -> CustomJobSpec:
    """One container pool per count; 0 is an empty placeholder pool."""
    pools = []
    for i, n in enumerate(replica_counts):
        if n == 0:
            pools.append(WorkerPoolSpec())
        else:
            pools.append(
                WorkerPoolSpec(
                    machine_spec=MachineSpec(machine_type="n1-standard-4"),
                    replica_count=n,
                    container_spec=ContainerSpec(image_uri="trainer:1", command=("python3", "-m", "trainer.task"), args=(f"--pool={i}",)),
                )
            )
    return CustomJobSpec(worker_pool_specs=tuple(pools), base_output_directory=base)


def fake_layout(spec: CustomJobSpec) -> cluster.ClusterLayout:
    """Fixed addresses: replica i of pool p is 10.0.p.(i+1):2222 (one host per replica, as on Vertex)."""
    replicas = cluster.replica_ids(spec)
    return cluster.ClusterLayout(
        addresses={r.task_name: f"10.0.{r.pool_index}.{r.index + 1}:2222" for r in replicas},
        replicas=tuple(replicas),
    )


def environments(spec: CustomJobSpec, trial_id: str | None) -> dict[str, dict]:
    """task name -> the env vcli adds, with CLUSTER_SPEC/TF_CONFIG decoded."""
    layout = fake_layout(spec)
    job = custom_job_spec_to_dict(spec)
    out = {}
    for r in layout.replicas:
        env = cluster.replica_env(
            layout=layout,
            replica=r,
            job=job,
            job_id="1234567890123456789",
            trial_id=trial_id,
            base_output_directory="/vcli/out",
            metric_file=f"/vcli/jobs/1234567890123456789/replicas/{r.task_name}/hypertune/output.metrics",
        )
        decoded = dict(env)
        for key in ("CLUSTER_SPEC", "TF_CONFIG"):
            if key in decoded:
                decoded[key] = json.loads(decoded[key])
                assert decoded[key]["job"] == job, f"{r.task_name} {key}.job is not the job's CustomJobSpec"
                decoded[key]["job"] = JOB_PLACEHOLDER
        out[r.task_name] = decoded
    return out


def dump_golden(data, indent: int = 0) -> str:
    """Sorted, indented JSON with lists of scalars on one line (easier to review)."""

    def dump(obj, level: int) -> str:
        pad = "  " * (level + 1)
        if isinstance(obj, dict) and obj:
            items = [f"{pad}{json.dumps(k)}: {dump(v, level + 1)}" for k, v in sorted(obj.items())]
            return "{\n" + ",\n".join(items) + "\n" + "  " * level + "}"
        if isinstance(obj, list) and any(isinstance(v, (dict, list)) for v in obj):
            return "[\n" + ",\n".join(pad + dump(v, level + 1) for v in obj) + "\n" + "  " * level + "]"
        return json.dumps(obj)

    return dump(data, indent) + "\n"


SCENARIOS = {
    "single_replica": ((1,), None),
    "chief_2_workers": ((1, 2), None),
    "chief_empty_ps": ((1, 0, 2), None),
    "four_pools_evaluator": ((1, 2, 1, 1), None),
    "trial_3": ((1, 1), "3"),
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_golden_environment(name):
    counts, trial = SCENARIOS[name]
    actual = environments(make_spec(*counts), trial)
    path = GOLDEN_DIR / f"cluster_{name}.json"
    if UPDATE:
        GOLDEN_DIR.mkdir(exist_ok=True)
        path.write_text(dump_golden(actual))
    assert path.exists(), f"missing golden {path}; run with VCLI_UPDATE_GOLDENS=1 and review it"
    assert actual == json.loads(path.read_text())


# --------------------------------------------------------------------------- §5 rules, restated


def test_single_replica_has_cluster_spec_but_no_tf_config():
    (env,) = environments(make_spec(1), None).values()
    assert "TF_CONFIG" not in env
    assert env["CLUSTER_SPEC"]["cluster"] == {"workerpool0": ["10.0.0.1:2222"]}
    assert env["CLUSTER_SPEC"]["task"] == {"type": "workerpool0", "index": 0}
    assert "CLOUD_ML_TRIAL_ID" not in env
    assert "MASTER_ADDR" not in env


def test_tf_config_pool_names_and_indices():
    envs = environments(make_spec(1, 2), None)
    assert list(envs) == ["workerpool0-0", "workerpool1-0", "workerpool1-1"]
    for env in envs.values():
        tf = env["TF_CONFIG"]
        assert tf["cluster"] == {"chief": ["10.0.0.1:2222"], "worker": ["10.0.1.1:2222", "10.0.1.2:2222"]}
        assert tf["environment"] == "cloud"
        assert env["CLUSTER_SPEC"]["cluster"] == {"workerpool0": ["10.0.0.1:2222"], "workerpool1": ["10.0.1.1:2222", "10.0.1.2:2222"]}
    assert envs["workerpool0-0"]["TF_CONFIG"]["task"] == {"type": "chief", "index": 0}
    assert envs["workerpool1-1"]["TF_CONFIG"]["task"] == {"type": "worker", "index": 1}
    assert envs["workerpool1-1"]["CLUSTER_SPEC"]["task"] == {"type": "workerpool1", "index": 1}


def test_empty_pool_is_absent():
    envs = environments(make_spec(1, 0, 2), None)
    assert list(envs) == ["workerpool0-0", "workerpool2-0", "workerpool2-1"]
    for env in envs.values():
        assert set(env["TF_CONFIG"]["cluster"]) == {"chief", "ps"}
        assert set(env["CLUSTER_SPEC"]["cluster"]) == {"workerpool0", "workerpool2"}
    assert envs["workerpool2-1"]["TF_CONFIG"]["task"] == {"type": "ps", "index": 1}
    assert envs["workerpool2-1"]["CLUSTER_SPEC"]["task"] == {"type": "workerpool2", "index": 1}


def test_evaluator_is_a_task_type_never_in_cluster():
    envs = environments(make_spec(1, 2, 1, 1), None)
    ev = envs["workerpool3-0"]
    assert ev["TF_CONFIG"]["task"] == {"type": "evaluator", "index": 0}
    for env in envs.values():
        assert "evaluator" not in env["TF_CONFIG"]["cluster"]
        assert set(env["TF_CONFIG"]["cluster"]) == {"chief", "worker", "ps"}
        assert env["CLUSTER_SPEC"]["cluster"]["workerpool3"] == ["10.0.3.1:2222"]
    # PyTorch variables count nodes of pools 0 and 1 only.
    assert "MASTER_ADDR" not in ev and "MASTER_ADDR" not in envs["workerpool2-0"]
    assert [envs[t]["RANK"] for t in ("workerpool0-0", "workerpool1-0", "workerpool1-1")] == ["0", "1", "2"]
    assert {envs[t]["WORLD_SIZE"] for t in ("workerpool0-0", "workerpool1-0", "workerpool1-1")} == {"3"}


def test_trial_environment():
    envs = environments(make_spec(1, 1), "3")
    for env in envs.values():
        assert env["CLUSTER_SPEC"]["task"]["trial"] == "3"
        assert env["TF_CONFIG"]["task"]["trial"] == "3"
        assert env["CLOUD_ML_TRIAL_ID"] == "3"
        assert env["AIP_MODEL_DIR"] == "/vcli/out/3/model/"
        assert env["AIP_CHECKPOINT_DIR"] == "/vcli/out/3/checkpoints/"
        assert env["AIP_TENSORBOARD_LOG_DIR"] == "/vcli/out/3/logs/"
    # Without a trial there is no task.trial and the dirs sit right under the base.
    env = environments(make_spec(1, 1), None)["workerpool1-0"]
    assert "trial" not in env["CLUSTER_SPEC"]["task"] and "trial" not in env["TF_CONFIG"]["task"]
    assert env["AIP_MODEL_DIR"] == "/vcli/out/model/"


def test_job_in_cluster_spec_is_the_camel_case_custom_job_spec():
    spec = make_spec(1, 0, 2)
    layout = fake_layout(spec)
    job = custom_job_spec_to_dict(spec)
    cs = cluster.cluster_spec(layout, layout.replicas[0], job, None)
    assert cs["job"]["workerPoolSpecs"][1] == {}
    assert cs["job"]["workerPoolSpecs"][2]["replicaCount"] == "2"
    assert cs["job"]["workerPoolSpecs"][0]["containerSpec"]["imageUri"] == "trainer:1"


def test_user_env_is_overridden_by_vertex_variables():
    spec = make_spec(1, 1)
    layout = fake_layout(spec)
    env = cluster.replica_env(
        layout=layout, replica=layout.replicas[1], job={}, job_id="j", trial_id=None,
        base_output_directory="/o", metric_file="/m", user_env={"TF_CONFIG": "mine", "MY_VAR": "x"},
    )
    assert env["MY_VAR"] == "x"
    assert json.loads(env["TF_CONFIG"])["task"] == {"type": "worker", "index": 0}


# --------------------------------------------------------------------------- plan_job, local executor


def test_plan_job_with_the_local_executor(tmp_path):
    spec = CustomJobSpec(
        worker_pool_specs=(
            WorkerPoolSpec(machine_spec=MachineSpec(machine_type="n1"), replica_count=1,
                           python_package_spec=PythonPackageSpec(executor_image_uri="x", python_module="trainer.task")),
            WorkerPoolSpec(machine_spec=MachineSpec(machine_type="n1"), replica_count=2,
                           python_package_spec=PythonPackageSpec(executor_image_uri="x", python_module="trainer.task")),
            WorkerPoolSpec(machine_spec=MachineSpec(machine_type="n1"), replica_count=1,
                           python_package_spec=PythonPackageSpec(executor_image_uri="x", python_module="trainer.task")),
        )
    )
    job_dir = tmp_path / "jobs" / "42"
    plan = plan_job(spec, job_id="42", job_dir=job_dir, executor=get_executor("local"))
    launches = {l.task_name: l for l in plan.launches}
    assert list(launches) == ["workerpool0-0", "workerpool1-0", "workerpool1-1", "workerpool2-0"]
    envs = {t: l.env for t, l in launches.items()}

    cs = json.loads(envs["workerpool0-0"]["CLUSTER_SPEC"])
    addresses = [a for pool in ("workerpool0", "workerpool1", "workerpool2") for a in cs["cluster"][pool]]
    assert len(addresses) == 4
    hosts = {a.rpartition(":")[0] for a in addresses}
    ports = [int(a.rpartition(":")[2]) for a in addresses]
    assert hosts == {"127.0.0.1"}
    assert len(set(ports)) == len(ports), f"reserved ports collide: {ports}"
    # Every reserved port can be bound (all at once: they are free and distinct).
    socks = []
    try:
        for port in ports:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(s)
            s.bind(("127.0.0.1", port))
    finally:
        for s in socks:
            s.close()

    chief_host, _, chief_port = cs["cluster"]["workerpool0"][0].rpartition(":")
    for t in ("workerpool0-0", "workerpool1-0", "workerpool1-1"):
        assert envs[t]["MASTER_ADDR"] == chief_host and envs[t]["MASTER_PORT"] == chief_port
        assert envs[t]["WORLD_SIZE"] == "3"
    assert [envs[t]["RANK"] for t in ("workerpool0-0", "workerpool1-0", "workerpool1-1")] == ["0", "1", "2"]
    assert "RANK" not in envs["workerpool2-0"]

    # Every replica sees the same cluster, and TF_CONFIG agrees with CLUSTER_SPEC.
    for env in envs.values():
        other = json.loads(env["CLUSTER_SPEC"])
        assert other["cluster"] == cs["cluster"]
        tf = json.loads(env["TF_CONFIG"])
        assert tf["cluster"] == {"chief": cs["cluster"]["workerpool0"], "worker": cs["cluster"]["workerpool1"], "ps": cs["cluster"]["workerpool2"]}
        assert env["CLOUD_ML_JOB_ID"] == "42"

    metric_files = [env["CLOUD_ML_HP_METRIC_FILE"] for env in envs.values()]
    assert len(set(metric_files)) == len(metric_files)
    for t, l in launches.items():
        assert l.env["CLOUD_ML_HP_METRIC_FILE"] == l.metric_file
        assert Path(l.metric_file).is_relative_to(job_dir) and t in l.metric_file
    assert envs["workerpool0-0"]["AIP_MODEL_DIR"] == f"{job_dir}/output/model/"


def test_plan_job_for_a_trial(tmp_path):
    spec = make_spec(1, 1)
    plan = plan_job(spec, job_id="7", job_dir=tmp_path / "j", executor=get_executor("local"), trial_id="3",
                    base_output_directory=str(tmp_path / "study"))
    for l in plan.launches:
        assert l.env["CLOUD_ML_TRIAL_ID"] == "3"
        assert l.env["AIP_CHECKPOINT_DIR"] == f"{tmp_path}/study/3/checkpoints/"
        assert json.loads(l.env["TF_CONFIG"])["task"]["trial"] == "3"
        assert json.loads(l.env["CLUSTER_SPEC"])["task"]["trial"] == "3"

"""The ssh executor end to end: real sshd in network namespaces, the real CLI, no mocks.

The harness (`tests/harness/netns.py`) gives two or three "hosts" (namespaces with an sshd
each) behind a switch namespace; vcli runs in a controller namespace, so nothing in the root
namespace changes. The hosts share this machine's filesystem and Python (with TensorFlow);
each gets its own working directory, so "on the chief's host" is a directory we can look in.

Needs root, iproute2, openssh-server and paramiko (`.ci/ssh-setup.sh`). Run: pytest -m ssh.
Where that is missing the tests fail, saying what is missing; they never skip silently. To
leave them out on purpose (e.g. a laptop without root), set VCLI_SKIP_SSH_TESTS=1.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from tests.harness import netns
from tests.helpers import reap, write_package

pytestmark = [pytest.mark.ssh]

REPO = Path(__file__).resolve().parent.parent
INJECTION = "a b'; touch /tmp/pwned; echo '$(id)"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    why = netns.available()
    if why:
        if os.environ.get("VCLI_SKIP_SSH_TESTS") == "1":
            pytest.skip(f"VCLI_SKIP_SSH_TESTS=1 ({why})")
        pytest.fail(f"the ssh tests cannot run here: {why}. Run them as root after .ci/ssh-setup.sh, "
                    "or set VCLI_SKIP_SSH_TESTS=1 to leave them out on purpose.")
    c = netns.NetnsCluster(tmp_path_factory.mktemp("netns"), n=2)
    with c:
        yield c
    assert c.leftovers() == [], f"namespaces/links left behind: {c.leftovers()}"


class Env:
    """A private vcli home/config/inventory for one test, and the CLI run inside the controller ns."""

    def __init__(self, cluster: netns.NetnsCluster, tmp: Path, *, known: bool = True,
                 extra: dict[str, dict[str, Any]] | None = None, environ: dict[str, str] | None = None) -> None:
        self.cluster = cluster
        self.environ = dict(environ or {})  # extra environment for the CLI (e.g. VCLI_SSH_ORPHAN_TIMEOUT)
        self.tmp = tmp
        self.home = tmp / "home"
        self.config = tmp / "config"
        self.config.mkdir()
        self.workdirs = {h.name: tmp / f"{h.name}-workdir" for h in cluster.hosts}
        self.hosts_file = self.config / "hosts.yaml"
        self.hosts_file.write_text(cluster.inventory_yaml(self.workdirs, sys.executable, extra=extra))
        self.user_known_hosts = tmp / "user_known_hosts"  # stands in for ~/.ssh/known_hosts
        self.user_known_hosts.write_text(cluster.known_hosts() if known else "")

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VCLI_", "TF_CONFIG", "CLUSTER_SPEC"))}
        env.update(
            VCLI_HOME=str(self.home), VCLI_CONFIG_DIR=str(self.config), VCLI_HOSTS_FILE=str(self.hosts_file),
            VCLI_SSH_USER_KNOWN_HOSTS=str(self.user_known_hosts),
            PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        )
        env.update(self.environ)
        return env

    def argv(self, *args: str) -> list[str]:
        return self.cluster.ctl([sys.executable, "-m", "vcli", *args])

    def run(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        proc = self.spawn(*args)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            raise AssertionError(f"vcli {' '.join(args)} timed out after {timeout}s\n{out}\n{err}") from None
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def spawn(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(self.argv(*args), env=self.env(), cwd=REPO, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)

    def hosts(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """`vcli hosts ...` (through the sub-app directly if vcli.cli does not mount it yet)."""
        probe = subprocess.run([sys.executable, "-m", "vcli", "hosts", "--help"], env=self.env(), cwd=REPO,
                               capture_output=True, text=True, timeout=60)
        if probe.returncode == 0:
            return self.run("hosts", *args, timeout=timeout)
        code = "import sys; from vcli.cli.hosts import hosts_app; sys.argv[0] = 'vcli hosts'; hosts_app()"
        proc = subprocess.run(self.cluster.ctl([sys.executable, "-c", code, *args]), env=self.env(), cwd=REPO,
                              capture_output=True, text=True, timeout=timeout)
        return proc

    def describe(self, job_id: str) -> dict[str, Any]:
        res = self.run("custom-jobs", "describe", job_id, "--format=json", timeout=60)
        assert res.returncode == 0, res.stderr
        return json.loads(res.stdout)


def _job_id(stderr: str) -> str:
    for line in stderr.splitlines():
        if "CustomJob [" in line and "customJobs/" in line:
            return line.split("customJobs/")[1].split("]")[0]
    raise AssertionError(f"no job id in:\n{stderr}")


# =========================================================================== (a) MWMS across hosts


def test_multiworker_job_across_two_hosts(cluster: netns.NetnsCluster, tmp_path: Path) -> None:
    env = Env(cluster, tmp_path)
    pkg = tmp_path / "pkg"
    shutil.copytree(REPO / "trainer", pkg / "trainer", ignore=shutil.ignore_patterns("__pycache__"))
    pool = "machine-type=n1-standard-4,replica-count=1"
    started = time.monotonic()
    res = env.run("custom-jobs", "create", "--executor=ssh", "--hosts=h1,h2", "--display-name=mwms",
                  f"--worker-pool-spec={pool},local-package-path={pkg},python-module=trainer.task",
                  f"--worker-pool-spec={pool}", "--args=--epochs=2", timeout=600)
    took = time.monotonic() - started
    print(f"MWMS over SSH: {took:.1f}s")
    assert res.returncode == 0, f"{res.stdout}\n{res.stderr}"
    job_id = _job_id(res.stderr)
    job = env.describe(job_id)
    assert job["state"] == "JOB_STATE_SUCCEEDED"
    by_task = {r["taskName"]: r for r in job["replicas"]}
    assert by_task["workerpool0-0"]["host"] == "h1" and by_task["workerpool1-0"]["host"] == "h2"
    assert by_task["workerpool0-0"]["address"].startswith("10.213.0.11:")
    assert by_task["workerpool1-0"]["address"].startswith("10.213.0.12:")
    # TF_CONFIG carried the namespaces' addresses: the trainer prints its cluster.
    cluster_lines = [l for l in res.stdout.splitlines() if "cluster=" in l]
    assert cluster_lines and all("10.213.0.11" in l and "10.213.0.12" in l for l in cluster_lines), res.stdout
    assert "final val_accuracy=" in res.stdout
    # The model is on the chief's host (h1's workdir), not on the worker's and not locally.
    model_dirs = list((env.workdirs["h1"] / "jobs" / job_id).rglob("saved_model.pb"))
    assert model_dirs, f"no SavedModel under {env.workdirs['h1']}"
    assert not list((env.workdirs["h2"]).rglob("saved_model.pb"))
    assert not list(env.home.rglob("saved_model.pb"))
    # The replica log says where its outputs are on the host.
    assert f"outputs under {env.workdirs['h1']}/jobs/{job_id}" in res.stdout
    # Nothing left running on either host.
    for h in ("h1", "h2"):
        assert cluster.job_pids(h, job_id) == []


# =========================================================================== (b) host keys


def test_unknown_host_key_refused_then_accepted(cluster: netns.NetnsCluster, tmp_path: Path) -> None:
    env = Env(cluster, tmp_path, known=False)
    h1 = cluster.host("h1")
    # A job on a host whose key nobody has accepted is refused with the fingerprint.
    res = env.run("custom-jobs", "create", "--executor=ssh", "--hosts=h1", "--display-name=k",
                  "--worker-pool-spec=machine-type=n1-standard-4,replica-count=1,container-image-uri=x",
                  f"--command={sys.executable},-c,print(1)", timeout=120)
    assert res.returncode != 0
    assert "is not known" in res.stderr and h1.fingerprint in res.stderr and "ssh-ed25519" in res.stderr
    assert "vcli hosts add h1 --accept-new-host-key" in res.stderr
    assert not (env.config / "known_hosts").exists()
    # `hosts add` without the flag refuses too and records nothing.
    res = env.hosts("add", "h3", f"--address={h1.address}", "--user=root", f"--identity-file={cluster.client_key}",
                    f"--python={sys.executable}")
    assert res.returncode != 0 and h1.fingerprint in res.stderr, res.stderr
    assert "h3:" not in env.hosts_file.read_text()
    # Accepting explicitly records the key in vcli's known_hosts, and then the host works.
    res = env.hosts("add", "h1", "--accept-new-host-key")
    assert res.returncode == 0, res.stderr
    assert h1.fingerprint in res.stderr
    assert h1.host_key_pub.read_text().split()[1] in (env.config / "known_hosts").read_text()
    res = env.hosts("check", "h1", "--format=json")
    assert res.returncode == 0, res.stderr
    facts = json.loads(res.stdout)[0]
    assert facts["status"] == "OK" and facts["cpus"] >= 1 and facts["python"].startswith(sys.executable)
    # A changed key (h2's key recorded for h1's address) is refused loudly, even with the flag.
    (env.config / "known_hosts").write_text(
        cluster.host("h2").known_hosts_line().replace(cluster.host("h2").address, h1.address))
    res = env.hosts("add", "h1", "--accept-new-host-key")
    assert res.returncode != 0 and "HOST KEY CHANGED" in res.stderr, res.stderr
    assert h1.fingerprint in res.stderr and cluster.host("h2").fingerprint in res.stderr


def test_hosts_check_and_list(cluster: netns.NetnsCluster, tmp_path: Path) -> None:
    env = Env(cluster, tmp_path, extra={"h1": {"gpus": {"count": 1, "type": "NVIDIA_TESLA_T4"}}})
    res = env.hosts("check", "--format=json")
    assert res.returncode == 0, res.stderr
    rows = {r["name"]: r for r in json.loads(res.stdout)}
    assert set(rows) == {"h1", "h2"} and all(r["status"] == "OK" for r in rows.values())
    assert "All 2 host(s) OK." in res.stderr  # h1 <-> h2 reachable on a TF-style port
    # What it found is recorded in the inventory (declared values still win in `hosts list`).
    import yaml

    detected = {n: h.get("detected") for n, h in yaml.safe_load(env.hosts_file.read_text())["hosts"].items()}
    assert all(d and d["cpus"] == rows[n]["cpus"] and d["gpus"]["count"] == 0 for n, d in detected.items()), detected
    res = env.hosts("list", "--format=value(name,address,gpus,gpuType)")
    assert res.returncode == 0, res.stderr
    assert "h1\t10.213.0.11\t1\tNVIDIA_TESLA_T4" in res.stdout
    # Cut h2 off: check names it and the reachability problem, one line each.
    cluster.link_down("h2")
    try:
        res = env.hosts("check", "--format=json", timeout=180)
    finally:
        cluster.link_up("h2")
    assert res.returncode != 0
    problems = [l for l in res.stderr.splitlines() if l.startswith("PROBLEM:")]
    assert any("h2" in p and "Cannot connect" in p for p in problems), res.stderr


# =========================================================================== (c) injection


def test_injection_args_reach_the_trainer_verbatim(cluster: netns.NetnsCluster, tmp_path: Path) -> None:
    env = Env(cluster, tmp_path)
    if os.path.exists("/tmp/pwned"):
        os.remove("/tmp/pwned")
    pkg = write_package(tmp_path, {"dump.py": """
        import json, os, sys
        out = os.path.join(os.environ["AIP_MODEL_DIR"], "argv.json")
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(out, "w") as f:
            json.dump({"argv": sys.argv[1:], "secret": os.environ.get("VCLI_SECRET_TOKEN")}, f)
        print("argv=" + json.dumps(sys.argv[1:]))
    """})
    config = tmp_path / "job.yaml"
    config.write_text(json.dumps({"workerPoolSpecs": [{
        "machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": 1,
        "containerSpec": {"imageUri": "unused", "command": [sys.executable, str(pkg / "dump.py")],
                          "args": [f"--value={INJECTION}", INJECTION],
                          "env": [{"name": "VCLI_SECRET_TOKEN", "value": "s3cr3t $(id) 'x'"}]},
    }]}))
    res = env.run("custom-jobs", "create", "--executor=ssh", "--hosts=h2", "--display-name=inj",
                  f"--config={config}", timeout=180)
    assert res.returncode == 0, f"{res.stdout}\n{res.stderr}"
    job_id = _job_id(res.stderr)
    dumped = json.loads(next((env.workdirs["h2"] / "jobs" / job_id).rglob("argv.json")).read_text())
    assert dumped["argv"] == [f"--value={INJECTION}", INJECTION]
    assert dumped["secret"] == "s3cr3t $(id) 'x'"
    assert not os.path.exists("/tmp/pwned")
    # The secret is in no log and no describe output.
    logs = env.run("custom-jobs", "stream-logs", job_id, timeout=60)
    described = json.dumps(env.describe(job_id))
    for text in (res.stdout, res.stderr, logs.stdout, described):
        assert "s3cr3t" not in text


def test_links_in_a_package_reach_the_host_as_the_trainer_sees_them_locally(cluster: netns.NetnsCluster,
                                                                             tmp_path: Path) -> None:
    """A link to a directory in the package (`data_link -> data`) was silently left out: the job
    SUCCEEDED locally and FAILED over SSH. Links inside are followed now (a loop is not), and
    a link out of the package is named in one WARNING line."""
    env = Env(cluster, tmp_path)
    pkg = write_package(tmp_path, {"read.py": """
        import os
        print("data_link:", open("data_link/x.txt").read(), flush=True)
        print("nested:", open("nested/deeper/x.txt").read(), flush=True)
        print("outside there:", os.path.exists("ext"), flush=True)
    """, "data/x.txt": "payload"})
    (pkg / "data_link").symlink_to("data")
    (pkg / "nested").mkdir()
    (pkg / "nested" / "deeper").symlink_to("../data")
    (pkg / "nested" / "loop").symlink_to("..")
    (tmp_path / "elsewhere").mkdir()
    (pkg / "ext").symlink_to(tmp_path / "elsewhere")
    res = env.run("custom-jobs", "create", "--executor=ssh", "--hosts=h1", "--display-name=links",
                  f"--worker-pool-spec=machine-type=n1-standard-4,replica-count=1,local-package-path={pkg},"
                  "script=read.py", timeout=180)
    assert res.returncode == 0, f"{res.stdout}\n{res.stderr}"
    assert "data_link: payload" in res.stdout and "nested: payload" in res.stdout
    assert "outside there: False" in res.stdout
    assert f"link(s) out of the package (ext -> {tmp_path / 'elsewhere'})" in res.stderr, res.stderr


def test_a_missing_interpreter_is_named_not_the_working_directory(cluster: netns.NetnsCluster, tmp_path: Path) -> None:
    """An inventory `python` that does not exist failed the job with "cannot create the working
    directory" (found by a probe)."""
    env = Env(cluster, tmp_path, extra={"h1": {"python": "/nonexistent/python"}})
    pkg = write_package(tmp_path, {"t.py": "print('hi')\n"})
    res = env.run("custom-jobs", "create", "--executor=ssh", "--hosts=h1", "--display-name=nopython",
                  f"--worker-pool-spec=machine-type=n1-standard-4,replica-count=1,local-package-path={pkg},script=t.py",
                  timeout=180)
    assert res.returncode == 3, f"{res.returncode}\n{res.stderr}"
    assert "Host h1: cannot run its Python interpreter /nonexistent/python" in res.stderr, res.stderr
    assert "working directory" not in res.stderr


# =========================================================================== (d) host loss


#: A short orphan timeout for the host-loss tests: the lost host stops its replica by itself.
LOST_HOST_ORPHAN_TIMEOUT = "8"


def test_host_loss_fails_the_job_quickly_and_stops_the_rest(cluster: netns.NetnsCluster, tmp_path: Path) -> None:
    env = Env(cluster, tmp_path, environ={"VCLI_SSH_ORPHAN_TIMEOUT": LOST_HOST_ORPHAN_TIMEOUT})
    pkg = write_package(tmp_path, {"sleeper.py": """
        import os, sys, time
        print("up on", os.environ["VCLI_TASK_NAME"], flush=True)
        time.sleep(600)
    """})
    pool = "machine-type=n1-standard-4,replica-count=1"
    proc = env.spawn("custom-jobs", "create", "--executor=ssh", "--hosts=h1,h2", "--display-name=loss",
                     f"--worker-pool-spec={pool},local-package-path={pkg},script=sleeper.py", f"--worker-pool-spec={pool}")
    try:
        job_id = None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # wait for both replicas to run
            jobs = list((env.home / "jobs").glob("*/replicas")) if (env.home / "jobs").exists() else []
            if jobs:
                job_id = jobs[0].parent.name
                logs = [p.read_text() for p in jobs[0].glob("*/replica.log")]
                if len(logs) == 2 and all("up on" in l for l in logs):
                    break
            time.sleep(0.2)
        else:
            raise AssertionError("replicas did not start")
        assert job_id and cluster.job_pids("h1", job_id) and cluster.job_pids("h2", job_id)
        cluster.link_down("h2")
        cut = time.monotonic()
        out, err = proc.communicate(timeout=90)
        took = time.monotonic() - cut
    finally:
        reap(proc)
        cluster.link_up("h2")
    print(f"host loss -> CLI exit: {took:.1f}s")
    assert proc.returncode != 0
    assert took < 40, f"the controller took {took:.1f}s to give up on the lost host"
    assert "lost contact with host h2" in err + out
    job = env.describe(job_id)
    assert job["state"] == "JOB_STATE_FAILED"
    assert "h2" in job["error"]["message"]
    # Nothing of the job is left on the surviving host (h1), nor any session of it.
    assert cluster.job_pids("h1", job_id) == []
    leftover = [p for p in cluster.pids("h1") if p != cluster.host("h1").sshd.pid]
    deadline = time.monotonic() + 10
    while leftover and time.monotonic() < deadline:
        time.sleep(0.2)
        leftover = [p for p in cluster.pids("h1") if p != cluster.host("h1").sshd.pid]
    assert leftover == [], [netns.process_cmdline(p) for p in leftover]
    # The lost host stopped its replica by itself once no controller renewed its lease.
    _wait_no_pids(cluster, "h2", job_id, 30)


# =========================================================================== cancel, controller death


def _wait_up(env: Env, count: int, timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        jobs = list((env.home / "jobs").glob("*/replicas")) if (env.home / "jobs").exists() else []
        for j in jobs:
            logs = [p.read_text() for p in j.glob("*/replica.log")]
            if sum("up on" in l for l in logs) >= count:
                return j.parent.name
        time.sleep(0.2)
    raise AssertionError("replicas did not start")


def _wait_no_pids(cluster: netns.NetnsCluster, host: str, job_id: str, seconds: float) -> float:
    started = time.monotonic()
    while cluster.job_pids(host, job_id) and time.monotonic() - started < seconds:
        time.sleep(0.1)
    assert cluster.job_pids(host, job_id) == [], "replica processes left on " + host
    return time.monotonic() - started


#: What real trainers start (data loaders, TensorBoard, NCCL helpers): a child, a child with a
#: grandchild, a `setsid` child and a double-forked daemon, all holding the trainer's stdout.
TREE = {"tree.py": """
    import os, subprocess, sys
    def start_tree():
        sleeper = [sys.executable, "-S", "-c", "import time; time.sleep(600)"]
        subprocess.Popen(sleeper)
        subprocess.Popen([sys.executable, "-S", "-c",
                          "import subprocess, sys, time; subprocess.Popen(sys.argv[1:]); time.sleep(600)", *sleeper])
        subprocess.Popen(sleeper, start_new_session=True)
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.execv(sys.executable, sleeper)
            os._exit(0)
        os.wait()
        print("up on", os.environ["VCLI_TASK_NAME"], flush=True)
""", "tree_sleep.py": "import time, tree; tree.start_tree(); time.sleep(600)\n",
    "tree_ok.py": "import time, tree; tree.start_tree(); time.sleep(1)\n",
    "tree_fail.py": """
    import os, sys, time, tree
    tree.start_tree()
    if os.environ["VCLI_TASK_NAME"].startswith("workerpool0"):
        time.sleep(600)  # the chief waits; its sibling fails
    time.sleep(1)
    sys.exit(3)
"""}
TREE_SIZE = 6  # the trainer and the five processes it starts


def test_whole_trees_go_when_a_job_succeeds_or_a_sibling_fails(cluster: netns.NetnsCluster, tmp_path: Path) -> None:
    env = Env(cluster, tmp_path)
    pkg = write_package(tmp_path, TREE)
    pool = "machine-type=n1-standard-4,replica-count=1"
    package = f"local-package-path={pkg}"
    # Success: every replica's helpers are gone once the job has SUCCEEDED, on every host.
    res = env.run("custom-jobs", "create", "--executor=ssh", "--hosts=h1,h2", "--display-name=tree-ok",
                  f"--worker-pool-spec={pool},{package},script=tree_ok.py", f"--worker-pool-spec={pool}",
                  timeout=180)
    assert res.returncode == 0, f"{res.stdout}\n{res.stderr}"
    job_id = _job_id(res.stderr)
    assert env.describe(job_id)["state"] == "JOB_STATE_SUCCEEDED"
    assert res.stdout.count("up on") == 2
    assert cluster.job_pids("h1", job_id) == [] and cluster.job_pids("h2", job_id) == []
    # A sibling fails: the chief's whole tree on the other host is stopped too.
    res = env.run("custom-jobs", "create", "--executor=ssh", "--hosts=h1,h2", "--display-name=tree-fail",
                  f"--worker-pool-spec={pool},{package},script=tree_fail.py", f"--worker-pool-spec={pool}",
                  timeout=180)
    assert res.returncode != 0
    job_id = _job_id(res.stderr)
    assert env.describe(job_id)["state"] == "JOB_STATE_FAILED"
    assert cluster.job_pids("h1", job_id) == [] and cluster.job_pids("h2", job_id) == []


def _wait_tree(cluster: netns.NetnsCluster, host: str, job_id: str) -> None:
    deadline = time.monotonic() + 10  # the grandchild starts a moment after "up on"
    while len(cluster.job_pids(host, job_id)) < TREE_SIZE and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(cluster.job_pids(host, job_id)) >= TREE_SIZE, cluster.job_pids(host, job_id)


def test_cancel_and_controller_death_leave_nothing_running(cluster: netns.NetnsCluster, tmp_path: Path) -> None:
    env = Env(cluster, tmp_path)
    pkg = write_package(tmp_path, TREE)
    pool = f"machine-type=n1-standard-4,replica-count=1,local-package-path={pkg},script=tree_sleep.py"
    # 1. `custom-jobs cancel` from another terminal while the controller runs.
    proc = env.spawn("custom-jobs", "create", "--executor=ssh", "--hosts=h1", "--display-name=c1",
                     f"--worker-pool-spec={pool}")
    try:
        job_id = _wait_up(env, 1)
        _wait_tree(cluster, "h1", job_id)
        res = env.run("custom-jobs", "cancel", job_id, timeout=120)
        assert res.returncode == 0, res.stderr
        proc.communicate(timeout=60)
    finally:
        reap(proc)
    assert env.describe(job_id)["state"] == "JOB_STATE_CANCELLED"
    _wait_no_pids(cluster, "h1", job_id, 5)
    # 2. The controller dies (SIGKILL): the remote tree keeps running (to be re-adopted by
    #    `resume`), and `cancel` from another process stops all of it and marks the orphaned
    #    job CANCELLED.
    for p in (env.home / "jobs").glob("*"):
        shutil.rmtree(p)
    proc = env.spawn("custom-jobs", "create", "--executor=ssh", "--hosts=h1", "--display-name=c2",
                     f"--worker-pool-spec={pool}")
    try:
        job_id = _wait_up(env, 1)
        _wait_tree(cluster, "h1", job_id)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
    finally:
        reap(proc)
    time.sleep(5)  # longer than the wrapper's stop grace: nothing is stopping the tree
    assert len(cluster.job_pids("h1", job_id)) >= TREE_SIZE, cluster.job_pids("h1", job_id)
    res = env.run("custom-jobs", "cancel", job_id, timeout=120)
    assert res.returncode == 0, res.stderr
    assert env.describe(job_id)["state"] == "JOB_STATE_CANCELLED"
    _wait_no_pids(cluster, "h1", job_id, 5)
    assert _replica_sessions(cluster, "h1") == []


def _replica_sessions(cluster: netns.NetnsCluster, host: str) -> list[list[str]]:
    """vcli's wrappers still running on a host (the remote ends of replica channels)."""
    deadline = time.monotonic() + 10
    while True:
        left = [netns.process_cmdline(p) for p in cluster.pids(host)]
        left = [c for c in left if any("vcli-wrapper-" in a for a in c)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def _kill_when_up(env: Env, proc: subprocess.Popen[str]) -> str:
    """Wait until the job's replica printed "up on", then SIGKILL the controller; the job id."""
    try:
        job_id = _wait_up(env, 1)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
    finally:
        reap(proc)
    return job_id


def _kill_controller_when_up(env: Env, cluster: netns.NetnsCluster, proc: subprocess.Popen[str],
                             host: str) -> str:
    """`_kill_when_up`, and the replica's processes outlived the controller on `host`."""
    job_id = _kill_when_up(env, proc)
    assert cluster.job_pids(host, job_id), "the replica did not outlive its controller"
    return job_id


def test_resume_reattaches_a_replica_whose_controller_died(cluster: netns.NetnsCluster, tmp_path: Path) -> None:
    env = Env(cluster, tmp_path)
    pkg = write_package(tmp_path, {"slow.py": """
        import os, time
        print("trainer pid", os.getpid(), flush=True)
        print("up on", os.environ["VCLI_TASK_NAME"], flush=True)
        time.sleep(6)
        print("done", flush=True)
    """})
    proc = env.spawn("custom-jobs", "create", "--executor=ssh", "--hosts=h1", "--display-name=resume",
                     f"--worker-pool-spec=machine-type=n1-standard-4,replica-count=1,local-package-path={pkg},"
                     "script=slow.py")
    job_id = _kill_controller_when_up(env, cluster, proc, "h1")
    res = env.run("custom-jobs", "resume", job_id, timeout=180)
    assert res.returncode == 0, f"{res.stdout}\n{res.stderr}"
    assert "Re-attached to supervisor" in res.stdout, res.stdout
    assert env.describe(job_id)["state"] == "JOB_STATE_SUCCEEDED"
    logs = env.run("custom-jobs", "stream-logs", job_id, timeout=60)
    assert logs.returncode == 0, logs.stderr
    pids = [l for l in logs.stdout.splitlines() if "trainer pid" in l]
    assert len(pids) == 1, logs.stdout  # re-attached, not restarted; no line repeated
    assert logs.stdout.count("up on") == 1 and logs.stdout.count("done") == 1, logs.stdout
    _wait_no_pids(cluster, "h1", job_id, 10)
    assert _replica_sessions(cluster, "h1") == []


def test_resume_waits_for_the_gpu_of_a_replica_that_never_started_on_an_ssh_host(cluster: netns.NetnsCluster,
                                                                                 tmp_path: Path) -> None:
    """A controller killed before it started a job's second replica, whose GPU on the SSH host
    another holder took meanwhile: `resume` failed the job at once ("Cannot start replica
    workerpool1-0 on host h1: GPU 1 is held by ...") and stopped the chief it had re-attached
    (found by a probe; the wait existed for this machine's GPUs only). The replica now waits for
    its GPU in the host's queue (WAITING in `hosts gpus h1`) and the job runs to its end."""
    from vcli.placement.gpulease import LeaseDir
    from vcli.store import Store

    env = Env(cluster, tmp_path, extra={"h1": {"gpus": {"count": 2, "type": "NVIDIA_TESLA_T4"}}})
    lease_dir = str(cluster.tmp / "h1-gpu-leases")
    pkg = write_package(tmp_path, {"slow.py": """
        import os, sys, time
        print("up on", os.environ["VCLI_TASK_NAME"], "gpu", os.environ.get("CUDA_VISIBLE_DEVICES"), flush=True)
        time.sleep(float(sys.argv[1]))
    """})
    pool = "machine-type=n1-standard-4,replica-count=1,accelerator-type=NVIDIA_TESLA_T4,accelerator-count=1"
    proc = env.spawn("custom-jobs", "create", "--executor=ssh", "--hosts=h1", "--display-name=half-started",
                     f"--worker-pool-spec={pool},local-package-path={pkg},script=slow.py", f"--worker-pool-spec={pool}",
                     "--args=25")
    job = _kill_when_up_count(env, proc, 2)
    worker = [p for p in cluster.job_pids("h1", job) if netns.process_env(p).get("VCLI_TASK_NAME") == "workerpool1-0"]
    assert worker, "the second replica's processes"
    for sig in (signal.SIGSTOP, signal.SIGKILL):  # stopped first: nothing records its end
        for pid in worker:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 30
    while LeaseDir(lease_dir).probe([1]) != {1: None}:
        assert time.monotonic() < deadline, LeaseDir(lease_dir).probe([1])
        time.sleep(0.1)
    store = Store(env.home)  # as if the controller had died before starting it
    store.upsert_replica(job, "workerpool1-0", handle=None, state="PENDING", start_time=None)
    store.close()
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(REPO)!r})
        from vcli.placement.gpulease import LeaseDir
        LeaseDir({lease_dir!r}).acquire([1], {{"job": "OTHER", "user": "someone"}})
        print("held", flush=True)
        sys.stdin.readline()
    """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    resume = None
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        resume = env.spawn("custom-jobs", "resume", job)
        assert resume.stderr is not None
        seen = ""
        deadline = time.monotonic() + 120
        while "Waiting for GPUs" not in seen:
            line = resume.stderr.readline()
            assert line and time.monotonic() < deadline, seen + resume.communicate(timeout=60)[1]
            seen += line
        assert "job OTHER" in seen, seen
        rows = env.hosts("gpus", "h1", "--format=json")
        assert rows.returncode == 0, rows.stderr
        waiting = [r for r in json.loads(rows.stdout) if r["state"] == "WAITING"]
        assert [(w["job"], w["gpus"]) for w in waiting] == [(job, 1)], rows.stdout
        holder.communicate("go\n", timeout=30)  # GPU 1 is free again
        out, err = resume.communicate(timeout=180)
        assert resume.returncode == 0, f"{out}\n{seen}{err}"
    finally:
        if holder.poll() is None:  # not a session of its own: never killpg
            holder.kill()
            holder.communicate()
        if resume is not None:
            reap(resume)
    assert env.describe(job)["state"] == "JOB_STATE_SUCCEEDED"
    logs = env.run("custom-jobs", "stream-logs", job, timeout=60)
    assert logs.stdout.count("up on workerpool0-0 gpu 0") == 1, logs.stdout  # re-attached, never restarted
    assert "up on workerpool1-0 gpu 1" in logs.stdout, logs.stdout
    _wait_no_pids(cluster, "h1", job, 10)
    assert LeaseDir(lease_dir).probe([0, 1]) == {0: None, 1: None}


def _kill_when_up_count(env: Env, proc: subprocess.Popen[str], count: int) -> str:
    """Wait until `count` replicas printed "up on", then SIGKILL the controller; the job id."""
    try:
        try:
            job_id = _wait_up(env, count)
        except AssertionError:
            reap(proc)
            raise AssertionError(f"replicas did not start: {proc.stdout.read() if proc.stdout else ''}"
                                 f"{proc.stderr.read() if proc.stderr else ''}") from None
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
    finally:
        reap(proc)
    return job_id


def test_resume_and_cancel_while_the_host_is_unreachable_conclude_nothing_false(cluster: netns.NetnsCluster,
                                                                                tmp_path: Path) -> None:
    """The controller dead and the host unreachable for a while: `resume` recorded the job
    FAILED ("exited 255") in 0.4 s and abandoned the running replica; `cancel` said its replicas
    "had all ended on their own". Now resume is exit 3 with the job left as it was (resumable),
    and cancel warns that the replica may run on until its lease runs out."""
    env = Env(cluster, tmp_path, environ={"VCLI_SSH_ORPHAN_TIMEOUT": "30", "VCLI_SSH_CONNECT_TIMEOUT": "3"})
    pkg = write_package(tmp_path, {"slow.py": """
        import os, time
        print("up on", os.environ["VCLI_TASK_NAME"], flush=True)
        time.sleep(120)
    """})
    proc = env.spawn("custom-jobs", "create", "--executor=ssh", "--hosts=h1", "--display-name=unreachable",
                     f"--worker-pool-spec=machine-type=n1-standard-4,replica-count=1,local-package-path={pkg},"
                     "script=slow.py")
    job_id = _kill_controller_when_up(env, cluster, proc, "h1")
    cluster.link_down("h1")
    try:
        res = env.run("custom-jobs", "resume", job_id, timeout=120)
        assert res.returncode == 3, f"{res.returncode}\n{res.stdout}\n{res.stderr}"
        assert "Cannot re-attach to replica workerpool0-0 on host h1" in res.stderr and "Nothing was changed" in res.stderr
        assert env.describe(job_id)["state"] == "JOB_STATE_RUNNING"
        assert cluster.job_pids("h1", job_id), "the replica stopped"
        res = env.run("custom-jobs", "cancel", job_id, timeout=120)
        assert "ended on their own" not in res.stdout + res.stderr, res.stderr
        assert "WARNING: could not stop replicas" in res.stderr and "VCLI_SSH_ORPHAN_TIMEOUT" in res.stderr, res.stderr
        assert env.describe(job_id)["state"] == "JOB_STATE_CANCELLED"
    finally:
        cluster.link_up("h1")
    _wait_no_pids(cluster, "h1", job_id, 90)  # no controller renews its lease: it stops itself


def test_an_orphaned_replica_is_stopped_after_the_orphan_timeout(cluster: netns.NetnsCluster, tmp_path: Path) -> None:
    env = Env(cluster, tmp_path, environ={"VCLI_SSH_ORPHAN_TIMEOUT": "3"})
    pkg = write_package(tmp_path, TREE)
    proc = env.spawn("custom-jobs", "create", "--executor=ssh", "--hosts=h1", "--display-name=orphan",
                     f"--worker-pool-spec=machine-type=n1-standard-4,replica-count=1,local-package-path={pkg},"
                     "script=tree_sleep.py")
    job_id = _kill_controller_when_up(env, cluster, proc, "h1")
    took = _wait_no_pids(cluster, "h1", job_id, 15)
    print(f"controller killed -> orphaned remote tree gone in {took:.1f}s")
    assert _replica_sessions(cluster, "h1") == []
    host_log = next((env.workdirs["h1"] / "jobs" / job_id).rglob("replica.log")).read_text()
    assert "VCLI_SSH_ORPHAN_TIMEOUT=3" in host_log


# =========================================================================== docker runtime on an SSH host


@pytest.mark.docker
def test_docker_runtime_through_the_hosts_engine(cluster: netns.NetnsCluster, tmp_path: Path) -> None:
    """A host with `runtime: docker`: the container runs on that host's engine, reached over the
    same verified SSH connection (docker system dial-stdio); outputs land in the host's workdir."""
    from tests.harness.docker_env import BASE_IMAGE, ensure_docker

    ensure_docker()
    env = Env(cluster, tmp_path, extra={"h2": {"runtime": "docker"}})
    script = ("import os; d = os.environ['AIP_MODEL_DIR']; os.makedirs(d, exist_ok=True); "
              "open(os.path.join(d, 'out.txt'), 'w').write('hello'); print('in container', os.environ['VCLI_TASK_NAME'])")
    config = tmp_path / "job.json"
    config.write_text(json.dumps({"workerPoolSpecs": [{
        "machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": 1,
        "containerSpec": {"imageUri": BASE_IMAGE, "command": ["python3", "-c", script]}}]}))
    res = env.run("custom-jobs", "create", "--executor=ssh", "--hosts=h2", "--display-name=dock",
                  f"--config={config}", timeout=300)
    assert res.returncode == 0, f"{res.stdout}\n{res.stderr}"
    job_id = _job_id(res.stderr)
    assert "in container workerpool0-0" in res.stdout
    assert "container" in res.stdout and "Docker engine" in res.stdout
    out = list((env.workdirs["h2"] / "jobs" / job_id).rglob("out.txt"))
    assert out and out[0].read_text() == "hello"
    job = env.describe(job_id)
    assert job["state"] == "JOB_STATE_SUCCEEDED" and job["replicas"][0]["host"] == "h2"


@pytest.mark.docker
def test_a_container_whose_controller_died_is_stopped_after_the_orphan_timeout(cluster: netns.NetnsCluster,
                                                                              tmp_path: Path) -> None:
    """Process replicas stopped themselves once no controller renewed their lease; a container
    on a `runtime: docker` host ran on for good (found by a probe). Its keeper on the host now
    stops it; while the controller lives, its renewals keep it running past the timeout."""
    from tests.harness.docker_env import BASE_IMAGE, ensure_docker

    ensure_docker()
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    env = Env(cluster, tmp_path / "a", extra={"h2": {"runtime": "docker"}}, environ={"VCLI_SSH_ORPHAN_TIMEOUT": "6"})
    script = "import os, time; print('up on', os.environ['VCLI_TASK_NAME'], flush=True); time.sleep({})"
    config = tmp_path / "job.json"

    def job(seconds: int) -> str:
        config.write_text(json.dumps({"workerPoolSpecs": [{
            "machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": 1,
            "containerSpec": {"imageUri": BASE_IMAGE, "command": ["python3", "-c", script.format(seconds)]}}]}))
        return str(config)

    res = env.run("custom-jobs", "create", "--executor=ssh", "--hosts=h2", "--display-name=renewed",
                  f"--config={job(12)}", timeout=300)  # twice the timeout: renewed all along
    assert res.returncode == 0, f"{res.stdout}\n{res.stderr}"
    env = Env(cluster, tmp_path / "b", extra={"h2": {"runtime": "docker"}}, environ={"VCLI_SSH_ORPHAN_TIMEOUT": "6"})
    proc = env.spawn("custom-jobs", "create", "--executor=ssh", "--hosts=h2", "--display-name=orphan",
                     f"--config={job(600)}")
    job_id = _kill_when_up(env, proc)

    def running() -> list[str]:
        out = subprocess.run(["docker", "ps", "-q", "--filter", f"label=vcli.job={job_id}"], capture_output=True,
                             text=True, timeout=60)
        return out.stdout.split()

    assert running(), "the container did not outlive its controller"
    deadline = time.monotonic() + 60
    while running() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not running(), "the orphaned container still runs"
    res = env.run("custom-jobs", "resume", job_id, timeout=120)
    assert env.describe(job_id)["state"] in ("JOB_STATE_FAILED", "JOB_STATE_CANCELLED"), res.stderr


# =========================================================================== (e) study over two 1-GPU hosts


def test_plan_job_gives_the_placer_the_spec_and_job_id() -> None:
    """GPU placement over hosts needs the job spec and id at the placer (no sshd needed)."""
    import tempfile

    from vcli.control import jobs
    from vcli.executors import Placement
    from vcli.spec import CustomJobSpec, WorkerPoolSpec

    seen: dict[str, Any] = {}

    def placer(replicas: Any, **kw: Any) -> list[Placement]:
        seen.update(kw)
        return [Placement() for _ in replicas]

    class Ports:
        name = "probe"

        def reserve_port(self, placement: Placement) -> int:
            return 1

    spec = CustomJobSpec(worker_pool_specs=(WorkerPoolSpec(replica_count=1),))
    with tempfile.TemporaryDirectory() as d:
        jobs.plan_job(spec, job_id="probe", job_dir=Path(d), executor=Ports(), placer=placer)  # type: ignore[arg-type]
    assert seen.get("spec") is spec and seen.get("job_id") == "probe"


def test_study_over_two_one_gpu_hosts(cluster: netns.NetnsCluster, tmp_path: Path) -> None:
    env = Env(cluster, tmp_path, extra={h: {"gpus": {"count": 1, "type": "NVIDIA_TESLA_T4"}} for h in ("h1", "h2")})
    pkg = write_package(tmp_path, {"trial.py": """
        import json, os, sys, time
        lr = float(sys.argv[1].split("=", 1)[1])
        rec = {"cuda": os.environ.get("CUDA_VISIBLE_DEVICES"), "start": time.time()}
        time.sleep(2)
        rec["end"] = time.time()
        out = os.path.join(os.environ["AIP_MODEL_DIR"], "trial.json")
        os.makedirs(os.path.dirname(out), exist_ok=True)
        json.dump(rec, open(out, "w"))
        print(f"accuracy={1 - abs(lr - 0.3):.4f}", flush=True)
    """})
    pool = (f"machine-type=n1-standard-4,replica-count=1,accelerator-type=NVIDIA_TESLA_T4,accelerator-count=1,"
            f"local-package-path={pkg},script=trial.py")
    res = env.run("hp-tuning-jobs", "create", "--executor=ssh", "--hosts=h1,h2", "--display-name=study",
                  "--max-trial-count=4", "--parallel-trial-count=2", "--algorithm=random-search", "--seed=1",
                  "--metric=metric-id=accuracy,goal=maximize",
                  "--parameter-spec=parameter-id=lr,type=double,min=0.01,max=1",
                  f"--worker-pool-spec={pool}", "--format=json", timeout=600)
    assert res.returncode == 0, f"{res.stdout}\n{res.stderr}"
    study = json.loads(res.stdout)
    assert [t["state"] for t in study["trials"]] == ["SUCCEEDED"] * 4
    records = []
    for h in ("h1", "h2"):
        for p in env.workdirs[h].rglob("trial.json"):
            records.append((h, json.loads(p.read_text())))
    assert len(records) == 4 and {h for h, _ in records} == {"h1", "h2"}
    assert all(r["cuda"] == "0" for _, r in records)
    for host in ("h1", "h2"):  # never two trials at once on one host's only GPU
        spans = sorted((r["start"], r["end"]) for h, r in records if h == host)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), spans


def test_two_controllers_never_share_a_gpu_of_one_ssh_host(cluster: netns.NetnsCluster, tmp_path: Path) -> None:
    """Two people (two vcli homes, two controller processes) drive the same 2-GPU SSH host: the
    leases live on the host, so a job that wants a GPU another controller's replica holds waits,
    says for whom, and starts once it is free; at no instant do two replicas hold one index."""
    records = tmp_path / "records"
    records.mkdir()
    gpus = {"h1": {"gpus": {"count": 2, "type": "NVIDIA_TESLA_T4"}}}
    envs = {}
    for who in ("alice", "bob"):
        (tmp_path / who).mkdir()
        envs[who] = Env(cluster, tmp_path / who, extra=gpus)
    pkg = write_package(tmp_path, {"trial.py": f"""
        import json, os, sys, time, uuid
        rec = {{"name": sys.argv[1], "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"), "start": time.time()}}
        open(os.path.join({str(records)!r}, sys.argv[1] + ".started"), "w").close()
        time.sleep(float(sys.argv[2]))
        rec["end"] = time.time()
        with open(os.path.join({str(records)!r}, uuid.uuid4().hex + ".json"), "w") as f:
            json.dump(rec, f)
    """})

    def job(env: Env, name: str, count: int, seconds: float) -> subprocess.Popen[str]:
        pool = (f"machine-type=n1-standard-4,replica-count=1,accelerator-type=NVIDIA_TESLA_T4,"
                f"accelerator-count={count},local-package-path={pkg},script=trial.py")
        return env.spawn("custom-jobs", "create", "--executor=ssh", "--hosts=h1", f"--display-name={name}",
                         f"--worker-pool-spec={pool}", f"--args={name},{seconds}")

    def leases_on_h1() -> list[dict[str, Any]]:
        res = envs["bob"].hosts("gpus", "h1", "--format=json")
        assert res.returncode == 0, res.stderr
        return json.loads(res.stdout)

    procs = {"both": job(envs["alice"], "both", 2, 8)}
    try:
        deadline = time.monotonic() + 120
        while not (records / "both.started").exists():
            assert time.monotonic() < deadline, "alice's 2-GPU job never started"
            assert procs["both"].poll() is None, procs["both"].communicate()
            time.sleep(0.1)
        # kill -9 of alice's controller: her replica goes on on the host and keeps both GPUs
        os.killpg(procs["both"].pid, signal.SIGKILL)
        procs.pop("both").communicate()
        held = leases_on_h1()
        assert [(r["gpu"], r["state"], r["replica"]) for r in held] == [(0, "HELD", "workerpool0-0"),
                                                                       (1, "HELD", "workerpool0-0")], held
        assert held[0]["job"] and held[0]["job"] == held[1]["job"] and held[0]["pid"]
        procs["one"] = job(envs["bob"], "one", 1, 2)  # bob's controller: both GPUs are alice's
        procs["two"] = job(envs["alice"], "two", 1, 2)  # alice's second controller process
        outs = {k: p.communicate(timeout=240) for k, p in procs.items()}
    finally:
        for p in procs.values():
            reap(p)
    for k, p in procs.items():
        assert p.returncode == 0, f"{k}: {outs[k]}"
        assert "Waiting for GPUs" in outs[k][1] and f"held by job {held[0]['job']}" in outs[k][1], outs[k][1]
    recs = [json.loads(p.read_text()) for p in records.glob("*.json")]
    assert sorted(r["name"] for r in recs) == ["both", "one", "two"]  # alice's orphan finished too
    assert next(r for r in recs if r["name"] == "both")["cuda"] == "0,1"
    assert sorted(r["cuda"] for r in recs if r["name"] != "both") == ["0", "1"]
    for index in ("0", "1"):  # never two replicas on one index at once
        spans = sorted((r["start"], r["end"]) for r in recs if index in r["cuda"].split(","))
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), (index, spans)
    assert [(r["gpu"], r["state"]) for r in leases_on_h1()] == [(0, "FREE"), (1, "FREE")]


def test_study_goes_on_after_a_host_is_lost(cluster: netns.NetnsCluster, tmp_path: Path) -> None:
    env = Env(cluster, tmp_path, environ={"VCLI_SSH_ORPHAN_TIMEOUT": LOST_HOST_ORPHAN_TIMEOUT})
    h2 = cluster.host("h2").address
    pkg = write_package(tmp_path, {"trial.py": f"""
        import json, os, sys, time
        on_h2 = "{h2}:" in os.environ["CLUSTER_SPEC"]
        print("up on", "h2" if on_h2 else "h1", flush=True)
        time.sleep(600 if on_h2 else 1)
        print("accuracy=0.5", flush=True)
    """})
    pool = f"machine-type=n1-standard-4,replica-count=1,local-package-path={pkg},script=trial.py"
    proc = env.spawn("hp-tuning-jobs", "create", "--executor=ssh", "--hosts=h1,h2", "--display-name=loss-study",
                     "--max-trial-count=4", "--parallel-trial-count=2", "--max-failed-trial-count=1",
                     "--algorithm=random-search", "--seed=1", "--metric=metric-id=accuracy,goal=maximize",
                     "--parameter-spec=parameter-id=lr,type=double,min=0.01,max=1",
                     f"--worker-pool-spec={pool}", "--format=json")
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            logs = list((env.home / "jobs").rglob("replica.log")) if (env.home / "jobs").exists() else []
            if any("up on h2" in p.read_text() for p in logs):
                break
            time.sleep(0.2)
        else:
            raise AssertionError("no trial started on h2")
        cluster.link_down("h2")
        out, err = proc.communicate(timeout=180)
    finally:
        reap(proc)
        cluster.link_up("h2")
    assert proc.returncode == 0, f"{out}\n{err}"
    study = json.loads(out)
    states = [t["state"] for t in study["trials"]]
    # The trial lost with h2 is INFRASTRUCTURE and runs again (on h1): no trial of the budget is lost.
    assert len(states) == 5 and states.count("SUCCEEDED") == 4 and states.count("INFEASIBLE") == 1, f"{states}\n{err}"
    lost = next(t for t in study["trials"] if t["state"] == "INFEASIBLE")
    assert "h2" in json.dumps(lost) and lost["failureClass"] == "INFRASTRUCTURE", f"{lost}\n{err}"
    assert [t["retryOf"] for t in study["trials"] if t.get("retryOf")] == [lost["id"]], err
    # The replica stranded on the lost host was stopped there once its lease expired.
    deadline = time.monotonic() + 30
    stranded = [p for p in cluster.pids("h2") if netns.process_env(p).get("VCLI_JOB_ID")]
    while stranded and time.monotonic() < deadline:
        time.sleep(0.2)
        stranded = [p for p in cluster.pids("h2") if netns.process_env(p).get("VCLI_JOB_ID")]
    assert stranded == [], [netns.process_cmdline(p) for p in stranded]


# =========================================================================== packages and working directories (#14)


def _run_in(env: Env, cwd: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """The CLI run from `cwd` (not the repository, whose own `trainer` package must not be
    what the replicas import)."""
    return subprocess.run(env.argv(*args), env=env.env(), cwd=cwd, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=timeout)


def test_notebook_study_installs_package_uris_once_per_host(cluster: netns.NetnsCluster, tmp_path: Path) -> None:
    """A packageUris sdist and pythonModule: trainer.task, from an empty directory: the sdist is
    shipped and installed into `<host workdir>/envs/<key>` once; the next study reuses it."""
    from tests.kit import PACKAGE_URIS_STUDY, trainer_sdist

    env = Env(cluster, tmp_path)
    tarball = trainer_sdist(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    config = tmp_path / "study.yaml"
    config.write_text(PACKAGE_URIS_STUDY.format(uri=f"file://{tarball}"))

    first = _run_in(env, empty, "hp-tuning-jobs", "create", "--executor=ssh", "--hosts=h1", f"--config={config}",
                    "--format=json")
    assert first.returncode == 0, f"{first.stdout}\n{first.stderr}"
    study = json.loads(first.stdout)
    assert study["state"] == "JOB_STATE_SUCCEEDED"
    assert sorted(t["finalMeasurement"]["metrics"][0]["value"] for t in study["trials"]) == [0.1, 0.2]
    assert "h1: Installing trainer-0.1.tar.gz" in first.stderr
    envs = env.workdirs["h1"] / "envs"
    [env_dir] = [p for p in envs.iterdir() if p.is_dir() and (p / "vcli-env.json").is_file()]
    built = (env_dir / "vcli-env.json").stat().st_mtime_ns
    assert not list(empty.iterdir())  # nothing written where vcli was run
    # Each trial's replica ran in a private, empty working directory of its own on the host.
    assert len(list(env.workdirs["h1"].glob("jobs/*/replicas/workerpool0-0/work/data.csv"))) == 2

    second = _run_in(env, empty, "hp-tuning-jobs", "create", "--executor=ssh", "--hosts=h1", f"--config={config}",
                     "--format=json")
    assert second.returncode == 0, f"{second.stdout}\n{second.stderr}"
    assert json.loads(second.stdout)["state"] == "JOB_STATE_SUCCEEDED"
    assert "Installing" not in second.stderr and f"Using the Python environment {env_dir}" in second.stderr
    assert (env_dir / "vcli-env.json").stat().st_mtime_ns == built
    assert not list(empty.iterdir())


def test_parallel_trials_on_one_host_get_private_working_directories(cluster: netns.NetnsCluster,
                                                                      tmp_path: Path) -> None:
    """Two trials at once on one host, each writing data.csv where it runs: neither sees the
    other's, and neither the local package nor its synced copy on the host changes."""
    from tests.kit import WORKDIR_TASK, file_tree, trainer_package

    env = Env(cluster, tmp_path)
    pkg = trainer_package(tmp_path / "pkg")
    before = file_tree(pkg)
    res = _run_in(env, tmp_path, "hp-tuning-jobs", "create", "--executor=ssh", "--hosts=h1", "--display-name=isolated",
                  "--metric=metric-id=accuracy,goal=maximize",
                  f"--worker-pool-spec=machine-type=n1-standard-4,replica-count=1,local-package-path={pkg},"
                  "python-module=trainer.task",
                  "--parameter-spec=parameter-id=lr,type=discrete,values=0.1;0.2",
                  "--algorithm=grid-search", "--max-trial-count=2", "--parallel-trial-count=2", "--format=json")
    assert res.returncode == 0, f"{res.stdout}\n{res.stderr}"
    trials = json.loads(res.stdout)["trials"]
    assert [t["state"] for t in trials] == ["SUCCEEDED", "SUCCEEDED"]
    assert file_tree(pkg) == before
    [synced] = list((env.workdirs["h1"] / "code").iterdir())
    assert file_tree(synced) == before  # the shared synced tree is never a replica's working directory
    works = list(env.workdirs["h1"].glob("jobs/*/replicas/workerpool0-0/work"))
    assert len(works) == 2
    assert len({(w / "data.csv").read_text() for w in works}) == 2
    assert all((w / "trainer" / "task.py").read_text() == WORKDIR_TASK for w in works)


def test_pbt_copies_a_checkpoint_from_one_host_to_the_other(cluster: netns.NetnsCluster, tmp_path: Path) -> None:
    """Two one-GPU hosts and a population of two one-GPU members: each member trains on its own
    host, so the member that exploits the other starts from a checkpoint copied across hosts."""
    from tests.kit import PBT_TOY

    env = Env(cluster, tmp_path, extra={h: {"gpus": {"count": 1, "type": "NVIDIA_TESLA_T4"}} for h in ("h1", "h2")})
    pkg = write_package(tmp_path, {"toy.py": PBT_TOY})
    config = tmp_path / "pbt.yaml"
    config.write_text(textwrap.dedent("""
        displayName: pbt-ssh
        maxTrialCount: 6
        studySpec:
          metrics: [{metricId: score, goal: MAXIMIZE}]
          algorithm: POPULATION_BASED_TRAINING
          populationBasedTrainingSpec: {populationSize: 2, perturbationIntervalSteps: 2, quantileFraction: 0.5, maxStepCount: 8}
          parameters:
          - parameterId: lr
            doubleValueSpec: {minValue: 0.001, maxValue: 0.2}
            scaleType: UNIT_LOG_SCALE
        """))
    pool = (f"machine-type=n1-standard-4,replica-count=1,accelerator-type=NVIDIA_TESLA_T4,accelerator-count=1,"
            f"local-package-path={pkg},script=toy.py")
    res = env.run("hp-tuning-jobs", "create", "--executor=ssh", "--hosts=h1,h2", f"--config={config}", "--seed=4",
                  f"--worker-pool-spec={pool}", "--args=--steps=8,--pause=0.5", "--format=json", timeout=600)
    assert res.returncode == 0, f"{res.stdout}\n{res.stderr}"
    study = json.loads(res.stdout)
    assert study["state"] == "JOB_STATE_SUCCEEDED"
    trials = {t["id"]: t for t in study["trials"]}
    exploited = [t for t in trials.values() if "parentTrialId" in t["populationBasedTraining"]]
    assert exploited, res.stderr[-3000:]

    def host_of(t: dict[str, Any]) -> str:
        return env.describe(t["customJob"].rsplit("/", 1)[1])["replicas"][0]["host"]

    crossed = 0
    for t in exploited:
        lin = t["populationBasedTraining"]
        parent = trials[lin["parentTrialId"]]
        start = int(lin["startStep"])
        crossed += host_of(t) != host_of(parent)
        job = env.describe(t["customJob"].rsplit("/", 1)[1])
        log = Path(job["replicas"][0]["logPath"]).read_text()
        score = next(m["metrics"][0]["value"] for m in parent["measurements"] if int(m["stepCount"]) == start)
        assert f"restored step={start} score={score:.6f}" in log
        assert int(t["measurements"][0]["stepCount"]) == start + 1
    assert crossed >= 1


def test_a_port_that_never_speaks_ssh_is_named_as_such(tmp_path: Path) -> None:
    """A tarpit or a hung sshd was paramiko's "No existing session" (found by a probe)."""
    import socket

    from vcli.errors import ExecutorError
    from vcli.executors.ssh.trust import connect
    from vcli.placement.hosts import Host, KnownHosts

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(5)
    port = listener.getsockname()[1]
    try:
        host = Host(name="tarpit", address="127.0.0.1", port=port, user="root")
        with pytest.raises(ExecutorError) as e:
            connect(host, timeout=0.5, known_hosts=KnownHosts(user=tmp_path / "known_hosts", vcli=tmp_path / "known_hosts.vcli"))
    finally:
        listener.close()
    assert str(e.value) == (f"Cannot connect to host tarpit (root@127.0.0.1:{port}): no SSH answer within 0.5 s (a hung "
                            f"sshd, or another service on port {port}?)"), str(e.value)


def test_a_refused_port_and_an_identity_file_that_is_a_directory_are_said_plainly(tmp_path: Path) -> None:
    """Paramiko's "[Errno None] Unable to connect to port P on A" and a raw "[Errno 21] Is a
    directory" reached the user (found by a probe)."""
    import socket

    from vcli.errors import ExecutorError
    from vcli.executors.ssh.trust import connect
    from vcli.placement.hosts import Host, KnownHosts

    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nothing listens there now
    known = KnownHosts(user=tmp_path / "known_hosts", vcli=tmp_path / "known_hosts.vcli")
    with pytest.raises(ExecutorError) as e:
        connect(Host(name="gone", address="127.0.0.1", port=port, user="root"), timeout=2, known_hosts=known)
    assert str(e.value) == (f"Cannot connect to host gone (root@127.0.0.1:{port}): connection refused (no sshd "
                            f"listening on port {port}?)"), str(e.value)
    with pytest.raises(ExecutorError) as e:
        connect(Host(name="k", address="127.0.0.1", port=port, user="root", identity_file=str(tmp_path)), timeout=2,
                known_hosts=known)
    assert str(e.value) == f"Host k: identity file {tmp_path} is not a file.", str(e.value)

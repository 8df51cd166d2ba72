"""Tests for the example TensorFlow trainer (trainer/task.py).

The trainer is user code with an env-var contract, so it is run exactly as a
replica would be: ``python -m trainer.task`` in a subprocess.  Each process
gets its own session and is SIGKILLed (whole group) in a ``finally`` so no
replica outlives a test (TF replicas ignore SIGTERM).
"""

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 240

# Variables from the outer environment that would change the trainer's behaviour.
_SCRUB = (
    "TF_CONFIG",
    "AIP_MODEL_DIR",
    "AIP_CHECKPOINT_DIR",
    "AIP_TENSORBOARD_LOG_DIR",
    "CLOUD_ML_HP_METRIC_FILE",
    "CLOUD_ML_TRIAL_ID",
    "TF_USE_LEGACY_KERAS",
)


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env.update({k: str(v) for k, v in extra.items()})
    return env


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start(args, env, log_prefix):
    out = open(f"{log_prefix}.out", "w")
    err = open(f"{log_prefix}.err", "w")
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "trainer.task", *args],
            cwd=str(log_prefix.parent),
            env=env,
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    finally:
        out.close()
        err.close()


def _kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _logs(log_prefix):
    out = Path(f"{log_prefix}.out").read_text()
    err = Path(f"{log_prefix}.err").read_text()
    return f"--- stdout ---\n{out}\n--- stderr (tail) ---\n{err[-3000:]}"


def _run_all(specs):
    """Start every (args, env, log_prefix) spec, wait for all; return exit codes."""
    procs = []
    try:
        for args, env, log_prefix in specs:
            procs.append(_start(args, env, log_prefix))
        return [proc.wait(timeout=TIMEOUT) for proc in procs]
    finally:
        for proc in procs:
            _kill_group(proc)


def _metrics(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def _is_saved_model(path):
    path = Path(path)
    return (path / "saved_model.pb").is_file() and (path / "variables").is_dir()


def test_single_process_run(tmp_path):
    metric_file = tmp_path / "hp" / "output.metrics"
    env = _env(
        AIP_MODEL_DIR=tmp_path / "model",
        AIP_CHECKPOINT_DIR=f"file://{tmp_path / 'ckpt'}",
        AIP_TENSORBOARD_LOG_DIR=tmp_path / "tb",
        CLOUD_ML_HP_METRIC_FILE=metric_file,
        CLOUD_ML_TRIAL_ID="7",
    )
    log = tmp_path / "single"
    (rc,) = _run_all([(["--epochs=2", "--num_units=64.0", "--unknown_flag=1"], env, log)])
    assert rc == 0, _logs(log)

    stdout = Path(f"{log}.out").read_text().splitlines()
    epoch_lines = [line for line in stdout if line.startswith("epoch ")]
    assert len(epoch_lines) == 2, _logs(log)
    assert epoch_lines[0].startswith("epoch 1/2 loss=") and "val_accuracy=" in epoch_lines[0]
    assert stdout[-1].startswith("final val_accuracy="), _logs(log)
    assert "unknown arguments: --unknown_flag=1" in Path(f"{log}.err").read_text()

    metrics = _metrics(metric_file)
    assert [m["global_step"] for m in metrics] == ["1", "2"]
    for m in metrics:
        assert set(m) == {"accuracy", "checkpoint_path", "global_step", "timestamp", "trial"}
        assert 0.0 <= float(m["accuracy"]) <= 1.0
        assert m["trial"] == "7"
    assert float(stdout[-1].split("=")[1]) == round(float(metrics[-1]["accuracy"]), 4)

    assert _is_saved_model(tmp_path / "model"), list((tmp_path / "model").iterdir())
    assert (tmp_path / "ckpt" / "checkpoint").is_file()
    assert list((tmp_path / "ckpt").glob("ckpt-2.index"))
    assert list((tmp_path / "tb").glob("events.out.tfevents.*"))


def test_multi_worker_chief_and_worker(tmp_path):
    cluster = {
        "chief": [f"127.0.0.1:{_free_port()}"],
        "worker": [f"127.0.0.1:{_free_port()}"],
    }
    specs = []
    for task_type in ("chief", "worker"):
        # The worker gets its own AIP_* dirs: they must stay untouched (it saves to
        # temp dirs under its TMPDIR and deletes them).
        prefix = "" if task_type == "chief" else "worker_"
        tmpdir = tmp_path / f"{task_type}_tmp"
        tmpdir.mkdir()
        env = _env(
            TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": task_type, "index": 0}}),
            AIP_MODEL_DIR=tmp_path / f"{prefix}model",
            AIP_CHECKPOINT_DIR=tmp_path / f"{prefix}ckpt",
            AIP_TENSORBOARD_LOG_DIR=tmp_path / f"{prefix}tb",
            CLOUD_ML_HP_METRIC_FILE=tmp_path / f"{task_type}_hp" / "output.metrics",
            TMPDIR=tmpdir,
        )
        specs.append((["--epochs=3"], env, tmp_path / task_type))

    rcs = _run_all(specs)
    assert rcs == [0, 0], _logs(tmp_path / "chief") + "\n" + _logs(tmp_path / "worker")

    chief_out = Path(f"{tmp_path / 'chief'}.out").read_text().splitlines()
    worker_out = Path(f"{tmp_path / 'worker'}.out").read_text().splitlines()
    # Replicas are in sync: identical loss / accuracy every epoch.
    assert [l for l in chief_out if l.startswith("epoch ")] == [l for l in worker_out if l.startswith("epoch ")]
    assert len([l for l in worker_out if l.startswith("epoch ")]) == 3
    assert chief_out[-1].startswith("final val_accuracy=")

    metrics = _metrics(tmp_path / "chief_hp" / "output.metrics")
    assert [m["global_step"] for m in metrics] == ["1", "2", "3"]
    assert float(metrics[-1]["accuracy"]) > 0.8, metrics

    assert _is_saved_model(tmp_path / "model")
    assert list((tmp_path / "ckpt").glob("ckpt-3.index"))
    assert len(list((tmp_path / "tb").glob("events.out.tfevents.*"))) == 1

    # Nothing from the worker: no metric file, no AIP_* output, temp dirs removed.
    for name in ("worker_hp", "worker_model", "worker_ckpt", "worker_tb"):
        assert not (tmp_path / name).exists(), name
    assert list((tmp_path / "worker_tmp").iterdir()) == []


def test_evaluator_and_fail_if_exit_without_training(tmp_path):
    # Neither imports TensorFlow, so this is fast.
    tf_config = {"cluster": {"chief": ["127.0.0.1:1"]}, "task": {"type": "evaluator", "index": 0}}
    env = _env(TF_CONFIG=json.dumps(tf_config), CLOUD_ML_HP_METRIC_FILE=tmp_path / "hp" / "m")
    assert _run_all([([], env, tmp_path / "evaluator")]) == [0]
    assert not (tmp_path / "hp").exists()

    env = _env(CLOUD_ML_HP_METRIC_FILE=tmp_path / "hp" / "m")
    args = ["--learning_rate=0.6", "--fail_if=learning_rate>0.5"]
    assert _run_all([(args, env, tmp_path / "fail")]) == [3]
    assert "failing on purpose" in Path(f"{tmp_path / 'fail'}.err").read_text()
    assert not (tmp_path / "hp").exists()

"""`hp-tuning-jobs tensorboard`: TensorBoard over a real study's trial log directories, one run
per trial named by its id and parameters; the install hint when TensorBoard is missing."""

from __future__ import annotations

import json
import os
import re
import signal
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.helpers import REPO, script_study, spawn, vcli

# Writes TensorBoard scalars with TensorBoard's own event writer (no TensorFlow import: fast).
TRAINER = """
import os, sys, time
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter
args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:] if "=" in a)
writer = EventFileWriter(os.environ["AIP_TENSORBOARD_LOG_DIR"])
for step in (1, 2, 3):
    loss = float(args["x"]) / step
    summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag="loss", simple_value=loss)])
    writer.add_event(event_pb2.Event(wall_time=time.time(), step=step, summary=summary))
    print(f"score={-loss} step={step}", flush=True)
writer.close()
"""


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    tmp = tmp_path_factory.mktemp("tb")
    home = tmp / "home"
    _, study, _ = script_study(home, tmp, TRAINER, "--metric=metric-id=score,goal=maximize",
                               "--parameter-spec=parameter-id=x,type=double,min=0.1,max=1",
                               "--parameter-spec=parameter-id=opt,values=adam:v2;sgd",  # a ':' TensorBoard's spec cannot take
                               "--algorithm=random-search", "--max-trial-count=3", "--parallel-trial-count=3", "--seed=4")
    return home, study


def _get(url: str) -> object:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


def test_every_trial_is_a_run_named_by_its_id_and_parameters(study) -> None:
    home, s = study
    proc = spawn(home, "hp-tuning-jobs", "tensorboard", s["name"].rsplit("/", 1)[1], "--port=0")
    try:
        lines: list[str] = []
        deadline = time.monotonic() + 90
        port = None
        assert proc.stderr is not None
        os.set_blocking(proc.stderr.fileno(), False)
        while port is None:
            assert proc.poll() is None, "".join(lines) + (proc.stderr.read() or "")
            assert time.monotonic() < deadline, "TensorBoard never said where it serves:\n" + "".join(lines)
            line = proc.stderr.readline()
            if not line:
                time.sleep(0.1)
                continue
            lines.append(line)
            m = re.search(r"TensorBoard .* at http://127\.0\.0\.1:(\d+)/", line)
            port = int(m.group(1)) if m else None
        expected = {}
        for t in s["trials"]:
            p = {x["parameterId"]: x["value"] for x in t["parameters"]}
            expected[f"trial-{t['id']} x={p['x']:.4g} opt={p['opt'].replace(':', '_')}"] = t
        # Each trial's own log directory is listed before TensorBoard starts.
        listed = "".join(lines)
        for name in expected:
            assert name in listed
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:  # TensorBoard loads event files in the background after it starts serving
            tags = _get(f"{base}/data/plugin/scalars/tags")
            if len(tags) == 3 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert {run.removesuffix("/.") for run in tags} == set(expected)
        assert all(set(t) == {"loss"} for t in tags.values())
        run = next(r for r in tags if r.startswith(f"trial-{s['trials'][0]['id']} "))
        series = _get(f"{base}/data/plugin/scalars/scalars?run={urllib.parse.quote(run)}&tag=loss")
        x = next(p["value"] for p in s["trials"][0]["parameters"] if p["parameterId"] == "x")
        assert [round(v, 5) for _, _, v in series] == [round(x / step, 5) for step in (1, 2, 3)]
    finally:
        proc.send_signal(signal.SIGINT)  # vcli exec'd TensorBoard: Ctrl-C stops it, nothing is left
        assert proc.wait(timeout=30) is not None
        for stream in (proc.stdout, proc.stderr):
            if stream:
                stream.close()


def test_missing_tensorboard_is_one_line_with_the_install_hint(study, tmp_path: Path) -> None:
    home, s = study
    # TensorBoard made unimportable (a meta path finder that refuses it) and no `tensorboard` on PATH.
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(
        "import sys\n"
        "class _NoTensorBoard:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'tensorboard' or name.startswith('tensorboard.'):\n"
        "            raise ModuleNotFoundError(name)\n"
        "        return None\n"
        "sys.meta_path.insert(0, _NoTensorBoard())\n")
    r = vcli(home, "hp-tuning-jobs", "tensorboard", s["name"].rsplit("/", 1)[1],
             PYTHONPATH=f"{shim}{os.pathsep}{REPO}", PATH=str(tmp_path))
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines()[-1].endswith("pip install tensorboard (or pip install 'vcli[tensorboard]')")

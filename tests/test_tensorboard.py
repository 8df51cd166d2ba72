"""`hp-tuning-jobs tensorboard`: TensorBoard over a real study's trial log directories, one run
per trial named by its id and parameters; the study's log directory with TensorBoard's
HPARAMS data (`vcli.plots.tensorboard.StudyLogs`), read back with TensorBoard's own event
reader and through a real TensorBoard's hparams plugin; the install hint when TensorBoard is
missing."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

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


def _get(url: str, body: dict[str, Any] | None = None) -> Any:
    """GET `url`, or POST `body` as JSON (the hparams plugin's API)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def _wait_for_port(stream, lines: list[str], proc: subprocess.Popen[str], timeout: float = 90) -> int:
    """Read TensorBoard's stderr until it names the port it serves on."""
    deadline = time.monotonic() + timeout
    os.set_blocking(stream.fileno(), False)
    while True:
        assert proc.poll() is None, "".join(lines) + (stream.read() or "")
        assert time.monotonic() < deadline, "TensorBoard never said where it serves:\n" + "".join(lines)
        line = stream.readline()
        if not line:
            time.sleep(0.1)
            continue
        lines.append(line)
        m = re.search(r"TensorBoard .* at http://127\.0\.0\.1:(\d+)/", line)
        if m:
            return int(m.group(1))


def _runs_loaded(base: str, count: int) -> dict[str, Any]:
    """The scalar tags of each run, once `count` runs are loaded (TensorBoard loads event files
    in the background after it starts serving)."""
    deadline = time.monotonic() + 30
    while True:
        tags = _get(f"{base}/data/plugin/scalars/tags")
        if len(tags) == count or time.monotonic() > deadline:
            return tags
        time.sleep(0.5)


def test_every_trial_is_a_run_named_by_its_id_and_parameters(study) -> None:
    home, s = study
    proc = spawn(home, "hp-tuning-jobs", "tensorboard", s["name"].rsplit("/", 1)[1], "--port=0")
    try:
        lines: list[str] = []
        assert proc.stderr is not None
        port = _wait_for_port(proc.stderr, lines, proc)
        expected = {}
        for t in s["trials"]:
            p = {x["parameterId"]: x["value"] for x in t["parameters"]}
            expected[f"trial-{t['id']} x={p['x']:.4g} opt={p['opt'].replace(':', '_')}"] = t
        # Each trial's own log directory is listed before TensorBoard starts.
        listed = "".join(lines)
        for name in expected:
            assert name in listed
        base = f"http://127.0.0.1:{port}"
        tags = _runs_loaded(base, 3)
        # (`/.` ends the names while the CLI serves with --logdir_spec; StudyLogs has none, below.)
        assert {run.removesuffix("/.") for run in tags} == set(expected)
        assert all("loss" in t for t in tags.values())
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


def _study_logs(home: Path, s: dict, root: Path):
    """(runs, StudyLogs) of the study in `home`, read from its store as `hp-tuning-jobs
    tensorboard` reads them."""
    from vcli import codec
    from vcli.codec.gcs import local_path
    from vcli.plots import tensorboard as tb
    from vcli.store import Store

    store = Store(home)
    try:
        sid = s["name"].rsplit("/", 1)[1]
        row = store.get_job(sid)
        trials = store.trials(sid)
        params = {t.id: t.parameters for t in trials}
        outputs = [(c.trial_id, params.get(c.trial_id, {}), c.record["outputDirectory"])
                   for c in store.child_jobs(sid) if c.trial_id and c.record.get("outputDirectory")]
        spec = codec.study_spec_from_stored(row.record["studySpec"])
        return tb.runs(outputs, local_path), tb.StudyLogs(str(root), spec, codec.iter_parameters(spec.parameters), trials)
    finally:
        store.close()


def test_the_study_log_directory_reads_back_with_tensorboards_event_reader(study, tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.plugins.hparams import api_pb2, plugin_data_pb2

    from vcli.plots import tensorboard as tb

    home, s = study
    runs, logs = _study_logs(home, s, tmp_path / "tb")
    root = Path(tb.write_study_logdir(logs, runs))

    def summaries(path: Path) -> list[tuple[int, str, Any]]:
        out = []
        for event in EventFileLoader(str(path)).Load():  # checks every record's CRC-32C
            for v in event.summary.value:
                if v.metadata.plugin_data.plugin_name == "hparams":
                    out.append((event.step, v.tag, plugin_data_pb2.HParamsPluginData.FromString(v.metadata.plugin_data.content)))
                else:
                    assert v.metadata.plugin_data.plugin_name == "scalars"
                    out.append((event.step, v.tag, v.tensor.float_val[0]))
        return out

    ((_, tag, data),) = summaries(root / tb.EVENT_FILE)
    assert tag == "_hparams_/experiment"
    infos = {h.name: h for h in data.experiment.hparam_infos}
    assert (infos["x"].type, infos["x"].domain_interval.min_value, infos["x"].domain_interval.max_value) == \
        (api_pb2.DATA_TYPE_FLOAT64, 0.1, 1.0)
    assert infos["opt"].type == api_pb2.DATA_TYPE_STRING
    assert [v.string_value for v in infos["opt"].domain_discrete.values] == ["adam:v2", "sgd"]
    assert [(m.name.tag, m.display_name) for m in data.experiment.metric_infos] == [("vcli/score/final", "score")]
    # One folder per trial, named as the run, holding vcli's session and links to the trainer's files.
    assert sorted(p.name for p in root.iterdir() if p.is_dir()) == sorted(r.name for r in runs)
    for r in runs:
        t = next(x for x in s["trials"] if x["id"] == r.trial_id)
        params = {p["parameterId"]: p["value"] for p in t["parameters"]}
        folder = root / r.name
        linked = [p for p in folder.iterdir() if p.is_symlink()]
        assert linked and all(p.resolve().parent == Path(r.log_dir).resolve() for p in linked)
        got = summaries(folder / tb.EVENT_FILE)
        start, end = got[0][2].session_start_info, got[-1][2].session_end_info
        assert got[0][1] == "_hparams_/session_start_info" and got[-1][1] == "_hparams_/session_end_info"
        assert start.hparams["x"].number_value == params["x"] and start.hparams["opt"].string_value == params["opt"]
        assert end.status == api_pb2.STATUS_SUCCESS and end.end_time_secs > start.start_time_secs
        curve = [(step, value) for step, tag, value in got if tag == "vcli/score"]
        assert curve == [(int(m["stepCount"]), pytest.approx(m["metrics"][0]["value"], rel=1e-6)) for m in t["measurements"]]
        (final,) = [(step, value) for step, tag, value in got if tag == "vcli/score/final"]
        assert final == (3, pytest.approx(t["finalMeasurement"]["metrics"][0]["value"], rel=1e-6))


def test_tensorboard_serves_the_study_with_hparams_and_plain_run_names(study, tmp_path: Path) -> None:
    """A real TensorBoard over `tensorboard_argv(..., study=...)`: each trial is one run named
    exactly by its id and parameters, holding the trainer's scalars and vcli's; the HPARAMS
    dashboard's API lists every trial as a session with its parameters, status and final score."""
    from vcli.plots import tensorboard as tb

    home, s = study
    runs, logs = _study_logs(home, s, tmp_path / "tb")
    argv = tb.tensorboard_argv(runs, host="127.0.0.1", port=0, study=logs)
    assert argv[:3] == [sys.executable, "-m", "tensorboard.main"] and f"--logdir={tmp_path / 'tb'}" in argv
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        assert proc.stderr is not None
        base = f"http://127.0.0.1:{_wait_for_port(proc.stderr, [], proc)}"
        tags = _runs_loaded(base, 3)
        assert set(tags) == {r.name for r in runs}  # no `/.`
        assert all(set(t) == {"loss", "vcli/score", "vcli/score/final"} for t in tags.values()), tags
        experiment = _get(f"{base}/data/plugin/hparams/experiment", {"experimentName": ""})
        assert {h["name"] for h in experiment["hparamInfos"]} == {"x", "opt"}
        assert [m["name"]["tag"] for m in experiment["metricInfos"]] == ["vcli/score/final"]
        groups = _get(f"{base}/data/plugin/hparams/session_groups", {
            "experimentName": "", "startIndex": 0, "sliceSize": 10,
            "allowedStatuses": ["STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE", "STATUS_RUNNING"]})["sessionGroups"]
        assert {g["name"] for g in groups} == {r.name for r in runs}
        for g in groups:
            t = next(x for x in s["trials"] if g["name"].startswith(f"trial-{x['id']} "))
            params = {p["parameterId"]: p["value"] for p in t["parameters"]}
            assert g["hparams"] == {"x": pytest.approx(params["x"]), "opt": params["opt"]}
            assert g["sessions"][0]["status"] == "STATUS_SUCCESS"
            (value,) = g["metricValues"]
            assert value["value"] == pytest.approx(t["finalMeasurement"]["metrics"][0]["value"], rel=1e-6)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)


def test_crc32c_is_castagnolis() -> None:
    from vcli.plots.tensorboard import crc32c

    assert crc32c(b"123456789") == 0xE3069283  # the standard check value
    assert crc32c(b"") == 0


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
    assert r.returncode == 9, r.stderr  # a missing extra
    assert r.stderr.strip().splitlines()[-1].endswith("needs TensorBoard, which the [tensorboard] extra installs: "
                                                      f"{sys.executable} -m pip install 'vcli[tensorboard]'"), r.stderr


def test_a_port_in_use_or_a_host_not_here_is_one_line_before_tensorboard_starts(study) -> None:
    """TensorBoard said so itself, after seconds of its start-up logging, and exited 255."""
    home, s = study
    study_id = s["name"].rsplit("/", 1)[1]
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = vcli(home, "hp-tuning-jobs", "tensorboard", study_id, f"--port={port}", timeout=60)
    assert r.returncode == 1, r.stderr
    assert r.stderr.strip().splitlines() == [
        f"ERROR: (vcli.hp-tuning-jobs.tensorboard) Invalid value for [--port]: port {port} on 127.0.0.1 is in use "
        "(another TensorBoard?): give another, or --port=0 for any free port."]
    r = vcli(home, "hp-tuning-jobs", "tensorboard", study_id, "--host=192.0.2.1", "--port=0", timeout=60)
    assert r.returncode == 1 and r.stderr.strip().splitlines() == [
        "ERROR: (vcli.hp-tuning-jobs.tensorboard) Invalid value for [--host]: cannot listen on [192.0.2.1]:0: "
        "Cannot assign requested address"], r.stderr

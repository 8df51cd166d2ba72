"""TensorBoard over a study's trials (`hp-tuning-jobs tensorboard`). Standard library only.

Every trial's replicas get `AIP_TENSORBOARD_LOG_DIR=<trial output>/logs/` (vcli.cluster); the
trial's custom job records that output directory. This module turns a study's trials into
TensorBoard runs named `trial-<id> <param>=<value> ...` and into the argv that serves them;
the CLI replaces itself with that TensorBoard (exec), so stopping it stops TensorBoard and
nothing is left behind.

With the study given (`StudyLogs`), TensorBoard serves one log directory that vcli writes
under the study's own folder (nothing is written into a trial's output), laid out as
TensorBoard's HPARAMS dashboard expects (the hparams plugin's format: the
`_hparams_/experiment`, `_hparams_/session_start_info` and `_hparams_/session_end_info`
summaries):

    <root>/events.out.tfevents.0.vcli          the experiment: every parameter with its domain
                                               from the spec, every metric of the study
    <root>/<run name>/events.out.tfevents.0.vcli
                                               one session per trial: its parameter values,
                                               start and end times and status, the metrics'
                                               measurements by step (tag `vcli/<metric>`) and
                                               the final value (tag `vcli/<metric>/final`, the
                                               HPARAMS table's metric column; float32, as
                                               TensorFlow's own scalars)
    <root>/<run name>/<entry> -> <trial's AIP_TENSORBOARD_LOG_DIR>/<entry>
                                               a link to each file and folder the trainer
                                               wrote there, so its own scalars share the run

Each trial is one run, named exactly `trial-3 lr=0.01 units=64` (TensorBoard names the
runs of `--logdir` by their path below it: no `/.` suffix as with `--logdir_spec`). Links
are made when TensorBoard starts: folders the trainer writes into later (Keras's `train/`)
are followed live, but a new top-level event file of a trial that was still running is
seen at the next `tensorboard`. The event files are TFRecord files of `Event` protocol
buffers, written here with the standard library (a TensorBoard found on PATH, outside this
Python, serves them all the same).
"""

from __future__ import annotations

import importlib.util
import math
import os
import shutil
import struct
import sys
from dataclasses import dataclass
from typing import Mapping, Sequence

from vcli.errors import MissingExtraError, UsageError
from vcli.plots.data import parse_time
from vcli.spec import (
    CategoricalValueSpec,
    DiscreteValueSpec,
    DoubleValueSpec,
    IntegerValueSpec,
    ParameterSpec,
    StudySpec,
    Trial,
    TrialState,
)


@dataclass(frozen=True)
class Run:
    """One trial as a TensorBoard run: `name` is what TensorBoard shows, `log_dir` the trial's
    AIP_TENSORBOARD_LOG_DIR on this machine, `present` whether it exists here (an SSH host's
    trial keeps its logs on the host)."""

    trial_id: str
    name: str
    log_dir: str
    present: bool


def _value(v: object) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


#: The longest run name, in bytes: it is a folder's name (255 bytes on most file systems).
MAX_RUN_NAME = 200


def run_name(trial_id: str, parameters: Mapping[str, object]) -> str:
    """`trial-3 learning_rate=0.01 units=64`. TensorBoard's --logdir_spec splits entries on
    `,` and a name from its path on the first `:`, so both are replaced in values, and so is
    `/` (the name is a folder's); a name longer than MAX_RUN_NAME bytes is cut, ending in `…`
    (the trial id, first, keeps it unique)."""
    parts = [f"trial-{trial_id}", *(f"{k}={_value(v)}" for k, v in parameters.items())]
    name = " ".join(parts).replace(",", ";").replace(":", "_").replace("/", "_").replace("\0", "")
    if len(name.encode()) > MAX_RUN_NAME:
        name = name.encode()[:MAX_RUN_NAME - 3].decode(errors="ignore") + "…"
    return name


def runs(trials: Sequence[tuple[str, Mapping[str, object], str]], local_path) -> list[Run]:
    """Runs for (trial id, parameters, the trial job's outputDirectory); `local_path` maps a
    gs:// directory to its local place (vcli.codec.gcs)."""
    out = []
    for trial_id, params, output_dir in trials:
        base = local_path(output_dir) if output_dir.startswith("gs://") else output_dir
        log_dir = os.path.join(base.rstrip("/"), "logs")
        out.append(Run(trial_id, run_name(trial_id, params), log_dir, os.path.isdir(log_dir)))
    return out


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:  # a finder that refuses the module: it is not usable here
        return False


@dataclass(frozen=True)
class StudyLogs:
    """The study whose runs TensorBoard serves with HPARAMS data: `root` is the folder vcli
    writes the study's log directory in (the CLI: `tensorboard/` in the study's own job
    folder; replaced at each start), `params` every parameter (`codec.iter_parameters`),
    `trials` in trial order."""

    root: str
    spec: StudySpec
    params: Sequence[ParameterSpec]
    trials: Sequence[Trial]


def tensorboard_argv(runs_: Sequence[Run], *, host: str, port: int, study: StudyLogs | None = None) -> list[str]:
    """The command that serves these runs, with the TensorBoard that this Python can import
    (else the one on PATH); UsageError with the install hint if there is none.

    With `study`, the study's log directory is written first (`write_study_logdir`) and
    served with `--logdir`: every trial is a session of the HPARAMS dashboard, with or
    without logs of its own; UsageError if the study has no trial yet. Without it, the runs
    with logs here are served with `--logdir_spec` (run names end in `/.`, no HPARAMS data);
    UsageError if no run has logs here."""
    present = [r for r in runs_ if r.present]
    if study is not None:
        if not study.trials:
            raise UsageError("this study has no trial yet: there is nothing for TensorBoard to show")
    elif not present:
        raise UsageError("no trial of this study has a TensorBoard log directory on this machine yet "
                         "(trials write to AIP_TENSORBOARD_LOG_DIR)")
    else:
        for r in present:
            if "," in r.log_dir:
                raise UsageError(f"TensorBoard cannot serve [{r.log_dir}]: its --logdir_spec does not allow ',' in paths")
    if _importable("tensorboard"):
        exe = [sys.executable, "-m", "tensorboard.main"]
    elif shutil.which("tensorboard"):
        exe = [shutil.which("tensorboard") or "tensorboard"]
    else:
        raise MissingExtraError("hp-tuning-jobs tensorboard", "tensorboard", "TensorBoard")
    if study is not None:
        return [*exe, f"--logdir={write_study_logdir(study, runs_)}", f"--host={host}", f"--port={port}"]
    spec = ",".join(f"{r.name}:{r.log_dir}" for r in present)
    return [*exe, f"--logdir_spec={spec}", f"--host={host}", f"--port={port}"]


# --------------------------------------------------------------------------- the study's log directory

#: vcli's own event file in each folder: `tfevents` in its name makes it one; the 0 sorts it
#: before the trainer's (`events.out.tfevents.<time>...`), which TensorBoard's Python loader
#: reads in name order.
EVENT_FILE = "events.out.tfevents.0.vcli"
#: TensorBoard's hparams plugin (`tensorboard/plugins/hparams/api.proto`, `plugin_data.proto`).
EXPERIMENT_TAG = "_hparams_/experiment"
SESSION_START_TAG = "_hparams_/session_start_info"
SESSION_END_TAG = "_hparams_/session_end_info"
STATUS_SUCCESS, STATUS_FAILURE, STATUS_RUNNING = 1, 2, 3
DATA_TYPE_STRING, DATA_TYPE_FLOAT64 = 1, 3


def metric_tag(metric_id: str, *, final: bool = False) -> str:
    """The scalar tag of a metric's measurements (`vcli/score`), or of its final value
    (`vcli/score/final`, the HPARAMS metric). Prefixed, so a trainer's own `score` summaries
    in the same run stay a series of their own."""
    return f"vcli/{metric_id}/final" if final else f"vcli/{metric_id}"


def write_study_logdir(study: StudyLogs, runs_: Sequence[Run]) -> str:
    """Write the study's log directory (module docstring) at `study.root`, replacing what a
    previous start left there, and return its path. Only vcli's own files and links are
    removed: a link is removed, never followed."""
    root = os.path.abspath(study.root)
    fresh = root + ".new"
    shutil.rmtree(fresh, ignore_errors=True)
    os.makedirs(fresh, mode=0o700)
    by_trial = {r.trial_id: r for r in runs_}
    first = _first_start(study.trials)
    _write_events(os.path.join(fresh, EVENT_FILE), first, [_event(first, 0, [_experiment(study)])])
    for t in study.trials:
        run = by_trial.get(t.id)
        folder = os.path.join(fresh, run.name if run else run_name(t.id, t.parameters))
        os.makedirs(folder, mode=0o700, exist_ok=True)
        start = parse_time(t.start_time)
        _write_events(os.path.join(folder, EVENT_FILE), start.timestamp() if start else first, _session_events(study, t))
        if run is not None and run.present:
            for entry in sorted(os.listdir(run.log_dir)):
                if entry != EVENT_FILE:
                    os.symlink(os.path.join(run.log_dir, entry), os.path.join(folder, entry))
    shutil.rmtree(root, ignore_errors=True)
    os.replace(fresh, root)
    return root


def _first_start(trials: Sequence[Trial]) -> float:
    starts = [w.timestamp() for t in trials if (w := parse_time(t.start_time)) is not None]
    return min(starts) if starts else 0.0


def _experiment(study: StudyLogs) -> bytes:
    """The `_hparams_/experiment` summary value: the spec's parameters and the study's metrics."""
    infos = b"".join(_message(4, _hparam_info(p)) for p in study.params)
    metrics = b"".join(_message(5, _message(1, _string(2, metric_tag(m.metric_id, final=True)))
                                + _string(3, m.metric_id)
                                + _string(4, f"{m.metric_id}: the trial's final measurement ({m.goal.value.lower()})"))
                       for m in study.spec.metrics)
    experiment = _double(3, _first_start(study.trials)) + infos + metrics
    return _hparams_value(EXPERIMENT_TAG, _message(2, experiment))


def _hparam_info(p: ParameterSpec) -> bytes:
    v = p.value_spec
    out = _string(1, p.parameter_id)
    if isinstance(v, CategoricalValueSpec):
        return out + _varint_field(4, DATA_TYPE_STRING) + _message(5, b"".join(_message(1, _string(3, str(c))) for c in v.values))
    out += _varint_field(4, DATA_TYPE_FLOAT64)
    if isinstance(v, DiscreteValueSpec):
        return out + _message(5, b"".join(_message(1, _double(2, float(x))) for x in v.values))
    assert isinstance(v, (DoubleValueSpec, IntegerValueSpec))
    return out + _message(6, _double(1, float(v.min_value)) + _double(2, float(v.max_value)))


def _session_events(study: StudyLogs, t: Trial) -> list[bytes]:
    """A trial's session: its start (parameter values), every measurement of every metric,
    the final values and, once it ended, its end and status."""
    start = parse_time(t.start_time)
    begin = start.timestamp() if start else _first_start(study.trials)
    values = b"".join(_message(1, _string(1, k) + _message(2, _string(3, v) if isinstance(v, str) else _double(2, float(v))))
                      for k, v in t.parameters.items())
    events = [_event(begin, 0, [_hparams_value(SESSION_START_TAG, _message(3, values + _double(5, begin)))])]
    for m in sorted(t.measurements, key=lambda m: m.step_count):
        when = begin + (m.elapsed_seconds or 0.0)
        scalars = [_scalar_value(metric_tag(k), float(v)) for k, v in m.metrics.items() if _finite(v)]
        if scalars:
            events.append(_event(when, m.step_count, scalars))
    final = t.final_measurement
    end = parse_time(t.end_time)
    finish = end.timestamp() if end else begin
    if t.state == TrialState.SUCCEEDED and final is not None:
        scalars = [_scalar_value(metric_tag(k, final=True), float(v)) for k, v in final.metrics.items() if _finite(v)]
        events.append(_event(finish, final.step_count, scalars))
    if t.state.is_final():
        status = STATUS_SUCCESS if t.state == TrialState.SUCCEEDED else STATUS_FAILURE
        events.append(_event(finish, final.step_count if final else 0,
                             [_hparams_value(SESSION_END_TAG, _message(4, _varint_field(1, status) + _double(2, finish)))]))
    return events


def _finite(v: object) -> bool:
    try:
        return math.isfinite(float(v))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False


# --------------------------------------------------------------------------- event files


def _write_events(path: str, wall_time: float, events: Sequence[bytes]) -> None:
    """A TFRecord file of the version event (at `wall_time`) then `events` (serialized
    `Event` messages)."""
    with open(path, "wb") as f:
        for data in [_double(1, wall_time) + _string(3, "brain.Event:2"), *events]:
            f.write(_record(data))


def _record(data: bytes) -> bytes:
    """One TFRecord: length, its masked CRC-32C, the data, its masked CRC-32C."""
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", _masked_crc(length)) + data + struct.pack("<I", _masked_crc(data))


def _crc_table() -> list[int]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1  # Castagnoli, reflected
        table.append(c)
    return table


_CRC_TABLE = _crc_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), the checksum of TFRecord files."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _masked_crc(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _event(wall_time: float, step: int, values: Sequence[bytes]) -> bytes:
    """An `Event` (wall_time 1, step 2, summary 5) whose summary holds `values`."""
    return _double(1, wall_time) + _varint_field(2, max(step, 0)) + _message(5, b"".join(_message(1, v) for v in values))


def _scalar_value(tag: str, value: float) -> bytes:
    """A `Summary.Value` (tag 1, metadata 9, tensor 8) holding a scalar of the scalars plugin
    as a float32 tensor, as TensorFlow writes them: TensorBoard's fast loader (the Rust data
    server) reads no other scalar type, so values are rounded to about 7 digits."""
    metadata = _message(1, _string(1, "scalars")) + _varint_field(4, 1)  # DATA_CLASS_SCALAR
    tensor = _varint_field(1, 1) + _message(2, b"") + _message(5, struct.pack("<f", value))  # DT_FLOAT, shape [], float_val
    return _string(1, tag) + _message(9, metadata) + _message(8, tensor)


#: The hparams plugin's summaries carry no data of their own: a float tensor of shape [0].
_NULL_TENSOR = bytes.fromhex("080112021200")


def _hparams_value(tag: str, plugin_data: bytes) -> bytes:
    """A `Summary.Value` of the hparams plugin; `plugin_data` is an `HParamsPluginData`."""
    metadata = _message(1, _string(1, "hparams") + _message(2, plugin_data))
    return _string(1, tag) + _message(9, metadata) + _message(8, _NULL_TENSOR)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _varint_field(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value)


def _double(number: int, value: float) -> bytes:
    return _varint(number << 3 | 1) + struct.pack("<d", value)


def _message(number: int, data: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _string(number: int, text: str) -> bytes:
    return _message(number, text.encode("utf-8"))

"""TensorBoard over a study's trials (`hp-tuning-jobs tensorboard`). Standard library only.

Every trial's replicas get `AIP_TENSORBOARD_LOG_DIR=<trial output>/logs/` (vcli.cluster); the
trial's custom job records that output directory. This module turns a study's trials into
TensorBoard runs named `trial-<id> <param>=<value> ...` and into the argv that serves them;
the CLI replaces itself with that TensorBoard (exec), so stopping it stops TensorBoard and
nothing is left behind.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from dataclasses import dataclass
from typing import Mapping, Sequence

from vcli.errors import UsageError

INSTALL_HINT = "TensorBoard is not installed here: pip install tensorboard (or pip install 'vcli[tensorboard]')"


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


def run_name(trial_id: str, parameters: Mapping[str, object]) -> str:
    """`trial-3 learning_rate=0.01 units=64`. TensorBoard's --logdir_spec splits entries on
    `,` and a name from its path on the first `:`, so both are replaced in values."""
    parts = [f"trial-{trial_id}", *(f"{k}={_value(v)}" for k, v in parameters.items())]
    return " ".join(parts).replace(",", ";").replace(":", "_")


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


def tensorboard_argv(runs_: Sequence[Run], *, host: str, port: int) -> list[str]:
    """The command that serves these runs, with the TensorBoard that this Python can import
    (else the one on PATH). UsageError with the install hint if there is none; UsageError if
    no run has logs here."""
    present = [r for r in runs_ if r.present]
    if not present:
        raise UsageError("no trial of this study has a TensorBoard log directory on this machine yet "
                         "(trials write to AIP_TENSORBOARD_LOG_DIR)")
    for r in present:
        if "," in r.log_dir:
            raise UsageError(f"TensorBoard cannot serve [{r.log_dir}]: its --logdir_spec does not allow ',' in paths")
    if _importable("tensorboard"):
        exe = [sys.executable, "-m", "tensorboard.main"]
    elif shutil.which("tensorboard"):
        exe = [shutil.which("tensorboard") or "tensorboard"]
    else:
        raise UsageError(INSTALL_HINT)
    spec = ",".join(f"{r.name}:{r.log_dir}" for r in present)
    return [*exe, f"--logdir_spec={spec}", f"--host={host}", f"--port={port}"]

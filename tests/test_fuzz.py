"""Generated hostile input (fixed seed): no traceback, no hang, no memory blow-up, documented
exit codes only, one ERROR line.

A few hundred cases of `--worker-pool-spec` values, job and study documents (`--config`), study
flags and `--filter`/`--sort-by`/`--format` strings, built by mutating valid inputs with
hostile values (empty, huge, negative, NaN, 5,000-digit numbers, 10,000 characters, unicode,
NUL bytes, shell placeholders, wrong types, deep nesting). Every case runs with
`--validate-only` (nothing is launched) or on a `list` command, in this process through vcli's
own Typer app (milliseconds each) under a per-case time limit; a sample also goes through the
real CLI in a subprocess, whose peak memory is measured by wait4.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import PeakRss, vcli_env

#: Exit codes a validate-only or list command may end with (vcli.errors.ExitCode): OK, INVALID,
#: USAGE, EXECUTOR_UNAVAILABLE, NOT_FOUND.
DOCUMENTED = {0, 1, 2, 3, 4}
SEED = 20261125
PER_CASE_SECONDS = 10.0

HOSTILE = [
    "", " ", "=", ",", ";", "==n1", "-1", "0", "1e308", "-1e308", "nan", "inf", "0x10", "1_000", "7" * 5000,
    "a" * 10_000, "１２", "héllo", "\u202e", "$IMAGE", "${JOB_DIR}/x", "../../..", "/etc/passwd", "~", "null",
    "true", "[1, 2]", "{a: 1}", "*", "(", "\\", "'", '"', "\n", "\t",
]
POOL_KEYS = ["machine-type", "replica-count", "accelerator-type", "accelerator-count", "container-image-uri",
             "executor-image-uri", "python-module", "local-package-path", "script", "requirements", "extra-packages",
             "extra-dirs", "output-image-uri", "bogus-key"]


def _pool(rng: random.Random) -> str:
    parts = ["machine-type=n1-standard-4", "container-image-uri=x"]
    for _ in range(rng.randint(1, 3)):
        key = rng.choice(POOL_KEYS)
        value = rng.choice(HOSTILE)
        parts.insert(rng.randint(0, len(parts)), f"{key}={value}" if rng.random() < 0.9 else key)
    return ",".join(parts)


VALID_JOB: dict[str, Any] = {"workerPoolSpecs": [{"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": 1,
                                                   "containerSpec": {"imageUri": "x", "command": ["python3", "-c", "0"]}}]}
VALID_STUDY: dict[str, Any] = {
    "studySpec": {"metrics": [{"metricId": "acc", "goal": "MAXIMIZE"}],
                  "parameters": [{"parameterId": "lr", "doubleValueSpec": {"minValue": 0.001, "maxValue": 0.1},
                                  "scaleType": "UNIT_LOG_SCALE"}],
                  "algorithm": "RANDOM_SEARCH"},
    "maxTrialCount": 4, "parallelTrialCount": 2,
    "trialJobSpec": VALID_JOB,
}


def _hostile_value(rng: random.Random) -> Any:
    kind = rng.randrange(9)
    if kind == 0:  # a bare number of that many digits in the text (Python cannot even print it)
        return f"@@BIG{rng.choice([20, 400, 5000])}@@"
    if kind == 1:
        return rng.choice([float("nan"), float("inf"), -1.0, 0, -(2**63), 1e308])
    if kind == 2:
        return rng.choice(HOSTILE)
    if kind == 3:
        return "bad\x00nul"
    if kind == 4:
        return [rng.choice(HOSTILE)] * rng.randint(0, 3)
    if kind == 5:
        return {rng.choice(HOSTILE) or "k": rng.choice(HOSTILE)}
    if kind == 6:
        deep: Any = "leaf"
        for _ in range(rng.choice([10, 70, 500])):
            deep = {"a": deep} if rng.random() < 0.5 else [deep]
        return deep
    if kind == 7:
        return None
    return rng.choice([True, False])


def _mutate(doc: Any, rng: random.Random) -> Any:
    """`doc` with one node (a leaf, or a whole subtree) replaced by a hostile value, or a key added."""
    doc = json.loads(json.dumps(doc))
    paths: list[tuple[Any, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                paths.append((node, k))
                walk(v)
        elif isinstance(node, list):
            for i, v in enumerate(node):
                paths.append((node, i))
                walk(v)

    walk(doc)
    parent, key = rng.choice(paths)
    if isinstance(parent, dict) and rng.random() < 0.2:
        parent[rng.choice(["bogusField", "diskSpec", "scheduling", "labels", "enableWebAccess"])] = _hostile_value(rng)
    else:
        parent[key] = _hostile_value(rng)
    return doc


def _dump(doc: Any, rng: random.Random) -> bytes:
    """The document as YAML or JSON text (JSON cannot hold NaN strictly: Python writes NaN)."""
    import re

    text = None
    if rng.random() < 0.5:
        import yaml

        try:
            text = yaml.safe_dump(doc, allow_unicode=True)
        except (yaml.YAMLError, RecursionError):
            pass
    if text is None:
        try:
            text = json.dumps(doc)
        except (ValueError, RecursionError):
            text = "{}"
    return re.sub(r"""['"]?@@BIG(\d+)@@['"]?""", lambda m: "9" * int(m.group(1)), text).encode()


def _cases(tmp: Path) -> list[tuple[str, list[str]]]:
    rng = random.Random(SEED)
    cases: list[tuple[str, list[str]]] = []
    for i in range(90):
        cases.append((f"pool-{i}", ["custom-jobs", "create", "--display-name=f", f"--worker-pool-spec={_pool(rng)}",
                                    "--executor=local", "--validate-only"]))
    for i in range(80):
        path = tmp / f"job-{i}.yaml"
        path.write_bytes(_dump(_mutate(VALID_JOB, rng), rng))
        cases.append((f"job-config-{i}", ["custom-jobs", "create", "--display-name=f", f"--config={path}",
                                          "--executor=local", "--validate-only"]))
    for i in range(80):
        path = tmp / f"study-{i}.yaml"
        path.write_bytes(_dump(_mutate(VALID_STUDY, rng), rng))
        cases.append((f"study-config-{i}", ["hp-tuning-jobs", "create", "--display-name=f", f"--config={path}",
                                            "--executor=local", "--validate-only"]))
    for i in range(40):
        spec = rng.choice(["parameter-id=lr,type=double,min={},max={}", "parameter-id={},type=integer,min=1,max=5",
                           "parameter-id=c,type=categorical,values={}", "parameter-id=d,type=discrete,values={}"])
        cases.append((f"study-flags-{i}", [
            "hp-tuning-jobs", "create", "--display-name=f", "--executor=local", "--validate-only",
            f"--parameter-spec={spec.format(*(rng.choice(HOSTILE) for _ in range(spec.count('{}'))))}",
            f"--metric=metric-id={rng.choice(['acc', *HOSTILE])},goal={rng.choice(['maximize', *HOSTILE])}",
            f"--max-trial-count={rng.choice(['3', *HOSTILE])}", "--worker-pool-spec=machine-type=n1-standard-4,"
            "container-image-uri=x", "--command=python3,-c,0"]))
    for i in range(40):
        cases.append((f"list-{i}", [rng.choice(["custom-jobs", "hp-tuning-jobs"]), "list",
                                    f"--filter={rng.choice(['displayName', 'state', 'name'])}"
                                    f"{rng.choice(['=', '~', ':', '<', '!='])}{rng.choice(HOSTILE)}",
                                    f"--sort-by={rng.choice(['~createTime', *HOSTILE])}",
                                    f"--format={rng.choice(['json', 'yaml', 'value(name)', 'table(name)', *HOSTILE])}"]))
    return cases


def _in_process(args: list[str], capfd: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """Run vcli's app here; (exit code, stderr). Any exception that escapes fails the case."""
    from vcli.cli import app

    def alarm(signum: int, frame: Any) -> None:
        raise TimeoutError(f"vcli {' '.join(args)[:300]} ran over {PER_CASE_SECONDS:g}s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, PER_CASE_SECONDS)
    try:
        app(args=args, prog_name="vcli", standalone_mode=True)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    return code, capfd.readouterr().err


def _check(name: str, code: int, stderr: str) -> None:
    assert code in DOCUMENTED, f"{name}: exit {code}\n{stderr[-2000:]}"
    assert "Traceback" not in stderr, f"{name}:\n{stderr[-3000:]}"
    if code not in (0,):
        errors = [line for line in stderr.splitlines() if line.startswith("ERROR: ")]
        assert len(errors) == 1, f"{name}: expected one ERROR line:\n{stderr[-2000:]}"
        assert len(errors[0]) < 3000, f"{name}: an ERROR line of {len(errors[0])} characters"


def test_generated_hostile_inputs_get_one_line_and_a_documented_exit_code(
        tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VCLI_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("VCLI_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.chdir(tmp_path)
    cases = _cases(tmp_path)
    assert len(cases) >= 300
    slowest = (0.0, "")
    codes: dict[int, int] = {}
    for name, args in cases:
        t0 = time.monotonic()
        code, stderr = _in_process(args, capfd)
        took = time.monotonic() - t0
        slowest = max(slowest, (took, name))
        _check(name, code, stderr)
        codes[code] = codes.get(code, 0) + 1
    print(f"{len(cases)} cases, exit codes {dict(sorted(codes.items()))}; slowest {slowest[1]} in {slowest[0]:.2f}s")
    assert len(codes) >= 3 and codes.get(0, 0) >= 10, codes  # the generator reaches past the first check


def test_a_sample_through_the_real_cli_stays_within_time_and_memory(tmp_path: Path) -> None:
    """Every tenth case as a real process: under 10 s and 500 MB resident (its own peak: `PeakRss`)."""
    import threading

    cases = _cases(tmp_path)[::10]
    env = vcli_env(tmp_path / "home")
    for name, args in cases:
        proc = subprocess.Popen([sys.executable, "-m", "vcli", *args], env=env, cwd=tmp_path,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        peak = PeakRss(proc.pid)  # its own peak (wait4's starts at this test process's size)
        killer = threading.Timer(30, proc.kill)
        killer.start()
        t0 = time.monotonic()
        try:
            assert proc.stderr is not None
            stderr = proc.stderr.read().decode(errors="replace")
            _, status, _ = os.wait4(proc.pid, 0)
        finally:
            killer.cancel()
        took = time.monotonic() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        _check(name, proc.returncode, stderr)
        assert took < PER_CASE_SECONDS, f"{name}: {took:.1f}s"
        resident = peak.stop()
        assert 0 < resident < 500 * 1024, f"{name}: {resident // 1024} MiB resident"

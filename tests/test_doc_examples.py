"""The examples of the README and every page of the docs site run. Every `vcli` line of their
```sh blocks (a trailing `\\` joins lines; a `  # comment` is dropped) runs in a scratch home and a
scratch directory that holds the repository's `examples/` and `trainer/`, `study.yaml` (a copy of
examples/hp_tuning.yaml) and `job.yaml` (a copy of examples/custom_job.yaml), by this convention:

- `create` runs with `--validate-only` (the job is checked and resolved, nothing trains);
- `ID` stands for a job (custom-jobs lines) or a study (hp-tuning-jobs lines) that the test ran
  first, to its end;
- `vcli config` lines run in a home of their own (a setting never leaks into the next example);
- `vcli dashboard` must still be serving after a few seconds (then it is stopped);
- a block right after a line `<!-- examples: skip (why) -->` is not run.

Every ```python block runs too, as a script in that directory with that home. Each line and
each script must exit 0 and print no traceback. A renamed flag, a changed command or a broken
example config then fails here instead of in a reader's terminal."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.helpers import REPO, vcli, vcli_env

#: The README and every page written by hand (the command reference is generated from the CLI).
PAGES = [REPO / "README.md", *sorted(p for p in (REPO / "docs" / "pages").rglob("*.md")
                                     if "reference/cli" not in p.as_posix())]
SKIP = re.compile(r"<!-- examples: skip \((.+)\) -->")
REPORT = ("import json, os\n"
          "with open(os.environ['CLOUD_ML_HP_METRIC_FILE'], 'a') as f:\n"
          "    f.write(json.dumps({'accuracy': '0.9', 'global_step': '1'}) + '\\n')\n")


def _runnable(lines: list[str], i: int, fence: str) -> bool:
    """Whether line i opens a block of that language that no skip marker right above it excludes."""
    return lines[i].strip() == fence and not any(SKIP.search(prev) for prev in lines[max(0, i - 2):i])


def examples(path: Path) -> list[tuple[int, str]]:
    """(line number, command) of every `vcli` command in the page's runnable ```sh blocks."""
    out: list[tuple[int, str]] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        if _runnable(lines, i, "```sh"):
            i += 1
            pending, start = "", 0
            while i < len(lines) and lines[i].strip() != "```":
                text = re.sub(r"\s{2,}#.*$", "", lines[i]).rstrip()
                if not pending:
                    start = i + 1
                pending += text[:-1].rstrip() + " " if text.endswith("\\") else text
                if not text.endswith("\\"):
                    if pending.startswith("vcli "):
                        out.append((start, " ".join(pending.split())))
                    pending = ""
                i += 1
        i += 1
    return out


def scripts(path: Path) -> list[tuple[int, str]]:
    """(line number, source) of every runnable ```python block of the page."""
    out: list[tuple[int, str]] = []
    lines = path.read_text().splitlines()
    for i in range(len(lines)):
        if _runnable(lines, i, "```python"):
            end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
            out.append((i + 1, "\n".join(lines[i + 1:end]) + "\n"))
    return out


def _cases() -> list[tuple[str, int, str]]:
    return [(str(p.relative_to(REPO)), n, cmd) for p in PAGES for n, cmd in examples(p)]


def _scripts() -> list[tuple[str, int, str]]:
    return [(str(p.relative_to(REPO)), n, src) for p in PAGES for n, src in scripts(p)]


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The scratch directory and home, with a finished custom job and a finished study."""
    root = tmp_path_factory.mktemp("doc-examples")
    for name in ("examples", "trainer"):
        (root / name).symlink_to(REPO / name)
    (root / "study.yaml").write_text((REPO / "examples" / "hp_tuning.yaml").read_text())
    (root / "job.yaml").write_text((REPO / "examples" / "custom_job.yaml").read_text())
    home = root / "home"
    (root / "report.py").write_text(REPORT)
    pool = "--worker-pool-spec=machine-type=n1-standard-4,replica-count=1,container-image-uri=python"
    command = f"--command={sys.executable},{root / 'report.py'}"
    job = vcli(home, "custom-jobs", "create", "--display-name=example-job", pool, command, "--executor=local",
               "--format=value(name.basename())", timeout=120)
    assert job.returncode == 0, job.stderr
    study = vcli(home, "hp-tuning-jobs", "create", "--display-name=example-study", pool, command,
                 "--executor=local", "--parameter-spec=parameter-id=learning_rate,type=double,min=0.001,max=0.1",
                 "--metric=metric-id=accuracy,goal=maximize", "--max-trial-count=2",
                 "--format=value(name.basename())", timeout=120)
    assert study.returncode == 0, study.stderr
    return {"root": str(root), "home": str(home), "custom-jobs": job.stdout.strip(),
            "hp-tuning-jobs": study.stdout.strip()}


def test_the_pages_have_examples() -> None:
    assert len(_cases()) >= 60 and len(_scripts()) >= 1


def test_every_skip_marker_says_why_and_precedes_a_block() -> None:
    for path in PAGES:
        lines = path.read_text().splitlines()
        for n, line in enumerate(lines):
            if "examples: skip" in line:
                assert SKIP.search(line) and SKIP.search(line).group(1).strip(), f"{path}:{n + 1}: no reason"
                assert any(nxt.startswith("```") for nxt in lines[n + 1:n + 3]), f"{path}:{n + 1}: no block after it"


@pytest.mark.parametrize("page,line,command", _cases(), ids=[f"{p}:{n}" for p, n, _ in _cases()])
def test_an_example_runs(scratch: dict[str, str], page: str, line: int, command: str) -> None:
    import shlex

    argv = shlex.split(command)[1:]
    group = argv[0]
    argv = [scratch.get(group, "ID") if a == "ID" else a for a in argv]
    if len(argv) > 1 and argv[1] == "create" and "--validate-only" not in argv:
        argv.append("--validate-only")
    # `config set` would change the shared scratch home for every later example: it gets its own.
    home = Path(tempfile.mkdtemp(dir=scratch["root"])) if group == "config" else Path(scratch["home"])
    env = vcli_env(home)
    full = [sys.executable, "-m", "vcli", *argv]
    if group == "dashboard":
        proc = subprocess.Popen([*full, "--port=0"] if "--port" not in command else full, cwd=scratch["root"],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return  # still serving
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=30)
        pytest.fail(f"{page}:{line}: `{command}` ended at once: {proc.stderr.read() if proc.stderr else ''}")
    r = subprocess.run(full, cwd=scratch["root"], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "Traceback" not in r.stderr, f"{page}:{line}: `{command}`\n{r.stderr[-3000:]}"


@pytest.mark.parametrize("page,line,source", _scripts(), ids=[f"{p}:{n}" for p, n, _ in _scripts()])
def test_a_python_example_runs(scratch: dict[str, str], page: str, line: int, source: str) -> None:
    env = vcli_env(Path(scratch["home"]))
    r = subprocess.run([sys.executable, "-c", source], cwd=scratch["root"], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and "Traceback" not in r.stderr, f"{page}:{line}\n{r.stderr[-3000:]}"

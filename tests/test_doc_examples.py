"""The examples of the README and the tutorials run. Every `vcli` line of their ```sh blocks
(a trailing `\\` joins lines; a `  # comment` is dropped) runs in a scratch home and a scratch
directory that holds the repository's `examples/` and `trainer/`, by this convention:

- `create` runs with `--validate-only` (the job is checked and resolved, nothing trains);
- `ID` stands for a job (custom-jobs lines) or a study (hp-tuning-jobs lines) that the test ran
  first, to its end;
- `vcli dashboard` must still be serving after a few seconds (then it is stopped);
- a block right after a line `<!-- examples: skip (why) -->` is not run.

Each line must exit 0 and print no traceback. A renamed flag, a changed command or a broken
example config then fails here instead of in a reader's terminal."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO, vcli, vcli_env

PAGES = [REPO / "README.md", *sorted((REPO / "docs" / "pages" / "tutorials").glob("*.md"))]
SKIP = re.compile(r"<!-- examples: skip \((.+)\) -->")
REPORT = ("import json, os\n"
          "with open(os.environ['CLOUD_ML_HP_METRIC_FILE'], 'a') as f:\n"
          "    f.write(json.dumps({'accuracy': '0.9', 'global_step': '1'}) + '\\n')\n")


def examples(path: Path) -> list[tuple[int, str]]:
    """(line number, command) of every `vcli` command in the page's runnable ```sh blocks."""
    out: list[tuple[int, str]] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```sh" and not any(SKIP.search(prev) for prev in lines[max(0, i - 2):i]):
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


def _cases() -> list[tuple[str, int, str]]:
    return [(str(p.relative_to(REPO)), n, cmd) for p in PAGES for n, cmd in examples(p)]


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The scratch directory and home, with a finished custom job and a finished study."""
    root = tmp_path_factory.mktemp("doc-examples")
    for name in ("examples", "trainer"):
        (root / name).symlink_to(REPO / name)
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
    assert len(_cases()) >= 10


@pytest.mark.parametrize("page,line,command", _cases(), ids=[f"{p}:{n}" for p, n, _ in _cases()])
def test_an_example_runs(scratch: dict[str, str], page: str, line: int, command: str) -> None:
    import shlex

    argv = shlex.split(command)[1:]
    group = argv[0]
    argv = [scratch.get(group, "ID") if a == "ID" else a for a in argv]
    if len(argv) > 1 and argv[1] == "create" and "--validate-only" not in argv:
        argv.append("--validate-only")
    env = vcli_env(Path(scratch["home"]))
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

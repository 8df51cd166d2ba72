"""The README's demo command works on a fresh clone: its first ```sh block, run verbatim by
bash in a clone of the repository (what a new user copies), installs vcli and the trainer extra
into the clone's `.venv` and trains the two-replica job to SUCCEEDED. The README's other
command, `bash .ci/test.sh`, is the one CI runs."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from tests.helpers import REPO


def test_the_readme_demo_runs_on_a_fresh_clone(tmp_path: Path) -> None:
    readme = (REPO / "README.md").read_text()
    demo = re.search(r"## Two commands.*?```sh\n(.*?)```", readme, re.S)
    assert demo is not None, "the README has no demo block under 'Two commands'"
    clone = tmp_path / "vcli"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True, timeout=120)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VCLI_", "VIRTUAL_ENV"))}
    # the user's shell: their PATH without this checkout's .venv; a vcli home of the test's own
    path = [p for p in env.get("PATH", "").split(os.pathsep) if not p.startswith(str(REPO))]
    env.update(VCLI_HOME=str(tmp_path / "vcli-home"), VCLI_CONFIG_DIR=str(tmp_path / "config"), PATH=os.pathsep.join(path))
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", demo.group(1)], cwd=clone, env=env, capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-3000:])
    from vcli.enums import JobKind
    from vcli.store import Store

    (job,) = Store(tmp_path / "vcli-home").list_jobs(JobKind.CUSTOM_JOB)
    assert job.state.value == "JOB_STATE_SUCCEEDED" and job.display_name == "digits"
    assert "final val_accuracy=" in r.stdout + r.stderr  # the chief trained and evaluated

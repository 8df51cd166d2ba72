"""The shell completion scripts in completions/ are typer's, for `vcli`, and must not drift.

Regenerate with:
    python -c "from typer.completion import get_completion_script as g; [open(f'completions/vcli.{s}', 'w').write(g(prog_name='vcli', complete_var='_VCLI_COMPLETE', shell=s)) for s in ('bash', 'zsh', 'fish')]"
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from typer.completion import get_completion_script

from tests.helpers import REPO, vcli, vcli_env
from vcli.spec import JobKind, JobState
from vcli.store import Store


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_scripts_are_current(shell: str) -> None:
    expected = get_completion_script(prog_name="vcli", complete_var="_VCLI_COMPLETE", shell=shell)
    assert (REPO / "completions" / f"vcli.{shell}").read_text() == expected


def test_bash_completion_completes_commands(tmp_path: Path) -> None:
    env = vcli_env(tmp_path, COMP_WORDS="vcli custom-jobs cr", COMP_CWORD="2", _VCLI_COMPLETE="complete_bash")
    out = subprocess.run(
        [sys.executable, "-c", "import sys; sys.argv[0] = 'vcli'; from vcli.cli import run; run()"],
        env=env, capture_output=True, text=True, timeout=60,
    )
    assert "create" in out.stdout.split()


def _bash_complete(tmp_path: Path, home: Path, words: list[str]) -> list[str]:
    """What bash offers for `words` (the last is the word being completed) through the real
    completions/vcli.bash, with `vcli` on PATH running this checkout."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    shim = bindir / "vcli"
    shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m vcli "$@"\n')
    shim.chmod(0o755)
    script = (
        f"source {shlex.quote(str(REPO / 'completions' / 'vcli.bash'))}\n"
        "complete -p vcli >&2\n"  # the script registered its function for `vcli`
        f"COMP_WORDS=({' '.join(shlex.quote(w) for w in words)})\n"
        f"COMP_CWORD={len(words) - 1}\n"
        "_vcli_completion vcli\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    env = vcli_env(home, PATH=f"{bindir}{os.pathsep}{os.environ['PATH']}")
    out = subprocess.run(["bash", "--norc", "--noprofile", "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "_vcli_completion" in out.stderr
    return [line for line in out.stdout.splitlines() if line]


def test_bash_tab_completes_job_ids_study_ids_and_choices(tmp_path: Path) -> None:
    home = tmp_path / "home"
    store = Store(home)
    jobs = [store.create_job(kind=JobKind.CUSTOM_JOB, display_name=n, record={}, state=JobState.JOB_STATE_SUCCEEDED).id
            for n in ("first", "second")]
    study = store.create_job(kind=JobKind.HYPERPARAMETER_TUNING_JOB, display_name="s", record={},
                             state=JobState.JOB_STATE_RUNNING).id
    store.create_job(kind=JobKind.CUSTOM_JOB, display_name="trial", record={}, state=JobState.JOB_STATE_RUNNING,
                     parent_id=study, trial_id="1")
    store.close()

    assert sorted(_bash_complete(tmp_path, home, ["vcli", "custom-jobs", "describe", ""])) == sorted(jobs)
    assert _bash_complete(tmp_path, home, ["vcli", "custom-jobs", "cancel", jobs[1]]) == [jobs[1]]
    assert _bash_complete(tmp_path, home, ["vcli", "hp-tuning-jobs", "stream-logs", ""]) == [study]
    assert _bash_complete(tmp_path, home, ["vcli", "custom-jobs", "create", "--executor", ""]) == ["local", "docker", "ssh", "ray", "slurm"]
    assert _bash_complete(tmp_path, home, ["vcli", "hp-tuning-jobs", "create", "--algorithm", "g"]) == ["grid-search"]
    # `--flag=value`, as the README writes it: bash splits it at `=` (it offered file names)
    assert _bash_complete(tmp_path, home, ["vcli", "hp-tuning-jobs", "create", "--algorithm", "=", "g"]) == ["grid-search"]
    assert _bash_complete(tmp_path, home, ["vcli", "custom-jobs", "create", "--executor", "="]) == [
        "local", "docker", "ssh", "ray", "slurm"]
    assert _bash_complete(tmp_path, home, ["vcli", "custom-jobs", "create", "--executor=local", "--hosts", "=", ""]) == []
    assert sorted(_bash_complete(tmp_path, home, ["vcli", "custom-jobs", "describe", "--format=json", ""])) == sorted(jobs)


def test_bash_tab_completes_host_names(tmp_path: Path) -> None:
    home = tmp_path / "home"
    for name in ("gpu1", "gpu2", "cpu1"):
        r = vcli(home, "hosts", "add", name, "--address=192.0.2.1", "--no-connect", timeout=60)
        assert r.returncode == 0, r.stderr
    assert _bash_complete(tmp_path, home, ["vcli", "hosts", "remove", "gpu"]) == ["gpu1", "gpu2"]
    assert _bash_complete(tmp_path, home, ["vcli", "custom-jobs", "create", "--hosts", "gpu1,"]) == ["gpu1,cpu1", "gpu1,gpu2"]


def test_completion_of_an_empty_home_offers_nothing_and_creates_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert _bash_complete(tmp_path, home, ["vcli", "custom-jobs", "describe", ""]) == []
    assert not home.exists()

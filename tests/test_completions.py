"""The shell completion scripts in completions/ are generated from the CLI and must not drift."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO, vcli_env


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_scripts_are_current(shell: str, tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", "import sys; sys.argv[0] = 'vcli'; from vcli.cli import run; run()", "--show-completion"],
        env=vcli_env(tmp_path, SHELL=f"/bin/{shell}"), capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stderr
    committed = (REPO / "completions" / f"vcli.{shell}").read_text()
    assert out.stdout == committed, f"regenerate with: SHELL=/bin/{shell} vcli --show-completion > completions/vcli.{shell}"


def test_bash_completion_completes_commands(tmp_path: Path) -> None:
    env = vcli_env(tmp_path, COMP_WORDS="vcli custom-jobs cr", COMP_CWORD="2", _VCLI_COMPLETE="complete_bash")
    out = subprocess.run(
        [sys.executable, "-c", "import sys; sys.argv[0] = 'vcli'; from vcli.cli import run; run()"],
        env=env, capture_output=True, text=True, timeout=60,
    )
    assert "create" in out.stdout.split()

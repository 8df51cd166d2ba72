"""The shell completion scripts in completions/ are typer's, for `vcli`, and must not drift.

Regenerate with:
    python -c "from typer.completion import get_completion_script as g; [open(f'completions/vcli.{s}', 'w').write(g(prog_name='vcli', complete_var='_VCLI_COMPLETE', shell=s)) for s in ('bash', 'zsh', 'fish')]"
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.completion import get_completion_script

from tests.helpers import REPO, vcli_env


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

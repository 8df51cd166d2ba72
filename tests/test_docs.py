"""The manual holds: the docs site builds with no broken link and no page left out of its
navigation, the command reference equals a fresh generation from the CLI, user docs describe
what vcli does (no process words: sessions, probes, "tested", test files), and the README
stays short."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs" / "pages"

#: Words that belong in CHANGELOG.md, commit messages and tests, not in a user's manual.
PROCESS_WORDS = re.compile(
    r"\bsessions? \d+|\ba probe\b|\bprobes? (?:found|saw)|\(tested|\btested[:;,)]|\bTested[:;,]|"
    r"\btests?/test_\w+|\btest_\w+\.py|\bbefore session|\buntil session|\bit used to\b|\(it said|\(it was |"
    r"[;(] ?before[,:] |^Before, | Before, |\btested (?:on|with|for|in|by|against)\b|\bmeasured here\b|"
    r"\bturned .{1,40} on before\b|\(it waited\b|\bwas fixed\b",
    re.IGNORECASE)


def _user_docs() -> list[Path]:
    return [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]


def test_the_docs_site_builds_strictly(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs", reason="needs the docs extra: pip install 'vcli[docs]'")
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", "docs/mkdocs.yml", "-d",
                        str(tmp_path / "site")], cwd=REPO, capture_output=True, text=True, timeout=300,
                       env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr[-4000:]
    assert (tmp_path / "site" / "reference" / "cli" / "custom-jobs" / "index.html").is_file()


def test_the_command_reference_is_current() -> None:
    r = subprocess.run([sys.executable, "docs/gen_cli_reference.py", "--check"], cwd=REPO, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_the_generated_reference_is_current() -> None:
    r = subprocess.run([sys.executable, "docs/gen_reference.py", "--check"], cwd=REPO, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_user_docs_carry_no_process_words() -> None:
    hits = []
    for path in _user_docs():
        in_code = False
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if line.startswith("```"):
                in_code = not in_code
            if not in_code and (m := PROCESS_WORDS.search(line)):
                hits.append(f"{path.relative_to(REPO)}:{number}: {m.group(0)!r} in {line.strip()[:100]}")
    assert not hits, "\n".join(hits)


def test_the_readme_is_short() -> None:
    assert len((REPO / "README.md").read_text().splitlines()) <= 250


def test_every_page_of_the_docs_is_linked_from_the_readme_or_the_site() -> None:
    """The README's links into docs/ point at pages that exist."""
    readme = (REPO / "README.md").read_text()
    for target in re.findall(r"\]\(((?:docs|bench)/[^)#]+|CHANGELOG\.md)\)", readme):
        assert (REPO / target).exists(), target

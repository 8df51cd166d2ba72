"""Write the command reference of the docs site from the CLI itself: one page per command
group (`docs/pages/reference/cli/<group>.md`) with every command's usage, help text and
options, as `vcli ... --help` knows them.

    .venv/bin/python docs/gen_cli_reference.py [--check]

`--check` writes nothing and exits 1 (naming the pages) when the pages differ from a fresh
generation: the test suite runs it, so a flag added, renamed or re-worded without
regenerating fails CI.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "docs" / "pages" / "reference" / "cli"
sys.path.insert(0, str(REPO))


def _root() -> Any:
    from typer.main import get_command

    from vcli.cli import app

    return get_command(app)


def _option_row(param: Any, ctx: Any) -> str:
    """`| `--flag` `VALUE` | help |` for one option."""
    names = ", ".join(f"`{o}`" for o in (*param.opts, *param.secondary_opts))
    if not param.is_flag:
        try:
            metavar = param.make_metavar(ctx)
        except TypeError:  # click before 8.2
            metavar = param.make_metavar()
        names += " `" + metavar.replace("|", "\\|") + "`"
    help_text = _escape(" ".join((param.help or "").split())).replace("|", "\\|")
    return f"| {names} | {help_text} |"


def _command_section(path: list[str], cmd: Any, context: Any) -> list[str]:
    ctx = context(cmd, info_name=path[-1])
    usage = " ".join(cmd.collect_usage_pieces(ctx))
    lines = [f"## `vcli {' '.join(path)}`", "", "```text", f"vcli {' '.join(path)} {usage}".rstrip(), "```", ""]
    text = (cmd.help or "").strip()
    if text:
        lines += [_clean(text), ""]
    args = [p for p in cmd.params if p.param_type_name == "argument"]
    if args:
        lines += ["Arguments: " + ", ".join(f"`{a.name.upper()}`" for a in args) + ".", ""]
    opts = [p for p in cmd.params if p.param_type_name == "option" and not p.hidden]
    if opts:
        lines += ["| Flag | What it does |", "|---|---|"]
        lines += [_option_row(p, ctx) for p in opts]
        lines.append("")
    return lines


def _clean(text: str) -> str:
    """Click's help text as Markdown: its `\\b` no-rewrap markers dropped."""
    return _escape("\n".join(line for line in text.splitlines() if line.strip() != "\b"))


def _escape(text: str) -> str:
    """Plain help text as Markdown: brackets outside `code` escaped (`NAME[ATTRIBUTES](KEY)` is
    no link)."""
    parts = text.split("`")
    return "`".join(p if i % 2 else p.replace("[", "\\[").replace("]", "\\]") for i, p in enumerate(parts))


def pages() -> dict[str, str]:
    """File name -> Markdown of every page of the command reference."""
    root = _root()
    context = type(root).context_class  # the click that typer ships (its own copy, or click)
    out: dict[str, str] = {}
    index = ["# Command reference", "", "Generated from the CLI by `docs/gen_cli_reference.py`; "
             "`vcli COMMAND --help` prints the same.", "", "| Command | What it does |", "|---|---|"]
    ctx = context(root, info_name="vcli")
    for name in root.list_commands(ctx):
        cmd = root.get_command(ctx, name)
        if cmd is None or cmd.hidden:
            continue
        summary = " ".join((cmd.get_short_help_str(limit=120) or "").split())
        index.append(f"| [`vcli {name}`]({name}.md) | {summary} |")
        lines = [f"# vcli {name}", ""]
        if hasattr(cmd, "list_commands"):
            lines += [_clean((cmd.help or "").strip()), ""]
            sub_ctx = context(cmd, info_name=name, parent=ctx)
            for sub in cmd.list_commands(sub_ctx):
                sub_cmd = cmd.get_command(sub_ctx, sub)
                if sub_cmd is None or sub_cmd.hidden:
                    continue
                lines += _command_section([name, sub], sub_cmd, context)
        else:
            lines += _command_section([name], cmd, context)
        out[f"{name}.md"] = "\n".join(lines).rstrip() + "\n"
    out["index.md"] = "\n".join(index) + "\n"
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with the pages in the repository; write nothing")
    args = parser.parse_args()
    fresh = pages()
    if args.check:
        existing = {p.name: p.read_text() for p in OUT.glob("*.md")} if OUT.is_dir() else {}
        stale = sorted(name for name in set(fresh) | set(existing) if fresh.get(name) != existing.get(name))
        if stale:
            print(f"the command reference is out of date: {', '.join(stale)}; run .venv/bin/python "
                  "docs/gen_cli_reference.py", file=sys.stderr)
            return 1
        return 0
    OUT.mkdir(parents=True, exist_ok=True)
    for old in OUT.glob("*.md"):
        if old.name not in fresh:
            old.unlink()
    for name, text in fresh.items():
        (OUT / name).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Shell completion for the words vcli knows at run time: job ids, study ids, host names.

Typer calls these with the word being completed, on every <TAB>, in a fresh process: they
read the store read-only (`vcli.store.peek_jobs`, which creates nothing) or the inventory
file, import nothing heavy, and never fail (a broken store or inventory completes nothing).
Choice flags (--executor, --algorithm, ...) complete from their Enum without help from here.
"""

from __future__ import annotations

from vcli.enums import JobKind


def _jobs(kind: JobKind, incomplete: str) -> list[tuple[str, str]]:
    from vcli.store import peek_jobs

    try:
        return peek_jobs(kind, incomplete)
    except Exception:  # completion must never print a traceback into the shell
        return []


def custom_job_ids(incomplete: str) -> list[tuple[str, str]]:
    """Ids of custom jobs (trial jobs excluded), with display name and state as help."""
    return _jobs(JobKind.CUSTOM_JOB, incomplete)


def study_ids(incomplete: str) -> list[tuple[str, str]]:
    """Ids of hyperparameter tuning jobs, with display name and state as help."""
    return _jobs(JobKind.HYPERPARAMETER_TUNING_JOB, incomplete)


def _inventory_names() -> list[str]:
    try:
        from vcli.placement.hosts import LOCAL, load_inventory

        return [name for name in sorted(load_inventory()) if name != LOCAL]
    except Exception:  # a broken inventory completes nothing; commands report it
        return []


def host_names(incomplete: str) -> list[str]:
    """Inventory host names (for `hosts remove/check` arguments)."""
    return [n for n in _inventory_names() if n.startswith(incomplete)]


def host_list(incomplete: str) -> list[str]:
    """`--hosts=a,b,<TAB>`: the names not yet in the comma-separated list, after what is typed."""
    done, _, last = incomplete.rpartition(",")
    taken = set(done.split(",")) if done else set()
    head = done + "," if done else ""
    return [head + n for n in _inventory_names() if n.startswith(last) and n not in taken]


def property_names(incomplete: str) -> list[str]:
    """The properties `vcli config` knows."""
    from vcli.properties import KNOWN

    return [p for p in KNOWN if p.startswith(incomplete)]


def register_bash() -> None:
    """bash completion that reads `--flag=value`, the form the README writes: bash splits the
    line at `=` (COMP_WORDBREAKS), so Click got `--algorithm`, `=`, `p` and `--algorithm=p<TAB>`
    offered file names. The words are joined back before Click sees them; the completions are
    the values, which replace the part after `=`."""
    import os

    from typer._click.shell_completion import add_completion_class, split_arg_string
    from typer._completion_classes import BashComplete

    class JoinedBashComplete(BashComplete):
        def get_completion_args(self) -> tuple[list[str], str]:
            words, cword = joined_words(split_arg_string(os.environ["COMP_WORDS"]), int(os.environ["COMP_CWORD"]))
            return words[1:cword], (words[cword] if cword < len(words) else "")

    add_completion_class(JoinedBashComplete, "bash")


def joined_words(words: list[str], cword: int) -> tuple[list[str], int]:
    """`words` with `--flag`, `=`, `value` joined into `--flag=value`, and where word `cword` went."""
    out: list[str] = []
    where: dict[int, int] = {}
    for i, word in enumerate(words):
        flag_open = bool(out) and out[-1].startswith("--") and i > 0 and words[i - 1] == "=" and out[-1].endswith("=")
        if word == "=" and out and out[-1].startswith("--") and "=" not in out[-1]:
            out[-1] += "="
        elif flag_open:
            out[-1] += word
        else:
            out.append(word)
        where[i] = len(out) - 1
    return out, where.get(cword, len(out))

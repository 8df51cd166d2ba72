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
        from vcli.hosts import LOCAL, load_inventory

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

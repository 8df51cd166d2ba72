"""`CustomJob.list(filter=, order_by=)`: Vertex's list syntax (AIP-160 filters, AIP-132
ordering) read by the CLI's own `--filter` and `--sort-by` over the same resources `vcli ...
list` builds.

A filter's field names are Vertex's proto names (`display_name`, `create_time`, `labels.team`)
or the REST ones (`displayName`); outside quotes, snake_case becomes camelCase, then gcloud's
filter language (`vcli.formats.filter`) reads it: `=`, `!=`, `<`, `>`, `:`, `AND`, `OR`, `NOT`.
`order_by` is `field [desc], field ...`.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from vcli.enums import JobKind

_QUOTED = re.compile(r"(\"(?:[^\"\\]|\\.)*\"|'[^']*')")
_SNAKE = re.compile(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b")


def camel(text: str) -> str:
    """`display_name` -> `displayName` in `text`, outside quoted strings."""
    parts = _QUOTED.split(text)
    return "".join(part if i % 2 else _SNAKE.sub(lambda m: _camel_word(m.group(0)), part)
                   for i, part in enumerate(parts))


def _camel_word(word: str) -> str:
    head, *rest = word.split("_")
    return head + "".join(w[:1].upper() + w[1:] for w in rest)


def sort_keys(order_by: str) -> str:
    """`create_time desc, display_name` -> `~createTime,displayName` (`--sort-by`'s form);
    ValueError for a term that is not `field`, `field asc` or `field desc`."""
    out = []
    for term in order_by.split(","):
        words = term.split()
        if not words:
            continue
        if len(words) > 2 or (len(words) == 2 and words[1].lower() not in ("asc", "desc")):
            raise ValueError(f"order_by: [{term.strip()}] is not `field`, `field asc` or `field desc`")
        desc = len(words) == 2 and words[1].lower() == "desc"
        out.append(("~" if desc else "") + _camel_word(words[0]))
    if not out:
        raise ValueError(f"order_by: [{order_by}] names no field")
    return ",".join(out)


def select(store: Any, rows: Sequence[Any], kind: JobKind, filter: str | None,
           order_by: str | None) -> list[Any]:
    """The stored `rows` whose resource `filter` selects, in `order_by`'s order; ValueError (naming
    the argument) for either that cannot be read."""
    from vcli import resources
    from vcli.errors import UsageError
    from vcli.formats import apply_sort
    from vcli.formats.filter import apply_filter

    for name, value in (("filter", filter), ("order_by", order_by)):
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{name} must be a string, not {type(value).__name__}")
    wants_trials = "trial" in (filter or "") + (order_by or "")
    by_name: dict[str, Any] = {}
    found = []
    for row in rows:
        resource = (resources.custom_job_resource(store, row) if kind is JobKind.CUSTOM_JOB
                    else resources.hp_tuning_job_resource(store, row, "all" if wants_trials else "none"))
        by_name[resource["name"]] = row
        found.append(resource)
    try:
        if filter:
            found = apply_filter(found, camel(filter))
        if order_by:
            found = apply_sort(found, sort_keys(order_by))
    except UsageError as e:
        argument = "filter" if filter and "--filter" in str(e) else "order_by"
        raise ValueError(f"{argument}: {str(e).split(': ', 1)[-1]}") from None
    return [by_name[r["name"]] for r in found]

"""gcloud's output conventions for resources: `--format`, `--filter`, `--sort-by`, `--flatten`.

`keys` is the shared resource-key and transform language, `printers` the `--format` printers,
`filter` the `--filter` expressions. Everything here is client-side and pure: resources in,
text or resources out; what gcloud's language has and vcli does not implement is refused with
a UsageError naming the flag (exit 2), never silently ignored.
"""

from __future__ import annotations

import copy
from typing import Any, Sequence

from vcli.formats.filter import apply_filter, compile_filter
from vcli.formats.keys import Key, parse_key, resolve, sort_key
from vcli.formats.printers import Format, Projection, parse_format, render

__all__ = ["Format", "Key", "Projection", "apply_filter", "apply_sort", "compile_filter", "flatten", "get_path",
           "parse_format", "parse_key", "render"]


def get_path(data: Any, path: Sequence[str | int]) -> Any:
    """The value at `path` (names and indices) in `data`; None where undefined."""
    return resolve(data, tuple(int(p) if isinstance(p, str) and p.isdigit() else p for p in path))


def apply_sort(resources: list[dict[str, Any]], sort_by: str | None) -> list[dict[str, Any]]:
    """`--sort-by=~createTime,displayName`: `~` descending; numbers by value, missing last."""
    if not sort_by:
        return resources
    out = list(resources)
    from vcli.errors import UsageError

    keys = [k.strip() for k in sort_by.split(",") if k.strip()]
    if not keys:
        raise UsageError("argument --sort-by: no key given")
    for k in reversed(keys):
        desc = k.startswith("~")
        key = parse_key(k.lstrip("~"), "--sort-by")
        out.sort(key=lambda r, key=key: sort_key(key.value(r)), reverse=desc)
    return out


def flatten(resources: list[Any], keys: Sequence[str]) -> list[Any]:
    """gcloud's `--flatten`: for each key (a dotted path to a list), one copy of each record
    per item of that list, the list replaced by the item; a record whose list is empty or
    missing stays once, with the key set to None. Keys apply in order."""
    for k in keys:
        key = parse_key(k, "--flatten")
        if key.calls or not all(isinstance(p, str) for p in key.path):
            from vcli.errors import UsageError

            raise UsageError(f"argument --flatten: [{k}] must be a dotted path to a list")
        path = key.path
        out = []
        for r in resources:
            items = resolve(r, path)
            for item in items if isinstance(items, list) and items else [None]:
                c = copy.deepcopy(r)
                node = c
                for part in path[:-1]:
                    node = node.setdefault(part, {}) if isinstance(node, dict) else {}
                if isinstance(node, dict):
                    node[path[-1]] = item
                out.append(c)
        resources = out
    return resources

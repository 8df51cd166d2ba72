"""gcloud's output conventions for resources: --format, --filter, --sort-by, --limit.

Supported formats: `yaml` (default for describe/list; list prints `---`-separated documents),
`json` (an object for describe, an array for list), `value(f1, f2, ...)` (tab-separated, no
header), `csv(...)` (header + comma-separated), `table(...)` (aligned columns with upper-case
headers) and `none`. Projections are dotted field paths with optional `.basename()` and
`:label=NAME`, e.g. `table(name.basename():label=ID, displayName, state)`.
Filters: terms `field=value`, `field!=value`, `field~regex`, `field:substring`, joined by
spaces or AND. Sort: `--sort-by=~createTime,displayName` (`~` = descending).
"""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass
from typing import Any, Sequence

from vcli.errors import UsageError


@dataclass(frozen=True)
class Projection:
    path: tuple[str, ...]
    basename: bool
    label: str


@dataclass(frozen=True)
class Format:
    kind: str
    projections: tuple[Projection, ...]


_KINDS = ("yaml", "json", "value", "csv", "table", "none", "default")


def parse_format(text: str) -> Format:
    m = re.fullmatch(r"\s*([a-z]+)(?:\[[^\]]*\])?\s*(?:\((.*)\))?\s*", text, re.S)
    if not m or m.group(1) not in _KINDS:
        raise UsageError(
            f"argument --format: unknown format [{text}]; use one of json, yaml, none, value(FIELD,...), csv(FIELD,...), table(FIELD,...)"
        )
    kind = "yaml" if m.group(1) == "default" else m.group(1)
    projections: list[Projection] = []
    if m.group(2):
        for part in _split_top(m.group(2)):
            part = part.strip()
            if not part:
                continue
            label = None
            if ":" in part:
                part, _, attrs = part.partition(":")
                lm = re.search(r"label=([^:]+)", attrs)
                label = lm.group(1) if lm else None
            basename = part.endswith(".basename()")
            if basename:
                part = part[: -len(".basename()")]
            part = re.sub(r"\.[a-z_]+\(.*\)$", "", part)  # other transforms: ignored, value kept
            path = tuple(p for p in part.split(".") if p)
            projections.append(Projection(path, basename, label or _header(path[-1] if path else "")))
    if kind in ("value", "csv", "table") and not projections:
        raise UsageError(f"argument --format: [{kind}] needs fields, e.g. {kind}(name,state)")
    return Format(kind, tuple(projections))


def _split_top(text: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return out


def _header(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper()


def get_path(data: Any, path: Sequence[str]) -> Any:
    cur = data
    for key in path:
        if isinstance(cur, dict):
            cur = cur.get(key)
        elif isinstance(cur, list) and key.isdigit() and int(key) < len(cur):
            cur = cur[int(key)]
        else:
            return None
        if cur is None:
            return None
    return cur


def _cell(data: Any, p: Projection) -> str:
    value = get_path(data, p.path)
    if value is None:
        return ""
    if p.basename and isinstance(value, str):
        value = value.rstrip("/").rsplit("/", 1)[-1]
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, list):
        return ";".join(_scalar(v) for v in value)
    return _scalar(value)


def _scalar(v: Any) -> str:
    if isinstance(v, (dict, list)):
        return json.dumps(v, sort_keys=True)
    return str(v)


def render(resources: Any, fmt: Format, *, is_list: bool) -> str:
    """Text for stdout ('' for `none`); resources are JSON-ready dicts."""
    from vcli.config import to_yaml

    items = resources if is_list else [resources]
    if fmt.kind == "none":
        return ""
    if fmt.kind == "json":
        return json.dumps(resources, indent=2, sort_keys=True) + "\n"
    if fmt.kind == "yaml":
        return "---\n".join(to_yaml(r) for r in items) if items else ""
    rows = [[_cell(r, p) for p in fmt.projections] for r in items]
    if fmt.kind == "value":
        return "".join("\t".join(row) + "\n" for row in rows)
    if fmt.kind == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow([p.label.lower() for p in fmt.projections])
        w.writerows(rows)
        return buf.getvalue()
    headers = [p.label for p in fmt.projections]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    return "\n".join(lines) + "\n"


_TERM = re.compile(r"^([A-Za-z0-9_.]+)\s*(!=|=|~|:|<=|>=|<|>)\s*(.*)$")


def apply_filter(resources: list[dict[str, Any]], expr: str | None) -> list[dict[str, Any]]:
    if not expr:
        return resources
    terms = [t for t in re.split(r"\s+AND\s+|\s+", expr.strip()) if t]
    parsed = []
    for t in terms:
        m = _TERM.match(t)
        if not m:
            raise UsageError(f"argument --filter: cannot parse [{t}]; use FIELD=VALUE, FIELD!=VALUE, FIELD~REGEX or FIELD:TEXT")
        parsed.append((m.group(1).split("."), m.group(2), m.group(3).strip("'\"")))

    def ok(r: dict[str, Any]) -> bool:
        for path, op, val in parsed:
            cur = get_path(r, path)
            text = "" if cur is None else str(cur)
            if op == "=" and text != val:
                return False
            if op == "!=" and text == val:
                return False
            if op == "~" and not re.search(val, text):
                return False
            if op == ":" and val.lower() not in text.lower():
                return False
            if op in ("<", ">", "<=", ">="):
                try:
                    a, b = float(text), float(val)
                except ValueError:
                    a, b = text, val  # type: ignore[assignment]
                if not {"<": a < b, ">": a > b, "<=": a <= b, ">=": a >= b}[op]:
                    return False
        return True

    return [r for r in resources if ok(r)]


def apply_sort(resources: list[dict[str, Any]], sort_by: str | None) -> list[dict[str, Any]]:
    if not sort_by:
        return resources
    out = list(resources)
    for key in reversed([k.strip() for k in sort_by.split(",") if k.strip()]):
        desc = key.startswith("~")
        path = key.lstrip("~").split(".")
        out.sort(key=lambda r: (get_path(r, path) is None, str(get_path(r, path) or "")), reverse=desc)
    return out

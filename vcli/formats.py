"""gcloud's output conventions for resources: --format, --filter, --sort-by, --limit.

Supported formats: `yaml` (default for describe/list; list prints `---`-separated documents),
`json` (an object for describe, an array for list), `value(f1, f2, ...)` (tab-separated, no
header), `csv(...)` (header + comma-separated), `table(...)` (aligned columns with upper-case
headers) and `none`; `csv[no-heading]`/`table[no-heading]` drop the header. Projections are
field paths (`jobSpec.workerPoolSpecs[0].replicaCount`) with optional transforms
`.basename()` and `.date(FORMAT[, tz=LOCAL|UTC])` (others keep the value) and `:label=NAME`,
e.g. `table(name.basename():label=ID, displayName, createTime.date('%Y-%m-%d %H:%M'))`.
Lists print `a;b`, mappings `k=v;k2=v2`, as gcloud's value/csv printers do.
Filters: terms `field=value`, `field!=value`, `field~regex`, `field:substring`, `<`, `>`, ...
joined by spaces or AND; values may be quoted (`displayName="my job"`).
Sort: `--sort-by=~createTime,displayName` (`~` = descending; numbers by value).
"""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass
from datetime import UTC
from typing import Any, Sequence

from vcli.errors import UsageError


@dataclass(frozen=True)
class Projection:
    path: tuple[str, ...]
    basename: bool
    label: str
    #: gcloud transforms after the lookup, in order: (name, positional args, keyword args).
    transforms: tuple[tuple[str, tuple[str, ...], tuple[tuple[str, str], ...]], ...] = ()


@dataclass(frozen=True)
class Format:
    kind: str
    projections: tuple[Projection, ...]
    #: `csv[no-heading](...)` / `table[no-heading](...)`.
    no_heading: bool = False


_KINDS = ("yaml", "json", "value", "csv", "table", "none", "default")


def parse_format(text: str) -> Format:
    m = re.fullmatch(r"\s*([a-z]+)(?:\[([^\]]*)\])?\s*(?:\((.*)\))?\s*", text, re.S)
    if not m or m.group(1) not in _KINDS:
        raise UsageError(
            f"argument --format: unknown format [{text}]; use one of json, yaml, none, value(FIELD,...), csv(FIELD,...), table(FIELD,...)"
        )
    kind = "yaml" if m.group(1) == "default" else m.group(1)
    no_heading = "no-heading" in _split(m.group(2) or "", ",")
    projections: list[Projection] = []
    if m.group(3):
        for part in _split(m.group(3), ","):
            part = part.strip()
            if part:
                projections.append(_projection(part))
    if kind in ("value", "csv", "table") and not projections:
        raise UsageError(f"argument --format: [{kind}] needs fields, e.g. {kind}(name,state)")
    return Format(kind, tuple(projections), no_heading)


def _projection(part: str) -> Projection:
    """`key.path[0].name.transform(args):label=X` -> Projection (':' inside quotes is not an attribute)."""
    key, *attrs = _split(part, ":", maxsplit=1)
    label = None
    if attrs:
        lm = re.search(r"(?:^|:)label=([^:]+)", attrs[0])
        label = lm.group(1).strip().strip("'\"") if lm else None
    path: list[str] = []
    transforms = []
    for seg in _split(key.strip(), "."):
        tm = re.fullmatch(r"([a-z_]+)\((.*)\)", seg.strip(), re.S)
        if tm:
            pos, kw = [], []
            for arg in _split(tm.group(2), ","):
                arg = arg.strip()
                km = re.fullmatch(r"([a-z_]+)=(.*)", arg, re.S)
                if km:
                    kw.append((km.group(1), _unquote(km.group(2).strip())))
                elif arg:
                    pos.append(_unquote(arg))
            transforms.append((tm.group(1), tuple(pos), tuple(kw)))
        elif not transforms:
            path.extend(_path(seg))
        # a key after a transform (unsupported chaining) is ignored
    basename = any(t[0] == "basename" for t in transforms)
    return Projection(tuple(path), basename, label or _header(path[-1] if path else ""), tuple(transforms))


def _path(text: str) -> list[str]:
    """`workerPoolSpecs[0].machineSpec` -> ['workerPoolSpecs', '0', 'machineSpec']."""
    return [p for p in re.split(r"[.\[\]]+", text) if p]


def _unquote(text: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def _split(text: str, sep: str, maxsplit: int = -1) -> list[str]:
    """Split on `sep` outside parentheses, brackets and quotes."""
    out, depth, quote, cur = [], 0, "", ""
    for ch in text:
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif ch == sep and depth == 0 and (maxsplit < 0 or len(out) < maxsplit):
            out.append(cur)
            cur = ""
            continue
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
    for name, args, kwargs in p.transforms:
        if value is None:
            break
        value = _transform(name, args, dict(kwargs), value)
    if value is None:
        return ""
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, list):
        return ";".join(_scalar(v) for v in value)
    if isinstance(value, dict):  # gcloud: `key=value;...`, keys sorted
        return ";".join(f"{k}={_scalar(v)}" for k, v in sorted(value.items()))
    return _scalar(value)


def _transform(name: str, args: tuple[str, ...], kwargs: dict[str, str], value: Any) -> Any:
    """gcloud's basename() and date(format, tz=LOCAL|UTC); other transforms keep the value."""
    if name == "basename" and isinstance(value, str):
        return value.rstrip("/").rsplit("/", 1)[-1]
    if name == "date":
        from datetime import datetime

        fmt = kwargs.get("format") or (args[0] if args else "%Y-%m-%dT%H:%M:%S")
        try:
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                when = datetime.fromtimestamp(value, UTC)
            else:
                when = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except (ValueError, OverflowError, OSError):
            return value
        tz = kwargs.get("tz") or (args[3] if len(args) > 3 else None)
        if tz and tz.upper() == "LOCAL":
            when = when.astimezone()
        elif tz and tz.upper() == "UTC":
            when = when.astimezone(UTC)
        return when.strftime(fmt)
    return value


def _scalar(v: Any) -> str:
    if isinstance(v, (dict, list)):
        return json.dumps(v, sort_keys=True)
    return str(v)


def flatten(resources: list[Any], keys: Sequence[str]) -> list[Any]:
    """gcloud's `--flatten`: for each key (a dotted path to a list), one copy of each record
    per item of that list, the list replaced by the item; a record whose list is empty or
    missing stays once, with the key set to None. Keys apply in order."""
    import copy

    for key in keys:
        path = _path(key)
        out = []
        for r in resources:
            items = get_path(r, path)
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


def render(resources: Any, fmt: Format, *, is_list: bool) -> str:
    """Text for stdout ('' for `none`); resources are JSON-ready dicts."""
    from vcli.codec import to_yaml

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
        if not fmt.no_heading:
            w.writerow([p.label.lower() for p in fmt.projections])
        w.writerows(rows)
        return buf.getvalue()
    headers = [p.label for p in fmt.projections]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    if fmt.no_heading:
        widths = [max((len(r[i]) for r in rows), default=0) for i in range(len(headers))]
    lines = [] if fmt.no_heading else ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    return "".join(line + "\n" for line in lines)


_TERM = re.compile(r"^([A-Za-z0-9_.\[\]]+)\s*(!=|=|~|:|<=|>=|<|>)\s*(.*)$", re.S)
#: One filter term: unquoted text and quoted strings run together (`displayName="my job"`).
_TOKEN = re.compile(r"""(?:[^\s"']+|"[^"]*"|'[^']*')+""")


def apply_filter(resources: list[dict[str, Any]], expr: str | None) -> list[dict[str, Any]]:
    if not expr:
        return resources
    terms = [t for t in _TOKEN.findall(expr) if t != "AND"]
    parsed = []
    for t in terms:
        m = _TERM.match(t)
        if not m:
            raise UsageError(f"argument --filter: cannot parse [{t}]; use FIELD=VALUE, FIELD!=VALUE, FIELD~REGEX or FIELD:TEXT")
        val: Any = _unquote(m.group(3).strip())
        if m.group(2) == "~":
            try:
                val = re.compile(val)
            except (re.error, RecursionError, OverflowError) as e:
                raise UsageError(f"argument --filter: [{t}] is not a valid regular expression: {e}") from None
        parsed.append((_path(m.group(1)), m.group(2), val))

    def ok(r: dict[str, Any]) -> bool:
        for path, op, val in parsed:
            cur = get_path(r, path)
            text = "" if cur is None else str(cur)
            if op == "=" and text != val:
                return False
            if op == "!=" and text == val:
                return False
            if op == "~" and not val.search(text):
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
        path = _path(key.lstrip("~"))
        out.sort(key=lambda r: _sort_key(get_path(r, path)), reverse=desc)
    return out


def _sort_key(value: Any) -> tuple[int, Any]:
    """Numbers (and numeric strings such as int64 counts) by value, then text, then missing."""
    if value is None:
        return (2, "")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (0, float(value))
    text = _scalar(value)
    try:
        return (0, float(text))
    except ValueError:
        return (1, text)

"""`--format=NAME[ATTRIBUTES](PROJECTION)`: gcloud's resource printers (`gcloud topic formats`).

Printers: `yaml` (the default; a list prints `---`-separated documents), `json` (an object for
describe, an array for list), `value` (tab-separated, no header), `csv` (header, then
comma-separated), `table` (aligned columns, upper-case headers), `flattened`/`text` (one
`key.path: value` line per leaf), `get` (like value), `none`/`disable`. A projection selects and
transforms keys (`vcli.formats.keys`); for `json`/`yaml`/`flattened` it keeps the selected keys
in their nesting. Key attributes: `:label=NAME`, `:sort=N`, `:reverse`, `:align=left|center|right`.
Printer attributes: `no-heading`, `box`, `title=T`, `pad=N`, `separator=S`, `delimiter=D`
(list items), `terminator=T`, `quote`, `no-pad`, `no-undefined`.

Contract: `parse_format` accepts exactly what `render` implements; any other printer,
attribute, key attribute or transform is a UsageError naming `--format` (exit 2), so output is
never silently different from what was asked.
"""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass
from typing import Any

from vcli.errors import UsageError
from vcli.formats.keys import ALL, Key, apply_calls, closing, parse_key, sort_key, split_top, text, unquote

FLAG = "--format"

#: Each printer and the attributes it takes (gcloud's names; others are refused).
PRINTERS: dict[str, tuple[str, ...]] = {
    "yaml": ("no-undefined",),
    "json": ("no-undefined",),
    "value": ("separator", "delimiter", "terminator", "quote"),
    "get": ("separator", "delimiter", "terminator"),
    "csv": ("no-heading", "separator", "delimiter", "terminator"),
    "table": ("no-heading", "box", "title", "pad", "delimiter"),
    "flattened": ("no-pad", "separator"),
    "text": ("no-pad", "separator"),
    "none": (),
    "disable": (),
    "default": ("no-undefined",),
}
_NEEDS_KEYS = ("value", "get", "csv", "table")
_KEY_ATTRIBUTES = ("label", "sort", "reverse", "align")


@dataclass(frozen=True)
class Projection:
    """One projected key and its attributes."""

    key: Key
    label: str
    sort: int | None = None
    reverse: bool = False
    align: str = "left"

    @property
    def path(self) -> tuple[str | int, ...]:
        return self.key.path


@dataclass(frozen=True)
class Format:
    kind: str
    projections: tuple[Projection, ...]
    attributes: tuple[tuple[str, str], ...] = ()

    def attr(self, name: str, default: str | None = None) -> str | None:
        return dict(self.attributes).get(name, default)

    @property
    def no_heading(self) -> bool:
        return "no-heading" in dict(self.attributes)


def parse_format(text_: str) -> Format:
    src = text_.strip()
    m = re.match(r"([a-z-]+)", src)
    if not m or m.group(1) not in PRINTERS:
        raise UsageError(f"argument {FLAG}: unknown format [{text_}]; use one of "
                         + ", ".join(k for k in PRINTERS if k not in ("default", "disable"))
                         + " (e.g. value(name,state), table(name.basename():label=ID,state))")
    kind = {"default": "yaml", "disable": "none", "text": "flattened"}.get(m.group(1), m.group(1))
    allowed = PRINTERS[m.group(1)]
    i, attrs, projections = m.end(), [], []
    seen_projection = False
    while i < len(src):
        ch = src[i]
        if ch.isspace():
            i += 1
        elif ch == "[":
            j = closing(src, i, FLAG)
            attrs += _attributes(src[i + 1:j], allowed, src)
            i = j + 1
        elif ch == "(" and not seen_projection:
            j = closing(src, i, FLAG)
            projections = [_projection(p.strip(), src) for p in split_top(src[i + 1:j], ",") if p.strip()]
            seen_projection = True
            i = j + 1
        else:
            raise UsageError(f"argument {FLAG}: cannot parse [{text_}] at [{src[i:][:30]}]; "
                             "one format is NAME[ATTRIBUTES](KEY, ...)")
    if kind in ("value", "csv", "table", "get") and not projections:
        raise UsageError(f"argument {FLAG}: [{kind}] needs fields, e.g. {kind}(name,state)")
    if kind == "none" and projections:
        raise UsageError(f"argument {FLAG}: [none] prints nothing and takes no fields")
    return Format(kind, tuple(projections), tuple(attrs))


def _attributes(inner: str, allowed: tuple[str, ...], src: str) -> list[tuple[str, str]]:
    out = []
    for part in split_top(inner, ","):
        part = part.strip()
        if not part:
            continue
        name, _, value = part.partition("=")
        name = name.strip()
        if name not in allowed:
            raise UsageError(f"argument {FLAG}: [{src}]: attribute [{name}] is not supported by this format; "
                             f"it takes {', '.join(allowed) or 'none'}")
        value = _unescape(unquote(value.strip()))
        if name == "pad" and not (value.isdigit() and len(value) <= 3):
            raise UsageError(f"argument {FLAG}: [{src}]: pad must be a number of spaces")
        out.append((name, value))
    return out


def _unescape(value: str) -> str:
    return value.replace("\\t", "\t").replace("\\n", "\n")


def _projection(part: str, src: str) -> Projection:
    """`key.path[0].transform(args):label=X:sort=1:reverse:align=right` -> Projection."""
    key_text, *attr_texts = split_top(part, ":")
    key = parse_key(key_text, FLAG)
    label, sort, reverse, align = None, None, False, "left"
    for attr in attr_texts:
        name, eq, value = attr.strip().partition("=")
        name, value = name.strip(), unquote(value.strip())
        if name not in _KEY_ATTRIBUTES:
            raise UsageError(f"argument {FLAG}: [{src}]: key attribute [{name}] is not supported; "
                             f"use {', '.join(':' + a for a in _KEY_ATTRIBUTES)}")
        if name == "label":
            label = value
        elif name == "sort":
            if not (value.isdigit() and len(value) <= 6):
                raise UsageError(f"argument {FLAG}: [{src}]: :sort= takes a number (1 sorts first)")
            sort = int(value)
        elif name == "reverse":
            reverse = True
        elif value not in ("left", "center", "right"):
            raise UsageError(f"argument {FLAG}: [{src}]: :align= takes left, center or right")
        else:
            align = value
    return Projection(key, label if label is not None else _header(key.name), sort, reverse, align)


def _header(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper()


# --------------------------------------------------------------------------- rendering


def render(resources: Any, fmt: Format, *, is_list: bool) -> str:
    """Text for stdout ('' for `none`); resources are JSON-ready dicts."""
    items = list(resources) if is_list else [resources]
    items = _sorted(items, fmt.projections)
    if fmt.kind == "none":
        return ""
    if fmt.kind in ("json", "yaml", "flattened"):
        return _render_structured(items, fmt, is_list)
    delimiter = fmt.attr("delimiter", ";") or ";"
    rows = [[text(p.key.value(r), delimiter) for p in fmt.projections] for r in items]
    if fmt.kind in ("value", "get"):
        return _values(rows, fmt)
    if fmt.kind == "csv":
        return _csv(rows, fmt)
    return _table(rows, fmt)


def _render_structured(items: list[Any], fmt: Format, is_list: bool) -> str:
    """`json`, `yaml` or `flattened` of the (sorted) items: projected when the format has keys,
    without null fields under `no-undefined`; a single resource unless `is_list`."""
    shown = [project(r, fmt.projections) for r in items] if fmt.projections else items
    if fmt.attr("no-undefined") is not None:
        shown = [_drop_none(r) for r in shown]
    return _structured(shown if is_list else shown[0], shown, fmt, is_list)


def _values(rows: list[list[str]], fmt: Format) -> str:
    """`value` (tab-separated) and `get` (space-separated): one line per row, no header; the
    separator and terminator attributes replace those, `quote` quotes cells that need it."""
    sep = fmt.attr("separator", "\t" if fmt.kind == "value" else " ")
    term = fmt.attr("terminator", "\n")
    if fmt.attr("quote") is not None:
        rows = [[_quote(c, sep or "\t") for c in row] for row in rows]
    return "".join((sep or "").join(row) + (term or "") for row in rows)


def _csv(rows: list[list[str]], fmt: Format) -> str:
    """`csv`: the lower-cased labels as a header (unless `no-heading`), then the rows; the
    separator's first character delimits, the terminator ends each line."""
    buf = io.StringIO()
    w = csv.writer(buf, delimiter=(fmt.attr("separator", ",") or ",")[0], lineterminator=fmt.attr("terminator", "\n") or "\n")
    if not fmt.no_heading:
        w.writerow([p.label.lower() for p in fmt.projections])
    w.writerows(rows)
    return buf.getvalue()


def _sorted(items: list[Any], projections: tuple[Projection, ...]) -> list[Any]:
    """`:sort=N` keys, lowest N first; `:reverse` sorts that key descending."""
    keyed = sorted((p for p in projections if p.sort is not None), key=lambda p: p.sort or 0)
    out = list(items)
    for p in reversed(keyed):
        out.sort(key=lambda r, p=p: sort_key(p.key.value(r)), reverse=p.reverse)
    return out


def project(resource: Any, projections: tuple[Projection, ...]) -> Any:
    """The resource cut down to the projected keys, each in its nesting, transformed."""
    out: dict[str, Any] = {}
    for p in projections:
        path = p.key.path
        value = p.key.value(resource)
        if value is None:
            continue
        if not path:  # a key-less call: firstof(...)
            out[p.label] = value
            continue
        _put(out, resource, path, p.key, resource)
    return out


def _put(out: Any, data: Any, path: tuple[str | int, ...], key: Key, root: Any) -> Any:
    """`out` with the value of `key` (whose path left is `path` within `data`) written in."""
    if not path:
        return apply_calls(data, key.calls, root)
    seg = path[0]
    if seg == ALL or (isinstance(data, list) and not isinstance(seg, int)):
        return _put_each(out, data, path, key, root)
    if isinstance(seg, int):
        return _put_index(out, data, seg, path[1:], key, root)
    return _put_field(out, data, path, key, root)


def _put_each(out: Any, data: Any, path: tuple[str | int, ...], key: Key, root: Any) -> Any:
    """`_put` over every item of the list `data` (`path` starts with `[]`, or with a field of
    each item); `out` unchanged when `data` is not a list."""
    if not isinstance(data, list):
        return out
    inner = path[1:] if path[0] == ALL else path
    base = out if isinstance(out, list) and len(out) == len(data) else [{} for _ in data]
    return [_put(b if isinstance(b, (dict, list)) else {}, d, inner, key, root) for b, d in zip(base, data)]


def _put_index(out: Any, data: Any, seg: int, rest: tuple[str | int, ...], key: Key, root: Any) -> Any:
    """`_put` (of the path left, `rest`) into item `seg` of the list `data`, kept as a one-item
    list; `out` unchanged when there is no such item."""
    if not isinstance(data, list) or not -len(data) <= seg < len(data):
        return out
    base = out if isinstance(out, list) else []
    return [_put(base[0] if base else {}, data[seg], rest, key, root)]


def _put_field(out: Any, data: Any, path: tuple[str | int, ...], key: Key, root: Any) -> Any:
    """`_put` into field `path[0]` of the dict `data`, nested in `out`; `out` unchanged when
    `data` has no such field."""
    seg, rest = path[0], path[1:]
    if not isinstance(data, dict) or seg not in data:
        return out
    target = out if isinstance(out, dict) else {}
    target[seg] = _put(target.get(seg, {}) if rest else None, data[seg], rest, key, root)
    return target


def _drop_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_none(v) for v in value]
    return value


def _structured(resource: Any, items: list[Any], fmt: Format, is_list: bool) -> str:
    if fmt.kind == "json":
        return json.dumps(resource, indent=2, sort_keys=True) + "\n"
    if fmt.kind == "yaml":
        from vcli.codec import to_yaml

        return "---\n".join(to_yaml(r) for r in items) if items else ""
    sep = fmt.attr("separator", ": ") or ": "
    blocks = []
    for r in items:
        leaves = list(_leaves(r, ""))
        width = 0 if fmt.attr("no-pad") is not None else max((len(k) for k, _ in leaves), default=0)
        lines = [f"{(k + sep.rstrip()).ljust(width + len(sep.rstrip()))}{' ' if sep.endswith(' ') else ''}{v}"
                 for k, v in leaves]
        blocks.append("---\n" + "".join(line.rstrip() + "\n" for line in lines))
    return "".join(blocks)


def _leaves(value: Any, prefix: str) -> Any:
    """(`a.b[0].c`, scalar text) for each leaf, keys sorted (gcloud's flattened printer)."""
    if isinstance(value, dict):
        if not value and prefix:
            yield prefix, "{}"
        for k in sorted(value):
            yield from _leaves(value[k], f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(value, list):
        if not value and prefix:
            yield prefix, "[]"
        for i, v in enumerate(value):
            yield from _leaves(v, f"{prefix}[{i}]")
    else:
        yield prefix, text(value)


def _quote(cell: str, sep: str) -> str:
    if cell == "" or any(c.isspace() for c in cell) or sep in cell or '"' in cell:
        return '"' + cell.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return cell


def _table(rows: list[list[str]], fmt: Format) -> str:
    headers = [p.label for p in fmt.projections]
    aligns = [p.align for p in fmt.projections]
    show_head = not fmt.no_heading
    widths = [max([len(h)] * show_head + [len(r[i]) for r in rows] or [0]) for i, h in enumerate(headers)]

    def cell(c: str, w: int, a: str) -> str:
        return c.rjust(w) if a == "right" else c.center(w) if a == "center" else c.ljust(w)

    title = fmt.attr("title")
    if fmt.attr("box") is not None:
        bar = lambda l, m, r: l + m.join("─" * (w + 2) for w in widths) + r
        line = lambda cs: "│" + "│".join(" " + cell(c, w, a) + " " for c, w, a in zip(cs, widths, aligns)) + "│"
        out = []
        if title:
            inner = sum(widths) + 3 * len(widths) - 1
            out += [bar("┌", "─", "┐"), "│" + (" " + title).ljust(inner) + "│", bar("├", "┬", "┤")]
        else:
            out.append(bar("┌", "┬", "┐"))
        if show_head:
            out += [line(headers), bar("├", "┼", "┤")]
        out += [line(r) for r in rows]
        out.append(bar("└", "┴", "┘"))
        return "".join(x + "\n" for x in out)
    gap = " " * int(fmt.attr("pad", "2") or "2")
    lines = [title] if title else []
    if show_head:
        lines.append(gap.join(cell(h, w, a) for h, w, a in zip(headers, widths, aligns)).rstrip())
    lines += [gap.join(cell(c, w, a) for c, w, a in zip(row, widths, aligns)).rstrip() for row in rows]
    return "".join(x + "\n" for x in lines)

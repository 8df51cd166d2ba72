"""`--filter=EXPRESSION`: gcloud's filter language (`gcloud topic filters`), client-side.

Terms: `key OP value` with OP one of `=` `!=` (equal; `*` in the value matches any text),
`:` (has: case-insensitive substring, `*` a wildcard, `key:*` the key is set), `~` `!~`
(Python regular expression, unanchored), `<` `<=` `>` `>=` (numbers by value, times as times,
text as text; a time may be relative: `createTime>-P1D`). A value may be quoted or a list
`key:(a b c)` (any of them). A bare word matches any value of the resource that contains it.
Keys take indices and transforms (`trials.len()>3`, `name.basename()=123`); a key that reaches
into a list matches when any item does (`trials.state=INFEASIBLE`).
Terms combine with `AND`, `OR`, `NOT`/`-term` and parentheses. Terms side by side are ANDed
with the lowest precedence (`a b OR c` is `a AND (b OR c)`); explicit AND and OR in one
parenthesis group must be grouped, as gcloud requires.

Contract: `compile_filter` returns a predicate that never raises on any resource, or raises
UsageError naming `--filter` (exit 2).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from vcli.errors import UsageError
from vcli.formats.keys import Key, closing, parse_key, parse_time, text

FLAG = "--filter"
Predicate = Callable[[Any], bool]
_OPS = ("!=", "!~", "<=", ">=", ":", "=", "<", ">", "~")
_OP_CHARS = set(":=!<>~")


def compile_filter(expr: str) -> Predicate:
    parser = _Parser(expr)
    pred = parser.expression(top=True)
    return pred


#: How long one `--filter` may take over all resources: bounds a regex that backtracks
#: catastrophically (`(a+)+$`), which Python's `re` would otherwise run for hours.
FILTER_SECONDS = 5.0


def apply_filter(resources: list[dict[str, Any]], expr: str | None,
                 *, seconds: float = FILTER_SECONDS) -> list[dict[str, Any]]:
    """The resources `expr` selects; UsageError if it cannot be parsed or takes longer than
    `seconds` (measured in the main thread only: elsewhere it is not bounded)."""
    if not expr or not expr.strip():
        return resources
    pred = compile_filter(expr)
    with _time_limit(seconds) as limited:
        try:
            return [r for r in resources if pred(r)]
        except _FilterTimeout:
            pass
    raise UsageError(f"argument {FLAG}: [{expr}] took more than {limited.seconds:g} s over "
                     f"{len(resources)} resource(s); a regular expression that backtracks (nested "
                     "repeats such as (a+)+) is the usual cause: simplify it")


class _FilterTimeout(BaseException):
    """Raised by SIGALRM inside the filter loop (a BaseException: no `except Exception` eats it)."""


class _time_limit:
    """SIGALRM after `seconds` in the main thread, restoring any timer and handler set before
    (the remaining time of an outer timer is kept)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._armed = False

    def __enter__(self) -> _time_limit:
        import signal
        import threading
        import time

        if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
            return self
        self._started = time.monotonic()
        self._old_handler = signal.signal(signal.SIGALRM, self._fire)
        self._old_timer = signal.setitimer(signal.ITIMER_REAL, self.seconds)
        self._armed = True
        return self

    @staticmethod
    def _fire(*_: Any) -> None:
        raise _FilterTimeout()

    def __exit__(self, *exc: Any) -> None:
        import signal
        import time

        if not self._armed:
            return
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self._old_handler)
        delay, interval = self._old_timer
        if delay > 0:
            left = delay - (time.monotonic() - self._started)
            signal.setitimer(signal.ITIMER_REAL, max(left, 0.001), interval)


#: How deep groups, NOT and `-` may nest: the parser (and the predicate it builds) recurse
#: once per level, and 500 levels overflowed Python's stack with a 3,000-line traceback.
MAX_DEPTH = 100


class _Parser:
    def __init__(self, src: str) -> None:
        self.src = src
        self.i = 0
        self.depth = 0

    def fail(self, what: str) -> UsageError:
        at = self.src[self.i:][:30]
        return UsageError(f"argument {FLAG}: {what} in [{self.src}]" + (f" at [{at}]" if at else ""))

    def skip(self) -> None:
        while self.i < len(self.src) and self.src[self.i].isspace():
            self.i += 1

    def word(self, w: str) -> bool:
        """The keyword `w` (AND, OR, NOT) stands at the cursor; consume it."""
        self.skip()
        end = self.i + len(w)
        if self.src[self.i:end] == w and (end == len(self.src) or self.src[end].isspace() or self.src[end] == "("):
            self.i = end
            return True
        return False

    def at_end_of_group(self) -> bool:
        self.skip()
        return self.i >= len(self.src) or self.src[self.i] == ")"

    def expression(self, top: bool = False) -> Predicate:
        """A parenthesis group: chains side by side (AND), each a run of one explicit op."""
        ops_seen: set[str] = set()
        chains = [self.chain(ops_seen)]
        while not self.at_end_of_group():
            chains.append(self.chain(ops_seen))
        if top and self.i < len(self.src):
            raise self.fail("unmatched [)]")
        if len(chains) == 1:
            return chains[0]
        return lambda r: all(c(r) for c in chains)

    def chain(self, ops_seen: set[str]) -> Predicate:
        parts = [self.unary()]
        op = None
        while True:
            if self.word("AND"):
                this = "AND"
            elif self.word("OR"):
                this = "OR"
            else:
                break
            ops_seen.add(this)
            if len(ops_seen) > 1:
                raise self.fail("parenthesis grouping is required when AND and OR are combined")
            op = this
            if self.at_end_of_group():
                raise self.fail(f"a term is missing after {this}")
            parts.append(self.unary())
        if len(parts) == 1:
            return parts[0]
        if op == "OR":
            return lambda r: any(p(r) for p in parts)
        return lambda r: all(p(r) for p in parts)

    def unary(self) -> Predicate:
        self.skip()
        if self.i >= len(self.src):
            raise self.fail("a term is missing")
        if self.depth >= MAX_DEPTH and (self.src[self.i] in "(-" or self.src.startswith("NOT", self.i)):
            raise self.fail(f"groups, NOT and - nest more than {MAX_DEPTH} levels deep")
        self.depth += 1
        try:
            return self._unary()
        finally:
            self.depth -= 1

    def _unary(self) -> Predicate:
        if self.word("NOT"):
            inner = self.unary()
            return lambda r: not inner(r)
        if self.src[self.i] == "-" and self.i + 1 < len(self.src) and not self.src[self.i + 1].isspace():
            self.i += 1
            inner = self.unary()
            return lambda r: not inner(r)
        if self.src[self.i] == "(":
            start = self.i
            self.i += 1
            inner = self.expression()
            self.skip()
            if self.i >= len(self.src) or self.src[self.i] != ")":
                self.i = start
                raise self.fail("unbalanced [(]")
            self.i += 1
            return inner
        if self.src[self.i] == ")":
            raise self.fail("unmatched [)]")
        for w in ("AND", "OR"):
            if self.src.startswith(w, self.i) and (self.i + len(w) == len(self.src) or self.src[self.i + len(w)].isspace()):
                raise self.fail(f"a term is missing before {w}")
        return self.term()

    def term(self) -> Predicate:
        start = self.i
        if self.src[self.i] in "'\"":
            return _global(self.quoted())
        key_text = self.key_text()
        self.skip()
        op = next((o for o in _OPS if self.src.startswith(o, self.i)), None)
        if op is None:
            if not key_text:
                raise self.fail("cannot parse a term")
            return _global(key_text)
        if not key_text:
            self.i = start
            raise self.fail(f"a key is missing before [{op}]")
        self.i += len(op)
        key = parse_key(key_text, FLAG)
        self.skip()
        values = self.operand(op)
        return _term(key, op, values, self.src[start:self.i])

    def key_text(self) -> str:
        """Up to an operator, a space or the `)` closing a group; transforms' parentheses kept."""
        j = self.i
        while j < len(self.src):
            ch = self.src[j]
            if ch.isspace() or ch in _OP_CHARS or ch == ")":
                break
            if ch in "([":
                j = closing(self.src, j, FLAG) + 1
                continue
            j += 1
        out, self.i = self.src[self.i:j], j
        return out

    def quoted(self) -> str:
        q = self.src[self.i]
        j = self.src.find(q, self.i + 1)
        if j < 0:
            raise self.fail("unterminated quote")
        out, self.i = self.src[self.i + 1:j], j + 1
        return out

    def operand(self, op: str) -> list[str]:
        if self.i >= len(self.src):
            raise self.fail(f"a value is missing after [{op}]")
        ch = self.src[self.i]
        if ch in "'\"":
            return [self.quoted()]
        if ch == "(" and op not in ("~", "!~"):  # after ~ a `(` is the regular expression's own
            try:
                j = closing(self.src, self.i, FLAG)
            except UsageError:
                raise self.fail(f"the value list after [{op}] is not closed") from None
            inner, self.i = self.src[self.i + 1:j], j + 1
            items = [t[1:-1] if t[:1] in "'\"" else t for t in re.findall(r""""[^"]*"|'[^']*'|[^\s]+""", inner)]
            items = [t for t in items if t != "OR"]
            if not items:
                raise self.fail(f"the value list after [{op}] is empty")
            return items
        j, depth = self.i, 0
        while j < len(self.src) and not self.src[j].isspace():
            if self.src[j] == "(":
                depth += 1
            elif self.src[j] == ")":
                if depth == 0:
                    break
                depth -= 1
            j += 1
        out, self.i = self.src[self.i:j], j
        if not out:
            raise self.fail(f"a value is missing after [{op}]")
        return [out]


# --------------------------------------------------------------------------- matching


def _leaf_values(value: Any) -> list[Any]:
    """A value fanned out: a list's items (nested lists flattened), else the value itself."""
    if isinstance(value, list):
        out: list[Any] = []
        for v in value:
            out.extend(_leaf_values(v))
        return out
    return [value]


def _global(word: str) -> Predicate:
    needle = word.lower()

    def walk(v: Any) -> bool:
        if isinstance(v, dict):
            return any(needle in str(k).lower() or walk(x) for k, x in v.items())
        if isinstance(v, list):
            return any(walk(x) for x in v)
        return v is not None and needle in text(v).lower()

    return walk


def _term(key: Key, op: str, operands: list[str], src: str) -> Predicate:
    tests = [_matcher(op, o, src) for o in operands]
    negated = op in ("!=", "!~")

    def pred(r: Any) -> bool:
        values = _leaf_values(key.value(r))
        hit = any(t(v) for t in tests for v in values)
        return not hit if negated else hit

    return pred


def _matcher(op: str, operand: str, src: str) -> Callable[[Any], bool]:
    if op in ("~", "!~"):
        try:
            rx = re.compile(operand)
        except (re.error, RecursionError, OverflowError) as e:
            raise UsageError(f"argument {FLAG}: [{src}] is not a valid regular expression: {e}") from None
        return lambda v: v is not None and rx.search(_cmp_text(v)) is not None
    if op == ":":
        if operand == "*":
            return lambda v: v not in (None, "", {}, [])
        rx = re.compile(".*".join(re.escape(p) for p in operand.split("*")), re.I)

        def has(v: Any) -> bool:
            if isinstance(v, dict):
                return any(rx.search(str(k)) or rx.search(text(x)) for k, x in v.items())
            return v is not None and rx.search(_cmp_text(v)) is not None

        return has
    if op in ("=", "!="):
        if "*" in operand:
            rx = re.compile(".*".join(re.escape(p) for p in operand.split("*")), re.S)
            return lambda v: v is not None and rx.fullmatch(_cmp_text(v)) is not None
        num = _number(operand)

        def equal(v: Any) -> bool:
            if v is None:
                return operand == ""
            if isinstance(v, bool):
                return operand.lower() == ("true" if v else "false")
            if num is not None and (n := _number(_cmp_text(v))) is not None:
                return n == num
            return _cmp_text(v) == operand

        return equal
    return _ordering(op, operand)


def _ordering(op: str, operand: str) -> Callable[[Any], bool]:
    compare = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
               ">=": lambda a, b: a >= b}[op]
    num = _number(operand)
    when = _time(operand)

    def ordered(v: Any) -> bool:
        if v is None or isinstance(v, (dict, bool)):
            return False
        s = _cmp_text(v)
        if num is not None and (n := _number(s)) is not None:
            return compare(n, num)
        if when is not None:
            try:
                t = parse_time(v)
            except (ValueError, OverflowError, OSError, TypeError):
                t = None
            if t is not None:
                if t.tzinfo is None:
                    t = t.replace(tzinfo=UTC)
                return compare(t, when)
        return compare(s, operand)

    return ordered


def _cmp_text(v: Any) -> str:
    return text(v)


def _number(s: str) -> float | None:
    if not re.fullmatch(r"\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*", s):
        return None
    try:
        return float(s)
    except (ValueError, OverflowError):
        return None


_DURATION = re.compile(r"([-+]?)P(?:(\d+(?:\.\d+)?)W)?(?:(\d+(?:\.\d+)?)D)?"
                       r"(?:T(?:(\d+(?:\.\d+)?)H)?(?:(\d+(?:\.\d+)?)M)?(?:(\d+(?:\.\d+)?)S)?)?", re.I)


def _time(operand: str) -> datetime | None:
    """An absolute time (ISO 8601), or one relative to now (`-P1D`, `-PT2H`)."""
    m = _DURATION.fullmatch(operand.strip())
    if m and any(m.groups()[1:]):
        w, d, h, mi, s = (float(g or 0) for g in m.groups()[1:])
        try:
            delta = timedelta(weeks=w, days=d, hours=h, minutes=mi, seconds=s)
            return datetime.now(UTC) + (-delta if m.group(1) == "-" else delta)
        except OverflowError:  # beyond the years 1..9999
            raise UsageError(f"argument {FLAG}: the time [{operand}] is out of range (years 1 to 9999)") from None
    if not re.match(r"\d{4}-\d{2}", operand.strip()):
        return None
    try:
        t = datetime.fromisoformat(operand.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=UTC)

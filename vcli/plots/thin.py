"""Fewer marks for big studies: what a plot of thousands of trials draws (standard library only).

No plot draws more than `canvas.MAX_MARKS` marks (points, bars, vertices of lines): past it a
plot draws a sample of its trials (`thin`): the best ones, the ones at the extremes of every
axis, and an even stride through the rest in trial order, so the best trials, the range of
every axis and the overall shape stay visible; a line that is a function of every trial (the
best so far, the empirical distribution, how many ran at once) keeps its corners or a sample
of them that keeps its extremes (`steps`, `sample_line`). A thinned plot says so in a corner
(`say_sampled`). The figure's colours, scales and ranks still come from every trial.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence, TypeVar

T = TypeVar("T")

#: The share of a thinned plot's marks given to its best trials.
BEST_SHARE = 0.1


def thin(items: Sequence[T], limit: int, *, score: Callable[[T], float] | None = None,
         coords: Sequence[Callable[[T], float]] = ()) -> list[T]:
    """At most `limit` of `items` (all of them when they fit), in their order: the
    `BEST_SHARE` of `limit` with the highest `score`, for each of `coords` the items with its
    least and greatest finite value, and an even stride through the rest."""
    n = len(items)
    if n <= limit:
        return list(items)
    keep: set[int] = set()
    if score is not None:
        keep.update(sorted(range(n), key=lambda i: -score(items[i]))[:max(1, int(limit * BEST_SHARE))])
    for coord in coords:
        values = [(v, i) for i in range(n) if _finite(v := coord(items[i]))]
        if values:
            keep.update((min(values)[1], max(values)[1]))
    rest = [i for i in range(n) if i not in keep]
    room = limit - len(keep)
    if room > 0 and rest:
        stride = len(rest) / room
        keep.update(rest[int(k * stride)] for k in range(min(room, len(rest))))
    return [items[i] for i in sorted(keep)]


def steps(xs: Sequence[float], ys: Sequence[float]) -> tuple[list[float], list[float]]:
    """A step line (drawn `steps-post`) with only its corners: the points where y changes,
    and the last point; the same line, drawn with fewer vertices."""
    if not xs:
        return [], []
    out_x, out_y = [xs[0]], [ys[0]]
    for x, y in zip(xs[1:], ys[1:]):
        if y != out_y[-1]:
            out_x.append(x)
            out_y.append(y)
    if out_x[-1] != xs[-1]:
        out_x.append(xs[-1])
        out_y.append(ys[-1])
    return out_x, out_y


def sample_line(xs: Sequence[float], ys: Sequence[float], limit: int) -> tuple[list[float], list[float]]:
    """At most about `limit` vertices of a line: all when they fit; else an even stride that
    keeps the first and last vertex and, in each stretch, the vertex of the greatest y (a
    peak of trials running at once is never smoothed away)."""
    n = len(xs)
    if n <= limit:
        return list(xs), list(ys)
    buckets = max(1, limit // 2)
    keep = {0, n - 1}
    for b in range(buckets):
        lo, hi = b * n // buckets, max((b + 1) * n // buckets, b * n // buckets + 1)
        keep.add(lo)
        keep.add(max(range(lo, min(hi, n)), key=lambda i: ys[i]))
    order = sorted(keep)
    return [xs[i] for i in order], [ys[i] for i in order]


def say_sampled(ax: Any, shown: int, total: int) -> None:
    """Write in the plot's corner that it shows `shown` of `total` trials, when it does."""
    if shown < total:
        ax.text(0.01, 0.01, f"{shown:,} of {total:,} trials drawn: the best, the extremes and an even sample",
                transform=ax.transAxes, fontsize=7, color="0.35", va="bottom", ha="left", zorder=6,
                bbox={"boxstyle": "round,pad=0.2", "facecolor": "white", "edgecolor": "none", "alpha": 0.8})


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)

"""Big studies in the report and the dashboard (#48): the figure cache on disk that `plot` and
the dashboard share (a second view of an unchanged study draws nothing; a new trial draws
again; concurrent writers never leave a damaged entry; a damaged or linked entry is a miss),
the dashboard's paginated trial table, and the cap on the marks one plot draws.

Studies are written straight through the store API (no trainer runs), and the dashboard is
asked in-process through its own router, so the whole module takes a few seconds."""

from __future__ import annotations

import json
import multiprocessing
import os
import re
from pathlib import Path
from typing import Any, Iterator

import pytest

from vcli.plots.cache import FigureCache, Slot, last_change

STUDY_SPEC = {"metrics": [{"metricId": "acc", "goal": "MAXIMIZE"}],
              "parameters": [{"parameterId": "lr", "doubleValueSpec": {"minValue": 1e-4, "maxValue": 0.1},
                              "scaleType": "UNIT_LOG_SCALE"},
                             {"parameterId": "units", "integerValueSpec": {"minValue": 16, "maxValue": 512}}]}


def _trial(i: int, n: int) -> Any:
    from vcli.spec import Measurement, Trial, TrialState

    acc = 0.5 + ((i * 7919) % n) / (2 * n)  # every value once, in no order: trial `_best(n)` is the best
    ms = tuple(Measurement(step_count=s, metrics={"acc": acc - (3 - s) / 100}) for s in range(1, 4))
    return Trial(id=str(i), parameters={"lr": 0.0001 * (1 + (i * 31) % 997), "units": 16 + (i * 13) % 497},
                 state=TrialState.SUCCEEDED, final_measurement=ms[-1], measurements=ms,
                 start_time=f"2026-12-07T10:{i // 600 % 60:02d}:{i // 10 % 60:02d}Z",
                 end_time=f"2026-12-07T11:{i // 600 % 60:02d}:{i // 10 % 60:02d}Z")


def _best(n: int) -> str:
    return str(max(range(1, n + 1), key=lambda i: (i * 7919) % n))


def make_study(home: Path, trials: int) -> str:
    """A SUCCEEDED study of `trials` trials written through the store API."""
    from vcli import codec
    from vcli.store import Store

    store = Store(home)
    try:
        study = store.create_job(kind="hyperparameterTuningJob", display_name="paged", state="JOB_STATE_SUCCEEDED",
                                 record={"studySpec": STUDY_SPEC, "maxTrialCount": trials, "parallelTrialCount": 4})
        specs = {p.parameter_id: p for p in codec.study_spec_from_stored(STUDY_SPEC).parameters}
        for i in range(1, trials + 1):
            store.save_trial(study.id, _trial(i, trials), specs)
        return study.id
    finally:
        store.close()


@pytest.fixture
def draws(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many trials each drawing of a study's figures had (`vcli.plots.render.draw` calls)."""
    pytest.importorskip("matplotlib", reason="needs the plot extra: pip install 'vcli[plot]'")
    from vcli.plots import render

    calls: list[int] = []
    real = render.draw

    def counted(spec: Any, params: Any, trials: Any, **kw: Any) -> Any:
        calls.append(len(trials))
        return real(spec, params, trials, **kw)

    monkeypatch.setattr(render, "draw", counted)
    return calls


def _view(home: Path, study: str) -> tuple[Any, str]:
    from vcli.dashboard import pages
    from vcli.dashboard.reader import Reader

    reader = Reader(home)  # a fresh dashboard: nothing in its memory
    try:
        view = reader.study(study)
        return view, pages.figures_part(reader.figures(view))
    finally:
        reader.close()


def test_a_second_view_of_an_unchanged_study_draws_nothing_and_a_new_trial_draws_again(tmp_path: Path, draws) -> None:
    from vcli import codec
    from vcli.plots import report_html
    from vcli.store import Store

    home = tmp_path / "home"
    study = make_study(home, 12)
    first, figures = _view(home, study)
    again, cached = _view(home, study)  # a dashboard started again: read from the disk cache
    assert draws == [12] and cached == figures and again.version == first.version
    assert 'data-key="history"' in figures
    # `plot`'s report reads the same entries (the same slot: study id and last change).
    store = Store(home)
    spec = codec.study_spec_from_stored(STUDY_SPEC)
    slot = Slot(FigureCache(home), study, last_change("JOB_STATE_SUCCEEDED", store.get_job(study).update_time,
                                                      store.trials_version(study)))
    assert slot.change == first.version
    html = report_html("t", spec, codec.iter_parameters(spec.parameters), store.trials(study), slot=slot)
    assert draws == [12] and html.count('<svg id="fig-') == figures.count('<svg id="fig-')
    # A trial added: the study's last change moves, so its figures are drawn again, with it.
    store.save_trial(study, _trial(13, 13), {p.parameter_id: p for p in spec.parameters})
    store.close()
    changed, redrawn = _view(home, study)
    assert changed.version != first.version and draws == [12, 13] and redrawn != figures
    _view(home, study)
    assert draws == [12, 13]


def _writer(root: str, seed: int, rounds: int) -> None:
    cache = FigureCache(root, max_bytes=60_000)
    for r in range(rounds):
        size = 1000 + (seed * 7919 + r * 104729) % 9000
        cache.put_many({f"k{k}.svg": _body(seed, k, size) for k in range(6)})


def _body(seed: int, key: int, size: int) -> bytes:
    head = f"{seed}:{key}:{size}:".encode()
    return head + bytes([65 + (seed + key) % 26]) * size


def _valid(name: str, body: bytes) -> bool:
    seed, key, size, rest = body.split(b":", 3)
    return f"k{int(key)}.svg" == name and rest == bytes([65 + (int(seed) + int(key)) % 26]) * int(size)


def test_concurrent_writers_leave_whole_entries_and_the_cache_stays_bounded(tmp_path: Path) -> None:
    """Four processes write the same six keys with bodies of other lengths, 40 times each,
    into a cache bounded far below what they write (evicting all the while), while this one
    reads: every entry read is one writer's whole body, never a mix or a torn one."""
    root = tmp_path / "home"
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(str(root), seed, 40)) for seed in range(4)]
    for p in procs:
        p.start()
    reader, seen = FigureCache(root), 0
    while any(p.is_alive() for p in procs):
        for k in range(6):
            body = reader.get(f"k{k}.svg")
            if body is not None:
                seen += 1
                assert _valid(f"k{k}.svg", body), body[:40]
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    left = os.listdir(reader.path)
    assert not [n for n in left if n.startswith(".tmp-")], left  # no writer left a temporary file
    for name in left:
        body = reader.get(name)
        assert body is not None and _valid(name, body)
    assert reader.size() <= 60_000 + 6 * 11_000  # within the bound, give or take the last batch
    assert seen > 0
    assert oct(os.stat(reader.path).st_mode & 0o777) == "0o700"


def test_a_damaged_or_linked_entry_is_a_miss_and_a_linked_directory_turns_the_cache_off(tmp_path: Path) -> None:
    cache = FigureCache(tmp_path / "home")
    assert cache.put_many({"a.svg": b"<svg/>", "b.svg": b"<svg>b</svg>"})
    assert cache.get_many(["a.svg", "b.svg"]) == [b"<svg/>", b"<svg>b</svg>"]
    (cache.path / "a.svg").write_bytes((cache.path / "a.svg").read_bytes()[:-2])  # torn
    assert cache.get("a.svg") is None and not (cache.path / "a.svg").exists()
    secret = tmp_path / "secret"
    secret.write_bytes(b"not yours")
    os.symlink(secret, cache.path / "c.svg")
    assert cache.get("c.svg") is None and secret.read_bytes() == b"not yours"
    # A cache directory that is a link (to a place another user chose) is not used at all.
    other = FigureCache(tmp_path / "elsewhere")
    (tmp_path / "elsewhere" / "cache").mkdir(parents=True)
    os.symlink(cache.path, other.path)
    assert other.get("b.svg") is None and other.put_many({"d.svg": b"x"}) is False
    assert not (cache.path / "d.svg").exists()


def test_the_least_recently_used_entries_go_first(tmp_path: Path) -> None:
    cache = FigureCache(tmp_path / "home", max_bytes=10_000)
    for i in range(4):
        cache.put_many({f"e{i}.svg": b"x" * 2000})
        os.utime(cache.path / f"e{i}.svg", (1000 + i, 1000 + i))
    assert cache.get("e0.svg") is not None  # used: it becomes the newest
    cache.put_many({"e4.svg": b"x" * 2000, "e5.svg": b"x" * 2000})  # 6 x 2 KB: past the bound
    assert sorted(os.listdir(cache.path)) == ["e0.svg", "e4.svg", "e5.svg"]


@pytest.fixture(scope="module")
def paged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, str]]:
    from vcli.dashboard.reader import Figures, Reader

    home = tmp_path_factory.mktemp("paged") / "home"
    study = make_study(home, 250)
    reader = Reader(home)
    reader.figures = lambda view: Figures([], "not drawn here")  # type: ignore[method-assign]  # the table only
    yield reader, study
    reader.close()


def _rows(html: str) -> list[str]:
    return re.findall(r'<tr id="trial-(\d+)"', html)


def test_the_trial_table_shows_100_trials_a_page_with_links_to_the_others(paged) -> None:
    from vcli.dashboard.server import route

    reader, study = paged
    pages_seen = []
    for n in (1, 2, 3):
        status, _, body = route(reader, ["studies", study], {"page": [str(n)]})
        assert status == 200
        pages_seen.append(_rows(body))
        assert f"page {n} of 3" in body
    assert [len(p) for p in pages_seen] == [100, 100, 50]
    assert pages_seen[0][:3] == ["250", "249", "248"] and pages_seen[2][-1] == "1"  # newest first
    assert sorted(sum(pages_seen, []), key=int) == [str(i) for i in range(1, 251)]  # each trial once
    _, _, body = route(reader, ["studies", study], {"page": ["2"]})
    for rel, n in (("first", 1), ("prev", 1), ("next", 3), ("last", 3)):
        assert f'<a href="?page={n}&amp;order=newest" rel="{rel}">' in body, rel
    assert "trials 101\u2013200 of 250, newest first" in body
    # Past the last page is the last page; the first has no link back.
    _, _, last = route(reader, ["studies", study], {"page": ["9"]})
    assert _rows(last) == pages_seen[2]
    _, _, first = route(reader, ["studies", study], {})
    assert _rows(first) == pages_seen[0] and 'rel="prev"' not in first
    # The live page fetches its part with its own query: the same rows.
    _, _, part = route(reader, ["api", "studies", study, "parts", "trials"], {"page": ["3"]})
    assert _rows(json.loads(part)["html"]) == pages_seen[2]


def test_best_first_starts_with_the_best_trial_and_is_stable(paged) -> None:
    from vcli.dashboard.server import NotFound, route

    reader, study = paged
    _, _, body = route(reader, ["studies", study], {"order": ["best"]})
    rows = _rows(body)
    assert len(rows) == 100 and rows[0] == _best(250)
    assert re.search(rf'<tr id="trial-{rows[0]}" class="best">', body)
    assert f'<a href="?order=best#trial-{_best(250)}" id="best-trial">' in body  # the summary's link finds it
    values = [float(v) for v in re.findall(r'<tr id="trial-\d+"[^>]*>(?:<td>.*?</td>){4}<td>([0-9.]+)</td>', body)]
    assert values == sorted(values, reverse=True) and len(values) == 100
    assert _rows(route(reader, ["studies", study], {"order": ["best"]})[2]) == rows
    for bad in ({"page": ["x"]}, {"order": ["worst"]}):
        with pytest.raises(NotFound):
            route(reader, ["studies", study], bad)


def test_a_page_of_a_big_study_is_small(paged) -> None:
    from vcli.dashboard.server import route

    reader, study = paged
    _, _, part = route(reader, ["api", "studies", study, "parts", "trials"], {})
    assert len(part) < 60_000, len(part)  # 100 rows, whatever the study's size


def test_no_plot_draws_more_than_max_marks_at_10000_trials() -> None:
    """Every plot of every figure of a 10,000-trial study holds at most `MAX_MARKS` marks
    (points, bars, vertices; a few more for axis lines), and the best trial and the extremes
    of the objective are among the points the history and the slices draw."""
    pytest.importorskip("matplotlib", reason="needs the plot extra: pip install 'vcli[plot]'")
    from vcli import codec
    from vcli.plots import render
    from vcli.plots.canvas import MAX_MARKS, _marks

    n = 10_000
    spec = codec.study_spec_from_stored(STUDY_SPEC)
    trials = [_trial(i, n) for i in range(1, n + 1)]
    drawn, _ = render.draw(spec, codec.iter_parameters(spec.parameters), trials)
    keys = {f.key for f in drawn}
    assert {"history", "parallel", "slice-lr", "intermediate", "contour", "rank", "edf", "timeline"} <= keys, keys
    values = [t.final_measurement.metrics["acc"] for t in trials]
    for f in drawn:
        for ax in f.figure.axes:
            marks = sum(_marks(a) for a in [*ax.collections, *ax.lines])
            assert marks <= MAX_MARKS + 64, (f.key, marks)
        if f.key in ("history", "slice-lr", "slice-units"):
            ys = {round(float(y), 9) for c in f.figure.axes[0].collections for y in c.get_offsets()[:, 1]}
            assert {round(max(values), 9), round(min(values), 9)} <= ys, f.key
            assert any("of 10,000 trials drawn" in t.get_text() for t in f.figure.axes[0].texts), f.key

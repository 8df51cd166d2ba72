"""Contract tests for vcli.tuning.suggesters (random, grid, bayesian gp / skopt)."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from tests.kit import check_values, done_trial, grid_parameters, mixed_parameters, toy_loss
from vcli.spec import (
    Algorithm,
    DoubleValueSpec,
    Goal,
    IntegerValueSpec,
    MetricSpec,
    ParameterSpec,
    ScaleType,
    StudySpec,
    Trial,
    TrialState,
)
from vcli.tuning.suggesters import Suggester, get_suggester

# ---------------------------------------------------------------------------- fixtures


def _study(params, algorithm=Algorithm.ALGORITHM_UNSPECIFIED, goal=Goal.MINIMIZE) -> StudySpec:
    return StudySpec(
        metrics=(MetricSpec(metric_id="loss", goal=goal),), parameters=params, algorithm=algorithm
    )


KINDS = ["random", "grid", "gp", "skopt", "tpe"]


def _make(kind: str, params=None, seed: int | None = 0, goal=Goal.MINIMIZE) -> Suggester:
    if kind == "grid":
        return get_suggester(_study(params or grid_parameters(), Algorithm.GRID_SEARCH, goal), seed=seed)
    if kind == "random":
        return get_suggester(_study(params or mixed_parameters(), Algorithm.RANDOM_SEARCH, goal), seed=seed)
    if kind == "tpe":
        return get_suggester(_study(params or mixed_parameters(), Algorithm.TPE, goal), seed=seed)
    return get_suggester(_study(params or mixed_parameters(), goal=goal), seed=seed, bayesian_backend=kind)


def _params_of(kind):
    return grid_parameters() if kind == "grid" else mixed_parameters()


# ---------------------------------------------------------------------------- contract


@pytest.mark.parametrize("kind", KINDS)
def test_ask_respects_count_types_bounds_and_conditionals(kind):
    s = _make(kind)
    assert s.ask(0) == []
    seen = []
    for round_ in range(3 if kind != "skopt" else 2):
        batch = s.ask(3)
        assert 1 <= len(batch) <= 3
        for j, sug in enumerate(batch):
            check_values(_params_of(kind), sug.parameters)
            seen.append(sug.parameters)
            s.tell(done_trial(f"{round_}-{j}", sug.parameters, toy_loss(sug.parameters)))
    assert len({json.dumps(p, sort_keys=True) for p in seen}) == len(seen)


@pytest.mark.parametrize("kind", KINDS)
def test_tell_accepts_infeasible_nonfinite_and_pending(kind):
    s = _make(kind)
    pts = [sug.parameters for sug in s.ask(4)]
    s.tell(done_trial("a", pts[0], None, state=TrialState.INFEASIBLE))
    s.tell(done_trial("b", pts[1], float("nan")))
    s.tell(done_trial("c", pts[2], float("inf")))
    s.tell(Trial(id="d", parameters=pts[3], state=TrialState.ACTIVE))
    s.tell(done_trial("d", pts[3], 1.0))  # pending -> final, same id
    nxt = s.ask(2)
    assert 1 <= len(nxt) <= 2
    for sug in nxt:
        check_values(_params_of(kind), sug.parameters)


def _history(kind: str, n: int, seed: int = 0) -> list[Trial]:
    """Run a short study, in batches of 2, and return its trials (one pending at the end)."""
    s = _make(kind, seed=seed)
    trials: list[Trial] = []
    while len(trials) < n:
        for sug in s.ask(2):
            t = done_trial(str(len(trials)), sug.parameters, toy_loss(sug.parameters))
            if len(trials) % 5 == 3:
                t = done_trial(t.id, sug.parameters, None, state=TrialState.INFEASIBLE)
            trials.append(t)
            s.tell(t)
    sug = s.ask(1)[0]
    trials.append(Trial(id=str(len(trials)), parameters=sug.parameters, state=TrialState.ACTIVE))
    return trials


@pytest.mark.parametrize("kind", ["random", "grid", "gp", "tpe"])
def test_replay_gives_same_next_points(kind):
    n = 14 if kind in ("gp", "tpe") else 6  # gp, tpe: beyond the 10-point initial design / random startup
    trials = _history(kind, n)
    a, b = _make(kind, seed=0), _make(kind, seed=0)
    for t in trials:
        a.tell(t)
        b.tell(t)
    assert [x.parameters for x in a.ask(2)] == [x.parameters for x in b.ask(2)]

    # the original instance, after telling its last suggestion, agrees with a rebuilt one
    orig = _make(kind, seed=0)
    for t in trials[:-1]:
        orig.tell(t)
    last = orig.ask(1)[0].parameters
    assert last == trials[-1].parameters
    orig.tell(trials[-1])
    rebuilt = _make(kind, seed=0)
    for t in trials:
        rebuilt.tell(t)
    assert [x.parameters for x in orig.ask(2)] == [x.parameters for x in rebuilt.ask(2)]


@pytest.mark.parametrize("kind", ["random", "gp", "skopt", "tpe"])
def test_consecutive_asks_without_tell_do_not_repeat(kind):
    s = _make(kind)
    a = s.ask(1)[0].parameters
    b = s.ask(1)[0].parameters
    assert a != b


@pytest.mark.parametrize("kind", ["random", "gp", "tpe"])
def test_random_draws_keyed_by_trial_number_not_batching(kind):
    """The k-th (random / initial-design) trial is the same whether asked alone or in a batch."""
    batched = [x.parameters for x in _make(kind, seed=5).ask(4)]
    s = _make(kind, seed=5)
    single = [s.ask(1)[0].parameters for _ in range(4)]
    assert batched == single


# ---------------------------------------------------------------------------- grid


def test_grid_enumerates_product_then_exhausts():
    s = _make("grid")
    got = []
    while True:
        batch = s.ask(4)
        if not batch:
            break
        for sug in batch:
            got.append(sug.parameters)
            s.tell(done_trial(str(len(got)), sug.parameters, 0.0))
    expected = []
    for units in (1, 2, 3):
        for slope in (0.1, 0.3):
            expected.append({"units": units, "act": "relu", "slope": slope})
        expected.append({"units": units, "act": "tanh"})
    assert got == expected
    assert s.ask(1) == []


def test_grid_resume_skips_known_points_in_any_state():
    a = _make("grid")
    first = [x.parameters for x in a.ask(3)]
    b = _make("grid")
    b.tell(done_trial("x", first[1], None, state=TrialState.INFEASIBLE))
    b.tell(Trial(id="y", parameters=first[0], state=TrialState.REQUESTED))
    assert [x.parameters for x in b.ask(2)] == [first[2], {"units": 2, "act": "relu", "slope": 0.1}]


def test_grid_rejects_double_parameter():
    params = grid_parameters() + (
        ParameterSpec(parameter_id="dropout", value_spec=DoubleValueSpec(min_value=0.0, max_value=0.5)),
    )
    with pytest.raises(ValueError, match="dropout"):
        _make("grid", params)


# ---------------------------------------------------------------------------- random


def test_random_is_reproducible_for_a_seed_and_varies_across_seeds():
    draw = lambda seed: [x.parameters for x in _make("random", seed=seed).ask(5)]
    assert draw(3) == draw(3)
    assert draw(3) != draw(4)


def test_random_respects_scales():
    s = _make("random")
    pts = [x.parameters for x in s.ask(400)]
    lrs = sorted(p["lr"] for p in pts)
    # log-uniform on [1e-5, 1]: median ~ 10^-2.5, far below the linear midpoint 0.5
    assert 10**-3.5 < lrs[len(lrs) // 2] < 10**-1.5
    betas = sorted(p["beta"] for p in pts)
    # reverse log on [0.01, 0.999]: dense near the top (median 1.009 - sqrt(0.00999) = 0.909)
    assert 0.87 < betas[len(betas) // 2] < 0.94
    assert {p["layers"] for p in pts} == set(range(1, 9))
    assert {p["batch"] for p in pts} == {16.0, 32.0, 64.0, 128.0}


def test_random_exhausts_a_finite_space():
    s = _make("random", grid_parameters())
    got = []
    while batch := s.ask(4):
        for sug in batch:
            got.append(json.dumps(sug.parameters, sort_keys=True))
            s.tell(done_trial(str(len(got)), sug.parameters, 0.0))
    assert len(got) == len(set(got)) == 9


# ---------------------------------------------------------------------------- bayesian


def _quadratic_params():
    return (
        ParameterSpec(parameter_id="x", value_spec=DoubleValueSpec(min_value=-2.0, max_value=3.0)),
        ParameterSpec(parameter_id="y", value_spec=DoubleValueSpec(min_value=-1.0, max_value=4.0)),
    )


def _quadratic(p) -> float:
    return (p["x"] - 1.3) ** 2 + 2.0 * (p["y"] - 0.7) ** 2


@pytest.mark.parametrize("goal", [Goal.MINIMIZE, Goal.MAXIMIZE])
def test_bayesian_gp_finds_quadratic_optimum(goal):
    sign = 1.0 if goal == Goal.MINIMIZE else -1.0
    s = _make("gp", _quadratic_params(), seed=1, goal=goal)
    best = math.inf
    for i in range(25):
        p = s.ask(1)[0].parameters
        v = _quadratic(p)
        best = min(best, v)
        s.tell(done_trial(str(i), p, sign * v))
    assert best < 1e-3


def test_bayesian_gp_batch_is_distinct_and_avoids_pending():
    s = _make("gp", _quadratic_params(), seed=2)
    for i in range(12):
        p = s.ask(1)[0].parameters
        s.tell(done_trial(str(i), p, _quadratic(p)))
    batch = [x.parameters for x in s.ask(4)]
    assert len(batch) == 4
    assert len({(p["x"], p["y"]) for p in batch}) == 4
    # a rebuilt suggester told the batch as running trials proposes something new
    r = _make("gp", _quadratic_params(), seed=2)
    for t in list(s._trials.values()):
        r.tell(t)
    for j, p in enumerate(batch):
        r.tell(Trial(id=f"p{j}", parameters=p, state=TrialState.ACTIVE))
    nxt = r.ask(1)[0].parameters
    assert all(abs(nxt["x"] - p["x"]) + abs(nxt["y"] - p["y"]) > 1e-6 for p in batch)


class _TwoPeaks:
    """An acquisition with a small peak at `a` and a twice as high one at `b` (unit space)."""

    def __init__(self, a, b):
        import numpy as np

        self.np, self.a, self.b = np, np.asarray(a, dtype=float), np.asarray(b, dtype=float)

    def values(self, X):
        np = self.np
        X = np.atleast_2d(X)
        return (np.exp(-((X - self.a) ** 2).sum(1) / 0.01) + 2.0 * np.exp(-((X - self.b) ** 2).sum(1) / 0.01))

    def value_grad(self, x, cols):
        np = self.np
        ea, eb = np.exp(-((x - self.a) ** 2).sum() / 0.01), 2.0 * np.exp(-((x - self.b) ** 2).sum() / 0.01)
        grad = -2.0 / 0.01 * (ea * (x - self.a) + eb * (x - self.b))
        return float(ea + eb), grad[cols]


def test_bayesian_gp_batch_points_after_the_first_refine_near_the_incumbent():
    """`_near_incumbent` climbs the acquisition's peak at the incumbent even when a higher one
    lies elsewhere (which the whole-space search finds); `local_starts` 0 turns it off."""
    import numpy as np

    params = tuple(ParameterSpec(parameter_id=n, value_spec=DoubleValueSpec(min_value=0.0, max_value=1.0)) for n in "abc")
    s = _make("gp", params, seed=0)
    acq = _TwoPeaks([0.2] * 3, [0.8] * 3)
    rng = np.random.default_rng(0)
    near = s._near_incumbent(acq, np.ones(3), np.array([0.21, 0.19, 0.2]), rng, set())
    assert np.abs(near - 0.2).max() < 1e-3, near
    far = s._optimise_acq(acq, np.ones(3), np.array([0.21, 0.19, 0.2]), np.random.default_rng(0), set())
    assert np.abs(far - 0.8).max() < 1e-3, far
    s.local_starts = 0
    assert s._near_incumbent(acq, np.ones(3), np.array([0.2] * 3), rng, set()) is None


@pytest.mark.parametrize("objective, asks, local_calls", [
    ("smooth", 4, 4),      # asked while three run, the first point too (trial 15; see below)
    ("smooth", 1, 1),      # one point (trial 15) asked while three run: as a batch's 2nd-4th
    ("quantised", 4, 0),   # plateaus: refining a step's inside finds nothing (`_explore` instead)
    ("integer", 4, 0),     # an integer loss is quantised too, before its values repeat
])
def test_bayesian_gp_uses_local_points_only_in_a_smooth_batch(objective, asks, local_calls, monkeypatch):
    from vcli.tuning.suggesters import bayesian

    calls = []
    orig = bayesian.GPSuggester._near_incumbent
    monkeypatch.setattr(bayesian.GPSuggester, "_near_incumbent", lambda self, *a: calls.append(1) or orig(self, *a))
    s = _make("gp", _quadratic_params(), seed=2)
    value = {"smooth": _quadratic, "quantised": lambda p: round(_quadratic(p)) + 0.5,
             "integer": lambda p: float(round(1000 * _quadratic(p)))}[objective]
    for i in range(12):
        p = s.ask(1)[0].parameters
        s.tell(done_trial(str(i), p, value(p)))
    s.ask(3)  # outstanding suggestions: pending points of the asks below
    calls.clear()
    assert len(s.ask(asks)) == asks
    assert len(calls) == local_calls


def test_bayesian_gp_one_point_asked_while_three_run_refines_unless_its_number_is_a_multiple_of_4(monkeypatch):
    """A study with parallelTrialCount 4 whose trials end one at a time asks one point at a
    time with three running: the mix of a batch of 4 (one point searching the whole box, three
    refining near the incumbent), by trial number; with nothing running, the whole box."""
    from vcli.tuning.suggesters import bayesian

    calls = []
    orig = bayesian.GPSuggester._near_incumbent
    monkeypatch.setattr(bayesian.GPSuggester, "_near_incumbent", lambda self, *a: calls.append(1) or orig(self, *a))
    s = _make("gp", _quadratic_params(), seed=2)
    for i in range(12):
        p = s.ask(1)[0].parameters
        s.tell(done_trial(str(i), p, _quadratic(p)))
    calls.clear()
    p = s.ask(1)[0].parameters  # trial 12, nothing running
    assert calls == []
    s.tell(done_trial("12", p, _quadratic(p)))
    batch = [sug.parameters for sug in s.ask(4)]  # trials 13-16, nothing running
    assert len(calls) == 3  # the points after the first
    for t, p in zip(range(13, 17), batch):
        s.tell(done_trial(str(t), p, _quadratic(p)))
    s = _make("gp", _quadratic_params(), seed=2)
    for i in range(12):
        p = s.ask(1)[0].parameters
        s.tell(done_trial(str(i), p, _quadratic(p)))
    running = [sug.parameters for sug in s.ask(3)]  # trials 12-14
    local = []
    for t in range(15, 23):
        calls.clear()
        running.append(s.ask(1)[0].parameters)  # trial t
        local.append(len(calls))
        p = running.pop(0)  # the oldest ends
        s.tell(done_trial(str(t - 3), p, _quadratic(p)))
    assert local == [1, 0, 1, 1, 1, 0, 1, 1]  # trials 16 and 20 search the whole box


def test_bayesian_gp_discrete_space_never_repeats_and_exhausts():
    s = _make("gp", grid_parameters(), seed=0)
    got = []
    while batch := s.ask(3):
        for sug in batch:
            got.append(json.dumps(sug.parameters, sort_keys=True))
            s.tell(done_trial(str(len(got)), sug.parameters, toy_loss(sug.parameters)))
    assert len(got) == len(set(got)) == 9


def test_skopt_backend_handles_reverse_log_and_converts_numpy():
    s = _make("skopt", seed=0)
    for i in range(11):
        p = s.ask(1)[0].parameters
        s.tell(done_trial(str(i), p, toy_loss(p)))
    batch = s.ask(2)
    assert len(batch) == 2
    for sug in batch:
        check_values(mixed_parameters(), sug.parameters)


def test_unknown_backend_and_no_heavy_import():
    with pytest.raises(ValueError, match="backend"):
        get_suggester(_study(_quadratic_params()), bayesian_backend="nope")
    code = "import sys, vcli.tuning.suggesters; assert 'numpy' not in sys.modules, 'numpy imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


# ---------------------------------------------------------------------------- without numpy
#
# A base install (no `tune` extra) has no numpy/scipy: RANDOM_SEARCH and GRID_SEARCH must run
# on it, drawing exactly what the numpy implementation drew, and the Bayesian suggester must
# name the extra to install.


def test_prng_is_numpys_default_rng():
    import random

    import numpy as np

    from vcli.tuning.suggesters._prng import uniforms

    r = random.Random(0)
    keys = [[0, 0], [0], [5, 3, 1], [2**32 - 1, 7], [2**63 + 5, 2], [1, 2, 3, 4, 5, 6]]
    keys += [[r.randrange(2**32), r.randrange(1000), *([r.randrange(4)] * r.randrange(2))] for _ in range(40)]
    for key in keys:
        assert uniforms(key, 9) == np.random.default_rng(key).random(9).tolist(), key


def test_sample_row_is_sample_unit_row_by_row():
    import numpy as np

    from vcli.tuning.space import Space

    wide = (  # a log-scale INTEGER (nearest in warped space) and one too wide for a choice list
        ParameterSpec(parameter_id="units", value_spec=IntegerValueSpec(min_value=1, max_value=1000),
                      scale_type=ScaleType.UNIT_LOG_SCALE),
        ParameterSpec(parameter_id="steps", value_spec=IntegerValueSpec(min_value=0, max_value=10**6)),
    )
    space = Space(mixed_parameters() + wide)
    U = np.random.default_rng(1).random((500, space.dim))
    U[:3] = [[0.0] * space.dim, [1.0 - 1e-15] * space.dim, [0.5] * space.dim]  # edges
    expected = space.sample_unit(U)
    for u, row in zip(U, expected):
        assert space.sample_row(u.tolist()) == row.tolist()


def _numpy_random_search(params, seed: int, trials_per_ask: list[int]) -> list[list[dict]]:
    """What RANDOM_SEARCH proposed when it drew with numpy (its code before the pure port)."""
    import numpy as np

    from vcli.tuning.space import Space

    space = Space(params)
    known: set = set()
    n_known = 0
    batches = []
    for count in trials_per_ask:
        out = []
        for i in range(count):
            rng = np.random.default_rng([seed, n_known + i])
            params_i = None
            for _ in range(64):
                cand = space.decode(space.sample_unit(rng.random((1, space.dim)))[0])
                if not space.is_finite or space.key(cand) not in known:
                    params_i = cand
                    break
            if params_i is None:
                params_i = next((p for p in space.grid() if space.key(p) not in known), None)
                if params_i is None:
                    break
            if space.is_finite:
                known.add(space.key(params_i))
            out.append(params_i)
        n_known += len(out)
        batches.append(out)
    return batches


@pytest.mark.parametrize("params", [mixed_parameters(), grid_parameters()], ids=["mixed", "finite"])
def test_random_search_draws_what_the_numpy_version_drew(params):
    asks = [1, 3, 2, 4, 3]  # the finite space (9 points) is exhausted on the way: retries, fallback, []
    s = get_suggester(_study(params, Algorithm.RANDOM_SEARCH), seed=17)
    got = []
    for count in asks:
        batch = [x.parameters for x in s.ask(count)]
        got.append(batch)
    assert got == _numpy_random_search(params, 17, asks)


# Makes numpy, scipy and the skopt stack unimportable in a fresh interpreter, as on a base install.
_NO_TUNE_EXTRA = """
import sys
class _NoTuneExtra:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {"numpy", "scipy", "skopt", "sklearn"}:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name.partition(".")[0])
        return None
sys.meta_path.insert(0, _NoTuneExtra())
"""


def test_random_and_grid_run_without_numpy_and_bayesian_names_the_missing_package():
    code = _NO_TUNE_EXTRA + """
import json
from vcli.spec import (Algorithm, CategoricalValueSpec, DoubleValueSpec, Goal, IntegerValueSpec, MetricSpec,
                       ParameterSpec, StudySpec)
from vcli.tuning.suggesters import get_suggester
params = (ParameterSpec(parameter_id="x", value_spec=DoubleValueSpec(min_value=0.0, max_value=1.0)),
          ParameterSpec(parameter_id="n", value_spec=IntegerValueSpec(min_value=1, max_value=3)))
grid = (ParameterSpec(parameter_id="n", value_spec=IntegerValueSpec(min_value=1, max_value=2)),
        ParameterSpec(parameter_id="c", value_spec=CategoricalValueSpec(values=("a", "b"))))
study = lambda p, a: StudySpec(metrics=(MetricSpec(metric_id="m", goal=Goal.MAXIMIZE),), parameters=p, algorithm=a)
out = {"random": [s.parameters for s in get_suggester(study(params, Algorithm.RANDOM_SEARCH), seed=3).ask(3)],
       "grid": [s.parameters for s in get_suggester(study(grid, Algorithm.GRID_SEARCH)).ask(10)]}
try:
    get_suggester(study(params, Algorithm.ALGORITHM_UNSPECIFIED), seed=3)
except ImportError as e:
    out["bayesian"] = e.name
assert not {"numpy", "scipy"} & set(sys.modules)
print(json.dumps(out))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    params = (
        ParameterSpec(parameter_id="x", value_spec=DoubleValueSpec(min_value=0.0, max_value=1.0)),
        ParameterSpec(parameter_id="n", value_spec=IntegerValueSpec(min_value=1, max_value=3)),
    )
    assert out["random"] == _numpy_random_search(params, 3, [3])[0]
    assert out["grid"] == [{"n": 1, "c": "a"}, {"n": 1, "c": "b"}, {"n": 2, "c": "a"}, {"n": 2, "c": "b"}]
    assert out["bayesian"] == "numpy"


def test_a_base_install_runs_the_default_algorithm_and_names_what_skopt_needs(tmp_path):
    """`pip install vcli` (no extras) into a fresh virtualenv runs a study with the default
    algorithm (vcli's GP) end to end; the scikit-optimize backend names the packages it needs
    and the command that installs them into this very environment."""
    from tests.helpers import REPO, vcli_env

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                          str(REPO)], capture_output=True, text=True, timeout=600)
    assert pip.returncode == 0, pip.stderr[-3000:]
    python = str(venv / "bin" / "python")

    def create(*flags: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(venv / "bin" / "vcli"), "hp-tuning-jobs", "create", "--display-name=base",
             "--metric=metric-id=score,goal=maximize", "--parameter-spec=parameter-id=x,type=double,min=0,max=6",
             "--worker-pool-spec=machine-type=n1-standard-4,container-image-uri=none",
             f"--command={python},-c,import sys; print('score=%s' % -abs(float(sys.argv[1].split('=')[1]) - 3))",
             "--max-trial-count=3", "--parallel-trial-count=1", "--seed=11", "--format=json", *flags],
            capture_output=True, text=True, timeout=300, cwd=tmp_path, env=vcli_env(tmp_path / "home"))

    r = create()  # the default algorithm: Bayesian optimisation
    assert r.returncode == 0, r.stderr
    study = json.loads(r.stdout)
    assert study["studySpec"]["algorithm"] == "ALGORITHM_UNSPECIFIED"
    assert [t["state"] for t in study["trials"]] == ["SUCCEEDED"] * 3
    r = create("--bayesian-backend=skopt")
    assert r.returncode == 9, r.stderr  # a missing extra
    assert r.stderr.strip().splitlines() == [
        "ERROR: (vcli.hp-tuning-jobs.create) The ALGORITHM_UNSPECIFIED suggester with --bayesian-backend=skopt needs "
        f"skopt, which the [tune] extra installs: {python} -m pip install 'vcli[tune]'"
    ]


def test_the_install_hint_under_pipx_injects(monkeypatch):
    from vcli.control.runner import install_hint

    monkeypatch.setattr(sys, "prefix", "/home/ada/.local/pipx/venvs/vcli")
    assert install_hint("tune") == "pipx inject vcli scikit-optimize==0.10.2 'scikit-learn>=1.3'"
    monkeypatch.setattr(sys, "prefix", "/srv/env")
    assert install_hint("tune") == f"{sys.executable} -m pip install 'vcli[tune]'"


def _step6_params():
    return tuple(
        ParameterSpec(parameter_id=f"x{i}", value_spec=DoubleValueSpec(min_value=0.0, max_value=1.0)) for i in range(6)
    )


def _step6(p) -> float:
    # a bowl at 0.3 floored to steps of 0.1: plateaus, like an accuracy on a few examples
    return math.floor(sum((p[f"x{i}"] - 0.3) ** 2 for i in range(6)) * 10.0) / 10.0


def test_bayesian_gp_noise_floor_is_quantisation_error_only_for_repeated_values():
    import numpy as np

    s = _make("gp", _quadratic_params(), seed=0)
    smooth = np.linspace(0.0, 1.0, 20) ** 2
    assert s._noise_floor(smooth, smooth) == s.min_noise
    steps = np.floor(np.linspace(0.0, 3.0, 20))  # 4 levels, 1 apart
    assert s._noise_floor(steps, steps) == pytest.approx(1.0 / 12.0)
    s.quantised_noise = False
    assert s._noise_floor(steps, steps) == s.min_noise


def test_bayesian_gp_refines_a_step_function_instead_of_exploring_corners():
    # issue 24: on plateaus the GP sent model-guided points to the box's corners. Seeds 1-4,
    # 30 trials: without the quantised-objective handling 8 corners and 2 of 4 runs short of
    # 0; with it (noise floor, prior mean, exploring near good points) none of either
    corners, short = 0, 0
    for seed in (1, 2, 3, 4):
        s = _make("gp", _step6_params(), seed=seed)
        best = math.inf
        for i in range(30):
            p = s.ask(1)[0].parameters
            if i >= 10 and sum(min(v, 1.0 - v) < 0.01 for v in p.values()) >= 4:
                corners += 1
            best = min(best, _step6(p))
            s.tell(done_trial(str(i), p, _step6(p)))
        short += best > 0.0
    assert corners == 0
    assert short == 0


def _tell_values(s, values) -> None:
    """Tell `s` one trial per value at its own startup points (trial numbers 0..)."""
    for i, v in enumerate(values):
        p = s.ask(1)[0].parameters
        s.tell(done_trial(str(i), p, v))


def _thompson(s, i):
    """What the explore rule draws for suggestion i of `s`'s next ask: a Thompson draw of the
    GP fitted to its history, from the generator keyed by trial number."""
    from vcli.tuning.suggesters._explore import thompson_row
    from vcli.tuning.suggesters.bayesian import _RNG_EXPLORE

    gp, _, _, _, X, y = s._single_model(s.observations(), s.valueless())
    x = thompson_row(s._np, s.space, gp, X, y, s.rng(i, _RNG_EXPLORE), s.known_keys(), top=s.explore_top,
                     sd=s.explore_sd)
    return s.space.decode(x)


@pytest.mark.parametrize("quantised", [True, False])
def test_bayesian_gp_explores_by_thompson_draws_every_fourth_trial_only_on_a_quantised_objective(quantised):
    # ten values: with repeats (plateaus) or all distinct
    values = [1.0, 1.0, 0.5, 0.5, 0.5, 0.8, 0.8, 0.2, 1.0, 0.5] if quantised else [1.0 + i / 7 for i in range(10)]
    trials = range(10, 18)
    explore = [quantised and t % 4 == 3 for t in trials]  # trials 11 and 15

    one = _make("gp", _step6_params(), seed=3)
    one.plateau_radius = 0.0  # the model's own points only (the plateau rule has its own test)
    _tell_values(one, values)
    for t in trials:
        expected = _thompson(one, 0)
        p = one.ask(1)[0].parameters
        assert (p == expected) == explore[t - 10], t
        one.tell(done_trial(str(t), p, values[t % 10] if quantised else 2.0 + t / 13))
    # the same trial numbers asked as one batch: slots 1 and 5 (trials 11 and 15) are
    # explored (keyed by trial number), the model fills the rest
    batch = _make("gp", _step6_params(), seed=3)
    batch.plateau_radius = 0.0
    _tell_values(batch, values)
    expected = [_thompson(batch, i) for i in range(len(trials))]
    got = [s.parameters for s in batch.ask(len(trials))]
    assert [g == e for g, e in zip(got, expected)] == explore
    # switched off: the model suggests trial 11 too
    off = _make("gp", _step6_params(), seed=3)
    off.explore_quantised = False
    _tell_values(off, values)
    off.tell(done_trial("10", off.ask(1)[0].parameters, 0.5))
    assert off.ask(1)[0].parameters != _thompson(off, 0)


def test_thompson_draws_follow_the_posterior_and_skip_known_points():
    import numpy as np

    from vcli.tuning.space import Space
    from vcli.tuning.suggesters import _gp
    from vcli.tuning.suggesters._explore import thompson_row

    # a GP on a 1-D bowl with its minimum at 0.7: draws land near it, and differ by draw
    sp = Space(_study((ParameterSpec(parameter_id="x", value_spec=DoubleValueSpec(min_value=0.0, max_value=1.0)),))
               .parameters)
    X = np.linspace(0.0, 1.0, 12)[:, None]
    y = (X[:, 0] - 0.7) ** 2 * 10.0
    y = (y - y.mean()) / y.std()
    gp = _gp.GP(X, y, np.array([False]), np.array([math.log(4.0), 0.0, math.log(1e-4)]))
    rows = [thompson_row(np, sp, gp, X, y, np.random.default_rng(k), set(), top=0.1, sd=0.05) for k in range(40)]
    xs = np.array([r[0] for r in rows])
    assert np.median(np.abs(xs - 0.7)) < 0.1 and len(set(np.round(xs, 6))) > 20
    # a finite space whose candidates are all known: no row
    grid = Space(_study(grid_parameters()).parameters)
    G = np.array([grid.encode(p) for p in grid.grid()], dtype=float)
    gy = np.arange(len(G), dtype=float)
    ggp = _gp.GP(G, (gy - gy.mean()) / gy.std(), np.array([n.kind == "CATEGORICAL" for n in grid.nodes]),
                 np.zeros(grid.dim + 2))
    known = {grid.key(p) for p in grid.grid()}
    assert thompson_row(np, grid, ggp, G, gy, np.random.default_rng(0), known, top=0.1, sd=0.05) is None


def test_on_plateau_is_a_max_norm_ball_and_categories_differ():
    import numpy as np

    from vcli.tuning.suggesters._explore import on_plateau

    level = np.array([[0.5, 0.5, 0.0], [0.1, 0.9, 2.0]])
    assert on_plateau(np, level, [0.51, 0.49, 0.0], 0.02)
    assert not on_plateau(np, level, [0.53, 0.5, 0.0], 0.02)  # one column out of the ball
    assert not on_plateau(np, level, [0.5, 0.5, 1.0], 0.02)  # another category
    assert on_plateau(np, level, [0.11, 0.9, 2.0], 0.02)
    assert not on_plateau(np, level[:0], [0.5, 0.5, 0.0], 0.02)


def test_a_log_ei_point_on_the_incumbents_plateau_is_replaced():
    """svm_digits (issue 24): log EI proposed 19 of 20 points in a row within 4 % of the box
    of one another on the incumbent's level, each scoring the same. On a quantised objective such a point is
    replaced (uniform or near a good point, by a draw keyed by the trial number); every other
    model point is log EI's, and a smooth objective is never touched."""
    import numpy as np

    from vcli.tuning.suggesters._explore import on_plateau

    replaced = kept = 0
    for seed in (1, 2):
        s = _make("gp", _step6_params(), seed=seed)
        history: list[Trial] = []
        for t in range(36):
            level = s._incumbent_level(s.observations()) if t >= 10 else None
            p = s.ask(1)[0].parameters
            if level is not None and t % 4 != 3:
                raw = _make("gp", _step6_params(), seed=seed)  # the same history, without the rule
                raw.plateau_radius = 0.0
                for done in history:
                    raw.tell(done)
                q = raw.ask(1)[0].parameters
                if on_plateau(np, level, s.space.encode(q), s.plateau_radius):
                    replaced += 1
                    assert p != q and not on_plateau(np, level, s.space.encode(p), 1e-9)
                else:
                    kept += 1
                    assert p == q
            history.append(done_trial(str(t), p, _step6(p)))
            s.tell(history[-1])
    assert replaced >= 3 and kept >= 3, (replaced, kept)
    smooth = _make("gp", _step6_params(), seed=1)
    _tell_values(smooth, [1.0 + i / 7 for i in range(10)])
    assert smooth._incumbent_level(smooth.observations()) is None

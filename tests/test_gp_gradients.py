"""Finite-difference checks of every hand-written derivative in vcli/tuning/suggesters/_gp.py.

The GP's hyperparameters are fitted, and the log-EI acquisition is maximised, by L-BFGS-B
with these analytic gradients: a wrong one does not crash, it just makes the optimiser stop
early at a poor point. `scipy.optimize.check_grad` compares each against forward differences
at several random points; the tolerance is relative to the gradient's norm (forward
differences with step ~1.5e-8 are good to about 1e-6 relative on these smooth functions).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import optimize, special

from vcli.tuning.suggesters import _gp

RTOL = 5e-6  # |analytic - finite difference| <= RTOL * max(|gradient|, 1); observed <= 6e-7


def _assert_grad(f, g, x0, rtol=RTOL) -> None:
    x0 = np.asarray(x0, dtype=float)
    err = optimize.check_grad(f, g, x0)
    scale = max(float(np.linalg.norm(g(x0))), 1.0)
    assert err <= rtol * scale, f"gradient error {err:.3g} at {x0} (gradient norm {scale:.3g})"


def _data(seed: int, n: int = 14):
    """Inputs in [0,1]^3 plus one categorical column (4 levels), standardised outputs."""
    rng = np.random.default_rng(seed)
    X = np.column_stack([rng.random((n, 3)), rng.integers(0, 4, n).astype(float)])
    is_cat = np.array([False, False, False, True])
    y = np.sin(6 * X[:, 0]) + X[:, 1] ** 2 - 0.5 * X[:, 2] + 0.3 * (X[:, 3] == 2) + 0.05 * rng.standard_normal(n)
    y = (y - y.mean()) / y.std()
    return X, y, is_cat


SEEDS = [0, 1, 2, 3, 4]


def test_matern52_derivative_with_respect_to_r2():
    for r2 in [1e-4, 0.03, 0.4, 1.0, 2.5, 7.0]:
        _assert_grad(
            lambda v: float(_gp.matern52(np.array(v))[0][0]),
            lambda v: np.array([float(_gp.matern52(np.array(v))[1][0])]),
            [r2],
        )


@pytest.mark.parametrize("seed", SEEDS)
def test_neg_log_posterior_gradient_in_every_hyperparameter(seed):
    """d/d[log lam_1..d, log s, log(noise - MIN_NOISE)] of the MAP objective (likelihood + priors)."""
    X, y, is_cat = _data(seed)
    D2 = _gp._per_dim_sq(X, is_cat)
    rng = np.random.default_rng(100 + seed)
    for _ in range(3):
        theta = np.concatenate([rng.uniform(-1.5, 2.5, X.shape[1]), rng.uniform(-1.0, 1.0, 1), rng.uniform(-7.0, -1.0, 1)])
        value, grad = _gp._neg_log_posterior(theta, D2, y)
        assert value < 1e25, "the kernel matrix should factor at these hyperparameters"
        assert grad.shape == theta.shape
        _assert_grad(
            lambda t: _gp._neg_log_posterior(t, D2, y)[0],
            lambda t: _gp._neg_log_posterior(t, D2, y)[1],
            theta,
        )


@pytest.mark.parametrize("seed", SEEDS)
def test_posterior_mean_and_variance_gradients_in_x(seed):
    X, y, is_cat = _data(seed)
    theta = _gp.fit_hyperparameters(X, y, is_cat)
    gp = _gp.GP(X, y, is_cat, theta)
    cols = np.array([0, 1, 2])  # the numeric columns; the categorical one stays fixed
    rng = np.random.default_rng(200 + seed)
    for _ in range(4):
        x0 = np.concatenate([rng.random(3), [float(rng.integers(0, 4))]])

        def at(z: np.ndarray, x0: np.ndarray = x0) -> np.ndarray:
            x = x0.copy()
            x[cols] = z
            return x

        mean, var, _, _ = gp.predict_grad(x0, cols)
        pm, pv = gp.predict(x0[None, :])
        assert mean == pytest.approx(float(pm[0]), rel=1e-9, abs=1e-12)
        assert var == pytest.approx(float(pv[0]), rel=1e-7, abs=1e-12)
        _assert_grad(lambda z: gp.predict_grad(at(z), cols)[0], lambda z: gp.predict_grad(at(z), cols)[2], x0[cols])
        _assert_grad(lambda z: gp.predict_grad(at(z), cols)[1], lambda z: gp.predict_grad(at(z), cols)[3], x0[cols])


@pytest.mark.parametrize("z", [3.0, 0.7, 0.0, -0.5, -0.99, -1.01, -2.0, -5.0, -12.0, -30.0])
def test_log_ei_gradient_in_mean_and_variance(z):
    """Both branches of log_h (z > -1 and the far tail), at several variances.

    Checked in (mean, log variance), the coordinates in which a fixed finite-difference step
    suits every variance: d/d log var = var * d/d var.
    """
    best = 0.3
    for var in (1e-4, 0.05, 1.0):
        mean = best - z * math.sqrt(var)
        val, _, _ = _gp.log_ei_grad(mean, var, best)
        assert val == pytest.approx(float(_gp.log_ei(np.array([mean]), np.array([var]), best)[0]), rel=1e-12)

        def grad(p: np.ndarray) -> np.ndarray:
            _, d_mean, d_var = _gp.log_ei_grad(p[0], math.exp(p[1]), best)
            return np.array([d_mean, d_var * math.exp(p[1])])

        _assert_grad(lambda p: _gp.log_ei_grad(p[0], math.exp(p[1]), best)[0], grad, [mean, math.log(var)])


def test_log_h_is_continuous_where_its_two_formulas_meet_and_matches_the_definition():
    below, above = _gp.log_h(np.array([-1.0 - 1e-9, -1.0 + 1e-9]))
    assert below == pytest.approx(above, abs=1e-8)
    z = np.linspace(-3.0, 3.0, 25)
    direct = np.log(np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi) + z * special.ndtr(z))
    np.testing.assert_allclose(_gp.log_h(z), direct, rtol=1e-10)


@pytest.mark.parametrize("seed", SEEDS)
def test_log_ei_acquisition_gradient_in_x(seed):
    """The gradient L-BFGS-B follows when it refines a candidate: d log EI / d x[cols]."""
    X, y, is_cat = _data(seed)
    gp = _gp.GP(X, y, is_cat, _gp.fit_hyperparameters(X, y, is_cat))
    acq = _gp.LogEI(gp, best=float(np.min(y)))
    cols = np.array([0, 2])  # a subset: value_grad differentiates only the columns it is given
    rng = np.random.default_rng(300 + seed)
    for _ in range(4):
        x0 = np.concatenate([rng.random(3), [float(rng.integers(0, 4))]])

        def at(z: np.ndarray, x0: np.ndarray = x0) -> np.ndarray:
            x = x0.copy()
            x[cols] = z
            return x

        val, grad = acq.value_grad(x0, cols)
        assert grad.shape == (len(cols),)
        assert val == pytest.approx(float(acq.values(x0[None, :])[0]), rel=1e-7, abs=1e-9)
        _assert_grad(lambda z: acq.value_grad(at(z), cols)[0], lambda z: acq.value_grad(at(z), cols)[1], x0[cols])

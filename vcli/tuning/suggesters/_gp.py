"""A small Gaussian-process regressor in numpy/scipy for the Bayesian suggester.

Kernel: s * Matern-5/2(r), r^2 = sum_k lam_k * d_k^2 with ARD inverse squared lengthscales
lam_k; d_k = x_k - x'_k for numeric columns and [x_k != x'_k] (Hamming) for categorical
ones. Plus Gaussian noise. Hyperparameters by maximum a posteriori (the priors Optuna's
GPSampler uses), L-BFGS-B with analytic gradients. Inputs live in [0,1] (categorical
columns hold indices); outputs are standardised by the caller.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import linalg, optimize, special

MIN_NOISE = 1e-6
_SQRT5 = math.sqrt(5.0)
_LOG_2PI_HALF = 0.5 * math.log(2.0 * math.pi)
_LOG_PI_2_HALF = 0.5 * math.log(math.pi / 2.0)

# bounds of the raw (log) hyperparameters: log lam, log s, log(noise - MIN_NOISE)
_LOG_LAM_BOUNDS = (-12.0, 12.0)
_LOG_S_BOUNDS = (-8.0, 6.0)
_LOG_NOISE_BOUNDS = (-20.0, 2.0)


def matern52(r2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Matern-5/2 of squared distance r2 and its derivative with respect to r2."""
    r = np.sqrt(np.maximum(r2, 0.0) * 5.0)  # sqrt(5) * r
    e = np.exp(-r)
    k = e * (1.0 + r + r * r / 3.0)
    dk = (-5.0 / 6.0) * (1.0 + r) * e
    return k, dk


def matern52_value(r2: np.ndarray) -> np.ndarray:
    """`matern52`'s value alone (the same floating-point operations), for callers that need
    no derivative: a third of the time on the 1,280 x 1,280 matrix of a Thompson draw."""
    r = np.sqrt(np.maximum(r2, 0.0) * 5.0)
    e = np.exp(-r)
    return e * (1.0 + r + r * r / 3.0)


def sqdist(X1: np.ndarray, X2: np.ndarray, lam: np.ndarray, is_cat: np.ndarray) -> np.ndarray:
    """Weighted squared distances, accumulated one column at a time (no 3-D arrays; in place,
    with the rounding of lam * d^2 term by term)."""
    out = np.zeros((X1.shape[0], X2.shape[0]))
    for k in range(X1.shape[1]):
        d = X1[:, k, None] - X2[None, :, k]
        if is_cat[k]:
            out += lam[k] * (d != 0.0)
        else:
            np.multiply(d, d, out=d)
            d *= lam[k]
            out += d
    return out


def _per_dim_sq(X: np.ndarray, is_cat: np.ndarray) -> np.ndarray:
    D = X[:, None, :] - X[None, :, :]
    D2 = D * D
    if is_cat.any():
        D2[:, :, is_cat] = (D[:, :, is_cat] != 0.0).astype(float)
    return D2


def _log_prior_and_grad(lam: np.ndarray, s: float, noise: float, raw_noise: float):
    # Optuna GPSampler's priors: -(0.1/lam + 0.1*lam) per dim; Gamma(2, 1) on s; Gamma(1.1, 30)
    # on the noise variance.
    lp = -np.sum(0.1 / lam + 0.1 * lam) + (math.log(s) - s) + (0.1 * math.log(noise) - 30.0 * noise)
    g_lam = 0.1 / lam - 0.1 * lam  # d/d log lam
    g_s = 1.0 - s  # d/d log s
    g_noise = (0.1 / noise - 30.0) * math.exp(raw_noise)  # d/d raw
    return lp, g_lam, g_s, g_noise


def _neg_log_posterior(theta: np.ndarray, D2: np.ndarray, y: np.ndarray, min_noise: float = MIN_NOISE):
    d = D2.shape[2]
    lam = np.exp(theta[:d])
    s = math.exp(theta[d])
    noise = math.exp(theta[d + 1]) + min_noise
    n = y.shape[0]
    r2 = D2 @ lam
    km, dkm = matern52(r2)
    K = s * km
    K[np.diag_indices(n)] += noise
    try:
        c, low = linalg.cho_factor(K, lower=True, check_finite=False)
    except linalg.LinAlgError:
        return 1e25, np.zeros_like(theta)
    alpha = linalg.cho_solve((c, low), y, check_finite=False)
    logml = -0.5 * float(y @ alpha) - float(np.sum(np.log(np.diag(c))))
    Kinv = linalg.cho_solve((c, low), np.eye(n), check_finite=False)
    W = np.outer(alpha, alpha) - Kinv  # dlogml/dtheta = 0.5 * sum(W * dK/dtheta)
    M = W * (s * dkm)
    g_lam = 0.5 * lam * np.einsum("ij,ijk->k", M, D2)
    g_s = 0.5 * float(np.sum(W * (s * km)))
    g_noise = 0.5 * float(np.trace(W)) * math.exp(theta[d + 1])
    lp, p_lam, p_s, p_noise = _log_prior_and_grad(lam, s, noise, theta[d + 1])
    value = -(logml + lp)
    grad = -np.concatenate([g_lam + p_lam, [g_s + p_s, g_noise + p_noise]])
    if not np.isfinite(value) or not np.all(np.isfinite(grad)):
        return 1e25, np.zeros_like(theta)
    return value, grad


def fit_hyperparameters(
    X: np.ndarray,
    y: np.ndarray,
    is_cat: np.ndarray,
    starts: list[np.ndarray] | None = None,
    min_noise: float = MIN_NOISE,
    gtol: float = 1e-4,
) -> np.ndarray:
    """MAP hyperparameters theta = [log lam (d), log s, log(noise - MIN_NOISE)]."""
    d = X.shape[1]
    D2 = _per_dim_sq(X, is_cat)
    if starts is None:
        starts = [np.zeros(d + 2)]
    bounds = [_LOG_LAM_BOUNDS] * d + [_LOG_S_BOUNDS, _LOG_NOISE_BOUNDS]
    best_theta, best_val = None, math.inf
    for t0 in starts:
        res = optimize.minimize(
            _neg_log_posterior,
            np.clip(t0, [b[0] for b in bounds], [b[1] for b in bounds]),
            args=(D2, y, min_noise),
            jac=True,
            method="L-BFGS-B",
            bounds=bounds,
            options={"maxiter": 200, "gtol": gtol},
        )
        if np.isfinite(res.fun) and res.fun < best_val:
            best_theta, best_val = res.x, float(res.fun)
    if best_theta is None:
        best_theta = np.zeros(d + 2)
    return best_theta


class GP:
    """A GP conditioned on (X, y) with fixed hyperparameters theta."""

    def __init__(
        self, X: np.ndarray, y: np.ndarray, is_cat: np.ndarray, theta: np.ndarray, min_noise: float = MIN_NOISE
    ) -> None:
        d = X.shape[1]
        self.X = X
        self.y = y
        self.is_cat = is_cat
        self.theta = theta
        self.lam = np.exp(theta[:d])
        self.s = math.exp(theta[d])
        self.noise = math.exp(theta[d + 1]) + min_noise
        n = X.shape[0]
        K = self.s * matern52(sqdist(X, X, self.lam, is_cat))[0]
        K[np.diag_indices(n)] += self.noise
        jitter = 0.0
        for _ in range(8):
            try:
                self.chol = linalg.cho_factor(K, lower=True, check_finite=False)
                break
            except linalg.LinAlgError:
                jitter = max(jitter * 10.0, 1e-8 * self.s)
                K[np.diag_indices(n)] += jitter
        else:  # pragma: no cover - pathological
            raise linalg.LinAlgError("kernel matrix is not positive definite")
        self.alpha = linalg.cho_solve(self.chol, y, check_finite=False)

    @property
    def lengthscales(self) -> np.ndarray:
        return 1.0 / np.sqrt(self.lam)

    def predict(self, Xq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and latent variance at the rows of Xq."""
        Ks = self.s * matern52(sqdist(Xq, self.X, self.lam, self.is_cat))[0]
        mean = Ks @ self.alpha
        V = linalg.solve_triangular(self.chol[0], Ks.T, lower=True, check_finite=False)
        var = np.maximum(self.s - np.sum(V * V, axis=0), 1e-30)
        return mean, var

    def predict_grad(self, x: np.ndarray, cols: np.ndarray):
        """Mean, variance and their gradients w.r.t. x[cols] (numeric columns) at one point."""
        r2 = sqdist(x[None, :], self.X, self.lam, self.is_cat)[0]
        km, dkm = matern52(r2)
        k = self.s * km
        # dk/dx_j = s * m'(r2) * 2 lam_j (x_j - X_ij)
        diff = x[cols][None, :] - self.X[:, cols]  # (n, c)
        dk = (self.s * dkm)[:, None] * 2.0 * self.lam[cols][None, :] * diff
        mean = float(k @ self.alpha)
        dmean = dk.T @ self.alpha
        v = linalg.cho_solve(self.chol, k, check_finite=False)
        var = max(self.s - float(k @ v), 1e-30)
        dvar = -2.0 * (dk.T @ v)
        return mean, var, dmean, dvar


def log_h(z: np.ndarray) -> np.ndarray:
    """log(phi(z) + z * Phi(z)), numerically stable (Ament et al. 2023, LogEI)."""
    z = np.asarray(z, dtype=float)
    out = np.empty_like(z)
    big = z > -1.0
    zb = z[big]
    out[big] = np.log(0.5 * zb * special.erfc(-zb / math.sqrt(2.0)) + np.exp(-0.5 * zb * zb) / math.sqrt(2.0 * math.pi))
    zs = z[~big]
    if zs.size:
        a = np.log(special.erfcx(-zs / math.sqrt(2.0)) * np.abs(zs)) + _LOG_PI_2_HALF  # < 0
        log1mexp = np.where(a > -math.log(2.0), np.log(-np.expm1(a)), np.log1p(-np.exp(a)))
        out[~big] = -0.5 * zs * zs - _LOG_2PI_HALF + log1mexp
    return out


def log_ei(mean: np.ndarray, var: np.ndarray, best: float) -> np.ndarray:
    """log expected improvement below `best` (minimisation)."""
    sd = np.sqrt(var)
    z = (best - mean) / sd
    return log_h(z) + np.log(sd)


def log_ei_grad(mean: float, var: float, best: float) -> tuple[float, float, float]:
    """log EI and its partial derivatives with respect to mean and variance."""
    sd = math.sqrt(var)
    z = (best - mean) / sd
    lh = float(log_h(np.array([z]))[0])
    ratio_cdf = math.exp(float(special.log_ndtr(z)) - lh)  # Phi/h
    ratio_pdf = math.exp(-0.5 * z * z - _LOG_2PI_HALF - lh)  # phi/h
    d_mean = -ratio_cdf / sd
    d_sd = ratio_pdf / sd
    d_var = d_sd / (2.0 * sd)
    return lh + math.log(sd), d_mean, d_var


# ---------------------------------------------------------------------- acquisitions
# values(X) -> (m,) for many points; value_grad(x, cols) -> (value, gradient with respect
# to x[cols]) for one point; larger is better.


class LogEI:
    def __init__(self, gp: GP, best: float) -> None:
        self.gp, self.best = gp, best

    def values(self, X: np.ndarray) -> np.ndarray:
        mean, var = self.gp.predict(X)
        return log_ei(mean, var, self.best)

    def value_grad(self, x: np.ndarray, cols: np.ndarray):
        mean, var, dmean, dvar = self.gp.predict_grad(x, cols)
        val, gm, gv = log_ei_grad(mean, var, self.best)
        return val, gm * dmean + gv * dvar

"""ALGORITHM_UNSPECIFIED: Bayesian optimisation.

`GPSuggester` (backend "gp", the default) is vcli's own GP-based optimiser in numpy/scipy:

* every parameter is one column in a warped unit space (see `_space`), categoricals use a
  Hamming-distance kernel part, inactive conditional children hold a fixed marker;
* a scrambled Sobol initial design of `n_startup` points;
* a GP with a Matern-5/2 ARD kernel and noise, standardised outputs (MAXIMIZE negated),
  hyperparameters by MAP (Optuna GPSampler's priors) with L-BFGS-B; above `max_fit_points`
  observations the hyperparameters are fitted on a deterministic subset (the best points plus
  a seeded random sample) while the posterior uses every observation;
* log expected improvement, maximised over Sobol candidates, then a mixed local search from
  the best candidates and the best observed point: L-BFGS-B over the active DOUBLE columns
  (analytic gradients) alternating with exhaustive/neighbourhood search over the
  INTEGER/DISCRETE/CATEGORICAL columns;
* pending points (running trials, outstanding suggestions, earlier points of the same batch)
  and valueless points (INFEASIBLE / non-finite) enter as kriging-believer fantasies: they
  shrink the posterior variance there, so the optimiser does not re-propose them, without
  ever being fed as metric values.

`SkoptSuggester` (backend "skopt") rebuilds a scikit-optimize `Optimizer` with a GP from the
history at every ask.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

from vcli.spec import ParameterValue, StudySpec
from vcli.suggesters._space import (
    CATEGORICAL,
    DISCRETE,
    DOUBLE,
    INTEGER,
    LINEAR,
    LOG,
    Space,
    SuggesterBase,
)


class GPSuggester(SuggesterBase):
    """vcli's Gaussian-process Bayesian optimiser (see the module docstring)."""

    def __init__(
        self,
        study_spec: StudySpec,
        *,
        seed: int | None = None,
        n_startup: int | None = None,
        n_candidates: int = 2048,
        n_local: int = 10,
        max_fit_points: int = 200,
        **tuning: object,
    ) -> None:
        super().__init__(study_spec, seed=seed)
        import numpy as np

        from vcli.suggesters import _gp  # noqa: F401  (imports scipy)

        self._np = np
        self.n_startup = n_startup if n_startup is not None else 10
        self.n_candidates = n_candidates
        self.n_local = n_local
        self.max_fit_points = max_fit_points
        # experimental knobs (benchmark only); the defaults are the tuned configuration
        self.tuning = {"ywarp": "yj", "startup": "random", "fantasy": "kb_best", **tuning}
        self._min_noise = float(self.tuning.get("min_noise", 1e-8))
        sp = self.space
        self._is_cat = np.array([n.kind == CATEGORICAL for n in sp.nodes], dtype=bool)
        # columns searched by L-BFGS: DOUBLE, and INTEGER with too many values to enumerate
        self._cont_cols = np.array(
            [c for c, n in enumerate(sp.nodes) if n.kind == DOUBLE or sp.choices[c] is None], dtype=int
        )
        self._disc_cols = [c for c, n in enumerate(sp.nodes) if sp.choices[c] is not None]

    # ------------------------------------------------------------------ ask

    def _ask(self, count: int) -> list[dict[str, ParameterValue]]:
        np = self._np
        sp = self.space
        obs = self.observations()
        known = self.known_keys()
        out: list[dict[str, ParameterValue]] = []
        if sp.dim == 0:
            return [{} for _ in range(count)]
        n_random = count if len(obs) < self.n_startup else 0
        if self.tuning.get("startup_by_index") and len(obs) >= 2:
            n_random = max(0, min(count, self.n_startup - self.n_known))
        if n_random:
            for i in range(n_random):
                p = self._startup_point(i, known)
                if p is None:
                    break
                known.add(sp.key(p))
                out.append(p)
            if n_random == count or len(out) < n_random:
                return out
            return out + self._ask_model(count - n_random, obs, known, out)
        return self._ask_model(count, obs, known, [])

    def _ask_model(self, count, obs, known, batch) -> list[dict[str, ParameterValue]]:
        """`count` points from the GP; `batch` = points already chosen in this ask (pending)."""
        np = self._np
        sp = self.space
        out: list[dict[str, ParameterValue]] = []

        from vcli.suggesters import _gp

        X = np.array([sp.encode(p) for p, _ in obs])
        yraw = np.array([v for _, v in obs])
        y = self._transform(yraw)
        theta = self._fit(X, y)
        gp_obs = _gp.GP(X, y, self._is_cat, theta, self._min_noise)
        best = float(np.min(y))
        P = np.array([sp.encode(p) for p in self.pending() + batch], dtype=float).reshape(-1, sp.dim)
        V = np.array([sp.encode(p) for p in self.valueless()], dtype=float).reshape(-1, sp.dim)
        best_x = X[int(np.argmin(y))]
        mode = self.tuning.get("fantasy", "qei")
        base = gp_obs
        if len(V):  # valueless points: kriging-believer fantasies (variance only)
            fy, _ = gp_obs.predict(V)
            base = _gp.GP(np.vstack([X, V]), np.concatenate([y, fy]), self._is_cat, theta, self._min_noise)
        for i in range(len(batch), len(batch) + count):
            rng = self.rng(i)
            if not len(P):
                acq = _gp.LogEI(base, best)
            elif mode == "qei":
                Z = self._normal_qmc(rng, len(P))
                acq = _gp.QLogEI(base, best, P, Z)
            else:  # kriging believer, incumbent updated with the fantasies
                fy, _ = base.predict(P)
                gp = _gp.GP(np.vstack([base.X, P]), np.concatenate([base.y, fy]), self._is_cat, theta, self._min_noise)
                b = min(best, float(np.min(fy)))
                if self.tuning.get("local_second") and len(P) == 1:
                    b = best
                acq = _gp.LogEI(gp, b)
            x = self._optimise_acq(acq, base, best_x, rng, known)
            if x is None:
                break
            p = sp.decode(x)
            known.add(sp.key(p))
            out.append(p)
            P = np.vstack([P, np.array(sp.encode(p))[None, :]])
        return out

    def _normal_qmc(self, rng, dim: int):
        """Fixed standard-normal QMC samples (n_fantasies, dim) for the q-batch EI."""
        np = self._np
        from scipy.stats import norm, qmc

        K = int(self.tuning.get("n_fantasies", 128))
        U = qmc.Sobol(dim, scramble=True, seed=rng).random(K)
        return norm.ppf(np.clip(U, 1e-9, 1 - 1e-9))

    def _far_from(self, x, Z, gp, tol: float) -> bool:
        """True when x is farther than `tol` (lengthscale units) from every row of Z."""
        from vcli.suggesters import _gp

        if len(Z) == 0:
            return True
        r2 = _gp.sqdist(x[None, :], Z, gp.lam, self._is_cat)[0]
        return bool(self._np.min(r2) > tol * tol)

    def _transform(self, yraw):
        """Standardised (and optionally warped) outputs to minimise."""
        np = self._np
        y = yraw - np.mean(yraw)
        sd = float(np.std(y))
        y = y / (sd if sd > 0 else 1.0)
        mode = self.tuning.get("ywarp")
        if mode and sd > 0:
            if mode == "yj":
                from scipy import stats

                lmb = float(stats.yeojohnson_normmax(y))
                lo, hi = self.tuning.get("yj_clip", (-10.0, 10.0))
                y = stats.yeojohnson(y, lmbda=min(hi, max(lo, lmb)))
            elif mode == "log":
                y = np.log(y - y.min() + float(self.tuning.get("log_delta", 0.1)))
            y = y - np.mean(y)
            s2 = float(np.std(y))
            y = y / (s2 if s2 > 0 else 1.0)
        return y

    def _startup_point(self, i: int, known: set) -> dict[str, ParameterValue] | None:
        """Point number n_known+i of a scrambled Sobol sequence seeded by `seed`."""
        np = self._np
        from scipy.stats import qmc

        sp = self.space
        idx = self.n_known + i
        if self.tuning.get("startup") == "random":
            return self._untried_random(self.rng(i, 2), known if sp.is_finite else set())
        m = max(1, math.ceil(math.log2(idx + 1)))
        U = qmc.Sobol(sp.dim, scramble=True, seed=np.random.default_rng([self.seed, 7])).random_base2(m)
        p = sp.decode(sp.sample_unit(U[idx : idx + 1])[0])
        if not sp.is_finite or sp.key(p) not in known:
            return p
        return self._untried_random(self.rng(i, 1), known)

    def _untried_random(self, rng, known: set) -> dict[str, ParameterValue] | None:
        sp = self.space
        for _ in range(64):
            p = sp.decode(sp.sample_unit(rng.random((1, sp.dim)))[0])
            if sp.key(p) not in known:
                return p
        return next((p for p in sp.grid() if sp.key(p) not in known), None)

    def _fit(self, X, y):
        np = self._np
        from vcli.suggesters import _gp

        n = len(y)
        if n > self.max_fit_points:
            order = np.argsort(y, kind="stable")
            n_best = self.max_fit_points // 4
            rest = order[n_best:]
            rng = np.random.default_rng([self.seed, n, 3])
            pick = rng.choice(len(rest), size=self.max_fit_points - n_best, replace=False)
            sel = np.sort(np.concatenate([order[:n_best], rest[pick]]))
            X, y = X[sel], y[sel]
        d = X.shape[1]
        starts = [np.zeros(d + 2)]
        if self.tuning.get("two_starts", True):
            starts.append(np.concatenate([np.full(d, math.log(10.0)), [0.0, math.log(1e-3)]]))
        return _gp.fit_hyperparameters(X, y, self._is_cat, starts, self._min_noise)

    # ------------------------------------------------------------------ acquisition

    def _optimise_acq(self, acq, gp, best_x, rng, known: set):
        """Maximise `acq` over the space: Sobol candidates, then local search from the best."""
        np = self._np
        from scipy.stats import qmc

        sp = self.space
        sob = qmc.Sobol(sp.dim, scramble=True, seed=rng)
        m = max(1, math.ceil(math.log2(self.n_candidates)))
        C = sp.sample_unit(sob.random_base2(m))
        f = acq.values(C)
        imax = int(np.argmax(f))
        starts = [C[imax]]
        probs = np.exp(f - f[imax])
        probs[imax] = 0.0
        nz = int(np.count_nonzero(probs > 0))
        k = min(self.n_local - 2, nz)
        if k > 0:
            probs /= probs.sum()
            starts.extend(C[rng.choice(len(C), size=k, replace=False, p=probs)])
        starts.append(np.asarray(best_x, dtype=float))
        ls = gp.lengthscales
        results = [self._local_search(acq, ls, np.array(s, dtype=float)) for s in starts]
        results.sort(key=lambda r: -r[1])
        for x, _ in results:
            if not sp.is_finite or sp.key_of_row(x) not in known:
                return x
        # fully discrete space and every local optimum already tried: best untried candidate
        for j in np.argsort(-f, kind="stable"):
            if sp.key_of_row(C[j]) not in known:
                return C[j]
        p = self._untried_random(rng, known)
        return None if p is None else np.array(sp.encode(p))

    def _local_search(self, acq, ls, x0):
        """Alternate L-BFGS-B on the continuous columns and enumeration of discrete ones."""
        np = self._np
        sp = self.space
        x = sp.snap(x0[None, :])[0]
        fx = float(acq.values(x[None, :])[0])
        for _ in range(8):
            improved = False
            active = np.array(sp.active_mask(x), dtype=bool)
            cols = np.array([c for c in self._cont_cols if active[c]], dtype=int)
            if len(cols):
                xn, fn = self._lbfgs(acq, ls, x, cols)
                if fn > fx + 1e-9:
                    x, fx, improved = xn, fn, True
            for c in self._disc_cols:
                if not sp.active_mask(x)[c]:
                    continue
                ch = np.asarray(sp.choices[c])
                if len(ch) <= 1:
                    continue
                if len(ch) > 32:  # neighbourhood of the current choice
                    j = int(np.argmin(np.abs(ch - x[c])))
                    idx = sorted({min(len(ch) - 1, max(0, j + o)) for o in (-8, -4, -2, -1, 1, 2, 4, 8)} - {j})
                    ch = ch[idx]
                else:
                    ch = ch[ch != x[c]]
                Xc = np.repeat(x[None, :], len(ch), axis=0)
                Xc[:, c] = ch
                Xc = sp.repair(Xc)
                fc = acq.values(Xc)
                j = int(np.argmax(fc))
                if fc[j] > fx + 1e-9:
                    x, fx, improved = Xc[j], float(fc[j]), True
            if not improved:
                break
        return x, fx

    def _lbfgs(self, acq, ls_all, x, cols):
        np = self._np
        from scipy import optimize

        ls = np.clip(ls_all[cols], 1e-3, 1e3)  # precondition: optimise z = x / lengthscale

        def fun(z):
            xx = x.copy()
            xx[cols] = z * ls
            val, g = acq.value_grad(xx, cols)
            return -val, -g * ls

        res = optimize.minimize(
            fun,
            x[cols] / ls,
            jac=True,
            method="L-BFGS-B",
            bounds=[(0.0, 1.0 / l) for l in ls],
            options={"maxiter": 100, "gtol": 1e-6},
        )
        xn = x.copy()
        xn[cols] = np.clip(res.x * ls, 0.0, 1.0)
        xn = self.space.snap(xn[None, :])[0]
        fn = float(acq.values(xn[None, :])[0])
        return xn, fn


# ---------------------------------------------------------------------- skopt backend


class SkoptSuggester(SuggesterBase):
    """scikit-optimize's `Optimizer` (GP, gp_hedge) rebuilt from the trials at every ask.

    Dimensions: linear/log DOUBLE -> Real (log-uniform prior for log), INTEGER -> Integer,
    DISCRETE -> Integer index over the sorted values, CATEGORICAL -> Categorical; reverse-log
    parameters -> Real on the warped [0,1]. Conditional children are always part of the
    vector (inactive ones get a fixed default when told) and omitted from suggestions.
    Pending trials are told with the constant lie min(observed) (skopt's "cl_min"); batches
    use ask(n_points=count). Valueless trials are not told (skopt has no notion of them).
    `acq_optimizer` is "sampling" when the space has a categorical, else "lbfgs".
    """

    def __init__(self, study_spec: StudySpec, *, seed: int | None = None, n_initial_points: int = 10) -> None:
        super().__init__(study_spec, seed=seed)
        import skopt  # noqa: F401

        self.n_initial_points = n_initial_points
        self._dims = [self._dimension(c) for c in range(self.space.dim)]

    def _dimension(self, col: int):
        from skopt.space import Categorical, Integer, Real

        n = self.space.nodes[col]
        name = n.parameter_id
        if n.kind == CATEGORICAL:
            return Categorical(list(n.values), name=name)
        if n.kind == DISCRETE:
            return Integer(0, len(n.values) - 1, name=name)
        if n.scale not in (LINEAR, LOG):  # reverse log: warped unit interval
            return Real(0.0, 1.0, name=name)
        if n.kind == INTEGER:
            if n.int_lo == n.int_hi:
                return Categorical([n.int_lo], name=name)
            prior = "log-uniform" if n.scale == LOG else "uniform"
            return Integer(n.int_lo, n.int_hi, prior=prior, name=name)
        lo, hi = n.lo, n.hi
        if lo == hi:
            return Categorical([lo], name=name)
        return Real(lo, hi, prior="log-uniform" if n.scale == LOG else "uniform", name=name)

    def _to_point(self, params: Mapping[str, object]) -> list:
        sp = self.space
        row = sp.encode(params)
        point = []
        for c, n in enumerate(sp.nodes):
            u = row[c]
            if n.kind == CATEGORICAL:
                point.append(n.values[max(0, int(u))])
            elif n.kind == DISCRETE:
                point.append(n.values.index(sp.value_of(c, u)))
            elif n.scale not in (LINEAR, LOG):
                point.append(float(u))
            elif n.kind == INTEGER:
                point.append(int(sp.value_of(c, u)))
            else:
                point.append(float(sp.value_of(c, u)))
        return point

    def _from_point(self, point: Sequence) -> dict[str, ParameterValue]:
        sp = self.space
        row = []
        for c, n in enumerate(sp.nodes):
            v = point[c]
            v = v.item() if hasattr(v, "item") else v
            if n.kind == CATEGORICAL:
                row.append(float(n.values.index(str(v))))
            elif n.kind == DISCRETE:
                row.append(sp.choices[c][int(v)])
            elif n.scale not in (LINEAR, LOG):
                row.append(float(v))
            else:
                row.append(sp.encode_value(c, v))
        return sp.decode(row)

    def _ask(self, count: int) -> list[dict[str, ParameterValue]]:
        import warnings

        import numpy as np
        from skopt import Optimizer

        sp = self.space
        if sp.dim == 0:
            return [{} for _ in range(count)]
        has_cat = any(n.kind == CATEGORICAL for n in sp.nodes)
        opt = Optimizer(
            self._dims,
            base_estimator="GP",
            acq_func="gp_hedge",
            acq_optimizer="sampling" if has_cat else "lbfgs",
            n_initial_points=self.n_initial_points,
            random_state=int(np.random.default_rng([self.seed, self.n_known]).integers(2**31 - 1)),
            model_queue_size=1,
        )
        obs = self.observations()
        xs = [self._to_point(p) for p, _ in obs]
        ys = [float(v) for _, v in obs]
        pend = self.pending()
        if pend and ys:
            xs += [self._to_point(p) for p in pend]
            ys += [min(ys)] * len(pend)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if xs:
                opt.tell(xs, ys)
            points = opt.ask(n_points=count) if count > 1 else [opt.ask()]
        known = self.known_keys()
        out = []
        for pt in points:
            p = self._from_point(pt)
            k = sp.key(p)
            if sp.is_finite and k in known:
                continue
            known.add(k)
            out.append(p)
        return out

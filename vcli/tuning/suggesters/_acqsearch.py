"""Maximising an acquisition function over a suggester's search space (`AcqSearch`): Sobol
candidates, then a mixed local search (L-BFGS-B on the continuous columns, enumeration of the
discrete ones); and the batch's local variant, from starts near the incumbent only.

`AcqSearch` is a mixin of `GPSuggester` (`bayesian.py`). It uses the suggester's `space`,
`_np` (numpy), `_cont_cols` (columns L-BFGS searches), `_disc_cols` (columns enumerated),
`n_candidates`, `n_local`, `local_sd`, `local_starts` and `_untried_random`. An acquisition
`acq` offers `values(X)` (rows of unit-space points) and `value_grad(x, cols)`."""

from __future__ import annotations

import math
from types import ModuleType
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    import numpy as np

    from vcli.spec import ParameterValue
    from vcli.tuning.space import Space


class AcqSearch:
    """Acquisition maximisers of `GPSuggester` (see the module docstring)."""

    # what the host suggester provides (declared for the type checker only; no runtime effect)
    space: Space
    _np: ModuleType
    _cont_cols: np.ndarray
    _disc_cols: list[int]
    n_candidates: int
    n_local: int
    local_sd: float
    local_starts: int
    _untried_random: Callable[[np.random.Generator, set], dict[str, ParameterValue] | None]

    def _optimise_acq(self, acq, ls, best_x, rng, known: set):
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
        x = self._best_untried([self._local_search(acq, ls, np.array(s, dtype=float)) for s in starts], known)
        if x is not None:
            return x
        # fully discrete space and every local optimum already tried: best untried candidate
        for j in np.argsort(-f, kind="stable"):
            if sp.key_of_row(C[j]) not in known:
                return C[j]
        p = self._untried_random(rng, known)
        return None if p is None else np.array(sp.encode(p))

    def _near_incumbent(self, acq, ls, best_x, rng, known: set):
        """The best untried local maximum of `acq` found from starts near the incumbent
        `best_x` (see `local_sd`), or None (the caller then searches the whole space; always
        with `local_starts` 0, which gives the batch spread over the box, as before)."""
        np = self._np
        sp = self.space
        if self.local_starts <= 0:
            return None
        C = np.repeat(np.asarray(best_x, dtype=float)[None, :], self.local_starts, axis=0)
        cols = self._cont_cols
        C[:, cols] = np.clip(C[:, cols] + rng.normal(0.0, self.local_sd, size=(len(C), len(cols))), 0.0, 1.0)
        C = sp.repair(sp.snap(C))
        f = acq.values(C)
        return self._best_untried([self._local_search(acq, ls, np.array(C[j], dtype=float)) for j in np.argsort(-f)[:4]],
                                  known)

    def _best_untried(self, results, known: set):
        """The best of the local search `results` ((row, value) pairs) whose point is not in
        `known` (any, in an infinite space); None when all are."""
        sp = self.space
        for x, _ in sorted(results, key=lambda r: -r[1]):
            if not sp.is_finite or sp.key_of_row(x) not in known:
                return x
        return None

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

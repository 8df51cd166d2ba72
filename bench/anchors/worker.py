"""Ask/tell server for one anchor optimiser, run inside that anchor's own venv.

    <env>/bin/python bench/anchors/worker.py OPTIMISER

Standard library only at module level. Reads JSON lines on stdin and answers one JSON line
each on the original stdout (everything the libraries print goes to stderr):

    {"cmd": "init", "space": [[name, kind, lo, hi, log, choices], ...], "seed": s, "n": n}
    {"cmd": "ask", "q": k}          -> {"points": [{name: value}, ...], "cpu": seconds}
    {"cmd": "tell", "values": [...]} -> {"cpu": seconds}   (values of the last ask, in order)

cpu = this process's CPU time (time.process_time) spent in the call, i.e. the optimiser's
own cost. The objective is evaluated by the caller (bench_suggesters.py), in its interpreter.
OPTIMISER: optuna_gp, optuna_tpe, ax, smac, hebo, vizier. Every minimisation.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")


class Optuna:
    def __init__(self, kind, space, seed, n):
        import warnings

        import optuna

        warnings.filterwarnings("ignore")
        optuna.logging.set_verbosity(optuna.logging.ERROR)
        sampler = optuna.samplers.GPSampler(seed=seed) if kind == "gp" else optuna.samplers.TPESampler(seed=seed)
        self.study = optuna.create_study(sampler=sampler, direction="minimize")
        self.space, self.trials = space, []

    def ask(self, q):
        out, self.trials = [], []
        for _ in range(q):
            t = self.study.ask()
            p = {}
            for name, k, lo, hi, log, choices in self.space:
                if k == "float":
                    p[name] = t.suggest_float(name, lo, hi, log=log)
                elif k == "int":
                    p[name] = t.suggest_int(name, lo, hi, log=log)
                else:
                    p[name] = t.suggest_categorical(name, list(choices))
            self.trials.append(t)
            out.append(p)
        return out

    def tell(self, values):
        for t, v in zip(self.trials, values):
            self.study.tell(t, v)


class Ax:
    """Ax's Client with its default generation strategy (Sobol, then BoTorch's modular
    default: a SingleTaskGP / MixedSingleTaskGP with qLogNEI)."""

    def __init__(self, space, seed, n):
        import logging

        from ax.api.client import Client
        from ax.api.configs import ChoiceParameterConfig, RangeParameterConfig

        logging.disable(logging.WARNING)
        params = []
        for name, k, lo, hi, log, choices in space:
            if k == "cat":
                params.append(ChoiceParameterConfig(name=name, values=list(choices), parameter_type="str", is_ordered=False))
            else:
                params.append(RangeParameterConfig(name=name, bounds=(lo, hi), parameter_type="float" if k == "float" else "int",
                                                   scaling="log" if log else "linear"))
        self.client = Client(random_seed=seed)
        self.client.configure_experiment(parameters=params)
        self.client.configure_optimization(objective="-f")
        self.idx = []

    def ask(self, q):
        trials = self.client.get_next_trials(max_trials=q)
        self.idx = list(trials)
        return [dict(trials[i]) for i in self.idx]

    def tell(self, values):
        for i, v in zip(self.idx, values):
            self.client.complete_trial(trial_index=i, raw_data={"f": float(v)})


class Smac:
    """SMAC3's HyperparameterOptimizationFacade (random forest, log EI, local + random search)."""

    def __init__(self, space, seed, n):
        import logging
        import tempfile

        from ConfigSpace import Categorical, ConfigurationSpace, Float, Integer
        from smac import HyperparameterOptimizationFacade, Scenario

        logging.disable(logging.WARNING)
        cs = ConfigurationSpace(seed=seed)
        for name, k, lo, hi, log, choices in space:
            if k == "float":
                cs.add(Float(name, (lo, hi), log=log))
            elif k == "int":
                cs.add(Integer(name, (lo, hi), log=log))
            else:
                cs.add(Categorical(name, list(choices)))
        scen = Scenario(cs, deterministic=True, n_trials=n + 10, seed=seed, output_directory=tempfile.mkdtemp(prefix="smac-"))
        self.smac = HyperparameterOptimizationFacade(scen, lambda config, seed=0: 0.0, overwrite=True, logging_level=40)
        self.infos = []

    def ask(self, q):
        self.infos = [self.smac.ask() for _ in range(q)]
        return [dict(i.config) for i in self.infos]

    def tell(self, values):
        from smac.runhistory.dataclasses import TrialValue

        for info, v in zip(self.infos, values):
            self.smac.tell(info, TrialValue(cost=float(v)))


class Hebo:
    def __init__(self, space, seed, n):
        import numpy as np
        import pandas as pd  # noqa: F401
        import torch
        from hebo.design_space.design_space import DesignSpace
        from hebo.optimizers.hebo import HEBO

        np.random.seed(seed)
        torch.manual_seed(seed)
        cfg = []
        for name, k, lo, hi, log, choices in space:
            if k == "float":
                cfg.append({"name": name, "type": "pow" if log else "num", "lb": lo, "ub": hi})
            elif k == "int":
                cfg.append({"name": name, "type": "int", "lb": lo, "ub": hi})
            else:
                cfg.append({"name": name, "type": "cat", "categories": list(choices)})
        self.opt = HEBO(DesignSpace().parse(cfg), scramble_seed=seed)
        self.space, self.rec = space, None

    def ask(self, q):
        self.rec = self.opt.suggest(n_suggestions=q)
        out = []
        for _, row in self.rec.iterrows():
            p = {}
            for name, k, *_ in self.space:
                v = row[name]
                p[name] = int(v) if k == "int" else (str(v) if k == "cat" else float(v))
            out.append(p)
        return out

    def tell(self, values):
        import numpy as np

        self.opt.observe(self.rec, np.asarray(values, dtype=float).reshape(-1, 1))


class Vizier:
    """OSS Vizier's default designer (GP-UCB-PE on jax) through its local client."""

    def __init__(self, space, seed, n):
        from vizier.service import clients
        from vizier.service import pyvizier as vz

        # A private in-memory store: the default is one SQLite file inside vizier's package,
        # which concurrent runs share (they then wait on its locks and some fail).
        clients.environment_variables.servicer_use_sql_ram()
        problem = vz.ProblemStatement()
        root = problem.search_space.root
        for name, k, lo, hi, log, choices in space:
            scale = vz.ScaleType.LOG if log else vz.ScaleType.LINEAR
            if k == "float":
                root.add_float_param(name, lo, hi, scale_type=scale)
            elif k == "int":
                root.add_int_param(name, lo, hi, scale_type=scale)
            else:
                root.add_categorical_param(name, list(choices))
        problem.metric_information.append(vz.MetricInformation("f", goal=vz.ObjectiveMetricGoal.MINIMIZE))
        config = vz.StudyConfig.from_problem(problem)
        config.algorithm = "DEFAULT"
        self.study = clients.Study.from_study_config(config, owner="bench", study_id=f"bench{seed}{os.getpid()}")
        self.space, self.sugg = space, []

    def ask(self, q):
        self.sugg = list(self.study.suggest(count=q))
        out = []
        for t in self.sugg:
            p = {}
            params = t.parameters
            for name, k, *_ in self.space:
                v = params[name]
                p[name] = int(v) if k == "int" else (str(v) if k == "cat" else float(v))
            out.append(p)
        return out

    def tell(self, values):
        from vizier.service import pyvizier as vz

        for t, v in zip(self.sugg, values):
            t.complete(vz.Measurement({"f": float(v)}))


def make(opt, space, seed, n):
    if opt in ("optuna_gp", "optuna_tpe"):
        return Optuna(opt.split("_")[1], space, seed, n)
    return {"ax": Ax, "smac": Smac, "hebo": Hebo, "vizier": Vizier}[opt](space, seed, n)


def _plain(v):
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def main():
    opt = sys.argv[1]
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # libraries' prints go to stderr
    sys.stdout = sys.stderr
    inst = None
    for line in sys.stdin:
        msg = json.loads(line)
        t0 = time.process_time()
        if msg["cmd"] == "init":
            inst = make(opt, msg["space"], msg["seed"], msg["n"])
            reply = {"ok": True}
        elif msg["cmd"] == "ask":
            pts = inst.ask(msg["q"])
            reply = {"points": [{k: _plain(v) for k, v in p.items()} for p in pts]}
        elif msg["cmd"] == "tell":
            inst.tell(msg["values"])
            reply = {}
        else:
            break
        reply["cpu"] = time.process_time() - t0
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    main()

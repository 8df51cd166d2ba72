"""Reading a big study: `describe` (YAML and JSON), `hp-tuning-jobs list` and `custom-jobs list`
on a home holding one study of N trials (5 measurements each), each trial with its custom job,
inserted through the store API; side by side with Optuna reading the same trials (the study
exported by `vcli hp-tuning-jobs export --to=sqlite:///...`, then `optuna.load_study` and
`trials_dataframe()`), and vcli's YAML writer against PyYAML's general representer on the
same `describe` document (in-process).

    .venv/bin/python bench/bench_reads.py [--trials 10000] [--repeat 3]

Prints, per read, the median, minimum and maximum wall time of `--repeat` runs (each a new
process, as a user runs it) and its ratio to Optuna's read.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

OPTUNA_READ = ("import optuna, sys; optuna.logging.set_verbosity(optuna.logging.WARNING); "
               "s = optuna.load_study(study_name=None, storage=sys.argv[1]); print(len(s.trials_dataframe()))")


def make_study(home: Path, trials: int) -> str:
    """The study of the test suite's big-study tests (tests/test_big_studies.py), N trials."""
    from tests.test_big_studies import make_study as make

    return make(home, trials)


def timed(argv: list[str], env: dict[str, str], repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        r = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=1800)
        out.append(time.perf_counter() - t0)
        if r.returncode != 0:
            raise SystemExit(f"{' '.join(argv[:6])}: exit {r.returncode}: {r.stderr[-500:]}")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        t0 = time.perf_counter()
        study = make_study(home, args.trials)
        made = time.perf_counter() - t0
        env = {**os.environ, "VCLI_HOME": str(home), "VCLI_CONFIG_DIR": str(Path(tmp) / "config")}
        vcli = [sys.executable, "-m", "vcli"]
        storage = f"sqlite:///{tmp}/optuna.db"
        subprocess.run([*vcli, "hp-tuning-jobs", "export", study, f"--to={storage}"], env=env, check=True,
                       capture_output=True, timeout=1800)
        reads = {
            "optuna load_study + trials_dataframe": [sys.executable, "-c", OPTUNA_READ, storage],
            "hp-tuning-jobs describe (YAML)": [*vcli, "hp-tuning-jobs", "describe", study],
            "hp-tuning-jobs describe --format=json": [*vcli, "hp-tuning-jobs", "describe", study, "--format=json"],
            "hp-tuning-jobs list": [*vcli, "hp-tuning-jobs", "list"],
            "custom-jobs list --include-trial-jobs": [*vcli, "custom-jobs", "list", "--include-trial-jobs"],
        }
        results = {name: timed(argv, env, args.repeat) for name, argv in reads.items()}
        from vcli.codec.yamlio import _to_yaml_represented, to_yaml
        from vcli.resources import hp_tuning_job_resource
        from vcli.store import Store

        store = Store(home)
        document = hp_tuning_job_resource(store, store.get_job(study))
        for name, write in (("YAML writer, in-process: vcli", to_yaml),
                            ("YAML writer, in-process: PyYAML representer", _to_yaml_represented)):
            runs = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                write(document)
                runs.append(time.perf_counter() - t0)
            results[name] = runs
    optuna = statistics.median(results["optuna load_study + trials_dataframe"])
    print(f"{args.trials} trials, {args.repeat} runs each; home made in {made:.1f} s; "
          f"{platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"{time.strftime('%Y-%m-%d')}\n")
    print("| read | median s | min s | max s | / Optuna |\n|---|---|---|---|---|")
    for name, runs in results.items():
        print(f"| {name} | {statistics.median(runs):.2f} | {min(runs):.2f} | {max(runs):.2f} | "
              f"{statistics.median(runs) / optuna:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Make the docs' pictures from a real run, not by hand: a 12-trial study of a toy trainer run by
`vcli hp-tuning-jobs create` in a scratch home, then

- `docs/pages/img/live-table.svg`: the live table as the terminal shows it when the study
  ended (the same renderable, `vcli.view.table.study_table`, recorded by rich);
- `docs/pages/img/hosts-gpus.svg`: `vcli hosts gpus` on a machine declaring 4 GPUs while a
  job holds two of them;
- `docs/pages/img/report.png` and `docs/pages/img/dashboard.png`: the study's report
  (`vcli hp-tuning-jobs plot`) and its dashboard page, in headless Chromium.

    .venv/bin/python docs/gen_pictures.py

Needs the `plot` extra and Chromium (`.ci/browser-setup.sh`); takes about a minute.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "docs" / "pages" / "img"
sys.path.insert(0, str(REPO))

TRAINER = '''import argparse, json, math, os, time
p = argparse.ArgumentParser()
p.add_argument("--learning_rate", type=float)
p.add_argument("--units", type=int)
a = p.parse_args()
for step in range(1, 4):
    time.sleep(0.3)
    acc = 0.95 - 0.04 * (math.log10(a.learning_rate) + 2) ** 2 - abs(a.units - 96) / 2000 - 0.05 / step
    with open(os.environ["CLOUD_ML_HP_METRIC_FILE"], "a") as f:
        f.write(json.dumps({"accuracy": str(round(acc, 4)), "global_step": str(step)}) + "\\n")
'''


def vcli(env: dict[str, str], *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([sys.executable, "-m", "vcli", *argv], env=env, capture_output=True, text=True, timeout=600)
    if check and r.returncode != 0:
        raise SystemExit(f"vcli {' '.join(argv[:3])}: exit {r.returncode}\n{r.stderr[-2000:]}")
    return r


def run_study(env: dict[str, str], work: Path) -> str:
    (work / "train.py").write_text(TRAINER)
    r = vcli(env, "hp-tuning-jobs", "create", "--display-name=digits-hpt", "--executor=local",
             "--worker-pool-spec=machine-type=n1-standard-4,replica-count=1,container-image-uri=python",
             f"--command={sys.executable},{work / 'train.py'}",
             "--parameter-spec=parameter-id=learning_rate,type=double,min=0.0001,max=0.1,scale=log",
             "--parameter-spec=parameter-id=units,type=integer,min=16,max=256",
             "--metric=metric-id=accuracy,goal=maximize", "--max-trial-count=12", "--parallel-trial-count=3",
             "--seed=7", "--format=value(name.basename())")
    return r.stdout.strip()


def live_table(env: dict[str, str], study: str) -> None:
    """The table the terminal showed as the study ended, from the study's stored trials."""
    from rich.console import Console

    from vcli import codec
    from vcli.enums import JobState
    from vcli.store import Store
    from vcli.view.table import StudySnapshot, study_table

    store = Store(Path(env["VCLI_HOME"]))
    row = store.get_job(study)
    spec = codec.study_spec_from_stored(row.record["studySpec"])
    trials = {t.id: t for t in store.trials(study)}
    snap = StudySnapshot(display_name=row.display_name, metrics=spec.metrics,
                         parameter_ids=[p.parameter_id for p in spec.parameters], max_trial_count=12, trials=trials,
                         state=JobState(row.state), since=time.monotonic() - 20)
    console = Console(record=True, width=100, force_terminal=True, color_system="truecolor", file=open(os.devnull, "w"))
    console.print(study_table(snap, width=100, height=24, now=time.monotonic()))
    console.save_svg(str(OUT / "live-table.svg"), title=f"vcli hp-tuning-jobs create --display-name={row.display_name} ...")


def hosts_gpus(env: dict[str, str], work: Path) -> None:
    """`vcli hosts gpus` while a job holds GPUs 0 and 1 of 4 declared."""
    from rich.console import Console
    from rich.text import Text

    gpus = {**env, "VCLI_LOCAL_GPUS": "4", "VCLI_LOCAL_GPU_TYPE": "NVIDIA_L4"}
    job = subprocess.Popen(
        [sys.executable, "-m", "vcli", "custom-jobs", "create", "--display-name=llm-finetune", "--executor=local",
         "--worker-pool-spec=machine-type=g2-standard-24,accelerator-type=NVIDIA_L4,accelerator-count=2,"
         "container-image-uri=python", f"--command={sys.executable},-c,import time; time.sleep(120)"],
        env=gpus, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            shown = vcli(gpus, "hosts", "gpus").stdout
            if "HELD" in shown or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    finally:
        os.killpg(job.pid, signal.SIGINT)
        job.wait(timeout=60)
    width = max(len(line) for line in shown.splitlines())
    console = Console(record=True, width=width, file=open(os.devnull, "w"))
    console.print(Text(shown.rstrip("\n"), no_wrap=True))
    console.save_svg(str(OUT / "hosts-gpus.svg"), title="vcli hosts gpus")


def screenshot(url: str, path: Path, height: int) -> None:
    from tests.harness.browser import chromium

    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        f"--user-data-dir={profile}", f"--window-size=1200,{height}", "--virtual-time-budget=5000",
                        f"--screenshot={path}", url], check=True, capture_output=True, timeout=120)


def report_and_dashboard(env: dict[str, str], work: Path, study: str) -> None:
    vcli(env, "hp-tuning-jobs", "plot", study, f"--output={work / 'report.html'}")
    screenshot((work / "report.html").as_uri(), OUT / "report.png", 1400)
    server = subprocess.Popen([sys.executable, "-m", "vcli", "dashboard", "--port=0"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        assert server.stdout is not None
        url = None
        for line in server.stdout:
            if m := re.search(r"http://\S+", line):
                url = m.group(0).rstrip("/")
                break
        if url is None:
            raise SystemExit("vcli dashboard printed no address")
        screenshot(f"{url}/studies/{study}", OUT / "dashboard.png", 1400)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        env = {**os.environ, "VCLI_HOME": str(work / "home"), "VCLI_CONFIG_DIR": str(work / "config"),
               "VCLI_GPU_LEASE_DIR": str(work / "leases"), "COLUMNS": "100"}
        env.pop("VCLI_LOCAL_GPUS", None)
        study = run_study(env, work)
        live_table(env, study)
        hosts_gpus(env, work)
        report_and_dashboard(env, work, study)
    print(json.dumps(sorted(p.name for p in OUT.iterdir())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

#!/usr/bin/env bash
# Create the anchor optimisers' virtual environments for bench/bench_suggesters.py.
#
#   nice -n 19 bash bench/anchors/make_envs.sh [torch] [smac] [hebo] [vizier]   (default: all)
#
# Each anchor lives in its own venv under $BENCH_ENVS (default /work/bench-envs), never in
# the project's .venv (whose pins must stay): the anchors pin other numpy/torch/jax versions.
# The bench talks to them through bench/anchors/worker.py (stdlib only, JSON lines over a
# pipe), so the objectives are always evaluated in the bench's own interpreter.
# Logs: $BENCH_ENVS/<name>.log. One env failing does not stop the others.
set -u
ENVS=${BENCH_ENVS:-/work/bench-envs}
PY=${BENCH_PYTHON:-python3.11}
mkdir -p "$ENVS"
want=("$@")
[ ${#want[@]} -eq 0 ] && want=(torch smac hebo vizier)

mk() {  # name, pip args...
  local name=$1; shift
  local log="$ENVS/$name.log"
  echo "== $name: $*" | tee "$log"
  if [ ! -x "$ENVS/$name/bin/python" ]; then "$PY" -m venv "$ENVS/$name" >>"$log" 2>&1 || return 1; fi
  "$ENVS/$name/bin/python" -m pip install -q --upgrade pip >>"$log" 2>&1
  if "$ENVS/$name/bin/python" -m pip install "$@" >>"$log" 2>&1; then
    echo "== $name: OK" | tee -a "$log"
  else
    echo "== $name: FAILED (see $log)" | tee -a "$log"
  fi
}

TORCH=torch==2.13.0  # the CPU wheel this machine's pip finds (/opt/wheels); the pip constraint caps torch
for w in "${want[@]}"; do
  case $w in
    # Optuna (GPSampler needs torch), Ax/BoTorch, Hyperopt
    torch) mk torch "$TORCH" optuna==5.0.0 ax-platform==1.3.1 botorch==0.18.1 hyperopt==0.3.0 ;;
    # SMAC3's HPO facade (random forest from pyrfr, which builds with swig)
    smac) mk smac swig smac==2.4.1 ;;
    # HEBO pins an old numpy
    hebo) mk hebo "$TORCH" hebo==0.3.6 ;;
    # OSS Vizier with its jax designers (GP-UCB-PE default). Unpinned, pip takes jax 0.10 and
    # equinox 0.11.7 fails on import (jax.core.Primitive is gone); this set imports and runs.
    vizier) mk vizier "google-vizier[jax]==0.1.24" jax==0.4.38 jaxlib==0.4.38 equinox==0.11.7 chex==0.1.88 \
                      flax==0.10.2 optax==0.2.4 orbax-checkpoint==0.10.2 ;;
    *) echo "unknown env $w" >&2 ;;
  esac
done

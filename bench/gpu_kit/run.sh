#!/usr/bin/env bash
# Run the GPU kit's stages ON THE GPU MACHINE (through the device tool's `run`, carry [".gpu_kit"]):
#
#   bash bench/gpu_kit/run.sh part1                      # env, cuda_tests, grpo, grpo_eager, decode, decode_compile (~8 min)
#   bash bench/gpu_kit/run.sh part2 part3 --budget-s 280 # mem7b, trl, then grpo_ckpt, grpo_fused, profile if time is left
#   bash bench/gpu_kit/run.sh decode grpo                # any list of stages / parts
#   bash bench/gpu_kit/run.sh --plan [part1 ...]         # the stages, their limits and estimates (no install)
#   bash bench/gpu_kit/run.sh --smoke                    # the CPU dry run (see --python/--wheels/--site below)
#
# Installs .gpu_kit/wheels (prepare.sh) into /tmp/site with --no-deps (once per machine: a warm machine keeps it),
# sets PYTHONPATH=/tmp/site:$PWD and PYTHONUNBUFFERED=1, then hands over to bench/gpu_kit/kit.py, which runs each
# stage under `timeout` and a global deadline (--budget-s, default the parts' budgets, counted from this script's
# start) and leaves kit.log, bundle.json and summary.md in $OUT (default /tmp/gpu_kit_out).
# Options for the dry run elsewhere: --python PY (default python3), --wheels DIR, --site DIR.
set -uo pipefail
START=$(date +%s)
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
PY=python3
WHEELS=.gpu_kit/wheels
SITE=/tmp/site
PLAN=0
ARGS=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --python) PY=$2; shift 2 ;;
    --wheels) WHEELS=$2; shift 2 ;;
    --site) SITE=$2; shift 2 ;;
    --plan) PLAN=1; shift ;;
    *) ARGS+=("$1"); shift ;;
  esac
done
if ((PLAN)); then
  exec "$PY" bench/gpu_kit/kit.py plan "${ARGS[@]}"
fi
export OUT=${OUT:-/tmp/gpu_kit_out}
mkdir -p "$OUT"
LOG=$OUT/kit.log
say() { echo "[run.sh $(date +%H:%M:%S)] $*" | tee -a "$LOG"; }

shopt -s nullglob
WHLS=("$WHEELS"/*.whl)
if ((${#WHLS[@]} == 0)); then
  say "no wheels in $WHEELS: run bench/gpu_kit/prepare.sh here first (and carry .gpu_kit)"
  exit 2
fi
STAMP=$(printf '%s\n' "${WHLS[@]##*/}" | sort | md5sum | cut -d' ' -f1)
if [[ -f "$SITE/.gpu_kit_stamp" && "$(cat "$SITE/.gpu_kit_stamp")" == "$STAMP" ]]; then
  say "wheels already installed in $SITE"
else
  say "installing ${#WHLS[@]} wheels into $SITE"
  rm -rf "$SITE"
  if ! "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
    "${WHLS[@]}" >>"$LOG" 2>&1; then
    say "wheel install FAILED (see $LOG); the stages run without them"
  else
    echo "$STAMP" >"$SITE/.gpu_kit_stamp"
  fi
fi
export PYTHONPATH="$SITE:$ROOT" PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
say "install done in $(($(date +%s) - START)) s; python: $("$PY" -c 'import sys; print(sys.version.split()[0])')"
exec "$PY" bench/gpu_kit/kit.py run --started-at "$START" --python "$PY" --out "$OUT" "${ARGS[@]}"

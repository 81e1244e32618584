#!/usr/bin/env bash
# Prepare the GPU kit HERE (not on the GPU machine), before the first device call; any time is fine.
#
#   bash bench/gpu_kit/prepare.sh                         # from the checkout the device copies (/work/main)
#   bash bench/gpu_kit/prepare.sh --python-version 3.11 --wheels .gpu_kit/wheels-cp311   # the CPU dry run's wheels
#
# 1. downloads every wheel of bench/gpu_kit/wheels.txt for CPython <version> on manylinux x86_64 (default 3.12,
#    the GPU image's Python) into .gpu_kit/wheels, and builds antlr4-python3-runtime's pure-Python wheel (PyPI has
#    only its sdist); checks one version per package;
# 2. saves the bundled SmolLM2 tokenizer (and its config.json) to .gpu_kit/tokenizer: the image has no gguf to read
#    the bundled model, and the benches only need its tokenizer;
# 3. makes git ignore /.gpu_kit/ (the repository's info/exclude), so it travels only when a call names it in carry;
# 4. prints the sizes (the repository's tracked + untracked-not-ignored files, and the kit) against the 64 MiB that
#    travel, and the exact device calls to make.
# Needs pip with network access and a Python with verl, transformers and gguf installed (the project's venv).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
PYV=3.12
WHEELS=.gpu_kit/wheels
TOKENIZER=.gpu_kit/tokenizer
PY=${KIT_PREP_PYTHON:-}
if [[ -z "$PY" ]]; then
  for candidate in "$ROOT/.venv/bin/python" /work/main/.venv/bin/python python3; do
    if command -v "$candidate" >/dev/null 2>&1; then PY=$candidate; break; fi
  done
fi
while [[ $# -gt 0 ]]; do
  case "$1" in
    --python-version) PYV=$2; shift 2 ;;
    --wheels) WHEELS=$2; shift 2 ;;
    --python) PY=$2; shift 2 ;;
    *) echo "unknown option $1 (see the comment at the top of $0)" >&2; exit 2 ;;
  esac
done
TAG=cp${PYV/./}
LIST=bench/gpu_kit/wheels.txt
mapfile -t PINS < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' "$LIST" | grep -v '^$')
BINARY=()
SDIST=()
for pin in "${PINS[@]}"; do
  if [[ "$pin" == antlr4-python3-runtime==* ]]; then SDIST+=("$pin"); else BINARY+=("$pin"); fi
done

echo "== wheels for CPython $PYV ($TAG) into $WHEELS"
rm -rf "$WHEELS"
mkdir -p "$WHEELS"
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$PYV" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$WHEELS" "${BINARY[@]}"
for pin in "${SDIST[@]}"; do
  # pure Python: the wheel built here installs on any CPython 3
  "$PY" -m pip wheel -q --no-deps -w "$WHEELS" "$pin"
done
# one version of each package (two stop the whole install there); every pin present
"$PY" - "$WHEELS" "$LIST" <<'EOF'
import re
import sys
from pathlib import Path

wheels, listing = Path(sys.argv[1]), Path(sys.argv[2])
norm = lambda s: re.sub(r"[-_.]+", "-", s).lower()
found = {}
for whl in sorted(wheels.glob("*.whl")):
    name, version = whl.name.split("-")[:2]
    found.setdefault(norm(name), []).append(version)
pins = {}
for line in listing.read_text().splitlines():
    line = line.split("#")[0].strip()
    if line:
        name, version = line.split("==")
        pins[norm(name)] = version
bad = [f"{n}: {v}" for n, v in found.items() if len(v) != 1]
missing = [f"{n}=={v}" for n, v in pins.items() if found.get(n) != [v]]
extra = sorted(set(found) - set(pins))
if bad or missing or extra:
    sys.exit(f"wheel folder {wheels} does not match {listing}: several versions {bad}, missing {missing}, extra {extra}")
print(f"{len(found)} wheels, one version each, as {listing} pins them")
EOF

echo "== tokenizer into $TOKENIZER"
if [[ -f "$TOKENIZER/tokenizer_config.json" && -f "$TOKENIZER/config.json" ]]; then
  echo "already there"
else
  rm -rf "$TOKENIZER"
  PYTHONPATH="$ROOT" "$PY" - "$TOKENIZER" <<'EOF'
import sys

from transformers import AutoConfig

from bench._common import BUNDLED_SMOLLM2
from verl.models.loader import load_tokenizer, resolve_model_path

path = resolve_model_path(BUNDLED_SMOLLM2)
load_tokenizer(path).save_pretrained(sys.argv[1])
AutoConfig.from_pretrained(path).save_pretrained(sys.argv[1])  # load_tokenizer wants a model folder's config.json
print(f"saved the tokenizer of {path}")
EOF
fi

echo "== git ignores /.gpu_kit/"
EXCLUDE=$(git rev-parse --git-path info/exclude)
if git check-ignore -q .gpu_kit/wheels; then
  echo "already ignored"
else
  mkdir -p "$(dirname "$EXCLUDE")"
  echo "/.gpu_kit/" >>"$EXCLUDE"
  echo "added /.gpu_kit/ to $EXCLUDE"
fi

echo "== sizes (64 MiB travel in all)"
REPO=$(git ls-files -z -co --exclude-standard | xargs -0 du -cb 2>/dev/null | awk 'END {print $1}')
KIT=$(du -sb .gpu_kit | awk '{print $1}')
WHL=$(du -sb "$WHEELS" | awk '{print $1}')
TOTAL=$((REPO + KIT))
printf 'repository %.1f MiB + .gpu_kit %.1f MiB (wheels %.1f MiB) = %.1f MiB\n' \
  "$(echo "$REPO/1048576" | bc -l)" "$(echo "$KIT/1048576" | bc -l)" "$(echo "$WHL/1048576" | bc -l)" \
  "$(echo "$TOTAL/1048576" | bc -l)"
if ((TOTAL > 60 * 1048576)); then
  echo "TOO BIG: over 60 MiB; the device call would be refused" >&2
  exit 1
fi

cat <<'EOF'
== the device calls (README: /work/.library/device/README.md). Check `status` first: budget_left_s >= 840 for both.
1. run  command: "bash bench/gpu_kit/run.sh part1"  carry: [".gpu_kit"]  timeout_s: 540
   (env, cuda_tests, grpo, grpo_eager, decode, decode_compile: about 8 minutes)
2. at once, while the machine is warm (it is handed back 30 s after a call), with B = budget_left_s - 45:
   run  command: "bash bench/gpu_kit/run.sh part2 part3 --budget-s B"  carry: [".gpu_kit"]  timeout_s: B + 30
   (mem7b, trl; then grpo_ckpt, grpo_fused, profile as far as B reaches), then give_back.
What comes back under files_at: kit.log (everything), bundle.json (every result file), summary.md (the tables);
`python bench/gpu_kit/kit.py unpack <files_at>/bundle.json` writes the result files into bench/results/gpu/.
EOF

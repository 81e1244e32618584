#!/usr/bin/env bash
# A recipe launched Hydra-style: its config directory, its config name, and any extra overrides, e.g.
#   bash examples/upstream_style/recipe_defaults/run.sh --cfg job
#   bash examples/upstream_style/recipe_defaults/run.sh -m actor_rollout_ref.actor.optim.lr=1e-6,3e-6
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
"${PYTHON:-python3}" -m verl.trainer.main_ppo --config-path "$HERE/config" --config-name grpo_clip_higher "$@"

#!/usr/bin/env bash
# GRPO on a tool-use task the model cannot do without its tool: examples/any_agent/lookup_agent.py (openai SDK function
# calling, unchanged) answers "what is the locker code of NAME?", the codes exist only in its lookup tool. Its reward:
# 1 for the right code, 0.1 for a valid lookup call without it (docs/any_agent.md). Data: make_lookup_data.py (48
# training names, 12 held-out names, three phrasings each). Model: the bundled SmolLM2-135M-Instruct, on CPU.
# Knobs (environment): PYTHON, MODEL, OUT, STEPS (default 8), BATCH (4), GROUP (4), VAL (held-out prompts, 36),
# TIMEOUT (seconds per trajectory, 1200: generous, so a slow shared CPU does not score the tool-using trajectories 0).
# Validation runs before the first and after the last step: val-core/lookup/reward/mean@1 is the held-out reward,
# val-agent/openai/tool_calls/mean the tool calls per trajectory.
set -euo pipefail
PY=${PYTHON:-python}
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-outputs/lookup_agent}
STEPS=${STEPS:-8}
$PY "$HERE/make_lookup_data.py" "$OUT/data" >/dev/null
$PY -m verl.trainer.main_ppo \
    data.train_files="$OUT/data/train.parquet" data.val_files="$OUT/data/test.parquet" \
    data.max_prompt_length=192 data.max_response_length=128 data.return_raw_chat=true \
    data.train_batch_size="${BATCH:-4}" data.val_max_samples="${VAL:-36}" \
    actor_rollout_ref.model.path="${MODEL:-smollm2-135m-instruct}" \
    actor_rollout_ref.rollout.name=hf actor_rollout_ref.rollout.n="${GROUP:-4}" \
    actor_rollout_ref.actor.ppo_mini_batch_size="${BATCH:-4}" \
    actor_rollout_ref.rollout.multi_turn.enable=true \
    actor_rollout_ref.rollout.agent.default_agent_loop=openai_agent \
    actor_rollout_ref.rollout.agent.openai.agent="$HERE/lookup_agent.py:run" \
    actor_rollout_ref.rollout.agent.openai.reward=agent \
    actor_rollout_ref.rollout.agent.openai.timeout_s="${TIMEOUT:-1200}" \
    custom_reward_function.path="$HERE/agent_reward_only.py" \
    algorithm.adv_estimator=grpo \
    trainer.total_training_steps="$STEPS" trainer.test_freq="$STEPS" trainer.val_before_train=true \
    trainer.save_freq=-1 trainer.logger=[console,file] trainer.resume_mode=disable \
    trainer.default_local_dir="$OUT" "$@"

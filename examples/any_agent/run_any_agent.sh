#!/usr/bin/env bash
# GRPO on an agent written with the openai SDK (examples/any_agent/calculator_agent.py), unchanged: each trajectory's
# agent gets its own OpenAI endpoint on 127.0.0.1 backed by the rollout engine; what the model sampled is trained
# token for token, and the reward is the number the agent's run() returns (docs/any_agent.md).
# Task: the bundled arithmetic questions; model: the bundled SmolLM2-135M-Instruct, on CPU.
# Knobs (environment): PYTHON, MODEL, OUT, STEPS (default 12), BATCH (8), GROUP (4), VAL (validation prompts, 64),
# RESPONSE_LEN (48 tokens per trajectory), TIMEOUT (seconds per trajectory, 300).
# Validation runs before the first and after the last step (val-core/arithmetic/reward/mean@1 is the accuracy).
set -euo pipefail
PY=${PYTHON:-python}
HERE=$(cd "$(dirname "$0")" && pwd)
STEPS=${STEPS:-12}
$PY -m verl.trainer.main_ppo \
    data.train_files=bundled://arithmetic/train.parquet data.val_files=bundled://arithmetic/test.parquet \
    data.max_prompt_length=96 data.max_response_length="${RESPONSE_LEN:-48}" data.return_raw_chat=true \
    data.train_batch_size="${BATCH:-8}" data.val_max_samples="${VAL:-64}" \
    actor_rollout_ref.model.path="${MODEL:-smollm2-135m-instruct}" \
    actor_rollout_ref.rollout.name=hf actor_rollout_ref.rollout.n="${GROUP:-4}" \
    actor_rollout_ref.actor.ppo_mini_batch_size="${BATCH:-8}" \
    actor_rollout_ref.rollout.multi_turn.enable=true \
    actor_rollout_ref.rollout.agent.default_agent_loop=openai_agent \
    actor_rollout_ref.rollout.agent.openai.agent="$HERE/calculator_agent.py:run" \
    actor_rollout_ref.rollout.agent.openai.reward=agent \
    actor_rollout_ref.rollout.agent.openai.timeout_s="${TIMEOUT:-300}" \
    custom_reward_function.path="$HERE/agent_reward_only.py" \
    algorithm.adv_estimator=grpo \
    trainer.total_training_steps="$STEPS" trainer.test_freq="$STEPS" trainer.val_before_train=true \
    trainer.save_freq=-1 trainer.logger=[console,file] trainer.resume_mode=disable \
    trainer.default_local_dir="${OUT:-outputs/any_agent}" "$@"

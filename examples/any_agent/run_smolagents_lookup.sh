#!/usr/bin/env bash
# GRPO on the locker-code task with a smolagents ToolCallingAgent: examples/any_agent/smolagents_lookup.py (unchanged
# smolagents code: OpenAIServerModel, a lookup tool, short prompt templates and a worked example in the agent's
# memory) answers "what is the locker code of NAME?"; the codes exist only in its lookup tool. Its reward: 1 for the
# right code in the final answer, 0.1 for a valid lookup call without it (docs/any_agent.md). Data:
# make_lookup_data.py (the same rows as run_lookup_agent.sh). Model: the bundled SmolLM2-135M-Instruct, on CPU.
# The agent makes two requests (max_steps=1: the lookup step, then smolagents' final-answer request); the second
# re-sends the history rewritten, so it starts a new segment, and both are training rows
# (rollout.agent.openai.train_segments=all, the default) with the GRPO advantage of their trajectory. Each holds one
# reply of at most 40 tokens, hence data.max_response_length=48; the longest prompt measured (the final-answer
# request after a 40-token reply smolagents could not parse, with its error text) was 364 tokens, hence
# data.max_prompt_length=416.
# Sampling: the rollout samples at T=0.7 (TEMP): at T=1 the bundled model almost never writes a well-formed call
# (0 of 32 trajectories), at 0.7 about 1 in 4 does; validation stays greedy (val_kwargs.do_sample=false).
# Knobs (environment): PYTHON, MODEL, OUT, STEPS (default 8), BATCH (4), GROUP (4), VAL (held-out prompts, 36), TEMP
# (0.7), TIMEOUT (seconds per trajectory, 1200: generous, so a slow shared CPU does not fail the two-request
# trajectories). Validation runs before the first and after the last step: val-core/lookup/reward/mean@1 is the
# held-out reward, val-agent/openai/tool_calls/mean the tool calls per trajectory.
set -euo pipefail
PY=${PYTHON:-python}
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-outputs/smolagents_lookup}
STEPS=${STEPS:-8}
$PY "$HERE/make_lookup_data.py" "$OUT/data" >/dev/null
$PY -m verl.trainer.main_ppo \
    data.train_files="$OUT/data/train.parquet" data.val_files="$OUT/data/test.parquet" \
    data.max_prompt_length=416 data.max_response_length=48 data.return_raw_chat=true \
    data.train_batch_size="${BATCH:-4}" data.val_max_samples="${VAL:-36}" \
    actor_rollout_ref.model.path="${MODEL:-smollm2-135m-instruct}" \
    actor_rollout_ref.rollout.name=hf actor_rollout_ref.rollout.n="${GROUP:-4}" \
    actor_rollout_ref.rollout.temperature="${TEMP:-0.7}" \
    actor_rollout_ref.actor.ppo_mini_batch_size="${BATCH:-4}" \
    actor_rollout_ref.rollout.multi_turn.enable=true \
    actor_rollout_ref.rollout.agent.default_agent_loop=openai_agent \
    actor_rollout_ref.rollout.agent.openai.agent="$HERE/smolagents_lookup.py:run" \
    actor_rollout_ref.rollout.agent.openai.reward=agent \
    actor_rollout_ref.rollout.agent.openai.timeout_s="${TIMEOUT:-1200}" \
    custom_reward_function.path="$HERE/agent_reward_only.py" \
    algorithm.adv_estimator=grpo \
    trainer.total_training_steps="$STEPS" trainer.test_freq="$STEPS" trainer.val_before_train=true \
    trainer.save_freq=-1 trainer.logger=[console,file] trainer.resume_mode=disable \
    trainer.default_local_dir="$OUT" "$@"

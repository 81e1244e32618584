#!/usr/bin/env bash
# A model learns to use a tool, on a CPU: multi-digit multiplication with the calculator tool.
#   1. data: cold-start SFT conversations (half hard problems solved with a calculator call, half easy ones answered
#      directly), GRPO and held-out problems (examples/agent_loop/make_tool_data.py)
#   2. the base model on the held-out problems (main_ppo trainer.val_only=true, tool agent loop)
#   3. SFT cold start on the conversations (main_sft, multi-turn rows, loss on the assistant turns)
#   4. multi-turn GRPO from the SFT model with the tool agent loop; validation before (= after SFT) and after
#   5. the table: held-out accuracy and tool calls per problem at each stage (summarize_tool_learning.py)
# Knobs (environment): PYTHON, MODEL (default the bundled smollm2-135m-instruct), OUT, N_SFT, N_TRAIN, N_TEST,
# SFT_EPOCHS, SFT_STEPS (default 4: a cold start that leaves GRPO room; empty: the whole epochs), SFT_LR, GRPO_STEPS (default 10), GRPO_LR, BATCH, GROUP, PROMPT_LEN, RESPONSE_LEN, SFT_MAX_LEN (tokens), and
# STAGES (default "data base sft grpo": rerun a part, e.g. STAGES=grpo after the others). Docs: docs/agent_loop.md ("Proof that it learns").
set -euo pipefail
PY=${PYTHON:-python}
MODEL=${MODEL:-smollm2-135m-instruct}
OUT=${OUT:-outputs/tool_learning}
HERE=$(cd "$(dirname "$0")" && pwd)
DATA=$OUT/data
want() { [[ " ${STAGES:-data base sft grpo} " == *" $1 "* ]]; }

if want data; then
    $PY "$HERE/make_tool_data.py" --out "$DATA" --n_sft "${N_SFT:-128}" --n_train "${N_TRAIN:-256}" \
        --n_test "${N_TEST:-64}"
fi

AGENT=(
    data.val_files="$DATA/test.parquet" data.train_files="$DATA/train.parquet"
    data.max_prompt_length="${PROMPT_LEN:-80}" data.max_response_length="${RESPONSE_LEN:-96}"
    data.return_raw_chat=true data.train_batch_size="${BATCH:-8}" algorithm.adv_estimator=grpo
    actor_rollout_ref.rollout.name=hf
    actor_rollout_ref.rollout.multi_turn.enable=true
    actor_rollout_ref.rollout.multi_turn.tool_config_path="$HERE/calculator_tool_config.yaml"
    actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3
    actor_rollout_ref.rollout.multi_turn.tokenization_sanity_check_mode=ignore_strippable
    actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent
    custom_reward_function.path="$HERE/tool_reward.py"
    trainer.logger=[console,file] trainer.resume_mode=disable trainer.overwrite_checkpoints=true
)

# 2. the base model
if want base; then
    $PY -m verl.trainer.main_ppo "${AGENT[@]}" actor_rollout_ref.model.path="$MODEL" \
        trainer.val_only=true trainer.default_local_dir="$OUT/base"
fi

# 3. SFT cold start (SFT_STEPS unset: 4 steps; set but empty: the whole epochs)
SFT_STEP_LIMIT=${SFT_STEPS-4}
if want sft; then
    $PY -m verl.trainer.main_sft data.train_files="$DATA/sft.parquet" model.path="$MODEL" \
        data.max_length="${SFT_MAX_LEN:-160}" data.train_batch_size=8 data.micro_batch_size_per_gpu=8 \
        optim.lr="${SFT_LR:-1e-4}" trainer.total_epochs="${SFT_EPOCHS:-1}" \
        ${SFT_STEP_LIMIT:+trainer.total_training_steps=$SFT_STEP_LIMIT} \
        trainer.default_local_dir="$OUT/sft" trainer.logger=[console,file] trainer.resume_mode=disable \
        trainer.overwrite_checkpoints=true
fi

# 4. multi-turn GRPO from the SFT model (validation before and after)
STEPS=${GRPO_STEPS:-10}
if want grpo; then
    $PY -m verl.trainer.main_ppo "${AGENT[@]}" actor_rollout_ref.model.path="$OUT/sft/hf_model" \
        actor_rollout_ref.rollout.n="${GROUP:-4}" actor_rollout_ref.actor.ppo_mini_batch_size="${BATCH:-8}" \
        actor_rollout_ref.actor.optim.lr="${GRPO_LR:-1e-5}" \
        trainer.total_training_steps="$STEPS" trainer.test_freq="$STEPS" trainer.val_before_train=true \
        trainer.save_freq=-1 trainer.default_local_dir="$OUT/grpo"
fi

# 5. the table
$PY "$HERE/summarize_tool_learning.py" "$OUT"

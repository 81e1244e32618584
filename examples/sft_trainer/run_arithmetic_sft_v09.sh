#!/usr/bin/env bash
# A verl v0.9-style SFT launch (the layout of upstream's examples/sft/gsm8k/run_*_fsdp.sh, run without torchrun):
# conversations in the messages column, the FSDP engine, LoRA. Under torchrun, launch
# `torchrun --standalone --nnodes=1 --nproc_per_node=N -m verl.trainer.sft_trainer ...` with the same arguments.
# First: python examples/data_preprocess/arithmetic_offline.py --local_dir $DATA
set -euo pipefail
PY=${PYTHON:-python}
DATA=${DATA:-$HOME/data/arithmetic_offline}
MODEL=${MODEL:-smollm2-135m-instruct}
SAVE_DIR=${SAVE_DIR:-./save_ckpts}
$PY -m verl.trainer.sft_trainer \
    data.train_files=$DATA/sft_messages_train.parquet \
    data.val_files=$DATA/sft_messages_test.parquet \
    data.messages_key=messages \
    data.train_batch_size=16 \
    data.micro_batch_size_per_gpu=4 \
    optim.lr=1e-4 \
    engine=fsdp \
    model.path=$MODEL \
    model.lora_rank=32 \
    model.lora_alpha=16 \
    model.target_modules=all-linear \
    trainer.default_local_dir=$SAVE_DIR \
    trainer.project_name=arithmetic-sft \
    trainer.experiment_name=arithmetic-sft-v09 \
    trainer.logger='["console"]' \
    trainer.total_epochs=1 "$@"

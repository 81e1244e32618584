#!/usr/bin/env bash
# A verl-style SFT launch (the layout of verl's examples/sft scripts, run without torchrun): LoRA fine-tuning with the
# prompt and response read from the extra_info dict. Under torchrun, add trainer.n_gpus_per_node=<nproc_per_node>.
# First: python examples/data_preprocess/arithmetic_offline.py --local_dir $DATA
set -euo pipefail
PY=${PYTHON:-python}
DATA=${DATA:-$HOME/data/arithmetic_offline}
MODEL=${MODEL:-smollm2-135m-instruct}
SAVE_DIR=${SAVE_DIR:-./save_ckpts}
$PY -m verl.trainer.fsdp_sft_trainer \
    data.train_files=$DATA/sft_train.parquet \
    data.val_files=$DATA/sft_test.parquet \
    data.prompt_key=extra_info \
    data.response_key=extra_info \
    optim.lr=1e-4 \
    data.prompt_dict_keys=['question'] \
    +data.response_dict_keys=['answer'] \
    data.micro_batch_size_per_gpu=4 \
    model.partial_pretrain=$MODEL \
    trainer.default_local_dir=$SAVE_DIR \
    trainer.project_name=arithmetic-sft \
    trainer.experiment_name=arithmetic-sft-lora \
    trainer.logger=['console'] \
    trainer.total_epochs=1 \
    model.lora_rank=32 \
    model.lora_alpha=16 \
    model.target_modules=all-linear \
    model.strategy=fsdp \
    use_remove_padding=true "$@"

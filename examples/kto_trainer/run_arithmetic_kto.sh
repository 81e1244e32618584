#!/usr/bin/env bash
# KTO on the arithmetic task. First: python examples/data_preprocess/arithmetic_offline.py --local_dir $DATA
set -euo pipefail
PY=${PYTHON:-python}
DATA=${DATA:-$HOME/data/arithmetic_offline}
$PY -m verl.trainer.main_kto \
    data.train_files=$DATA/kto_train.parquet data.val_files=$DATA/kto_test.parquet \
    trainer.experiment_name=arithmetic_kto "$@"

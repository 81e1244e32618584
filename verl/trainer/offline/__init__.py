"""Offline post-training: SFT, DPO (sigmoid / IPO / hinge), KTO and GKD (distillation from a teacher), from Python
or ``python -m verl.trainer.main_*``.

The trainers share one loop (:mod:`verl.trainer.offline.base`) and the checkpoint/export layout of PPO; each
algorithm's loss is a pure function: :func:`sft_loss`, :func:`dpo_loss`, :func:`kto_loss`.
"""

from verl.trainer.offline.base import OfflineTrainer
from verl.trainer.offline.dpo import DPOTrainer, dpo_loss, run_dpo
from verl.trainer.offline.gkd import GKDTrainer, run_gkd
from verl.trainer.offline.kto import KTOTrainer, kto_kl_estimate, kto_loss, run_kto
from verl.trainer.offline.sft import SFTTrainer, run_sft, sft_loss

__all__ = [
    "DPOTrainer",
    "GKDTrainer",
    "KTOTrainer",
    "OfflineTrainer",
    "SFTTrainer",
    "dpo_loss",
    "kto_kl_estimate",
    "kto_loss",
    "run_dpo",
    "run_gkd",
    "run_kto",
    "run_sft",
    "sft_loss",
]

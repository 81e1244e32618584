"""The offline trainers of the public API (``from verl import DPOTrainer``): SFT, DPO and KTO."""

from verl.trainer.offline import DPOTrainer, KTOTrainer, SFTTrainer

__all__ = ["DPOTrainer", "KTOTrainer", "SFTTrainer"]

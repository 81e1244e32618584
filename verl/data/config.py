"""The ``data`` section of the PPO config as a typed dataclass (``data.*`` keys of ``ppo_trainer.yaml``).

It lives with the datasets that read it (:class:`verl.data.rl_dataset.RLHFDataset`), the floor below the trainer;
``verl.trainer.config.schema`` re-exports it under its former name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Optional, Union

from verl.base_config import BaseConfig

__all__ = ["CustomDatasetClassConfig", "DataConfig"]


@dataclass
class CustomDatasetClassConfig(BaseConfig):
    """``data.custom_cls``: a dataset class of your own, loaded from ``path`` (a python file or module), ``name``."""

    path: Optional[str] = None
    name: Optional[str] = None


@dataclass
class DataConfig(BaseConfig):
    """``data``: where prompts come from and how they are tokenized and batched."""

    tokenizer: Optional[str] = None
    train_files: Optional[Union[str, list[str]]] = None
    val_files: Optional[Union[str, list[str]]] = None
    prompt_key: str = "prompt"
    reward_fn_key: str = "data_source"
    max_prompt_length: int = 512
    max_response_length: int = 512
    train_batch_size: int = 1024
    # DAPO dynamic sampling (algorithm.filter_groups): prompts drawn per generation round; None: train_batch_size
    gen_batch_size: Optional[int] = None
    val_batch_size: Optional[int] = None
    train_max_samples: int = -1  # cap on training rows (-1: all); with shuffle a seeded random subset, else the first
    val_max_samples: int = -1
    validation_shuffle: bool = False  # upstream v0.9: the validation rows in one random order seeded by data.seed
    return_raw_chat: bool = False
    shuffle: bool = True
    seed: int = 42
    filter_overlong_prompts: bool = True
    filter_overlong_prompts_workers: int = 1  # processes that tokenise the prompts for the length filter
    truncation: Literal["error", "left", "right"] = "error"
    apply_chat_template: bool = True
    # extra arguments of the chat template (upstream v0.9; e.g. {enable_thinking: false} for Qwen3), given to every
    # rendering of a prompt: the dataset's and the agent loops'
    apply_chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    dataloader_num_workers: int = 0
    image_key: str = "images"
    video_key: str = "videos"
    video_max_frames: int = 16
    return_multi_modal_inputs: bool = True
    min_pixels: Optional[int] = None
    max_pixels: Optional[int] = None
    custom_cls: CustomDatasetClassConfig = field(default_factory=CustomDatasetClassConfig)
    trust_remote_code: bool = False  # the driver's tokenizer / processor may run the model repository's code
    image_patch_size: Optional[int] = None  # vision-language: must equal the processor's patch size (checked)

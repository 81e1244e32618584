"""Policy Filtration for PPO (PF-PPO): resample a scored batch towards responses with reliable rewards.

``algorithm.use_pf_ppo=true`` with ``algorithm.pf_ppo.{reweight_method, weight_pow}``; upstream source:
``verl/trainer/ppo/core_algos.py`` (``compute_pf_ppo_reweight_data``, applied after GAE in ``compute_advantage``).
Paper: Zhang et al. 2024, "Policy Filtration in RLHF to Fine-Tune LLM for Code Generation", arXiv:2409.06957.
"""

from __future__ import annotations

from typing import Any

import torch

from verl.algorithms.config import PFPPOConfig

PF_PPO_METHODS = ("pow", "max_min", "max_random")


def pf_ppo_weights(scores: torch.Tensor, reweight_method: str, weight_pow: float) -> torch.Tensor:
    """Sampling weights ``[batch]`` from the sequence scores ``s`` ``[batch]``.

    * ``pow``: ``|s|^weight_pow`` (confident rewards, far from 0, are drawn more often);
    * ``max_min``: 1 for responses with the batch's highest or lowest score, 0 otherwise;
    * ``max_random``: 0.4 for the highest score, 0.1 for the others.

    Every weight is then raised to at least ``1e-8`` (plus ``1e-8``) so that sampling is defined.
    """
    if reweight_method == "pow":
        weights = scores.abs().pow(weight_pow)
    elif reweight_method == "max_min":
        extreme = (scores == scores.max()) | (scores == scores.min())
        weights = extreme.to(scores.dtype)
    elif reweight_method == "max_random":
        weights = torch.where(scores == scores.max(), 0.4, 0.1).to(scores.dtype)
    else:
        raise ValueError(f"algorithm.pf_ppo.reweight_method={reweight_method!r}; choose one of {PF_PPO_METHODS}")
    return torch.clamp(weights + 1e-8, min=1e-8)


def compute_pf_ppo_reweight_data(
    data: Any,
    reweight_method: str = PFPPOConfig.reweight_method,
    weight_pow: float = PFPPOConfig.weight_pow,
    generator: torch.Generator | None = None,
) -> Any:
    """A batch of the same size drawn with replacement, row ``i`` with probability ``w_i / sum w`` (see
    :func:`pf_ppo_weights`; scores ``s_i = sum_t token_level_scores_i,t``).

    ``data`` is a ``DataProto`` (anything indexable by a row-index tensor with ``batch`` and ``meta_info``): tensors
    and non-tensor columns are resampled together; ``meta_info`` lists with one entry per row are resampled too.
    Upstream's signature (``generator`` added for reproducible tests; ``None`` uses torch's global RNG).
    """
    scores = data.batch["token_level_scores"].sum(dim=-1)
    weights = pf_ppo_weights(scores, reweight_method, weight_pow)
    n = scores.shape[0]
    idx = torch.multinomial(weights.cpu().double(), n, replacement=True, generator=generator)
    resampled = data[idx]
    picked = idx.tolist()
    resampled.meta_info = {
        k: ([v[i] for i in picked] if isinstance(v, list) and len(v) == n else v) for k, v in data.meta_info.items()
    }
    return resampled

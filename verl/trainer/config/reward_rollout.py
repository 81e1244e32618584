"""``reward.reward_model.rollout`` (upstream v0.9): the serving engine of the reward model, onto our rm workers.

Upstream serves a (discriminative) reward model through a rollout engine; here the score is a forward pass of the
same weights in the ``rm`` worker group (the number the engine returns). Each key of the section:

===================================================  =============================================================
upstream                                             here
===================================================  =============================================================
``name``                                             vllm | hf (the forward pass gives the engine's score); others
                                                     refused
``dtype``                                            ``reward_model.dtype``
``prompt_length`` + ``response_length``              ``reward_model.max_length``: the longest input the reward model
                                                     reads (upstream's engine length), unless set there
``tensor_model_parallel_size`` x                     checked: divides the reward model's ranks (upstream's
``data_parallel_size``, ``expert_parallel_size``     replicas); every rank holds the whole model here
``gpu_memory_utilization``                           ``reward_model.gpu_memory_utilization``: the reward model's
                                                     weights + a scoring micro-batch's activations stay within this
                                                     share of the device; on a pool of its own also its process's
                                                     CUDA cap, colocated its weights leave the device between calls
                                                     (as upstream's colocated server sleeps)
anything else                                        refused, one line per key
===================================================  =============================================================
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf

from verl.trainer.config.v1_modes import user_set

R = "reward.reward_model.rollout"
ENGINES = {"vllm", "hf"}
DTYPES = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16", "float32": "float32"}
PARALLEL = ("tensor_model_parallel_size", "data_parallel_size", "expert_parallel_size")
KEYS = {"name", "dtype", "prompt_length", "response_length", "gpu_memory_utilization", *PARALLEL}


def _set(cfg: DictConfig, key: str, value: Any, source: str, user: set[str], errors: list[str], changed: dict) -> None:
    current = OmegaConf.select(cfg, key)
    if current == value:
        return
    if user_set(key, user):
        errors.append(f"{source} and {key}={current} set the same thing differently (it asks {value}); keep one")
        return
    OmegaConf.update(cfg, key, value, merge=False)
    changed[key] = value


def resolve_reward_rollout(
    cfg: DictConfig, user: set[str], errors: list[str], changed: dict[str, Any], source: str = R
) -> None:
    """Apply ``reward.reward_model.rollout`` (module docstring) to ``cfg``; refusals go to ``errors``, one line
    each, naming the keys under ``source`` (where the user wrote them: this section or ``reward_model.rollout``)."""
    section = cfg.reward.reward_model.rollout
    if not section:
        return
    if "name" in section and OmegaConf.is_missing(section, "name"):
        # upstream v0.9's reward.yaml has name: ??? (mandatory only when a reward model is served)
        if cfg.reward.reward_model.enable:
            errors.append(f"{source}.name=???: the reward model's engine must be given when it is enabled: vllm or hf")
        del section["name"]
    for key in sorted(set(section.keys()) - KEYS):
        errors.append(
            f"{source}.{key}: upstream's reward-model server setting with no counterpart here (the reward model is a "
            f"forward pass in the rm worker group); drop it"
        )
    engine = section.get("name")
    if engine is not None and str(engine) not in ENGINES:
        errors.append(
            f"{source}.name={engine}: {engine} is not an engine here; the reward model's score is a forward pass "
            "of its weights (the number vLLM returns): use name=vllm or hf"
        )
    dtype = section.get("dtype")
    if dtype is not None:
        if str(dtype) not in DTYPES:
            errors.append(f"{source}.dtype={dtype}: one of {sorted(DTYPES)}")
        else:
            _set(cfg, "reward_model.dtype", DTYPES[str(dtype)], f"{source}.dtype", user, errors, changed)
    if section.get("prompt_length") is not None or section.get("response_length") is not None:
        prompt = section.get("prompt_length") or cfg.data.max_prompt_length
        response = section.get("response_length") or cfg.data.max_response_length
        if not user_set("reward_model.max_length", user):
            lengths = f"{source}.prompt_length + response_length"
            _set(cfg, "reward_model.max_length", int(prompt) + int(response), lengths, user, errors, changed)
    rm = cfg.reward.reward_model
    _check_layout(section, rm, cfg.trainer, errors, source)
    share = section.get("gpu_memory_utilization")
    if share is not None:
        if not 0 < float(share) <= 1:
            errors.append(f"{source}.gpu_memory_utilization={share}: a share of the GPU, in (0, 1]")
        else:
            # own pool: also the process's CUDA cap; colocated: the rm's weights + activations bound, weights offloaded
            # between calls (verl/workers/reward_model_budget.py)
            _set(cfg, "reward_model.gpu_memory_utilization", float(share), f"{source}.gpu_memory_utilization", user,
                 errors, changed)  # fmt: skip


def _check_layout(section: DictConfig, rm: DictConfig, trainer: DictConfig, errors: list[str], source: str) -> None:
    """A served reward model's replicas divide its ranks (upstream lays them out only when one is served: its
    defaults, TP 2, stand for nothing with ``reward.reward_model.enable=false``)."""
    if not rm.enable:
        return
    own_pool = bool(rm.enable_resource_pool)
    ranks = int(rm.nnodes) * int(rm.n_gpus_per_node) if own_pool else int(trainer.nnodes) * int(trainer.n_gpus_per_node)
    replica = int(section.get("tensor_model_parallel_size") or 1) * int(section.get("data_parallel_size") or 1)
    if replica < 1 or ranks % replica:
        errors.append(
            f"{source}.tensor_model_parallel_size x data_parallel_size = {replica} must be >= 1 and divide the reward "
            f"model's {ranks} ranks, as upstream splits them into replicas"
        )
    ep = int(section.get("expert_parallel_size") or 1)
    if ep < 1 or replica % ep:
        errors.append(
            f"{source}.expert_parallel_size={ep} must divide a replica's {replica} ranks, as upstream requires"
        )

"""``python -m verl.trainer.main_generation``: January 2026's offline generation entry point, with its config.

Upstream (``verl/trainer/main_generation.py``, config ``verl/trainer/config/generation.yaml``) reads the chat
prompts of ``data.prompt_key`` from the parquet ``data.path``, samples ``data.n_samples`` responses per prompt with
the rollout engine and writes the input rows plus a ``responses`` column (per row a list of ``n_samples`` strings) to
``data.output_path``. Here the same keys drive the generation path of ``main_generation_server`` (v0.9's successor;
:func:`verl.trainer.main_generation_server.run_generation`, through ``main_eval.iter_generations``):

===========================================================  ========================================================
``data.path``, ``data.prompt_key``, ``data.output_path``      the prompts in, every input column plus ``responses``
``data.n_samples``                                            responses per prompt (``rollout.n`` of the PPO config)
``data.batch_size``                                           prompts per generation call
``model.path``, ``+model.trust_remote_code``                  the model (remote code needs the security switch)
``model.external_lib``                                        a module imported before the model loads
``rollout.*`` (sampling, lengths, vLLM engine settings)       the PPO config's ``actor_rollout_ref.rollout.*``
``trainer.nnodes`` x ``trainer.n_gpus_per_node``              a multiple of ``rollout.tensor_model_parallel_size``
===========================================================  ========================================================

Keys that do nothing in generation (``actor.*``, ``ray_kwargs.*``, the log-prob keys, ``rollout.n``,
``rollout.data_parallel_size``) keep their defaults; another value is refused in one line naming the key.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass, field
from typing import ClassVar, Literal, Optional

from omegaconf import DictConfig

from verl.trainer.config.entrypoint import run_entrypoint
from verl.trainer.config.remote_code_checks import remote_code_errors

__all__ = ["GenerationConfig", "main", "run_main_generation", "to_generation_server_config"]


@dataclass
class GenTrainerConfig:
    """``trainer``: the GPUs upstream would start, the device, the security switch."""

    nnodes: int = 1
    n_gpus_per_node: int = 8
    device: Literal["auto", "cpu", "cuda"] = "auto"
    allow_unsafe_operations: bool = False


@dataclass
class GenDataConfig:
    """``data``: the prompts, how many responses each, where they go."""

    path: Optional[str] = None
    prompt_key: str = "prompt"
    n_samples: int = 5
    output_path: Optional[str] = None
    batch_size: int = 128


@dataclass
class GenModelConfig:
    """``model``; ``trust_remote_code`` is added with ``+`` in upstream's scripts (not in the packaged YAML)."""

    path: Optional[str] = None
    external_lib: Optional[str] = None
    trust_remote_code: bool = False


@dataclass
class GenRolloutConfig:
    """``rollout``: January's flat rollout section (the PPO config's ``actor_rollout_ref.rollout`` keys)."""

    name: Literal["vllm", "hf"] = "vllm"
    mode: Literal["async", "sync"] = "async"
    temperature: float = 1.0
    top_k: int = 50
    top_p: float = 0.7
    prompt_length: int = 1536
    response_length: int = 512
    dtype: str = "auto"  # bf16 where native (CUDA, AVX512-BF16, AMX), else fp32; upstream: bfloat16
    gpu_memory_utilization: float = 0.5
    ignore_eos: bool = False
    enforce_eager: bool = True
    free_cache_engine: bool = True
    load_format: str = "auto"
    tensor_model_parallel_size: int = 1
    data_parallel_size: int = 1
    max_num_batched_tokens: int = 8192
    max_model_len: Optional[int] = None
    max_num_seqs: int = 1024
    log_prob_micro_batch_size: Optional[int] = None
    log_prob_micro_batch_size_per_gpu: int = 8
    do_sample: bool = True
    disable_log_stats: bool = True
    enable_chunked_prefill: bool = True
    n: int = 1
    calculate_log_probs: bool = False


@dataclass
class GenFSDPConfig:
    """``actor.fsdp_config`` (unused by generation)."""

    fsdp_size: int = -1
    forward_prefetch: bool = False


@dataclass
class GenActorConfig:
    """``actor`` (unused by generation: no actor runs)."""

    strategy: str = "fsdp"
    ulysses_sequence_parallel_size: int = 1
    entropy_from_logits_with_chunking: bool = False
    entropy_checkpointing: bool = False
    fsdp_config: GenFSDPConfig = field(default_factory=GenFSDPConfig)


@dataclass
class GenRayInitConfig:
    """``ray_kwargs.ray_init`` (unused: no Ray here)."""

    num_cpus: Optional[int] = None


@dataclass
class GenRayKwargsConfig:
    """``ray_kwargs`` (unused: generation runs in this process)."""

    ray_init: GenRayInitConfig = field(default_factory=GenRayInitConfig)
    timeline_json_file: Optional[str] = None


# keys that do nothing here: (dotted key, the only value accepted, what to do instead)
_INERT = (
    ("rollout.n", 1, "set data.n_samples (responses per prompt)"),
    ("rollout.data_parallel_size", 1, "one engine generates every prompt here; use rollout.tensor_model_parallel_size"),
    ("rollout.calculate_log_probs", False, "the output holds response texts only; drop it"),
    ("rollout.log_prob_micro_batch_size", None, "no log-probs are computed in generation; drop it"),
    ("rollout.log_prob_micro_batch_size_per_gpu", 8, "no log-probs are computed in generation; drop it"),
    ("actor.strategy", "fsdp", "no actor runs in generation; drop it"),
    ("actor.ulysses_sequence_parallel_size", 1, "no actor runs in generation; drop it"),
    ("actor.entropy_from_logits_with_chunking", False, "no actor runs in generation; drop it"),
    ("actor.entropy_checkpointing", False, "no actor runs in generation; drop it"),
    ("actor.fsdp_config.fsdp_size", -1, "no actor runs in generation; drop it"),
    ("actor.fsdp_config.forward_prefetch", False, "no actor runs in generation; drop it"),
    ("ray_kwargs.ray_init.num_cpus", None, "generation runs in this process without Ray; drop it"),
    ("ray_kwargs.timeline_json_file", None, "generation runs in this process without Ray; drop it"),
)


@dataclass
class GenerationConfig:
    """The whole ``generation.yaml``."""

    config_name: ClassVar[str] = "generation"

    trainer: GenTrainerConfig = field(default_factory=GenTrainerConfig)
    data: GenDataConfig = field(default_factory=GenDataConfig)
    model: GenModelConfig = field(default_factory=GenModelConfig)
    rollout: GenRolloutConfig = field(default_factory=GenRolloutConfig)
    actor: GenActorConfig = field(default_factory=GenActorConfig)
    ray_kwargs: GenRayKwargsConfig = field(default_factory=GenRayKwargsConfig)

    @staticmethod
    def adapt_defaults(cfg: DictConfig, user_keys: set[str]) -> dict[str, bool]:
        """``model.trust_remote_code`` is false unless the command line adds it (``+``, as upstream's YAML lacks
        it); returns what was filled in."""
        if "trust_remote_code" in cfg.model:
            return {}
        cfg.model.trust_remote_code = False
        return {"model.trust_remote_code": False}

    @staticmethod
    def cross_field_checks(cfg: DictConfig) -> tuple[list[str], list[str]]:
        """Required keys, sample counts, tensor-parallel groups, the security switch, and the inert keys."""
        from omegaconf import OmegaConf

        errors: list[str] = []
        for key, why in (
            ("data.path", "the parquet of prompts"),
            ("data.output_path", "where the parquet with the responses column goes"),
            ("model.path", "the model to generate with"),
        ):
            if not OmegaConf.select(cfg, key):
                errors.append(f"{key}: required ({why})")
        n = int(cfg.data.n_samples)
        if n < 1:
            errors.append(f"data.n_samples={n}: must be >= 1")
        elif n > 1 and (not cfg.rollout.do_sample or float(cfg.rollout.temperature) == 0.0):
            errors.append(f"data.n_samples={n} with greedy decoding: the responses would be equal; set 1")
        if int(cfg.data.batch_size) < 1:
            errors.append(f"data.batch_size={cfg.data.batch_size}: must be >= 1")
        gpus = int(cfg.trainer.n_gpus_per_node) * int(cfg.trainer.nnodes)
        tp = int(cfg.rollout.tensor_model_parallel_size)
        if cfg.rollout.name == "vllm" and (tp < 1 or gpus % tp):
            errors.append(
                f"rollout.tensor_model_parallel_size={tp} must divide trainer.n_gpus_per_node x trainer.nnodes = {gpus}"
            )
        if cfg.model.trust_remote_code:
            requested = [("model.trust_remote_code", cfg.model.path)]
            errors += remote_code_errors(requested, cfg.trainer.allow_unsafe_operations)
        if cfg.model.external_lib and not cfg.trainer.allow_unsafe_operations:
            errors.append(
                "model.external_lib runs Python code of your choosing, which is not allowed here unless "
                "trainer.allow_unsafe_operations=true (the security switch): add it to run that code"
            )
        for key, default, instead in _INERT:
            value = OmegaConf.select(cfg, key)
            if value != default:
                errors.append(f"{key}={value}: does nothing in generation here; {instead}")
        return errors, []


def to_generation_server_config(cfg: DictConfig) -> DictConfig:
    """The PPO-shaped config :func:`~verl.trainer.main_generation_server.run_generation` reads, from January's
    generation config: ``data.path`` -> ``data.train_files``, ``data.n_samples`` -> ``rollout.n``, ``model.*`` ->
    ``actor_rollout_ref.model.*``, every ``rollout.*`` key of both -> ``actor_rollout_ref.rollout.*``."""
    from verl.trainer.config.loader import load_config

    ppo = load_config([], schema=None)
    ppo.data.train_files = str(cfg.data.path)
    ppo.data.prompt_key = str(cfg.data.prompt_key)
    ppo.data.output_path = str(cfg.data.output_path)
    model = ppo.actor_rollout_ref.model
    model.path = str(cfg.model.path)
    model.trust_remote_code = bool(cfg.model.trust_remote_code)
    rollout = ppo.actor_rollout_ref.rollout
    for key, value in cfg.rollout.items():
        if key in rollout and key != "n":
            rollout[key] = value
    rollout.n = int(cfg.data.n_samples)
    for key in ("nnodes", "n_gpus_per_node", "device", "allow_unsafe_operations"):
        ppo.trainer[key] = cfg.trainer[key]
    return ppo


def run_main_generation(cfg: DictConfig) -> str:
    """Import ``model.external_lib`` (if any), then generate ``data.n_samples`` responses per prompt of
    ``data.path`` in batches of ``data.batch_size`` prompts into ``data.output_path``; returns that path."""
    from verl.trainer.main_generation_server import run_generation

    if cfg.model.external_lib:
        importlib.import_module(str(cfg.model.external_lib))
    return run_generation(to_generation_server_config(cfg), batch_size=int(cfg.data.batch_size))


def main(argv: list[str] | None = None) -> int:
    """Command-line entry (``sys.argv[1:]`` when ``argv`` is None); returns the exit code."""
    return run_entrypoint(
        argv,
        prog="python -m verl.trainer.main_generation",
        description="Generate data.n_samples responses per prompt of data.path into data.output_path (parquet).",
        config_name=GenerationConfig.config_name,
        schema=GenerationConfig,
        load_run_fn=lambda: run_main_generation,
    )


if __name__ == "__main__":
    sys.exit(main())

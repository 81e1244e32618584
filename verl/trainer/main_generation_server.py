"""``python -m verl.trainer.main_generation_server``: rollout-only generation from the PPO config (upstream v0.9).

Upstream (``verl/trainer/main_generation_server.py``, config ``ppo_trainer``) reads the parquet(s) of
``data.train_files``, sends each chat prompt of ``data.prompt_key`` ``actor_rollout_ref.rollout.n`` times to
standalone rollout servers and writes the input rows plus a ``responses`` column (per row a list of ``n`` response
strings) to ``data.output_path``. The keys, as here:

==============================================================  =================================================
``data.train_files`` (one or a list), ``data.prompt_key``       the prompts (chat message lists); every input
                                                                column is written back
``data.output_path``                                            the output parquet (its folder is created)
``actor_rollout_ref.model.path`` / ``tokenizer_path`` /         the model and its tokenizer (chat template)
``trust_remote_code``
``actor_rollout_ref.rollout.name``                              ``vllm`` (our vLLM engine) or ``hf``
``actor_rollout_ref.rollout.n``                                 responses per prompt (``temperature=0`` needs 1)
``rollout.temperature``, ``top_p``, ``response_length``         sampling, as upstream's requests
``rollout.top_k``                                               applied (upstream leaves it out of its requests)
``rollout.prompt_length``                                       a longer prompt is an error naming the row
``rollout.tensor_model_parallel_size``, ``gpu_memory_utilization``,  the engine's settings (vLLM)
``dtype``, ``max_num_seqs``, ``load_format`` ...
``trainer.n_gpus_per_node`` x ``trainer.nnodes``                must be a multiple of the tensor-parallel size;
                                                                one engine generates every prompt here
==============================================================  =================================================

Generation goes through :func:`verl.trainer.main_eval.iter_generations`, the path ``main_eval`` generates with.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional

from omegaconf import DictConfig, ListConfig, OmegaConf

from verl.data.config import DataConfig
from verl.trainer.config.entrypoint import run_entrypoint
from verl.trainer.config.schema import PPOConfig

logger = logging.getLogger(__name__)

__all__ = ["GenerationServerConfig", "main", "run_generation"]

ENGINES = ("vllm", "hf")


@dataclass
class GenerationDataConfig(DataConfig):
    """``data`` of the PPO config plus upstream's ``data.output_path`` (given with ``+`` in upstream's scripts)."""

    output_path: Optional[str] = None


@dataclass
class GenerationServerConfig(PPOConfig):
    """The PPO config (``ppo_trainer.yaml``) as ``main_generation_server`` reads it."""

    data: GenerationDataConfig = field(default_factory=GenerationDataConfig)

    @staticmethod
    def step_plan_text(cfg: DictConfig) -> None:
        """No PPO step plan: this entry point only generates."""
        return None

    @classmethod
    def cross_field_checks(cls, cfg: DictConfig) -> tuple[list[str], list[str]]:
        """The PPO checks, then generation's own: an output path, an engine we have, ``n >= 1`` (1 when greedy),
        and GPUs that split into tensor-parallel groups."""
        errors, warnings = PPOConfig.cross_field_checks(cfg)
        rollout = cfg.actor_rollout_ref.rollout
        if not cfg.data.output_path:
            errors.append("data.output_path: required (where the parquet with the responses column goes)")
        if not cfg.data.train_files:
            errors.append("data.train_files: required (the parquet(s) of prompts)")
        if str(rollout.name) not in ENGINES:
            errors.append(f"actor_rollout_ref.rollout.name={rollout.name}: generation runs on vllm or hf here")
        if int(rollout.n) < 1:
            errors.append(f"actor_rollout_ref.rollout.n={rollout.n}: must be >= 1")
        elif float(rollout.temperature) == 0.0 and int(rollout.n) != 1:
            errors.append(f"actor_rollout_ref.rollout.n={rollout.n} with temperature=0: greedy responses are equal")
        gpus = int(cfg.trainer.n_gpus_per_node) * int(cfg.trainer.nnodes)
        tp = int(rollout.tensor_model_parallel_size)
        if str(rollout.name) == "vllm" and (tp < 1 or gpus % tp):
            errors.append(
                f"actor_rollout_ref.rollout.tensor_model_parallel_size={tp} must divide trainer.n_gpus_per_node x "
                f"trainer.nnodes = {gpus} (upstream starts that many GPUs / tp servers)"
            )
        return errors, warnings


def _files(cfg: DictConfig) -> list[str]:
    files = cfg.data.train_files
    files = list(files) if isinstance(files, ListConfig | list | tuple) else [files]
    return [os.path.expanduser(str(f)) for f in files]


def _engine(cfg: DictConfig, tokenizer: Any) -> Callable[[Any], Any]:
    """The rollout engine's ``generate_sequences`` for ``actor_rollout_ref.rollout.name`` (vllm or hf)."""
    model = cfg.actor_rollout_ref.model
    rollout_cfg = OmegaConf.to_container(cfg.actor_rollout_ref.rollout, resolve=True)
    rollout_cfg["trust_remote_code"] = bool(model.trust_remote_code)
    from verl.models.loader import resolve_model_path

    path = resolve_model_path(str(model.path))
    if cfg.actor_rollout_ref.rollout.name == "vllm":
        from verl.workers.rollout.vllm_rollout import vLLMRollout

        return vLLMRollout(path, rollout_cfg, tokenizer=tokenizer).generate_sequences
    from verl.hardware.precision import resolve_dtype
    from verl.models.loader import load_causal_lm
    from verl.utils.device import get_device_name, get_torch_device
    from verl.workers.rollout.hf_rollout import HFRollout

    device = get_torch_device(get_device_name(str(cfg.trainer.device)))
    weights = load_causal_lm(path, dtype=resolve_dtype(str(cfg.actor_rollout_ref.rollout.dtype), device),
                             trust_remote_code=bool(model.trust_remote_code))  # fmt: skip
    return HFRollout(weights.to(device), rollout_cfg, tokenizer=tokenizer).generate_sequences


def _prompt_file(table: Any, prompt_key: str, workdir: str) -> str:
    """The prompts as the dataset reads them: only ``prompt_key`` is used for generation; a parquet without the RL
    columns (``data_source``, ``reward_model``) gets neutral ones in a temporary copy."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    prompts = table.select([prompt_key])
    n = prompts.num_rows
    prompts = prompts.append_column("data_source", pa.array(["generation"] * n))
    prompts = prompts.append_column("reward_model", pa.array([{"ground_truth": ""}] * n))
    path = os.path.join(workdir, "prompts.parquet")
    pq.write_table(prompts, path)
    return path


def run_generation(cfg: DictConfig, batch_size: int | None = None) -> str:
    """Generate ``rollout.n`` responses per prompt of ``data.train_files`` and write them, with the input columns,
    to ``data.output_path``; returns that path. The ``responses`` column holds per row a list of ``n`` strings.
    ``batch_size``: prompts per generation call (None: ``rollout.max_num_seqs // n``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from verl.models.loader import load_tokenizer, resolve_model_path
    from verl.trainer.main_eval import iter_generations
    from verl.utils.security import SecurityPolicy, set_security_policy

    set_security_policy(SecurityPolicy.from_config(cfg))
    model, rollout, data = cfg.actor_rollout_ref.model, cfg.actor_rollout_ref.rollout, cfg.data
    tables = []
    for path in _files(cfg):
        if not os.path.isfile(path):
            raise FileNotFoundError(f"data.train_files: {path} does not exist")
        table = pq.read_table(path)
        if data.prompt_key not in table.column_names:
            raise ValueError(f"{path}: no column {data.prompt_key!r} (data.prompt_key); columns: {table.column_names}")
        tables.append(table)
    table = pa.concat_tables(tables, promote_options="default")
    trust = bool(model.trust_remote_code)
    tokenizer = load_tokenizer(resolve_model_path(str(model.tokenizer_path or model.path), False), trust)
    n = int(rollout.n)
    responses: list[list[str]] = []
    with tempfile.TemporaryDirectory(prefix="verl-gen-") as workdir:
        generate = _engine(cfg, tokenizer)
        for _, texts in iter_generations(
            _prompt_file(table, str(data.prompt_key), workdir),
            tokenizer,
            generate,
            prompt_key=str(data.prompt_key),
            n=n,
            batch_size=int(batch_size) if batch_size else max(1, int(rollout.max_num_seqs) // n),
            max_prompt_length=int(rollout.prompt_length),
            truncation="error",
        ):
            responses.extend(texts)
    out = table.append_column("responses", pa.array(responses, type=pa.list_(pa.string())))
    target = os.path.expanduser(str(data.output_path))
    os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
    tmp = f"{target}.tmp-{os.getpid()}"
    pq.write_table(out, tmp)
    os.replace(tmp, target)
    print(f"Saved {out.num_rows} rows x {n} responses to {target}")
    return target


def main(argv: list[str] | None = None) -> int:
    """Command-line entry (``sys.argv[1:]`` when ``argv`` is None); returns the exit code."""
    return run_entrypoint(
        argv,
        prog="python -m verl.trainer.main_generation_server",
        description="Generate rollout.n responses per prompt of data.train_files into data.output_path (parquet).",
        config_name=GenerationServerConfig.config_name,
        schema=GenerationServerConfig,
        load_run_fn=lambda: run_generation,
    )


if __name__ == "__main__":
    sys.exit(main())

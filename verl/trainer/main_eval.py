"""``python -m verl.trainer.main_eval key=value ...``: score generations offline (mean@N, pass@k, maj@k).

Two modes (defaults in ``verl/trainer/config/eval.yaml``):

1. ``data.path=gens.parquet`` - a parquet of generations, one row per prompt with ``data_source``, ``responses``
   (a list of N strings) and ``reward_model.ground_truth``; every response is scored with
   ``default_compute_score`` (or ``custom_reward_function.path``).
2. ``data.path=prompts.parquet model.path=...`` - a verl RL parquet (chat ``prompt`` column); N responses per prompt
   are generated with the HF rollout engine from a model directory, a bundled model name or a training checkpoint
   (``.../global_step_N`` or ``.../global_step_N/actor``), then scored as in mode 1.

Per data source (and ``all``): ``mean@N`` (mean score), ``pass@k`` (unbiased estimator of Chen et al. 2021,
``1 - C(N-c, k) / C(N, k)`` with ``c`` correct responses out of ``N``) and ``maj@k`` (correctness of the most
frequent answer among the first ``k`` responses), each averaged over prompts. The result is printed as JSON and
written to ``output.path`` when set. Exit codes: 0 ok, 2 bad config or data, 1 runtime failure.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import tempfile
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Optional

from omegaconf import DictConfig, OmegaConf

from verl.trainer.config.entrypoint import run_entrypoint
from verl.trainer.config.schema import CustomRewardFunctionConfig
from verl.trainer.config.validation import ConfigError

logger = logging.getLogger(__name__)

__all__ = [
    "EvalConfig",
    "extract_answer",
    "iter_generations",
    "main",
    "maj_at_k",
    "pass_at_k",
    "read_generations",
    "run_eval",
    "score_generations",
]


# ---------------------------------------------------------------------------------------------------- config
@dataclass
class EvalDataConfig:
    """``data``: the input parquet and its column names."""

    path: Optional[str] = None
    response_key: str = "responses"
    data_source_key: str = "data_source"
    reward_model_key: str = "reward_model"
    prompt_key: str = "prompt"
    max_prompt_length: int = 512
    batch_size: int = 16
    max_samples: int = -1
    apply_chat_template: bool = True


@dataclass
class EvalModelConfig:
    """``model``: the model to generate with (mode 2); ``path: null`` selects mode 1."""

    path: Optional[str] = None
    tokenizer_path: Optional[str] = None
    trust_remote_code: bool = False
    dtype: str = "auto"


@dataclass
class EvalRolloutConfig:
    """``rollout``: sampling of mode 2 (the HF rollout engine's keys)."""

    n: int = 1
    do_sample: bool = True
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    response_length: int = 256
    max_num_seqs: int = 64
    dtype: str = "auto"
    seed: Optional[int] = 0


@dataclass
class EvalMetricsConfig:
    """``metrics``: which k and what counts as correct."""

    k: Optional[list[int]] = None
    correct_threshold: float = 1.0


@dataclass
class EvalOutputConfig:
    """``output``: where results (and mode-2 generations) go."""

    path: Optional[str] = None
    generations_path: Optional[str] = None


@dataclass
class EvalTrainerConfig:
    """``trainer``: device and the unsafe-operations switch (a custom reward function may need it)."""

    device: Literal["auto", "cpu", "cuda"] = "auto"
    allow_unsafe_operations: bool = False


@dataclass
class EvalConfig:
    """The whole ``eval.yaml``."""

    config_name: ClassVar[str] = "eval"

    data: EvalDataConfig = field(default_factory=EvalDataConfig)
    model: EvalModelConfig = field(default_factory=EvalModelConfig)
    rollout: EvalRolloutConfig = field(default_factory=EvalRolloutConfig)
    custom_reward_function: CustomRewardFunctionConfig = field(default_factory=CustomRewardFunctionConfig)
    metrics: EvalMetricsConfig = field(default_factory=EvalMetricsConfig)
    output: EvalOutputConfig = field(default_factory=EvalOutputConfig)
    trainer: EvalTrainerConfig = field(default_factory=EvalTrainerConfig)

    @staticmethod
    def cross_field_checks(cfg: DictConfig) -> tuple[list[str], list[str]]:
        """Errors and warnings that involve more than one key."""
        errors: list[str] = []
        if not cfg.data.path:
            errors.append("data.path: required (a parquet of generations, or of prompts when model.path is set)")
        if int(cfg.rollout.n) < 1:
            errors.append(f"rollout.n: must be >= 1, got {cfg.rollout.n}")
        if int(cfg.data.batch_size) < 1:
            errors.append(f"data.batch_size: must be >= 1, got {cfg.data.batch_size}")
        for k in cfg.metrics.k or []:
            if int(k) < 1:
                errors.append(f"metrics.k: every k must be >= 1, got {k}")
        return errors, []


# ---------------------------------------------------------------------------------------------- pure metrics
def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples of which ``c`` are correct (Chen et al. 2021):
    ``1 - C(n - c, k) / C(n, k)``, computed as a stable product. Requires ``1 <= k <= n``."""
    if not 1 <= k <= n or not 0 <= c <= n:
        raise ValueError(f"pass_at_k needs 1 <= k <= n and 0 <= c <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def maj_at_k(answers: Sequence[Any], correct: Sequence[bool], k: int) -> float:
    """1.0 when the most frequent non-empty answer among the first ``k`` responses is a correct one, else 0.0.

    Ties go to the answer seen first; responses without an answer (None) do not vote.
    """
    votes = [(a, c) for a, c in zip(answers[:k], correct[:k]) if a is not None]
    if not votes:
        return 0.0
    counts = Counter(a for a, _ in votes)
    best = max(counts.values())
    winner = next(a for a, _ in votes if counts[a] == best)
    return 1.0 if any(c for a, c in votes if a == winner) else 0.0


def extract_answer(data_source: str, response: str) -> str | None:
    """The final answer of a response, for majority voting: the last ``\\boxed{}`` for MATH sources, the last
    number otherwise (normalised, so ``4.0`` and ``4`` agree), else the stripped text (None when empty)."""
    from verl.rewards import MATH_SOURCES
    from verl.rewards.arithmetic import extract_last_number

    if data_source in MATH_SOURCES:
        from verl.rewards.math import last_boxed_content, normalize_answer

        boxed = last_boxed_content(response)
        if boxed is not None:
            return normalize_answer(boxed)
    number = extract_last_number(response)
    if number is not None:
        return format(number.normalize(), "f")
    text = response.strip()
    return text or None


def _default_ks(n: int) -> list[int]:
    ks, k = [], 1
    while k <= n:
        ks.append(k)
        k *= 2
    return ks


def score_generations(
    rows: Sequence[dict[str, Any]],
    compute_score: Callable[..., Any],
    ks: Sequence[int] | None = None,
    correct_threshold: float = 1.0,
) -> dict[str, Any]:
    """Score every response of every row and reduce to ``{"n", "k", "num_prompts", "metrics": {source: {...}}}``.

    ``rows``: dicts with ``data_source``, ``responses`` (N strings, the same N for every row), ``ground_truth`` and
    optionally ``extra_info``. ``compute_score(data_source, solution_str, ground_truth, extra_info)`` returns a
    float or a dict with ``score`` (and optionally ``acc`` and ``pred``). Metrics per source and for ``all``:
    ``mean@N``, ``pass@k`` and ``maj@k`` for each k <= N.
    """
    if not rows:
        raise ValueError("score_generations: no rows to score")
    n = len(rows[0]["responses"])
    for i, row in enumerate(rows):
        if len(row["responses"]) != n or n == 0:
            raise ValueError(
                f"row {i}: {len(row['responses'])} responses, but row 0 has {n}; every row needs the same N >= 1"
            )
    ks = sorted({int(k) for k in (ks or _default_ks(n)) if int(k) <= n})
    if not ks:
        raise ValueError(f"metrics.k: no k <= N={n}")
    per_prompt: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for i, row in enumerate(rows):
        source = str(row["data_source"])
        scores, correct, answers = [], [], []
        for response in row["responses"]:
            result = compute_score(source, response, row["ground_truth"], row.get("extra_info"))
            pred = None
            if isinstance(result, dict):
                if "score" not in result:
                    raise ValueError(f"row {i}: the reward function returned a dict without 'score': {result}")
                acc = result.get("acc", result["score"])
                pred = result.get("pred")
                result = result["score"]
            else:
                acc = result
            score = float(result)
            if math.isnan(score):
                raise ValueError(f"row {i} ({source}): the reward function returned NaN for {response[:80]!r}")
            scores.append(score)
            correct.append(float(acc) >= correct_threshold)
            answers.append(str(pred) if pred is not None else extract_answer(source, str(response)))
        c = sum(correct)
        values = {f"mean@{n}": sum(scores) / n}
        for k in ks:
            values[f"pass@{k}"] = pass_at_k(n, c, k)
            values[f"maj@{k}"] = maj_at_k(answers, correct, k)
        for name, value in values.items():
            per_prompt[source][name].append(value)
            per_prompt["all"][name].append(value)
    metrics = {
        source: {name: sum(vals) / len(vals) for name, vals in stats.items()} for source, stats in per_prompt.items()
    }
    metrics["all"] = metrics.pop("all")  # keep "all" last
    counts = Counter(str(r["data_source"]) for r in rows)
    return {"n": n, "k": ks, "num_prompts": len(rows), "num_prompts_per_source": dict(counts), "metrics": metrics}


# ------------------------------------------------------------------------------------------------------ I/O
def _ground_truth(value: Any, where: str) -> Any:
    if isinstance(value, dict) and "ground_truth" in value:
        return value["ground_truth"]
    raise ConfigError(f"{where}: expected a struct with a 'ground_truth' field, got {str(value)[:120]!r}")


def read_generations(path: str, data_cfg: Any) -> list[dict[str, Any]]:
    """Read a mode-1 parquet into rows for :func:`score_generations`; errors name the file, row and column."""
    import pyarrow.parquet as pq

    if not os.path.isfile(path):
        raise ConfigError(f"data.path: {path} does not exist")
    table = pq.read_table(path)
    keys = {"responses": data_cfg.response_key, "source": data_cfg.data_source_key, "rm": data_cfg.reward_model_key}
    missing = [col for col in keys.values() if col not in table.column_names]
    if missing:
        raise ConfigError(f"{path}: missing column(s) {missing}; columns present: {table.column_names}")
    rows = []
    limit = int(data_cfg.max_samples)
    for i, rec in enumerate(table.to_pylist()):
        if 0 <= limit <= i:
            break
        responses = rec[keys["responses"]]
        if isinstance(responses, str) or not isinstance(responses, (list, tuple)):
            raise ConfigError(
                f"{path} row {i}: column {keys['responses']!r} must be a list of response strings, got "
                f"{type(responses).__name__}"
            )
        rows.append(
            {
                "data_source": rec[keys["source"]],
                "responses": [str(r) for r in responses],
                "ground_truth": _ground_truth(rec[keys["rm"]], f"{path} row {i} column {keys['rm']!r}"),
                "extra_info": rec.get("extra_info"),
            }
        )
    if not rows:
        raise ConfigError(f"{path}: no rows")
    return rows


def _resolve_model_dir(path: str, workdir: str) -> str:
    """A loadable HF directory for ``path``: a training checkpoint is merged (LoRA too) into ``workdir``."""
    from verl.models.loader import resolve_model_path

    candidate = os.path.expanduser(path)
    if os.path.isdir(os.path.join(candidate, "actor")):
        candidate = os.path.join(candidate, "actor")
    is_checkpoint = os.path.isdir(candidate) and (
        os.path.isdir(os.path.join(candidate, "huggingface")) or os.path.isdir(os.path.join(candidate, "lora_adapter"))
    )
    if is_checkpoint:
        from verl.model_merger import merge_checkpoint

        target = os.path.join(workdir, "merged")
        merge_checkpoint(candidate, target)
        return target
    return resolve_model_path(path)


def iter_generations(
    files: str | Sequence[str],
    tokenizer: Any,
    generate_sequences: Callable[[Any], Any],
    *,
    prompt_key: str,
    n: int,
    batch_size: int,
    max_prompt_length: int,
    apply_chat_template: bool = True,
    max_samples: int = -1,
    truncation: str = "left",
) -> Iterator[tuple[Any, list[list[str]]]]:
    """Generate ``n`` responses per prompt of a parquet (or several) of chat prompts, batch by batch.

    ``generate_sequences``: a rollout engine's (``HFRollout`` / ``vLLMRollout``) ``DataProto -> DataProto``.
    Prompts longer than ``max_prompt_length`` tokens are cut on the left (``truncation="error"``: an error naming
    the row). Yields ``(batch, texts)``: the prompt
    batch (``DataProto``, its parquet columns in ``non_tensor_batch``) and, per prompt, its ``n`` decoded responses.
    Shared by ``main_eval`` (mode 2) and ``main_generation_server``.
    """
    import torch

    from verl.data.rl_dataset import RLHFDataset, collate_fn
    from verl.protocol import DataProto
    from verl.trainer.ppo.batch_rollout import decode_responses, generate_groups, prompt_meta
    from verl.trainer.ppo.sessions import final_rows

    data_section = {
        "prompt_key": prompt_key,
        "max_prompt_length": int(max_prompt_length),
        "filter_overlong_prompts": False,
        "truncation": truncation,
        "apply_chat_template": bool(apply_chat_template),
        "max_samples": int(max_samples),
    }
    dataset = RLHFDataset(files if isinstance(files, str) else list(files), tokenizer, data_section)
    loader = torch.utils.data.DataLoader(dataset, batch_size=int(batch_size), shuffle=False, collate_fn=collate_fn)
    meta = prompt_meta(tokenizer)
    for batch_dict in loader:
        batch = DataProto.from_single_dict(batch_dict)
        rollouts = final_rows(generate_groups(batch, n, generate_sequences, meta))  # one row per trajectory
        texts = decode_responses(tokenizer, rollouts)
        yield batch, [texts[j * n : (j + 1) * n] for j in range(len(batch))]


def generate_rows(cfg: DictConfig) -> list[dict[str, Any]]:
    """Mode 2: generate ``rollout.n`` responses per prompt of ``data.path`` with ``model.path`` (HF engine)."""
    from verl.hardware.precision import resolve_dtype
    from verl.models.loader import load_causal_lm, load_tokenizer
    from verl.utils.device import get_device_name, get_torch_device
    from verl.workers.rollout.hf_rollout import HFRollout

    with tempfile.TemporaryDirectory(prefix="verl-eval-") as workdir:
        model_dir = _resolve_model_dir(str(cfg.model.path), workdir)
        tokenizer = load_tokenizer(cfg.model.tokenizer_path or model_dir, trust_remote_code=cfg.model.trust_remote_code)
        device = get_torch_device(get_device_name(cfg.trainer.device))
        weights_dtype = resolve_dtype(str(cfg.model.dtype), device)
        model = load_causal_lm(model_dir, dtype=weights_dtype, trust_remote_code=cfg.model.trust_remote_code)
        model.to(device)
    rollout = HFRollout(model, OmegaConf.to_container(cfg.rollout, resolve=True), tokenizer=tokenizer)
    rows: list[dict[str, Any]] = []
    generations = iter_generations(
        str(cfg.data.path),
        tokenizer,
        rollout.generate_sequences,
        prompt_key=cfg.data.prompt_key,
        n=int(cfg.rollout.n),
        batch_size=int(cfg.data.batch_size),
        max_prompt_length=int(cfg.data.max_prompt_length),
        apply_chat_template=bool(cfg.data.apply_chat_template),
        max_samples=int(cfg.data.max_samples),
    )
    for batch, texts in generations:
        for j in range(len(batch)):
            rm = batch.non_tensor_batch["reward_model"][j]
            rows.append(
                {
                    "data_source": str(batch.non_tensor_batch["data_source"][j]),
                    "responses": texts[j],
                    "ground_truth": _ground_truth(rm, f"{cfg.data.path} prompt {len(rows)} column 'reward_model'"),
                    "extra_info": batch.non_tensor_batch["extra_info"][j],
                }
            )
    return rows


def _write_generations(rows: list[dict[str, Any]], path: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist(
        [
            {
                "data_source": r["data_source"],
                "responses": r["responses"],
                "reward_model": {"ground_truth": str(r["ground_truth"])},
            }
            for r in rows
        ]
    )
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    pq.write_table(table, tmp)
    os.replace(tmp, path)


# ----------------------------------------------------------------------------------------------------- run
def _compute_score_fn(cfg: DictConfig) -> Callable[..., Any]:
    from verl.rewards import default_compute_score
    from verl.trainer.ppo.reward import get_custom_reward_fn

    custom = get_custom_reward_fn(cfg)
    if custom is None:
        return default_compute_score

    def call(data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None) -> Any:
        return custom(
            data_source=data_source, solution_str=solution_str, ground_truth=ground_truth, extra_info=extra_info
        )

    return call


def run_eval(cfg: DictConfig) -> dict[str, Any]:
    """Run one evaluation from a validated ``eval.yaml`` config; print and return the result dict."""
    from verl.utils.fs import atomic_write_text
    from verl.utils.security import SecurityPolicy, set_security_policy

    set_security_policy(SecurityPolicy.from_config(cfg))
    mode = "generate" if cfg.model.path else "generations"
    if mode == "generate":
        rows = generate_rows(cfg)
        if cfg.output.generations_path:
            _write_generations(rows, str(cfg.output.generations_path))
    else:
        rows = read_generations(str(cfg.data.path), cfg.data)
    try:
        result = score_generations(rows, _compute_score_fn(cfg), cfg.metrics.k, float(cfg.metrics.correct_threshold))
    except (ValueError, NotImplementedError) as e:
        raise ConfigError(f"{cfg.data.path}: {e}") from e
    result = {"mode": mode, "data_path": str(cfg.data.path), "model_path": cfg.model.path, **result}
    text = json.dumps(result, indent=2, sort_keys=False)
    print(text)
    if cfg.output.path:
        atomic_write_text(str(cfg.output.path), text + "\n")
    return result


def main(argv: list[str] | None = None) -> int:
    """Command-line entry (``sys.argv[1:]`` when ``argv`` is None); returns the exit code."""
    return run_entrypoint(
        argv,
        prog="python -m verl.trainer.main_eval",
        description="Score generations (mean@N, pass@k, maj@k), optionally generating them first with a model.",
        config_name=EvalConfig.config_name,
        schema=EvalConfig,
        load_run_fn=lambda: run_eval,
    )


if __name__ == "__main__":
    sys.exit(main())

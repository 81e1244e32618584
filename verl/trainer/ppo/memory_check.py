"""Refuse at start a CPU run whose micro-batches cannot fit the machine's free memory (``trainer.check_memory``).

A run that does not fit is otherwise killed by the kernel minutes later, with ``Killed`` as its only word. Before
any model loads, from the model's ``config.json`` and safetensors headers (the run identity's fingerprint) and the
config's batch keys, the peak of each phase on one rank is estimated, worst case (every sequence at its length
limit):

* the actor update, per micro-batch (``actor.ppo_micro_batch_size_per_gpu`` sequences, or
  ``actor.ppo_max_token_len_per_gpu`` tokens with ``use_dynamic_bsz``) of ``T = prompt + response`` tokens:
  activations kept for the backward ``T * layers * (10 * hidden + 4 * intermediate) * b`` (a decoder layer keeps
  about ten hidden-sized and four MLP-sized tensors per token: norms, q/k/v, attention output, residuals, gate, up,
  activation, product; ``b`` = 4 bytes in float32, 2 under bf16/fp16 autocast; gradient checkpointing keeps one
  hidden-sized tensor per layer plus one layer's worth) plus the response tokens' logits in float32
  ``R * vocab * 4 * 6`` (the logits, the tempered copy, their gradient and the log-softmax/entropy blocks);
* the log-prob passes (``rollout.log_prob_micro_batch_size_per_gpu``, ``ref.log_prob_micro_batch_size_per_gpu``):
  no graph, so the logits ``R * vocab * 4 * 3`` and one layer's activations;
* fixed: the actor's parameters, gradients and Adam moments in float32 (16 bytes per parameter, one copy over all
  ranks: FSDP shards them), the reference model's weights (4 bytes per parameter) when a KL needs it, and the
  critic's 16 bytes per parameter when one is trained.

Measured on SmolLM2-135M in float32 (``response_logits_forward`` and its backward, gradients included; peak resident
memory over the loaded model): 2 x 256 tokens 1527 MiB (estimate 1499), 4 x 256 tokens 2588 MiB (2484), 4 x 512
tokens 4856 MiB (4455): 2-8% below. The rollout engine's own memory (vLLM's KV cache) is not counted.
The estimate is compared with the memory available (``MemAvailable`` of ``/proc/meminfo``, or a cgroup's limit
minus its usage when lower); a run over it is refused with :class:`MemoryBudgetError` (one line: the arithmetic, and
the key to lower with the largest value that fits). GPU runs are not checked here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from verl.models.lora import lora_enabled
from verl.utils.errors import ConfigError

__all__ = ["MemoryBudgetError", "PhaseEstimate", "available_memory_bytes", "check_ppo_memory", "estimate_ppo_memory"]

GIB = float(1 << 30)
LOGIT_COPIES_TRAIN = 6
LOGIT_COPIES_INFER = 3


class MemoryBudgetError(ConfigError):
    """A run whose estimated peak memory is above the memory available; ``str(err)`` is one line."""

    def __init__(self, message: str) -> None:
        self.problems = [message]
        ValueError.__init__(self, message)


@dataclass
class PhaseEstimate:
    """The peak of one phase on one rank: its micro-batch key, its value, and the bytes of its parts."""

    name: str
    key: str
    value: int
    tokens: int
    response_tokens: int
    activation_bytes: float
    logits_bytes: float

    @property
    def total(self) -> float:
        return self.activation_bytes + self.logits_bytes


def _meminfo_available() -> float | None:
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_available() -> float | None:
    for limit_file, usage_file in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),
    ):
        try:
            with open(limit_file, encoding="utf-8") as f:
                limit = f.read().strip()
            with open(usage_file, encoding="utf-8") as f:
                usage = float(f.read().strip())
        except (OSError, ValueError):
            continue
        if limit == "max" or float(limit) >= 1 << 60:
            return None
        return max(0.0, float(limit) - usage)
    return None


def available_memory_bytes() -> float | None:
    """Bytes this process may still allocate: ``MemAvailable``, or the cgroup's limit minus usage when lower;
    None where neither can be read."""
    values = [v for v in (_meminfo_available(), _cgroup_available()) if v is not None]
    return min(values) if values else None


def _per_token_activation_bytes(fp: dict[str, Any], act_bytes: int, checkpointing: bool) -> tuple[float, str]:
    hidden, layers = int(fp["hidden_size"]), int(fp["num_hidden_layers"])
    inter = int(fp.get("intermediate_size") or 4 * hidden)
    layer = (10 * hidden + 4 * inter) * act_bytes
    if checkpointing:
        text = f"({layers} x {hidden} + 10 x {hidden} + 4 x {inter}) x {act_bytes} B"
        return layers * hidden * act_bytes + layer, text
    return layers * layer, f"{layers} layers x (10 x {hidden} + 4 x {inter}) x {act_bytes} B"


def estimate_ppo_memory(config: Any, fingerprints: dict[str, dict[str, Any]]) -> tuple[list[PhaseEstimate], float, str]:
    """``(phases, fixed bytes, fixed arithmetic)`` of a PPO-family config (see the module docstring);
    ``fingerprints``: role -> model fingerprint (:func:`~verl.checkpoint.identity.model_fingerprint`)."""
    from verl.hardware.precision import resolve_dtype_name
    from verl.trainer.config import critic_enabled, need_reference_policy

    actor_fp = fingerprints["actor"]
    arr = config.actor_rollout_ref
    prompt, response = config.data.max_prompt_length, config.data.max_response_length
    seq = prompt + response
    vocab = int(actor_fp["vocab_size"])
    dtype = resolve_dtype_name(str(arr.actor.dtype or "auto"), "cpu")
    act_bytes = 4 if dtype == "float32" else 2
    checkpointing = bool(arr.model.enable_gradient_checkpointing)
    per_token, per_token_text = _per_token_activation_bytes(actor_fp, act_bytes, checkpointing)
    one_layer, _ = _per_token_activation_bytes({**actor_fp, "num_hidden_layers": 1}, act_bytes, False)

    def micro(section: Any, size_key: str, dyn_key: str, max_tok_key: str) -> tuple[int, int, str, int]:
        """(tokens, response tokens, the key that sets them, its value) of one micro-batch of ``section``."""
        if bool(section.get(dyn_key, False)):
            tokens = int(section.get(max_tok_key))
            return tokens, tokens * response // seq, max_tok_key, tokens
        size = int(section.get(size_key) or 1)
        return size * seq, size * response, size_key, size

    phases = []
    tokens, resp, key, value = micro(
        arr.actor, "ppo_micro_batch_size_per_gpu", "use_dynamic_bsz", "ppo_max_token_len_per_gpu"
    )
    phases.append(
        PhaseEstimate(
            f"actor update: {tokens} tokens x {per_token_text}",
            f"actor_rollout_ref.actor.{key}",
            value,
            tokens,
            resp,
            tokens * per_token,
            resp * vocab * 4.0 * LOGIT_COPIES_TRAIN,
        )
    )
    passes = [("rollout", arr.rollout)] + ([("ref", arr.ref)] if need_reference_policy(config) else [])
    for name, section in passes:
        tokens, resp, key, value = micro(
            section, "log_prob_micro_batch_size_per_gpu", "log_prob_use_dynamic_bsz", "log_prob_max_token_len_per_gpu"
        )
        phases.append(
            PhaseEstimate(
                f"{name} log-probs: {tokens} tokens",
                f"actor_rollout_ref.{name}.{key}",
                value,
                tokens,
                resp,
                tokens * one_layer,
                resp * vocab * 4.0 * LOGIT_COPIES_INFER,
            )
        )
    params = int(actor_fp.get("num_parameters") or 0)
    fixed = params * 16.0
    parts = [f"actor {params / 1e6:.0f}M params x 16 B (weights, gradients, Adam)"]
    if need_reference_policy(config) and not lora_enabled(arr.model):
        fixed += params * 4.0
        parts.append(f"reference {params / 1e6:.0f}M x 4 B")
    if critic_enabled(config) and "critic" in fingerprints:
        critic_params = int(fingerprints["critic"].get("num_parameters") or 0)
        fixed += critic_params * 16.0
        parts.append(f"critic {critic_params / 1e6:.0f}M x 16 B")
    return phases, fixed, " + ".join(parts)


def _per_rank_mini_batch(config: Any) -> int:
    """Sequences per rank in one actor mini-batch (``ppo_mini_batch_size * rollout.n / world``), which the
    micro-batch size must divide."""
    arr, trainer_cfg = config.actor_rollout_ref, config.trainer
    world = max(1, trainer_cfg.nnodes * trainer_cfg.n_gpus_per_node)
    return max(1, int(arr.actor.ppo_mini_batch_size) * int(arr.rollout.n) // world)


def _largest_divisor_at_most(n: int, limit: int) -> int:
    return max(d for d in range(1, min(n, limit) + 1) if n % d == 0)


def check_ppo_memory(config: Any, identity: dict[str, Any] | None, available: float | None = None) -> str | None:
    """Refuse (:class:`MemoryBudgetError`) a CPU run whose estimated peak is above the available memory; returns
    the one-line estimate (for the log) or None when not checked (``trainer.check_memory=false``, a GPU run, no
    model fingerprint, or the available memory unknown). ``available`` overrides the measured bytes (tests)."""
    from verl.utils.device import get_device_name

    trainer_cfg = config.trainer
    if not trainer_cfg.check_memory or get_device_name(trainer_cfg.device) != "cpu":
        return None
    fps = (identity or {}).get("models") or {}
    actor = fps.get("actor") or {}
    if not all(actor.get(k) for k in ("vocab_size", "hidden_size", "num_hidden_layers")):
        return None
    available = available_memory_bytes() if available is None else available
    if available is None:
        return None
    phases, fixed, fixed_text = estimate_ppo_memory(config, fps)
    ranks = trainer_cfg.n_gpus_per_node  # the ranks on this machine, each with its own micro-batch
    worst = max(phases, key=lambda p: p.total)
    need = fixed + ranks * worst.total
    summary = (
        f"estimated peak {need / GIB:.1f} GiB = {fixed / GIB:.1f} GiB fixed ({fixed_text})"
        f" + {ranks} rank(s) x {worst.total / GIB:.1f} GiB for the {worst.name} "
        f"({worst.activation_bytes / GIB:.1f} GiB activations + {worst.response_tokens} response tokens x "
        f"{int(fps['actor']['vocab_size'])} vocab x 4 B x "
        f"{LOGIT_COPIES_TRAIN if worst.name.startswith('actor') else LOGIT_COPIES_INFER} = "
        f"{worst.logits_bytes / GIB:.1f} GiB logits); available {available / GIB:.1f} GiB"
    )
    if need <= available:
        return summary
    budget = (available - fixed) / max(ranks, 1)
    fits = int(worst.value * budget / worst.total) if budget > 0 and worst.total > 0 else 0
    if worst.key.endswith("actor.ppo_micro_batch_size_per_gpu") and fits >= 1:
        fits = _largest_divisor_at_most(_per_rank_mini_batch(config), fits)
    lower = f"lower {worst.key}={worst.value} to {fits} or less" if fits >= 1 else f"lower {worst.key}={worst.value}"
    raise MemoryBudgetError(
        f"trainer.check_memory: this run does not fit this machine's memory: {summary}. To fit: {lower}, or "
        "data.max_prompt_length / data.max_response_length, or turn on "
        "actor_rollout_ref.model.enable_gradient_checkpointing; trainer.check_memory=false skips this check"
    )

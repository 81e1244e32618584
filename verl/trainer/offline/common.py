"""Shared by the offline trainers: their config (defaults <- dict overrides), sequence log-probs, loss outputs."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from verl.trainer.config.loader import packaged_config_text
from verl.trainer.config.validation import ConfigError, validate_config
from verl.workers.actor.token_scoring import next_token_logprobs_at


def build_offline_config(schema: type, *layers: Mapping[str, Any] | DictConfig | None) -> DictConfig:
    """The packaged defaults of ``schema.config_name`` with ``layers`` applied in order, resolved and validated.

    A layer maps dotted keys (``"optim.lr"``) or section names (``"optim": {"lr": 1e-5}``) to values; a
    ``DictConfig`` layer (a whole config, as the CLI builds it) is merged as is. Unknown keys and bad values
    raise :class:`ConfigError` naming the key.
    """
    cfg = OmegaConf.create(packaged_config_text(schema.config_name))
    for layer in layers:
        if layer is None:
            continue
        if isinstance(layer, DictConfig):
            cfg = OmegaConf.merge(cfg, layer)
            continue
        if not isinstance(layer, Mapping):
            raise ConfigError(f"config must be a dict of key -> value, got {type(layer).__name__}")
        for key, value in layer.items():
            if not isinstance(key, str) or not key:
                raise ConfigError(f"config key {key!r} must be a non-empty string")
            try:
                OmegaConf.update(cfg, key, value, merge=True, force_add=True)
            except OmegaConfBaseException as e:
                raise ConfigError(f"{key}: cannot set {value!r:.100}: {' '.join(str(e).split())}") from e
    try:
        OmegaConf.resolve(cfg)
    except OmegaConfBaseException as e:
        raise ConfigError(f"cannot resolve interpolation: {' '.join(str(e).split())}") from e
    validate_config(cfg, schema)
    return cfg


@dataclass
class LossOutput:
    """What one micro-batch contributes to a step.

    ``loss_sum`` is the differentiable loss *summed* over the micro-batch's units (tokens for SFT, pairs for DPO,
    rows for KTO), so that dividing by the step's total units gives the exact step mean under gradient
    accumulation. ``stats`` maps a metric name to ``(sum, count)``; the logged value is ``sum / count`` over the
    step (over all ranks).
    """

    loss_sum: torch.Tensor
    stats: dict[str, tuple[float, float]] = field(default_factory=dict)


def add_stat(stats: dict[str, tuple[float, float]], name: str, values: torch.Tensor) -> None:
    """Add the sum and count of ``values`` (any shape) to ``stats[name]``.

    An empty tensor still registers the name with count 0, so every rank reduces the same list of metrics.
    """
    s, c = stats.get(name, (0.0, 0.0))
    stats[name] = (s + float(values.detach().float().sum().item()), c + float(values.numel()))


def merge_stats(total: dict[str, tuple[float, float]], part: Mapping[str, tuple[float, float]]) -> None:
    """Add each ``(sum, count)`` of ``part`` (e.g. one micro-batch's :attr:`LossOutput.stats`) to ``total``."""
    for name, (s, c) in part.items():
        old = total.get(name, (0.0, 0.0))
        total[name] = (old[0] + s, old[1] + c)


@contextlib.contextmanager
def autocast(device: torch.device, dtype: torch.dtype) -> Iterator[None]:
    """Mixed-precision compute in ``dtype`` (no-op for float32); parameters stay in their own (fp32) dtype."""
    if dtype == torch.float32:
        yield
        return
    with torch.autocast(device_type=device.type, dtype=dtype):
        yield


def sequence_log_probs(
    model: torch.nn.Module,
    batch: Mapping[str, torch.Tensor],
    device: torch.device,
    dtype: torch.dtype,
    pack: bool = False,
) -> torch.Tensor:
    """Sequence log-prob ``[n]``: the sum of ``log p(input_ids[:, t + 1] | input_ids[:, :t + 1])`` (float32) over
    the response tokens ``t + 1`` (``loss_mask == 1``) of ``batch``'s right-padded ``input_ids``,
    ``attention_mask``, ``position_ids`` and ``loss_mask`` ``[n, seq]``. The LM head runs at the positions that
    predict a response token only; ``pack`` runs the valid tokens packed (``model.use_remove_padding``)."""
    ids = batch["input_ids"]
    scored = torch.zeros_like(batch["loss_mask"], dtype=torch.bool)
    scored[:, :-1] = batch["loss_mask"][:, 1:].bool()  # position t predicts token t + 1
    with autocast(device, dtype):
        out = next_token_logprobs_at(model, ids, batch["attention_mask"], batch["position_ids"], scored, pack=pack)
    rows = torch.div(out.positions, ids.shape[1], rounding_mode="floor")
    return torch.zeros(ids.shape[0], device=ids.device).index_add(0, rows, out.log_probs[0].float())

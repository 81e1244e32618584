"""The PPO driver's part of SPO (``algorithm.spo``; the formulas and the tracker: :mod:`verl.algorithms.spo`).

Each step :class:`SPODriver`

1. draws ``data.train_batch_size`` prompts out of the loader's batch (``data.gen_batch_size`` prompts) with
   probability proportional to their priority ``sqrt(p_hat (1 - p_hat)) + 0.05`` (with replacement only when the
   loader's batch is smaller), seeded by ``data.seed`` and the step, so a resumed run draws what the uninterrupted
   one drew (:meth:`select`);
2. puts each row's ``p_hat`` in the batch column ``spo_values`` for the advantage estimator ``spo``
   (:meth:`attach_values`);
3. after the actor's update, works out each prompt's discount ``rho`` (``rho.type=kl``: two log-prob passes of the
   updated actor, over the prompt's previous response and over this step's) and folds the step's rewards into the
   tracker (:meth:`observe`).

The tracker and every prompt's last response with its log-probs are part of the checkpoint (:meth:`state_dict`):
the recipe keeps them in memory only, so its resumed runs start the tracker over.

A prompt is keyed by the text of its last user message (``raw_prompt``, kept by ``data.return_raw_chat``, which SPO
turns on): the key the recipe's ``merge_offline_values.py`` writes, and the recipe trainer's own key (the first
message) wherever a prompt is one user message.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch

from verl.algorithms.spo import (
    SPOValueTracker,
    kl_discount,
    load_offline_scores,
    policy_drift,
    priority_weights,
)
from verl.protocol import DataProto
from verl.trainer.ppo.sessions import metric_rows

__all__ = ["SPODriver", "prompt_key"]

logger = logging.getLogger(__name__)

VALUES_COLUMN = "spo_values"


def prompt_key(raw_prompt: Any) -> str:
    """The tracker's key of a prompt: the text of its last user message (a plain string prompt: itself), stripped.
    A message whose content is a list of parts keys by its text parts joined."""
    if isinstance(raw_prompt, str):
        return raw_prompt.strip()
    messages = list(raw_prompt)
    users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    message = (users or messages)[-1]
    content = message.get("content", "") if isinstance(message, dict) else message
    if isinstance(content, list):
        content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content).strip()


class _PastResponse:
    """A prompt's last trained response, unpadded: prompt and response ids, the response's loss mask and its
    log-probs under the actor right after that step's update (``int32``/``bool``/``float32``, ``[tokens]``)."""

    __slots__ = ("prompt_ids", "response_ids", "response_mask", "log_probs")

    def __init__(self, prompt_ids, response_ids, response_mask, log_probs) -> None:
        self.prompt_ids, self.response_ids = prompt_ids, response_ids
        self.response_mask, self.log_probs = response_mask, log_probs


class SPODriver:
    """SPO's state on the PPO driver (module docstring). ``section`` is ``algorithm.spo``
    (:class:`~verl.algorithms.config.SPOConfig`), ``train_batch_size`` the prompts a step trains on, ``seed`` the
    sampling seed (``data.seed``), ``pad_id`` the tokenizer's pad id (for rebuilding past responses)."""

    def __init__(self, section: Any, train_batch_size: int, seed: int, pad_id: int) -> None:
        self.section = section
        self.train_batch_size = int(train_batch_size)
        self.seed = int(seed)
        self.pad_id = int(pad_id)
        self.rho_type = str(section.rho.type)
        self.clip_lower = float(section.rho.clip_lower)
        self.offline_prompts: set[str] = set()
        if section.offline_values:
            scores = load_offline_scores(str(section.offline_values))
            self.offline_prompts = set(scores)
            self.tracker = SPOValueTracker.from_offline(scores, int(section.offline_N), self.clip_lower, self.seed)
        else:
            self.tracker = SPOValueTracker()
        self.past: dict[str, _PastResponse] = {}
        self._unknown_warned = False

    @classmethod
    def from_config(cls, config: Any, tokenizer: Any) -> SPODriver | None:
        """The driver part of a PPO config with ``algorithm.spo.enable``; None otherwise."""
        section = config.algorithm.get("spo")
        if section is None or not bool(section.enable):
            return None
        pad = tokenizer.pad_token_id if tokenizer is not None and tokenizer.pad_token_id is not None else 0
        return cls(section, int(config.data.train_batch_size), int(config.data.seed), int(pad))

    # ------------------------------------------------------------------------------------------------ 1. select
    def keys(self, batch: DataProto) -> list[str]:
        """The tracker key of each row (:func:`prompt_key` of ``raw_prompt``)."""
        if "raw_prompt" not in batch.non_tensor_batch:
            raise ValueError(
                "algorithm.spo keys each prompt's value by its text, and this batch has no raw_prompt column: set "
                "data.return_raw_chat=true (a data.custom_cls dataset must return raw_prompt, as verl's does)"
            )
        return [prompt_key(p) for p in batch.non_tensor_batch["raw_prompt"]]

    def select(self, prompts: DataProto, step: int) -> tuple[DataProto, dict[str, float]]:
        """``train_batch_size`` prompts of the loader's batch ``prompts``, drawn by priority (module docstring);
        returns them and ``spo/*`` sampling metrics."""
        keys = self.keys(prompts)
        self._warn_unknown(keys)
        weights = priority_weights(self.tracker.values(keys))
        rng = np.random.default_rng([self.seed, int(step)])
        size = self.train_batch_size
        picked = rng.choice(len(keys), size=size, replace=size > len(keys), p=weights / weights.sum())
        chosen = prompts.select_idxs(picked)
        values = self.tracker.values([keys[i] for i in picked])
        metrics = {
            "spo/sampled_prompts": float(len(set(picked.tolist()))),
            "spo/candidate_prompts": float(len(keys)),
            "spo/sampled_p_hat_mean": float(values.mean()),
        }
        return chosen, metrics

    def _warn_unknown(self, keys: list[str]) -> None:
        if self._unknown_warned or not self.offline_prompts:
            return
        unknown = [k for k in keys if k not in self.offline_prompts]
        if unknown:
            self._unknown_warned = True
            logger.warning(
                "algorithm.spo.offline_values=%s has no scores for %d of the %d prompts of this batch (e.g. %r): they "
                "start at the prior p_hat=0.5 (the file's keys are each prompt's last user message, stripped)",
                self.section.offline_values, len(unknown), len(keys), unknown[0][:80],
            )  # fmt: skip

    # ------------------------------------------------------------------------------------------ 2. the values
    def attach_values(self, batch: DataProto) -> dict[str, float]:
        """Put each row's ``p_hat`` in ``batch.batch["spo_values"]`` ``[rows]`` (a padding row: 0.5); returns the
        recipe's ``spo/*`` metrics of the step's rewards and posteriors."""
        keys = self.keys(batch)
        alpha, beta = self.tracker.posterior(keys)
        values = alpha / (alpha + beta)
        batch.batch[VALUES_COLUMN] = torch.as_tensor(values, dtype=torch.float32)
        rows = metric_rows(batch)
        rewards = batch.batch["token_level_scores"].sum(-1).double().numpy()[rows]
        return {
            "spo/reward": float(rewards.mean()),
            "spo/alpha": float(alpha[rows].mean()),
            "spo/beta": float(beta[rows].mean()),
            "spo/Neff": float((alpha + beta)[rows].mean()),
            "spo/p_hats": float(values[rows].mean()),
            "spo/adv_before_norm": float((rewards - values[rows]).mean()),
        }

    @staticmethod
    def advantage_metrics(batch: DataProto) -> dict[str, float]:
        """Quantiles 10/30/50/70/90 of the normalised advantages of the step's responses (the recipe's
        ``spo/adv_after_norm/p*``)."""
        rows = torch.as_tensor(metric_rows(batch))
        first = batch.batch["advantages"][rows]
        mask = batch.batch["response_mask"][rows].bool()
        per_row = torch.stack([a[m][0] if bool(m.any()) else a.new_zeros(()) for a, m in zip(first, mask)])
        q = torch.quantile(per_row.double(), torch.tensor([0.1, 0.3, 0.5, 0.7, 0.9], dtype=torch.float64))
        return {f"spo/adv_after_norm/p{p}": float(v) for p, v in zip((10, 30, 50, 70, 90), q)}

    # -------------------------------------------------------------------------------------------- 3. observe
    def observe(self, batch: DataProto, actor: Any) -> dict[str, float]:
        """After the step's actor update: each prompt's ``rho`` (constant, or from the drift of its previous
        response under ``actor``, a worker group with ``compute_log_prob``), then the tracker update; returns the
        ``spo/*`` discount and visit metrics."""
        keys = self.keys(batch)
        rows = np.flatnonzero(metric_rows(batch))
        rewards = batch.batch["token_level_scores"].sum(-1).double().numpy()
        metrics: dict[str, float] = {}
        if self.rho_type == "constant":
            rho_of = {keys[i]: float(self.section.rho.value) for i in rows}
            metrics["spo/rho"] = float(self.section.rho.value)
            metrics["spo/D"] = 0.0
        else:
            rho_of, kl_metrics = self._kl_rho(batch, keys, rows, actor)
            metrics.update(kl_metrics)
        self.tracker.update([keys[i] for i in rows], [rewards[i] for i in rows], rho_of)
        visits = np.array([self.tracker.visits[keys[i]] for i in rows], dtype=np.float64)
        metrics.update({
            "spo/cur_sampled_number/min": float(visits.min()),
            "spo/cur_sampled_number/max": float(visits.max()),
            "spo/cur_sampled_number/mean": float(visits.mean()),
            "spo/tracked_prompts": float(len(self.tracker)),
        })  # fmt: skip
        return metrics

    def _kl_rho(
        self, batch: DataProto, keys: list[str], rows: np.ndarray, actor: Any
    ) -> tuple[dict[str, float], dict[str, float]]:
        """``rho`` per prompt of ``rows`` from its previous response (first visit: ``D = 0``), then this step's
        responses stored with their log-probs under the updated actor."""
        if "multi_modal_inputs" in batch.non_tensor_batch and any(batch.non_tensor_batch["multi_modal_inputs"]):
            raise ValueError(
                "algorithm.spo.rho.type=kl recomputes each prompt's previous response, which is not kept for image "
                "or video inputs; use algorithm.spo.rho.type=constant"
            )
        response_len = batch.batch["responses"].shape[1]
        prompt_len = batch.batch["input_ids"].shape[1] - response_len
        seen = [i for i in range(len(batch)) if keys[i] in self.past]
        current = self._rows_of(batch, prompt_len, response_len)  # this step's responses, unpadded
        drift = np.zeros(len(batch), dtype=np.float64)
        if seen:
            # every row (a past response where its prompt has one, else itself) so the pass splits as the batch does
            replay = [self.past.get(keys[i], current[i]) for i in range(len(batch))]
            rebuilt = self._rebuild(replay, prompt_len, response_len)
            now = actor.compute_log_prob(rebuilt).batch["old_log_probs"].float()
            then = torch.zeros_like(now)
            for i in seen:
                then[i, : len(replay[i].log_probs)] = replay[i].log_probs
            drift[seen] = policy_drift(then, now, rebuilt.batch["response_mask"]).numpy()[seen]
        raw, rho_rows = kl_discount(drift, self.clip_lower)
        # this step's responses, under the weights just trained, become each prompt's "previous" one
        # (rebuilt as the past responses are, so a later D compares like with like)
        updated = actor.compute_log_prob(self._rebuild(current, prompt_len, response_len)).batch["old_log_probs"]
        for i, row in enumerate(current):
            row.log_probs = updated[i, : len(row.response_ids)].float().clone()
        first = [i for i in rows if keys[i] not in self.past]
        for i in rows:
            self.past[keys[i]] = current[i]
        rho_of = {keys[i]: float(rho_rows[i]) for i in rows}
        metrics = {
            "spo/D": float(drift[rows].mean()),
            "spo/rho": float(raw[rows].mean()),
            "spo/rho_clipped": float(rho_rows[rows].mean()),
            "spo/rho_clip_ratio": float((rho_rows[rows] != raw[rows]).mean()),
            "spo/first_sampled_ratio": float(len(first) / max(len(rows), 1)),
        }
        return rho_of, metrics

    def _rows_of(self, batch: DataProto, prompt_len: int, response_len: int) -> list[_PastResponse]:
        """Each row of ``batch`` unpadded (:class:`_PastResponse`, log-probs zero until a pass fills them)."""
        ids, mask = batch.batch["input_ids"], batch.batch["attention_mask"].bool()
        loss_mask = batch.batch["response_mask"].bool()
        out = []
        for i in range(len(batch)):
            r = int(mask[i, prompt_len:].sum())
            out.append(
                _PastResponse(
                    ids[i, :prompt_len][mask[i, :prompt_len]].to(torch.int32),
                    ids[i, prompt_len : prompt_len + r].to(torch.int32),
                    loss_mask[i, :r].clone(),
                    torch.zeros(r, dtype=torch.float32),
                )
            )
        return out

    def _rebuild(self, rows: list[_PastResponse], prompt_len: int, response_len: int) -> DataProto:
        """Rows in the rollout layout, ``[rows, prompt_len + response_len]``: the prompt left-padded, the response
        right-padded, positions counted over the real tokens."""
        width = prompt_len + response_len
        n = len(rows)
        input_ids = torch.full((n, width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((n, width), dtype=torch.long)
        loss_mask = torch.zeros((n, response_len), dtype=torch.long)
        for i, row in enumerate(rows):
            p, r = len(row.prompt_ids), len(row.response_ids)
            if p > prompt_len or r > response_len:
                raise ValueError(
                    f"algorithm.spo: a stored response ({p} prompt + {r} response tokens) is longer than this run's "
                    f"layout ({prompt_len} + {response_len}): data.max_prompt_length or the response length shrank "
                    "since it was stored (a resumed run must keep them)"
                )
            input_ids[i, prompt_len - p : prompt_len] = row.prompt_ids.long()
            input_ids[i, prompt_len : prompt_len + r] = row.response_ids.long()
            attention[i, prompt_len - p : prompt_len + r] = 1
            loss_mask[i, :r] = row.response_mask.long()
        positions = torch.clamp(torch.cumsum(attention, dim=-1) - 1, min=0)
        tensors = {
            "input_ids": input_ids,
            "attention_mask": attention,
            "position_ids": positions,
            "responses": input_ids[:, prompt_len:].clone(),
            "response_mask": loss_mask,
        }
        return DataProto.from_dict(tensors=tensors, meta_info={})

    # ------------------------------------------------------------------------------------------ checkpoint
    def state_dict(self) -> dict[str, Any]:
        """The tracker and the stored responses, flat (one tensor per field plus lengths), for ``data.pt``."""
        keys = sorted(self.past)
        past = [self.past[k] for k in keys]

        def flat(field: str, dtype: torch.dtype) -> torch.Tensor:
            parts = [getattr(p, field) for p in past]
            return torch.cat(parts).to(dtype) if parts else torch.zeros(0, dtype=dtype)

        return {
            "tracker": self.tracker.state_dict(),
            "past_keys": keys,
            "past_prompt_lengths": [len(p.prompt_ids) for p in past],
            "past_response_lengths": [len(p.response_ids) for p in past],
            "past_prompt_ids": flat("prompt_ids", torch.int32),
            "past_response_ids": flat("response_ids", torch.int32),
            "past_response_mask": flat("response_mask", torch.bool),
            "past_log_probs": flat("log_probs", torch.float32),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.tracker.load_state_dict(state["tracker"])
        self.past = {}
        p_off = r_off = 0
        for key, p, r in zip(state["past_keys"], state["past_prompt_lengths"], state["past_response_lengths"]):
            self.past[key] = _PastResponse(
                state["past_prompt_ids"][p_off : p_off + p].clone(),
                state["past_response_ids"][r_off : r_off + r].clone(),
                state["past_response_mask"][r_off : r_off + r].clone(),
                state["past_log_probs"][r_off : r_off + r].clone(),
            )
            p_off, r_off = p_off + p, r_off + r

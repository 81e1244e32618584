"""What one PPO step consumes, computed from the config before anything loads.

verl's batch keys multiply in ways few people predict: ``data.train_batch_size`` and ``ppo_mini_batch_size`` count
prompts, ``rollout.n`` multiplies them into sequences, the ranks ``trainer.nnodes * trainer.n_gpus_per_node`` (divided
by the Ulysses group size) share each mini-batch, and ``ppo_micro_batch_size_per_gpu`` (or a token budget with
``use_dynamic_bsz``) cuts a rank's share into gradient-accumulation micro-batches. :func:`step_plan` spells the chain
out, each figure with the keys and the arithmetic that produced it; entry points print it at start and with
``--cfg job`` (on stderr, so the YAML on stdout stays the config), and the run directory keeps it as
``step_plan.json`` for the report. The checks that refuse inconsistent settings are in
:mod:`verl.trainer.config.ppo_checks`; this module assumes a config that passed them.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass
from typing import Any

from omegaconf import DictConfig

from verl.reporting.report.run_files import STEP_PLAN_FILE
from verl.trainer.config.log_prob_passes import bypass_mode, runs_old_log_prob_pass
from verl.trainer.config.parallel_checks import sp_size, world_size
from verl.trainer.config.ppo_checks import critic_enabled, need_reference_policy

__all__ = ["PLAN_FILE", "PlanRow", "format_plan", "step_plan", "write_plan"]

PLAN_FILE = STEP_PLAN_FILE


@dataclass(frozen=True)
class PlanRow:
    """One figure of a step: ``what`` it counts, its ``value`` and ``how`` verl's keys produce it."""

    what: str
    value: int | str
    how: str


def _micro_rows(
    who: str, seqs: int, section: Any, micro_key: str, dynamic_key: str, budget_key: str, seq_len: int, sp: int
) -> list[PlanRow]:
    """Micro-batches per rank for ``seqs`` sequences of one rank, fixed-size or packed by tokens."""
    if bool(section[dynamic_key]):
        # a micro-batch of the sequence-parallel group may carry sp times the per-GPU budget (verl's rule)
        budget = int(section[budget_key]) * sp
        least = math.ceil(seqs * seq_len / budget)
        return [
            PlanRow(
                "micro-batches per rank",
                f">= {least} (by tokens)",
                f"{who}.{dynamic_key}=true packs sequences up to {who}.{budget_key} * sp = {budget} tokens: "
                f"ceil({seqs} sequences * {seq_len} tokens / {budget}) = {least} at full length",
            )
        ]
    micro = int(section[micro_key])
    return [
        PlanRow(
            "micro-batches per rank",
            math.ceil(seqs / micro),
            f"{seqs} sequences / {who}.{micro_key}={micro}",
        )
    ]


def _update_rows(
    label: str, who: str, section: Any, prompts: int, n: int, dp: int, seq_len: int, sp: int
) -> list[PlanRow]:
    mini, epochs = int(section.ppo_mini_batch_size), int(section.ppo_epochs)
    minis = prompts // mini
    per_rank = mini * n // dp
    rows = [
        PlanRow(
            f"{label}: optimizer steps per step",
            minis * epochs,
            f"(data.train_batch_size / {who}.ppo_mini_batch_size) * {who}.ppo_epochs = ({prompts} / {mini}) * {epochs}",
        ),
        PlanRow(
            f"{label}: sequences per rank per mini-batch",
            per_rank,
            f"{who}.ppo_mini_batch_size * rollout.n / data-parallel ranks = {mini} * {n} / {dp}",
        ),
    ]
    keys = ("ppo_micro_batch_size_per_gpu", "use_dynamic_bsz", "ppo_max_token_len_per_gpu")
    micro = [
        PlanRow(f"{label}: {r.what} per mini-batch", r.value, r.how)
        for r in _micro_rows(who, per_rank, section, *keys, seq_len, sp)
    ]
    rows += micro
    if not bool(section.use_dynamic_bsz):
        rows.append(
            PlanRow(
                f"{label}: gradient accumulation",
                micro[0].value,
                "micro-batches per rank per mini-batch, one optimizer step per mini-batch",
            )
        )
    return rows


def step_plan(cfg: DictConfig) -> list[PlanRow]:
    """The figures of one training step of the PPO config ``cfg`` (a config that passed validation)."""
    arr, data = cfg.actor_rollout_ref, cfg.data
    prompts, n = int(data.train_batch_size), int(arr.rollout.n)
    prompt_len, response_len = int(data.max_prompt_length), int(data.max_response_length)
    seq_len = prompt_len + response_len
    world = world_size(cfg)
    actor_sp = sp_size(arr.actor)
    dp = world // actor_sp
    rows = [
        PlanRow("prompts per step", prompts, "data.train_batch_size"),
        PlanRow(
            "responses per step", prompts * n, f"data.train_batch_size * actor_rollout_ref.rollout.n = {prompts} * {n}"
        ),
        PlanRow(
            "tokens per step (upper bound)",
            prompts * n * seq_len,
            f"responses * (data.max_prompt_length + data.max_response_length) = {prompts * n} * "
            f"({prompt_len} + {response_len})",
        ),
        PlanRow(
            "ranks (data-parallel)",
            f"{world} ({dp})",
            f"trainer.nnodes * trainer.n_gpus_per_node = {cfg.trainer.nnodes} * {cfg.trainer.n_gpus_per_node}; "
            f"/ actor ulysses_sequence_parallel_size {actor_sp}",
        ),
    ]
    if cfg.algorithm.filter_groups.enable:
        gen = int(data.gen_batch_size) if data.get("gen_batch_size") is not None else prompts
        max_gen = int(cfg.algorithm.filter_groups.max_num_gen_batches)
        rounds = f"at most {max_gen} rounds" if max_gen > 0 else "no round limit"
        rows.insert(
            1,
            PlanRow(
                "prompts per generation round",
                gen,
                f"data.gen_batch_size; rounds until data.train_batch_size groups with varied "
                f"{cfg.algorithm.filter_groups.metric} are kept, {rounds} (filter_groups.max_num_gen_batches)",
            ),
        )
    forward_seqs = prompts * n // dp
    if not runs_old_log_prob_pass(cfg):
        why = (
            "algorithm.rollout_correction.bypass_mode: the rollout's log-probs are the old policy's"
            if bypass_mode(cfg.algorithm.rollout_correction)
            else "the update is exactly on-policy (actor.skip_old_log_prob_on_policy)"
        )
        rows.append(PlanRow("old log-prob pass", "skipped", why))
    else:
        rows += [
            PlanRow(f"old log-prob pass: {r.what}", r.value, r.how)
            for r in _micro_rows(
                "actor_rollout_ref.rollout",
                forward_seqs,
                arr.rollout,
                "log_prob_micro_batch_size_per_gpu",
                "log_prob_use_dynamic_bsz",
                "log_prob_max_token_len_per_gpu",
                seq_len,
                actor_sp,
            )
        ]
    if need_reference_policy(cfg):
        ref_dp = world // sp_size(arr.ref)
        rows += [
            PlanRow(f"reference log-prob pass: {r.what}", r.value, r.how)
            for r in _micro_rows(
                "actor_rollout_ref.ref",
                prompts * n // ref_dp,
                arr.ref,
                "log_prob_micro_batch_size_per_gpu",
                "log_prob_use_dynamic_bsz",
                "log_prob_max_token_len_per_gpu",
                seq_len,
                sp_size(arr.ref),
            )
        ]
    rows += _update_rows("actor update", "actor_rollout_ref.actor", arr.actor, prompts, n, dp, seq_len, actor_sp)
    if critic_enabled(cfg):
        critic_sp = sp_size(cfg.critic)
        rows += _update_rows("critic update", "critic", cfg.critic, prompts, n, world // critic_sp, seq_len, critic_sp)
    return rows


def format_plan(rows: list[PlanRow]) -> str:
    """The plan as aligned text lines: ``what  value  (how)``."""
    width = max(len(r.what) for r in rows)
    value_width = max(len(str(r.value)) for r in rows)
    lines = ["one step of this run:"]
    lines += [f"  {r.what:<{width}}  {r.value!s:>{value_width}}  ({r.how})" for r in rows]
    return "\n".join(lines)


def write_plan(rows: list[PlanRow], run_dir: str) -> str:
    """Write ``run_dir/step_plan.json`` atomically; returns its path."""
    os.makedirs(run_dir, exist_ok=True)
    path = os.path.join(run_dir, PLAN_FILE)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump([asdict(r) for r in rows], f, indent=1)
    os.replace(tmp, path)
    return path

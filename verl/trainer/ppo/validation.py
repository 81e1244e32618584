"""Validation of the PPO driver: greedy generation on the validation set, scoring, verl's metric names.

``run_validation(trainer)`` returns ``val-core/<data_source>/<var>/{mean,best,maj}@N`` metrics and, with
``trainer.validation_data_dir``, dumps every generation to ``<dir>/<global_step>.jsonl``; with
``trainer.log_val_generations=N`` it logs N of them to the tracker as a table (:func:`select_generations_to_log`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from verl.experimental.agent_loop.metrics import compute_agent_metrics
from verl.protocol import DataProto
from verl.trainer.ppo.batch_rollout import decode_generations
from verl.trainer.ppo.metric_utils import flatten_validation_metrics, process_validation_metrics
from verl.trainer.ppo.sessions import final_rows


def select_generations_to_log(
    inputs: list[str], outputs: list[str], scores: list[float], n: int, seed: int = 42
) -> list[dict[str, object]]:
    """``n`` of the validation generations as ``{"input", "output", "score"}`` rows, chosen as verl does: sorted by
    input, shuffled with a fixed seed, the first ``n`` kept, so every validation pass shows the same prompts."""
    rows = sorted(zip(inputs, outputs, scores), key=lambda row: row[0])
    np.random.RandomState(seed).shuffle(rows)
    return [{"input": i, "output": o, "score": float(s)} for i, o, s in rows[: max(int(n), 0)]]


def run_validation(trainer: Any) -> dict[str, float]:
    """Generate ``val_kwargs.n`` responses per validation prompt (greedy by default), score and reduce them.

    ``trainer`` is the driver (:class:`~verl.trainer.ppo.ray_trainer.RayPPOTrainer`, which imports this module):
    its ``generate_groups``, ``score``, ``val_dataloader``, ``val_reward_fn`` and tracker are used."""
    if trainer.val_dataloader is None or trainer.val_reward_fn is None:
        return {}
    val_kwargs = trainer.config.actor_rollout_ref.rollout.val_kwargs
    n = int(val_kwargs.n)
    max_samples = int(trainer.config.data.val_max_samples or -1)
    sources: list[str] = []
    uids: list[str] = []
    infos: dict[str, list] = {"reward": []}
    dump_dir = trainer.config.trainer.validation_data_dir
    n_logged = int(trainer.config.trainer.log_val_generations or 0)
    dumped: dict[str, list] = {"prompts": [], "responses": [], "scores": [], "ground_truth": []}
    seen = 0
    agent_columns: dict[str, list] = {}
    for batch_dict in trainer.val_dataloader:
        batch = DataProto.from_single_dict(batch_dict)
        if max_samples > 0:
            if seen >= max_samples:
                break
            batch = batch[: max_samples - seen]
        seen += len(batch)
        meta = {"validate": True, "do_sample": bool(val_kwargs.do_sample)}
        batch = final_rows(trainer.generate_groups(batch, n, **meta))  # one row per trajectory is scored
        batch, scores, extra = trainer.score(batch, trainer.val_reward_fn)
        infos["reward"].extend(scores.sum(-1).tolist())
        for key, values in extra.items():
            if len(values) == len(batch):
                infos.setdefault(key, []).extend(values)
        if dump_dir or n_logged > 0:
            prompts, responses, dump_extra = decode_generations(trainer.tokenizer, batch)
            dumped["prompts"].extend(prompts)
            dumped["responses"].extend(responses)
            dumped["scores"].extend(scores.sum(-1).tolist())
            dumped["ground_truth"].extend(dump_extra.get("ground_truth", [""] * len(batch)))
        sources.extend(batch.non_tensor_batch.get("data_source", np.array(["unknown"] * len(batch))).tolist())
        uids.extend(batch.non_tensor_batch["uid"].tolist())
        for key in ("agent_metrics", "agent_reward"):  # multi-turn rollouts: val-agent/* metrics
            if key in batch.non_tensor_batch:
                agent_columns.setdefault(key, []).extend(batch.non_tensor_batch[key].tolist())
    infos = {k: v for k, v in infos.items() if len(v) == len(sources)}
    tracker = trainer.report.tracker
    if n_logged > 0 and tracker is not None and sources:
        rows = select_generations_to_log(dumped["prompts"], dumped["responses"], dumped["scores"], n_logged)
        tracker.log_generations(rows, trainer.global_steps)
    if dump_dir and sources:
        from verl.reporting import dump_rollout_jsonl

        # trainer.validation_data_dir: <dir>/<global_step>.jsonl with every validation generation of this pass
        dump_rollout_jsonl(
            trainer._namespaced(dump_dir),
            trainer.global_steps,
            dumped["prompts"],
            dumped["responses"],
            dumped["scores"],
            {"ground_truth": dumped["ground_truth"]},
        )
    metrics = flatten_validation_metrics(process_validation_metrics(sources, uids, infos))
    agent = compute_agent_metrics({k: np.array(v, dtype=object) for k, v in agent_columns.items()})
    metrics.update({f"val-{k}": v for k, v in agent.items()})
    return metrics

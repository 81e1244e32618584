"""Upstream v0.9's ``verl/trainer/ppo/v1/utils.py`` advantage functions, for batches where one trajectory (a
*session*) gave several training rows (:mod:`verl.trainer.ppo.sessions`).

Rows are named by upstream's keys ``{uid}_{session_id}_{index}``: ``uid`` the prompt's group, ``session_id`` the
trajectory, ``index`` the row's position in it (the highest is the session's final output). For GRPO the group
statistics are computed over the final outputs only (one per trajectory, as if the trajectory had given one row),
and each other row of a session takes its final output's advantage: the value at the final row's first response
token, times the row's own ``response_mask``. Every other estimator is delegated unchanged, row by row.
"""

from __future__ import annotations

from typing import Any

import torch

from verl.protocol import DataProto
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.batch_transforms import compute_advantage as _compute_advantage
from verl.trainer.ppo.batch_transforms import compute_response_mask

__all__ = ["compute_advantage", "compute_advantage_for_multi_trajectories"]


def compute_advantage(
    data: DataProto,
    adv_estimator: Any,
    gamma: float = 1.0,
    lam: float = 1.0,
    num_repeat: int = 1,
    norm_adv_by_std_in_grpo: bool = True,
    config: Any = None,
) -> DataProto:
    """Upstream's ``compute_advantage`` signature (explicit ``gamma``/``lam``/``norm_adv_by_std_in_grpo``,
    ``config`` the ``algorithm`` section or None): fills ``advantages``/``returns [rows, response_len]`` through
    :func:`verl.trainer.ppo.batch_transforms.compute_advantage` (the registered estimators, groups by ``uid``)."""
    return _compute_advantage(
        data,
        adv_estimator,
        gamma=gamma,
        lam=lam,
        num_repeat=num_repeat,
        norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo,
        config=config,
    )


def _is_grpo(adv_estimator: Any) -> bool:
    return str(getattr(adv_estimator, "value", adv_estimator)) == core_algos.AdvantageEstimator.GRPO.value


def compute_advantage_for_multi_trajectories(
    data: DataProto,
    batch_keys: list[str],
    adv_estimator: Any,
    gamma: float = 1.0,
    lam: float = 1.0,
    num_repeat: int = 1,
    norm_adv_by_std_in_grpo: bool = True,
    config: Any = None,
) -> DataProto:
    """Advantages ``[rows, response_len]`` of a batch whose rows are named by ``batch_keys``
    (``{uid}_{session_id}_{index}``, one per row of ``data``).

    GRPO: :func:`compute_advantage` on the final row of each ``{uid}_{session_id}`` (the highest ``index``);
    every row ``r`` of that session then gets ``A[r, t] = A_final[t0] * response_mask[r, t]`` with ``t0`` the final
    row's first response token (its advantage is one value per row). ``returns`` equal ``advantages``, as GRPO's
    do. Other estimators: :func:`compute_advantage` on every row, unchanged. Returns ``data`` (filled in place).
    """
    if not _is_grpo(adv_estimator):
        return compute_advantage(data, adv_estimator, gamma, lam, num_repeat, norm_adv_by_std_in_grpo, config)
    if len(batch_keys) != len(data):
        raise ValueError(f"batch_keys has {len(batch_keys)} keys for {len(data)} rows")
    if "response_mask" not in data.batch.keys():
        data.batch["response_mask"] = compute_response_mask(data)
    final: dict[str, tuple[int, int]] = {}  # session -> (highest index, its row)
    sessions = []
    for row, key in enumerate(batch_keys):
        parts = str(key).rsplit("_", 2)
        if len(parts) != 3 or not parts[2].lstrip("-").isdigit():
            raise ValueError(f"batch_keys[{row}]={key!r}: expected {{uid}}_{{session_id}}_{{index}}")
        session, index = f"{parts[0]}_{parts[1]}", int(parts[2])
        sessions.append(session)
        if session not in final or final[session][0] < index:
            final[session] = (index, row)
    final_rows = [row for _, row in final.values()]
    local = {session: k for k, session in enumerate(final)}
    finals = compute_advantage(
        data.select_idxs(final_rows), adv_estimator, gamma, lam, num_repeat, norm_adv_by_std_in_grpo, config
    )
    first = finals.batch["response_mask"].argmax(dim=1)
    per_session = finals.batch["advantages"][torch.arange(len(final_rows)), first]
    source = torch.tensor([local[s] for s in sessions], dtype=torch.long)
    mask = data.batch["response_mask"]
    advantages = per_session[source].unsqueeze(-1).to(mask.device) * mask
    data.batch["advantages"] = advantages
    data.batch["returns"] = advantages.clone()
    return data

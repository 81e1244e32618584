"""The asynchronous reward-manager interface of verl's reward loop: score one sample per coroutine.

A reward-loop manager is built as ``cls(config, tokenizer, compute_score)`` (``config`` holds a ``reward`` section)
and scores one sample with ``await manager.run_single(data)`` -> ``{"reward_score": float, "reward_extra_info":
dict}``, where ``data`` is a one-row (or, for multi-sequence outputs, several-row: the last row is scored)
:class:`~verl.protocol.DataProto` holding ``responses [n, R]``, ``attention_mask [n, P+R]`` (or ``[n, R]``) and the
non-tensors ``data_source``, ``reward_model`` (``{"ground_truth": ...}``) and optionally ``extra_info``.

The same managers are also batch reward functions: ``manager(data, return_dict=False)`` scores every row
concurrently and places each score at the row's last valid response token, like the reward managers of
:mod:`verl.workers.reward_manager` (whose reward functions, ``default_compute_score`` and overlong penalty they
share). Upstream's Ray reward-loop workers and reward-model servers are not part of this package.
"""

from __future__ import annotations

import asyncio
import inspect
import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import torch

from verl.protocol import DataProto
from verl.workers.reward_manager.abstract import ground_truth_of

__all__ = [
    "RawRewardFn",
    "RewardManagerBase",
    "call_reward_fn",
    "decode_last_response",
    "refuse_reward_model_kwargs",
    "split_result",
]

RawRewardFn = Callable[..., Any] | None


def decode_last_response(
    tokenizer: Any, data: DataProto, data_source_key: str = "data_source"
) -> tuple[str, int, dict[str, Any]]:
    """The last row of ``data``: ``(response text, valid response length, reward-function kwargs)``.

    The valid response tokens are the first ``attention_mask[-R:].sum()`` of ``responses [n, R]`` (right padding, as
    the rollout writes them). The kwargs are ``data_source`` (the ``data_source_key`` column), ``ground_truth`` and
    ``extra_info`` (a fresh dict: the row's ``extra_info`` updated with its ``tool_extra_fields``, when the agent loop
    recorded any).
    """
    row = data[len(data) - 1]
    responses = row.batch["responses"]
    valid = int(row.batch["attention_mask"][-responses.shape[-1] :].sum())
    text = tokenizer.decode(responses[:valid], skip_special_tokens=True)
    ntb = row.non_tensor_batch
    for key in (data_source_key, "reward_model"):
        if key not in ntb:
            raise KeyError(f"reward loop: the sample has no non-tensor {key!r}; keys: {sorted(ntb)}")
    extra_info = dict(ntb.get("extra_info") or {})
    tool_fields = ntb.get("tool_extra_fields")
    if tool_fields is not None:
        extra_info.update(dict(tool_fields))
    kwargs = {
        "data_source": ntb[data_source_key],
        "ground_truth": ground_truth_of(ntb["reward_model"]),
        "extra_info": extra_info,
    }
    return text, valid, kwargs


async def call_reward_fn(compute_score: Callable[..., Any], **kwargs: Any) -> Any:
    """Await ``compute_score(**kwargs)`` when it is a coroutine function, else run it in the loop's thread pool so a
    slow synchronous scorer does not hold up the other samples."""
    if inspect.iscoroutinefunction(compute_score):
        return await compute_score(**kwargs)
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(None, lambda: compute_score(**kwargs))


def split_result(result: Any) -> tuple[float, dict[str, Any]]:
    """A reward function's result as ``(score, reward_extra_info)``: a dict gives its ``"score"`` and all its items
    as extra info; a number is the score and is recorded as ``acc``."""
    if isinstance(result, dict):
        if "score" not in result:
            raise ValueError(f"reward function returned a dict without 'score' (keys: {sorted(result)})")
        return float(result["score"]), dict(result)
    return float(result), {"acc": float(result)}


def refuse_reward_model_kwargs(name: str, reward_router_address: Any, reward_model_tokenizer: Any) -> None:
    """verl's reward-loop managers also take ``reward_router_address`` / ``reward_model_tokenizer`` (a served
    reward model handed to the reward function); there is no such server here, so a value other than None is
    refused."""
    for key, value in (
        ("reward_router_address", reward_router_address),
        ("reward_model_tokenizer", reward_model_tokenizer),
    ):
        if value is not None:
            raise ValueError(
                f"{name}: {key} names upstream's reward-model router, which this verl does not serve; score with a "
                "reward function (reward_model.judge for an LLM judge, docs/data_and_rewards.md)"
            )


class RewardManagerBase(ABC):
    """Base of the reward-loop managers (verl's ``verl.experimental.reward_loop.reward_manager.base``).

    Args:
        config: the run config (DictConfig or dict) with a ``reward`` section.
        tokenizer: decodes the response tokens.
        compute_score: the reward function (sync or ``async``); None: :func:`verl.rewards.default_compute_score`.

    ``init_class(config, tokenizer)`` runs once per class (the first instance's config) for state shared by every
    instance of the class in the process, such as the rate limiters of ``rate_limited``.
    """

    _class_initialized = False

    def __init__(self, config: Any, tokenizer: Any, compute_score: RawRewardFn) -> None:
        if compute_score is None:
            from verl.rewards import default_compute_score

            compute_score = default_compute_score
        self.config = config
        self.tokenizer = tokenizer
        self.compute_score = compute_score
        self.is_async_reward_score = inspect.iscoroutinefunction(compute_score)
        self._own_loop: asyncio.AbstractEventLoop | None = None
        self.init_class(config, tokenizer)

    @classmethod
    def init_class(cls, config: Any, tokenizer: Any) -> None:
        """Set up the class-wide state once (no-op here; subclasses extend it)."""
        cls._class_initialized = True

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The running event loop, or (outside one) an event loop this manager keeps for its synchronous calls."""
        try:
            return asyncio.get_running_loop()
        except RuntimeError:
            if self._own_loop is None or self._own_loop.is_closed():
                self._own_loop = asyncio.new_event_loop()
            return self._own_loop

    def close(self) -> None:
        """Close the event loop this manager kept for its synchronous calls (a later call makes a new one)."""
        if self._own_loop is not None and not self._own_loop.is_closed():
            self._own_loop.close()
        self._own_loop = None

    @abstractmethod
    async def run_single(self, data: DataProto) -> dict[str, Any]:
        """Score the last row of ``data``: ``{"reward_score": float, "reward_extra_info": dict}``."""

    async def score_last_row(
        self, data: DataProto, extra_info: dict[str, Any] | None = None
    ) -> tuple[float, dict[str, Any], int]:
        """Decode the last row, call the reward function: ``(score, reward_extra_info, valid response length)``;
        ``extra_info`` entries are added to the row's ``extra_info`` for the call."""
        text, valid, kwargs = decode_last_response(self.tokenizer, data)
        kwargs["extra_info"].update(extra_info or {})
        result = await call_reward_fn(self.compute_score, solution_str=text, **kwargs)
        score, extra = split_result(result)
        return score, extra, valid

    @classmethod
    def assemble_rm_scores(cls, data: DataProto, scores: list[float]) -> torch.Tensor:
        """``rm_scores [bs, R]``: zeros with ``scores[i]`` at row i's last valid response token (position 0 for an
        empty response). The valid length is ``attention_mask[:, -R:].sum(-1)``."""
        responses = data.batch["responses"]
        valid = data.batch["attention_mask"][:, -responses.shape[-1] :].sum(-1)
        rm_scores = torch.zeros(responses.shape, dtype=torch.float32, device=responses.device)
        rows = torch.arange(len(scores), device=responses.device)
        rm_scores[rows, (valid - 1).clamp(min=0)] = torch.tensor(scores, dtype=torch.float32, device=responses.device)
        return rm_scores

    def __call__(self, data: DataProto, return_dict: bool = False) -> torch.Tensor | dict[str, Any]:
        """Score every row of ``data`` concurrently (one :meth:`run_single` each) from synchronous code.

        Returns ``reward_tensor [bs, R]`` (see :meth:`assemble_rm_scores`) or, with ``return_dict``,
        ``{"reward_tensor", "reward_extra_info"}`` with one value per row for each extra key (NaN where a row did
        not report it). A batch that already carries ``rm_scores`` is returned as it is.
        """
        if "rm_scores" in data.batch.keys():
            scores = data.batch["rm_scores"]
            return {"reward_tensor": scores, "reward_extra_info": {}} if return_dict else scores
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise RuntimeError(
                f"{type(self).__name__}(data) blocks; inside an event loop await run_single for each row instead"
            )

        async def score_all() -> list[dict[str, Any]]:
            return await asyncio.gather(*(self.run_single(data[i : i + 1]) for i in range(len(data))))

        results = self.loop.run_until_complete(score_all())
        reward_tensor = self.assemble_rm_scores(data, [float(r["reward_score"]) for r in results])
        if not return_dict:
            return reward_tensor
        keys: list[str] = []
        for r in results:
            keys.extend(k for k in r["reward_extra_info"] if k not in keys)
        extra = {k: [r["reward_extra_info"].get(k, math.nan) for r in results] for k in keys}
        return {"reward_tensor": reward_tensor, "reward_extra_info": extra}

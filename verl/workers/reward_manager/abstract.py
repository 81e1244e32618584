"""Shared machinery of the reward managers: decode responses, call the reward function safely, place scores.

A reward manager turns a rollout batch into ``reward_tensor [bs, response_len]`` holding each sample's score at
its last valid response token (zeros elsewhere), plus ``reward_extra_info`` (name -> list of length bs) with the
extra values that dict-returning reward functions report.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from verl.protocol.rollout_text import decode_prompt_response, rollout_row_ids
from verl.sandbox.process_pool import PoolTaskError, ProcessPool, default_num_workers
from verl.utils.logging_utils import console_write

logger = logging.getLogger(__name__)

ON_ERROR_MODES = ("fail", "zero")
# Key of the per-sample 0/1 error flags and of the aggregate (a one-element list the trainer sums into a metric).
ERROR_FLAG_KEY = "reward_error"
NUM_ERRORS_KEY = "reward/num_errors"
_FLOAT32_MAX = float(np.finfo(np.float32).max)


class RewardComputationError(RuntimeError):
    """A reward function failed for one sample (raised under ``on_error='fail'``)."""


class RewardTimeoutError(TimeoutError):
    """A reward function ran longer than its time limit."""


@dataclass
class Sample:
    """One decoded row of the batch, as handed to the reward function."""

    index: int
    data_source: str
    prompt_str: str
    response_str: str
    ground_truth: Any
    extra_info: dict[str, Any] | None
    valid_response_length: int


def _as_float(value: Any) -> float:
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"score tensor must have one element, got shape {tuple(value.shape)}")
        value = value.item()
    if isinstance(value, np.generic):
        value = value.item()
    if value is None:
        raise ValueError("reward function returned None")
    if not isinstance(value, int | float):  # bool is an int: True -> 1.0
        raise ValueError(f"score must be a number, got {type(value).__name__}: {value!r:.100}")
    score = float(value)
    if not math.isfinite(score):
        raise ValueError(f"reward function returned a non-finite score {score}")
    if abs(score) > _FLOAT32_MAX:  # would become inf in the float32 reward tensor and poison the advantages
        raise ValueError(f"reward function returned {score:g}, beyond the float32 range of the reward tensor")
    return score


def normalize_result(result: Any) -> tuple[float, dict[str, Any]]:
    """Split a reward function result into ``(score, extras)``.

    A number is the score; a dict must hold ``"score"`` and its other keys are extras. An Exception instance
    (per-sample error from a batch function) is raised. None, NaN/inf and non-numbers raise ValueError.
    """
    if isinstance(result, BaseException):
        raise result
    if isinstance(result, dict):
        if "score" not in result:
            raise ValueError(f"reward function returned a dict without 'score' (keys: {sorted(result)})")
        extras = {k: v for k, v in result.items() if k != "score"}
        return _as_float(result["score"]), extras
    return _as_float(result), {}


def ground_truth_of(reward_model: Any) -> Any:
    """The ground truth of a row's ``reward_model`` column entry (None when it has none)."""
    return reward_model.get("ground_truth") if isinstance(reward_model, dict) else None


class AbstractRewardManager:
    """Base of the registered reward managers. Subclasses implement ``score_samples``.

    Args:
        tokenizer: decodes prompts and responses.
        num_examine: how many samples per data source to print (for eyeballing).
        compute_score: the reward function (see ``verl.rewards``); None: ``default_compute_score``.
        reward_fn_key: non-tensor key holding the data source name.
        on_error: ``fail`` (raise naming the sample) or ``zero`` (score 0, counted in ``reward_error``).
        timeout_s: time limit of one reward function call, counted from its start (None or <= 0: none).
        batch_timeout_s: deadline of one batch, counted from the start of scoring; calls still running then are
            killed and calls not started fail (None or <= 0: none).
        num_workers: worker processes that run the reward function
            (:class:`verl.sandbox.process_pool.ProcessPool`); a call past a limit is killed there, and
            ``sys.exit``, ``os._exit`` or a crash fail only its sample. ``0`` calls it in this process (no time limit
            can stop it then, so none may be set). ``None``: a pool of ``min(8, CPUs)`` workers when a limit is set,
            else in this process.
    """

    def __init__(
        self,
        tokenizer: Any,
        num_examine: int,
        compute_score: Callable[..., Any] | None = None,
        reward_fn_key: str = "data_source",
        on_error: str = "fail",
        timeout_s: float | None = None,
        batch_timeout_s: float | None = None,
        num_workers: int | None = None,
        **kwargs: Any,
    ) -> None:
        if kwargs:
            raise TypeError(
                f"{type(self).__name__} got unknown arguments {sorted(kwargs)}; accepted: tokenizer, num_examine, "
                "compute_score, reward_fn_key, on_error, timeout_s, batch_timeout_s, num_workers"
                + self._extra_arg_names()
            )
        if on_error not in ON_ERROR_MODES:
            raise ValueError(f"reward_model.on_error must be one of {list(ON_ERROR_MODES)}, got {on_error!r}")
        if compute_score is None:
            from verl.rewards import default_compute_score

            compute_score = default_compute_score
        limited = any(t is not None and t > 0 for t in (timeout_s, batch_timeout_s))
        if num_workers is not None and int(num_workers) < 0:
            raise ValueError(f"reward_model.num_workers must be >= 0 (0: in the trainer process), got {num_workers}")
        if num_workers is not None and int(num_workers) == 0 and limited:
            raise ValueError(
                f"reward_model.num_workers=0 runs the reward function in the trainer process, where a time limit "
                f"cannot stop it; unset reward_model.timeout_s ({timeout_s}) and batch_timeout_s "
                f"({batch_timeout_s}) or use worker processes (num_workers >= 1)"
            )
        self.tokenizer = tokenizer
        self.num_examine = int(num_examine)
        self.compute_score = compute_score
        self.reward_fn_key = reward_fn_key
        self.on_error = on_error
        self.timeout_s = timeout_s
        self.batch_timeout_s = batch_timeout_s
        if num_workers is None:
            num_workers = default_num_workers() if limited else 0
        self.num_workers = int(num_workers)
        # Built now so a function that cannot travel to the workers fails here, not at the first batch.
        self._pool = ProcessPool(compute_score, self.num_workers, name="reward") if self.num_workers else None

    def call_reward_fn(self, inputs: list[dict[str, Any]], timeout_s: float | None) -> list[Any]:
        """``compute_score(**kwargs)`` for each kwargs in ``inputs``: one result or Exception per input.

        In the worker pool each call is limited to ``timeout_s`` and the whole list to ``batch_timeout_s``; a
        call over a limit is killed and gets a :class:`RewardTimeoutError`. ``SystemExit`` and any other failure
        become that input's Exception; the caller's ``on_error`` decides the score.
        """
        if self._pool is None:
            results: list[Any] = []
            for kwargs in inputs:
                try:
                    results.append(self.compute_score(**kwargs))
                except SystemExit as e:  # a reward function must not end the run
                    results.append(RewardComputationError(f"SystemExit({e.code!r}) (sys.exit called)"))
                except Exception as e:
                    results.append(e)
            return results
        results = self._pool.map(inputs, task_timeout_s=timeout_s, deadline_s=self.batch_timeout_s)
        return [
            RewardTimeoutError(str(r)) if isinstance(r, PoolTaskError) and r.kind == "timeout" else r for r in results
        ]

    def close(self) -> None:
        """Stop the reward worker processes (they start again if the manager is used afterwards). A verl-style
        subclass that never called this class's ``__init__`` has no pool: nothing to stop."""
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.close()

    def __getstate__(self) -> dict[str, Any]:
        # Worker processes belong to the process that started them; a copy elsewhere starts its own.
        state = dict(self.__dict__)
        state["_pool"] = None
        state["_pool_pending"] = self.num_workers > 0
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        pending = state.pop("_pool_pending", False)
        self.__dict__.update(state)
        if pending:
            self._pool = ProcessPool(self.compute_score, self.num_workers, name="reward")

    @classmethod
    def _extra_arg_names(cls) -> str:
        return ""

    # ------------------------------------------------------------------ to implement
    def score_samples(self, samples: list[Sample]) -> list[Any]:
        """Return one raw reward-function result (number, dict, or the Exception it raised) per sample."""
        raise NotImplementedError

    def postprocess(self, sample: Sample, score: float, extras: dict[str, Any]) -> float:
        """Hook to adjust a valid score (e.g. DAPO's overlong penalty); may add entries to ``extras``."""
        return score

    # ------------------------------------------------------------------ shared flow
    def _decode_samples(self, data: Any) -> list[Sample]:
        ntb = data.non_tensor_batch
        if self.reward_fn_key not in ntb:
            raise KeyError(
                f"reward manager: the batch has no non-tensor key {self.reward_fn_key!r} (data.reward_fn_key); "
                f"keys: {sorted(ntb)}"
            )
        if "reward_model" not in ntb:
            raise KeyError(f"reward manager: the batch has no 'reward_model' (ground truth); keys: {sorted(ntb)}")
        extra_infos = ntb.get("extra_info")
        turns = agent_turns(ntb)
        samples = []
        # the text every reward sees (verl.protocol.rollout_text): a multi-turn response is the whole conversation
        # after the prompt, its tool and user turns included; one device-to-host copy for the batch
        for i, (prompt_ids, response_ids) in enumerate(rollout_row_ids(data)):
            n_valid = len(response_ids)
            prompt_str, response_str = decode_prompt_response(self.tokenizer, prompt_ids, response_ids)
            samples.append(
                Sample(
                    index=i,
                    data_source=str(ntb[self.reward_fn_key][i]),
                    prompt_str=prompt_str,
                    response_str=response_str,
                    ground_truth=ground_truth_of(ntb["reward_model"][i]),
                    extra_info=_with_turns(None if extra_infos is None else extra_infos[i], turns, i),
                    valid_response_length=n_valid,
                )
            )
        return samples

    def _error(self, sample: Sample, error: BaseException) -> RewardComputationError:
        # a worker's report already starts with the exception type it caught there
        cause = str(error) if isinstance(error, PoolTaskError) else f"{type(error).__name__}: {error}"
        return RewardComputationError(
            f"reward for sample {sample.index} (data_source={sample.data_source!r}) failed: {cause}"
        )

    def __call__(self, data: Any, return_dict: bool = False) -> torch.Tensor | dict[str, Any]:
        """Score every row of ``data`` (a DataProto after rollout).

        Returns ``reward_tensor [bs, response_len]`` (score at the last valid response token), or with
        ``return_dict`` ``{"reward_tensor", "reward_extra_info"}``. If the batch already carries ``rm_scores``
        (a reward model ran), those are returned unchanged.
        """
        if "rm_scores" in data.batch.keys():
            rm_scores = data.batch["rm_scores"]
            return {"reward_tensor": rm_scores, "reward_extra_info": {}} if return_dict else rm_scores

        samples = self._decode_samples(data)
        responses = data.batch["responses"]
        reward_tensor = torch.zeros(responses.shape, dtype=torch.float32, device=responses.device)
        raw_results = self.score_samples(samples)
        if len(raw_results) != len(samples):
            raise RewardComputationError(
                f"{type(self).__name__}: reward function returned {len(raw_results)} results for {len(samples)} samples"
            )

        per_sample_extras: list[dict[str, Any]] = []
        error_flags: list[int] = []
        examined: dict[str, int] = defaultdict(int)
        for sample, raw in zip(samples, raw_results):
            try:
                score, extras = normalize_result(raw)
            except Exception as e:
                if self.on_error == "fail":
                    raise self._error(sample, e) from e
                logger.warning("%s; scoring it 0 (reward_model.on_error=zero)", self._error(sample, e))
                score, extras, failed = 0.0, {}, 1
            else:
                score = self.postprocess(sample, score, extras)
                failed = 0
            per_sample_extras.append(extras)
            error_flags.append(failed)
            # A response with no valid token still needs its score somewhere: position 0.
            reward_tensor[sample.index, max(sample.valid_response_length - 1, 0)] = score
            if examined[sample.data_source] < self.num_examine:
                examined[sample.data_source] += 1
                console_write(  # above the trainer's progress bar
                    f"[prompt] {sample.prompt_str}\n[response] {sample.response_str}\n"
                    f"[ground_truth] {sample.ground_truth}\n[score] {score}" + (" (error)" if failed else "")
                )

        # Every key gets one value per sample; samples that did not report a key get NaN.
        keys: list[str] = []
        for extras in per_sample_extras:
            keys.extend(k for k in extras if k not in keys)
        reward_extra_info: dict[str, list[Any]] = {
            k: [extras.get(k, float("nan")) for extras in per_sample_extras] for k in keys
        }
        if self.on_error == "zero":
            reward_extra_info[ERROR_FLAG_KEY] = error_flags
            reward_extra_info[NUM_ERRORS_KEY] = [sum(error_flags)]
        if return_dict:
            return {"reward_tensor": reward_tensor, "reward_extra_info": reward_extra_info}
        return reward_tensor


def agent_turns(ntb: dict[str, Any]) -> list[Any] | None:
    """Turns of each trajectory when the rollout went through agent loops (``agent_metrics[i]["num_turns"]``, or
    upstream's ``__num_turns__`` column), else None."""
    if "__num_turns__" in ntb:
        return [int(n) for n in ntb["__num_turns__"]]
    if "agent_metrics" in ntb:
        return [(m or {}).get("num_turns") for m in ntb["agent_metrics"]]
    return None


def _with_turns(extra_info: Any, turns: list[Any] | None, i: int) -> Any:
    """``extra_info`` with ``num_turns`` and ``rollout_reward_scores`` added for an agent-loop trajectory, as
    upstream's reward managers pass them (verl-recipe's ReTool scorer rewards tool use by ``num_turns``); a copy,
    so the batch's own rows are unchanged. Other rollouts: ``extra_info`` as it is."""
    if turns is None or not (extra_info is None or isinstance(extra_info, dict)):
        return extra_info
    return {**(extra_info or {}), "num_turns": turns[i], "rollout_reward_scores": {}}

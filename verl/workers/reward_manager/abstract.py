"""Shared machinery of the reward managers: decode responses, call the reward function safely, place scores.

A reward manager turns a rollout batch into ``reward_tensor [bs, response_len]`` holding each sample's score at
its last valid response token (zeros elsewhere), plus ``reward_extra_info`` (name -> list of length bs) with the
extra values that dict-returning reward functions report.
"""

from __future__ import annotations

import logging
import math
import threading
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

logger = logging.getLogger(__name__)

ON_ERROR_MODES = ("fail", "zero")
# Key of the per-sample 0/1 error flags and of the aggregate (a one-element list the trainer sums into a metric).
ERROR_FLAG_KEY = "reward_error"
NUM_ERRORS_KEY = "reward/num_errors"


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


def call_with_timeout(fn: Callable[..., Any], timeout_s: float | None, *args: Any, **kwargs: Any) -> Any:
    """Run ``fn(*args, **kwargs)`` in a daemon thread and wait at most ``timeout_s`` seconds.

    Raises RewardTimeoutError when it does not finish (the thread is abandoned: Python cannot stop a thread, and a
    daemon thread does not keep the process alive). ``timeout_s`` None or <= 0 calls ``fn`` directly. Exceptions
    of ``fn`` propagate.
    """
    if timeout_s is None or timeout_s <= 0:
        return fn(*args, **kwargs)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = fn(*args, **kwargs)
        except BaseException as e:  # re-raised in the caller's thread
            box["error"] = e

    thread = threading.Thread(target=target, daemon=True, name="reward-fn")
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise RewardTimeoutError(f"reward function did not return within {timeout_s:g}s")
    if "error" in box:
        raise box["error"]
    return box["result"]


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


class AbstractRewardManager:
    """Base of the registered reward managers. Subclasses implement ``score_samples``.

    Args:
        tokenizer: decodes prompts and responses.
        num_examine: how many samples per data source to print (for eyeballing).
        compute_score: the reward function (see ``verl.utils.reward_score``); None: ``default_compute_score``.
        reward_fn_key: non-tensor key holding the data source name.
        on_error: ``fail`` (raise naming the sample) or ``zero`` (score 0, counted in ``reward_error``).
        timeout_s: time limit of one reward function call (None or <= 0: none).
    """

    def __init__(
        self,
        tokenizer: Any,
        num_examine: int,
        compute_score: Callable[..., Any] | None = None,
        reward_fn_key: str = "data_source",
        on_error: str = "fail",
        timeout_s: float | None = None,
        **kwargs: Any,
    ) -> None:
        if kwargs:
            raise TypeError(
                f"{type(self).__name__} got unknown arguments {sorted(kwargs)}; accepted: tokenizer, num_examine, "
                "compute_score, reward_fn_key, on_error, timeout_s" + self._extra_arg_names()
            )
        if on_error not in ON_ERROR_MODES:
            raise ValueError(f"reward_model.on_error must be one of {list(ON_ERROR_MODES)}, got {on_error!r}")
        if compute_score is None:
            from verl.utils.reward_score import default_compute_score

            compute_score = default_compute_score
        self.tokenizer = tokenizer
        self.num_examine = int(num_examine)
        self.compute_score = compute_score
        self.reward_fn_key = reward_fn_key
        self.on_error = on_error
        self.timeout_s = timeout_s

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
        batch = data.batch
        # Decoding is per row on the host: one device-to-host copy instead of one sync per row.
        prompts = batch["prompts"].cpu()
        responses = batch["responses"].cpu()
        prompt_len = prompts.shape[-1]
        attention_mask = batch["attention_mask"].cpu()
        if "response_mask" in batch.keys():
            response_mask = batch["response_mask"].cpu()
        else:
            response_mask = attention_mask[:, prompt_len:]
        valid_prompt_mask = attention_mask[:, :prompt_len].bool()
        valid_resp_len = response_mask.sum(dim=-1).tolist()
        ntb = data.non_tensor_batch
        if self.reward_fn_key not in ntb:
            raise KeyError(
                f"reward manager: the batch has no non-tensor key {self.reward_fn_key!r} (data.reward_fn_key); "
                f"keys: {sorted(ntb)}"
            )
        if "reward_model" not in ntb:
            raise KeyError(f"reward manager: the batch has no 'reward_model' (ground truth); keys: {sorted(ntb)}")
        extra_infos = ntb.get("extra_info")
        samples = []
        for i in range(len(prompts)):
            n_valid = int(valid_resp_len[i])
            prompt_ids = prompts[i][valid_prompt_mask[i]]
            response_ids = responses[i][:n_valid]
            reward_model = ntb["reward_model"][i]
            ground_truth = reward_model.get("ground_truth") if isinstance(reward_model, dict) else None
            samples.append(
                Sample(
                    index=i,
                    data_source=str(ntb[self.reward_fn_key][i]),
                    prompt_str=self.tokenizer.decode(prompt_ids.tolist(), skip_special_tokens=True),
                    response_str=self.tokenizer.decode(response_ids.tolist(), skip_special_tokens=True),
                    ground_truth=ground_truth,
                    extra_info=None if extra_infos is None else extra_infos[i],
                    valid_response_length=n_valid,
                )
            )
        return samples

    def _error(self, sample: Sample, error: BaseException) -> RewardComputationError:
        return RewardComputationError(
            f"reward for sample {sample.index} (data_source={sample.data_source!r}) failed: "
            f"{type(error).__name__}: {error}"
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
                print(f"[prompt] {sample.prompt_str}")
                print(f"[response] {sample.response_str}")
                print(f"[ground_truth] {sample.ground_truth}")
                print(f"[score] {score}" + (" (error)" if failed else ""))

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

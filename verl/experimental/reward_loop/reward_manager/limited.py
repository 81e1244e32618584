"""Rate-limited reward scoring for reward functions that call a metered API (an LLM judge, a scoring service).

:class:`AsyncTokenBucket` is a token bucket for asyncio: it holds up to ``max_tokens`` tokens, refills at
``rate_limit`` tokens per second, and ``await acquire(n)`` returns once ``n`` tokens could be taken.
:class:`RateLimitedRewardManager` (``rate_limited``) puts three limits in front of the reward function, all shared
by every instance in the process: at most ``max_concurrent`` calls at once, ``max_rpm`` calls per minute and
``max_tpm`` API tokens per minute (each call counted as ``estimated_tokens_per_request``); a call longer than
``timeout`` seconds, or one that raises, scores 0 and says why in ``reward_extra_info``. The names and semantics are
those of verl's ``verl/experimental/reward_loop/reward_manager/limited.py``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, fields
from typing import Any

from verl.experimental.reward_loop.reward_manager.base import (
    RawRewardFn,
    RewardManagerBase,
    call_reward_fn,
    decode_last_response,
    refuse_reward_model_kwargs,
    split_result,
)
from verl.experimental.reward_loop.reward_manager.registry import register
from verl.protocol import DataProto
from verl.workers.reward_manager.registry import register as register_legacy

__all__ = ["AsyncTokenBucket", "RateLimitSettings", "RateLimitedRewardManager"]

logger = logging.getLogger(__name__)


class AsyncTokenBucket:
    """Token-bucket rate limiter for coroutines.

    Args:
        rate_limit: tokens added per second (> 0).
        max_tokens: capacity, i.e. the largest burst (default: ``rate_limit``, one second's worth). The bucket
            starts full.

    Refill is continuous: ``tokens = min(max_tokens, tokens + elapsed_s * rate_limit)``, counted from the first
    :meth:`acquire`. A request larger than ``max_tokens`` can never be met from a full bucket, so it takes what is
    there and leaves the balance negative, after waiting ``(n - tokens) / rate_limit`` seconds; later requests wait
    for the debt to be refilled. Requests are served one at a time in arrival order (an ``asyncio.Lock``), which keeps
    the overall rate at ``rate_limit`` however many coroutines ask at once.
    """

    def __init__(self, rate_limit: float, max_tokens: float | None = None) -> None:
        if not rate_limit > 0:
            raise ValueError(f"AsyncTokenBucket: rate_limit must be > 0 tokens per second, got {rate_limit}")
        if max_tokens is not None and not max_tokens > 0:
            raise ValueError(f"AsyncTokenBucket: max_tokens must be > 0, got {max_tokens}")
        self.rate_limit = float(rate_limit)
        self.max_tokens = float(max_tokens) if max_tokens is not None else self.rate_limit
        self.tokens = self.max_tokens
        self.last_update: float | None = None  # time.monotonic() of the last refill; None before the first acquire
        self.lock = asyncio.Lock()

    def _refill(self) -> float:
        now = time.monotonic()
        if self.last_update is not None:
            self.tokens = min(self.max_tokens, self.tokens + (now - self.last_update) * self.rate_limit)
        self.last_update = now
        return now

    async def acquire(self, num_tokens: float = 1.0) -> None:
        """Wait until ``num_tokens`` can be taken, then take them (see the class docstring)."""
        if num_tokens < 0:
            raise ValueError(f"AsyncTokenBucket.acquire: num_tokens must be >= 0, got {num_tokens}")
        async with self.lock:  # held while waiting: the next request queues behind this one
            self._refill()
            if num_tokens > self.max_tokens:
                wait_s = max(0.0, num_tokens - self.tokens) / self.rate_limit
                self.tokens -= num_tokens  # negative: the debt is refilled while we (and anyone behind us) wait
                if wait_s > 0:
                    await asyncio.sleep(wait_s)
                    self._refill()  # the wait refilled the part of the debt beyond the bucket's balance
                return
            while self.tokens < num_tokens:
                await asyncio.sleep((num_tokens - self.tokens) / self.rate_limit)
                self._refill()
            self.tokens -= num_tokens


@dataclass(frozen=True)
class RateLimitSettings:
    """The ``reward`` section keys that :class:`RateLimitedRewardManager` reads (verl's names and defaults)."""

    max_concurrent: int = 1
    max_rpm: float | None = None
    max_tpm: float | None = None
    estimated_tokens_per_request: int = 2000
    timeout: float = 300.0

    @classmethod
    def from_config(cls, config: Any) -> RateLimitSettings:
        """The settings in ``config["reward"]`` (absent keys take the defaults above; other keys are ignored: the
        section also holds the reward manager's own settings)."""
        section = (config["reward"] if config is not None and "reward" in config else None) or {}
        values = {f.name: section[f.name] for f in fields(cls) if f.name in section and section[f.name] is not None}
        settings = cls(**values)
        settings.check()
        return settings

    def check(self) -> None:
        """Refuse values that cannot limit anything, naming the key."""
        if int(self.max_concurrent) < 1:
            raise ValueError(f"reward.max_concurrent must be >= 1, got {self.max_concurrent}")
        for key in ("max_rpm", "max_tpm", "estimated_tokens_per_request", "timeout"):
            value = getattr(self, key)
            if value is not None and not value > 0:
                raise ValueError(f"reward.{key} must be > 0 (leave max_rpm / max_tpm unset for no limit), got {value}")


@register_legacy("rate_limited")  # reward_model.reward_manager=rate_limited (verl.trainer.ppo.reward)
@register("rate_limited")
class RateLimitedRewardManager(RewardManagerBase):
    """The reward function behind three process-wide limits (see the module docstring).

    Order per sample: decode, one RPM token, ``estimated_tokens_per_request`` TPM tokens, a concurrency slot, then
    the call under ``timeout``. A timed-out call gives ``reward_score 0.0`` with ``reward_extra_info`` ``{"timeout":
    True, "acc": 0.0}``; a raising one ``{"error": str(exception), "acc": 0.0}``. The limiters are class attributes
    made by the first :meth:`init_class` (the first instance's config); a later config with other limits is
    ignored with a warning, so create the first instance with the intended limits.
    """

    _semaphore: asyncio.Semaphore | None = None
    _max_concurrent: int | None = None
    _rpm_limiter: AsyncTokenBucket | None = None
    _max_rpm: float | None = None
    _tpm_limiter: AsyncTokenBucket | None = None
    _max_tpm: float | None = None
    _estimated_tokens_per_request: int | None = None
    _class_initialized = False

    @classmethod
    def init_class(cls, config: Any, tokenizer: Any) -> None:
        """Build the shared limiters from ``config["reward"]`` once per process."""
        settings = RateLimitSettings.from_config(config)
        if cls._class_initialized:
            if (settings.max_rpm, settings.max_tpm) != (cls._max_rpm, cls._max_tpm):
                logger.warning(
                    "RateLimitedRewardManager's limiters are shared by every instance and already set "
                    "(max_rpm=%s, max_tpm=%s); the new max_rpm=%s, max_tpm=%s are ignored",
                    cls._max_rpm,
                    cls._max_tpm,
                    settings.max_rpm,
                    settings.max_tpm,
                )
            return
        cls._max_concurrent = int(settings.max_concurrent)
        cls._semaphore = asyncio.Semaphore(cls._max_concurrent)
        cls._max_rpm = settings.max_rpm
        cls._rpm_limiter = None if settings.max_rpm is None else AsyncTokenBucket(settings.max_rpm / 60.0)
        cls._max_tpm = settings.max_tpm
        cls._tpm_limiter = None if settings.max_tpm is None else AsyncTokenBucket(settings.max_tpm / 60.0)
        cls._estimated_tokens_per_request = int(settings.estimated_tokens_per_request)
        cls._class_initialized = True
        logger.info(
            "reward rate limits: %d concurrent, %s requests/min, %s tokens/min (%d per request)",
            cls._max_concurrent,
            settings.max_rpm or "unlimited",
            settings.max_tpm or "unlimited",
            cls._estimated_tokens_per_request,
        )

    def __init__(
        self,
        config: Any,
        tokenizer: Any,
        compute_score: RawRewardFn,
        reward_router_address: str | None = None,
        reward_model_tokenizer: Any = None,
        num_examine: int | None = None,
        reward_fn_key: str | None = None,
        **kwargs: Any,
    ) -> None:
        # num_examine, reward_fn_key: the legacy reward-manager call's arguments (verl accepts both there); the
        # samples are not printed, reward_fn_key names the data-source column
        refuse_reward_model_kwargs(type(self).__name__, reward_router_address, reward_model_tokenizer)
        if kwargs:
            raise TypeError(f"RateLimitedRewardManager got unknown arguments {sorted(kwargs)}")
        self.reward_fn_key = reward_fn_key or "data_source"
        if tokenizer is None:
            raise TypeError("RateLimitedRewardManager needs a tokenizer to decode the responses")
        super().__init__({"reward": {}} if config is None else config, tokenizer, compute_score)
        self.timeout = RateLimitSettings.from_config(self.config).timeout

    async def run_single(self, data: DataProto) -> dict[str, Any]:
        """``{"reward_score", "reward_extra_info"}`` of the last row of ``data`` under the limits."""
        cls = type(self)
        if cls._semaphore is None:  # the class state was reset after this instance was made
            cls.init_class(self.config, self.tokenizer)
        text, _, kwargs = decode_last_response(self.tokenizer, data, self.reward_fn_key)
        if cls._rpm_limiter is not None:
            await cls._rpm_limiter.acquire(1.0)
        if cls._tpm_limiter is not None:
            await cls._tpm_limiter.acquire(float(cls._estimated_tokens_per_request))
        async with cls._semaphore:
            try:
                result = await asyncio.wait_for(
                    call_reward_fn(self.compute_score, solution_str=text, **kwargs), timeout=self.timeout
                )
                score, extra = split_result(result)
            except asyncio.TimeoutError:
                logger.warning("reward call timed out after %ss (data_source=%s)", self.timeout, kwargs["data_source"])
                score, extra = 0.0, {"timeout": True, "acc": 0.0}
            except Exception as e:
                logger.error("reward call failed (data_source=%s): %s", kwargs["data_source"], e)
                score, extra = 0.0, {"error": str(e), "acc": 0.0}
        return {"reward_score": score, "reward_extra_info": extra}

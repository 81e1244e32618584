"""Reward over HTTP: POST one JSON object per sample to a scoring service.

Request body: ``{"data_source", "solution_str", "ground_truth", "extra_info"}``. Response body: ``{"score": float,
...}`` (other keys are passed through as extra info) or a bare JSON number. Connection errors, timeouts, HTTP 429
and 5xx are retried with exponential backoff; other 4xx fail at once. A semaphore bounds the requests in flight,
shared by every caller of one client.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np


class RemoteRewardError(RuntimeError):
    """The remote reward service could not produce a score (after retries)."""


def _json_default(value: Any) -> Any:
    """Serialise numpy values that datasets put into ``extra_info``."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"value of type {type(value).__name__} is not JSON serialisable")


class RemoteRewardClient:
    """A ``compute_score`` that asks an HTTP service.

    Args:
        url: the endpoint to POST to.
        timeout_s: per-request timeout.
        max_retries: retries after the first attempt (so at most ``max_retries + 1`` requests per sample).
        max_concurrency: most requests in flight at once (across threads).
        backoff_s: wait before the first retry; doubled for each further retry.

    Call it per sample like any reward function, or use ``compute_score_batch`` (the ``batch`` reward manager's
    contract), which fans the samples out over ``max_concurrency`` threads.
    """

    def __init__(
        self,
        url: str,
        timeout_s: float = 10.0,
        max_retries: int = 3,
        max_concurrency: int = 8,
        backoff_s: float = 0.5,
    ) -> None:
        if not url or not str(url).startswith(("http://", "https://")):
            raise ValueError(f"reward_model.remote.url must be an http(s) URL, got {url!r}")
        if max_concurrency < 1:
            raise ValueError(f"reward_model.remote.max_concurrency must be >= 1, got {max_concurrency}")
        if max_retries < 0:
            raise ValueError(f"reward_model.remote.max_retries must be >= 0, got {max_retries}")
        self.url = str(url)
        self.timeout_s = float(timeout_s)
        self.max_retries = int(max_retries)
        self.max_concurrency = int(max_concurrency)
        self.backoff_s = float(backoff_s)
        self._semaphore = threading.BoundedSemaphore(self.max_concurrency)

    def __getstate__(self) -> dict[str, Any]:
        # A lock cannot be pickled; a copy in a reward worker process gets its own limit.
        state = dict(self.__dict__)
        del state["_semaphore"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._semaphore = threading.BoundedSemaphore(self.max_concurrency)

    def _post_once(self, body: bytes) -> Any:
        request = urllib.request.Request(
            self.url, data=body, headers={"Content-Type": "application/json"}, method="POST"
        )
        with self._semaphore:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return json.loads(response.read().decode("utf-8"))

    @staticmethod
    def _parse(payload: Any) -> float | dict[str, Any]:
        if isinstance(payload, bool) or not isinstance(payload, int | float | dict):
            raise RemoteRewardError(f"expected a JSON number or an object with 'score', got {payload!r:.200}")
        if isinstance(payload, dict):
            if "score" not in payload:
                raise RemoteRewardError(f"response object has no 'score' key (keys: {sorted(payload)})")
            return payload if len(payload) > 1 else float(payload["score"])
        return float(payload)

    def __call__(
        self,
        data_source: str,
        solution_str: str,
        ground_truth: Any,
        extra_info: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> float | dict[str, Any]:
        """Score one sample remotely; raises RemoteRewardError naming the URL and the last error after retries."""
        body = json.dumps(
            {
                "data_source": data_source,
                "solution_str": solution_str,
                "ground_truth": ground_truth,
                "extra_info": extra_info,
            },
            default=_json_default,
        ).encode("utf-8")
        last_error: str = ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                time.sleep(self.backoff_s * (2 ** (attempt - 1)))
            try:
                return self._parse(self._post_once(body))
            except urllib.error.HTTPError as e:
                last_error = f"HTTP {e.code} {e.reason}"
                if e.code != 429 and e.code < 500:
                    break  # the request itself is wrong; retrying cannot help
            except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as e:
                last_error = f"{type(e).__name__}: {getattr(e, 'reason', e)}"
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                last_error = f"invalid JSON response: {e}"
        raise RemoteRewardError(
            f"remote reward {self.url} failed after {attempt + 1} attempt(s) for data_source={data_source!r}: "
            f"{last_error}"
        )

    def compute_score_batch(
        self,
        data_sources: Sequence[str],
        solution_strs: Sequence[str],
        ground_truths: Sequence[Any],
        extra_infos: Sequence[dict[str, Any] | None] | None = None,
        **kwargs: Any,
    ) -> list[float | dict[str, Any] | Exception]:
        """Score a batch concurrently. A sample whose request failed gets its exception in its slot (the
        reward managers treat an Exception item as that sample's error), so one bad sample spares the rest."""
        n = len(solution_strs)
        if extra_infos is None:
            extra_infos = [None] * n

        def one(i: int) -> float | dict[str, Any] | Exception:
            try:
                return self(data_sources[i], solution_strs[i], ground_truths[i], extra_infos[i])
            except Exception as e:  # returned, not raised: per-sample error reporting
                return e

        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, max(n, 1))) as pool:
            return list(pool.map(one, range(n)))


def make_remote_compute_score(remote_config: Any) -> RemoteRewardClient:
    """Build a client from the ``reward_model.remote`` config section (``url``, ``timeout_s``, ``max_retries``,
    ``max_concurrency``, optional ``backoff_s``)."""
    get = remote_config.get if hasattr(remote_config, "get") else lambda k, d=None: getattr(remote_config, k, d)
    return RemoteRewardClient(
        url=get("url"),
        timeout_s=float(get("timeout_s", 10.0)),
        max_retries=int(get("max_retries", 3)),
        max_concurrency=int(get("max_concurrency", 8)),
        backoff_s=float(get("backoff_s", 0.5)),
    )

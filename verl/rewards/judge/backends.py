"""Where a judge's answers come from: any OpenAI-compatible endpoint or the trainer's ``judge`` worker group (a
causal LM run in this process is :class:`verl.workers.judge_worker.HFJudgeBackend`, on the workers' floor, as it
drives their ``hf`` engine).

Both take a list of judge prompts (plain text, sent as one user message) and return one answer string or one
Exception per prompt, in order, so a failed request spares the others.

- :class:`OpenAIJudgeBackend`: ``POST {url}/chat/completions`` (``verl serve``, a vLLM server, any OpenAI-compatible
  service), all requests of a batch concurrently on an asyncio event loop, at most ``max_concurrency`` in flight,
  each retried with exponential backoff on connection errors, timeouts, HTTP 429 and 5xx.
- :class:`WorkerGroupJudgeBackend`: the prompts split over the ranks of the trainer's ``judge`` worker group
  (:class:`verl.workers.judge_worker.JudgeWorker`), each rank answering its share with an ``HFJudgeBackend``.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from verl.sections.reward_model import JudgeConfig

T = TypeVar("T")


class JudgeRequestError(RuntimeError):
    """The judge endpoint did not answer (after retries) or answered something that is not a chat completion."""


def run_coroutine(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion from synchronous code, also when the caller already runs an event loop (an
    agent loop): then it runs on a fresh loop in a helper thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as e:  # handed to the caller's thread
            box["error"] = e

    thread = threading.Thread(target=target, name="judge-loop")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


class OpenAIJudgeBackend:
    """Chat completions from an OpenAI-compatible server.

    Args:
        url: the API base, e.g. ``http://127.0.0.1:8000/v1`` (``/chat/completions`` is appended unless the URL
            already ends with it).
        model: the ``model`` field of each request.
        max_new_tokens / temperature: ``max_tokens`` and ``temperature`` of each request.
        max_concurrency: most requests in flight at once.
        timeout_s: per-request timeout; max_retries: retries after the first attempt; backoff_s: first retry wait.
        api_key_env: name of an environment variable holding a bearer token (read when a request is sent).
    """

    def __init__(
        self,
        url: str,
        model: str = "judge",
        max_new_tokens: int = JudgeConfig.max_new_tokens,
        temperature: float = JudgeConfig.temperature,
        max_concurrency: int = JudgeConfig.max_concurrency,
        timeout_s: float = JudgeConfig.timeout_s,
        max_retries: int = JudgeConfig.max_retries,
        backoff_s: float = 0.5,
        api_key_env: str | None = None,
    ) -> None:
        if not url or not str(url).startswith(("http://", "https://")):
            raise ValueError(f"reward_model.judge.url must be an http(s) URL, got {url!r}")
        if max_concurrency < 1:
            raise ValueError(f"reward_model.judge.max_concurrency must be >= 1, got {max_concurrency}")
        url = str(url).rstrip("/")
        self.url = url if url.endswith("/chat/completions") else url + "/chat/completions"
        self.model = str(model)
        self.max_new_tokens = int(max_new_tokens)
        self.temperature = float(temperature)
        self.max_concurrency = int(max_concurrency)
        self.timeout_s = float(timeout_s)
        self.max_retries = int(max_retries)
        self.backoff_s = float(backoff_s)
        self.api_key_env = api_key_env

    def _post(self, body: bytes) -> str:
        headers = {"Content-Type": "application/json"}
        if self.api_key_env and os.environ.get(self.api_key_env):
            headers["Authorization"] = f"Bearer {os.environ[self.api_key_env]}"
        request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
            payload = json.loads(response.read().decode("utf-8"))
        try:
            content = payload["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError) as e:
            raise JudgeRequestError(f"{self.url}: not a chat completion: {str(payload)[:200]}") from e
        if not isinstance(content, str):
            raise JudgeRequestError(f"{self.url}: message content is {type(content).__name__}, not text")
        return content

    def _post_with_retries(self, text: str) -> str:
        body = json.dumps(
            {
                "model": self.model,
                "messages": [{"role": "user", "content": text}],
                "max_tokens": self.max_new_tokens,
                "temperature": self.temperature,
            }
        ).encode("utf-8")
        last = ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                return self._post(body)
            except urllib.error.HTTPError as e:
                try:  # the server's explanation (an unknown model name, a bad field) names the fix
                    detail = e.read().decode("utf-8", "replace")[:200]
                except OSError:
                    detail = ""
                last = f"HTTP {e.code} {e.reason}" + (f": {detail}" if detail else "")
                if e.code != 429 and e.code < 500:
                    break  # the request is wrong: retrying cannot help
            except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as e:
                last = f"{type(e).__name__}: {getattr(e, 'reason', e)}"
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                last = f"invalid JSON response: {e}"
        raise JudgeRequestError(f"judge {self.url} failed after {attempt + 1} attempt(s): {last}")

    def request(self, text: str) -> str:
        """One judge prompt's answer (blocking, retried as above); raises :class:`JudgeRequestError`."""
        return self._post_with_retries(text)

    async def agenerate(self, texts: Sequence[str]) -> list[str | Exception]:
        """All answers, requests concurrent up to ``max_concurrency`` (blocking HTTP in worker threads)."""
        semaphore = asyncio.Semaphore(self.max_concurrency)
        loop = asyncio.get_running_loop()
        # its own threads: the loop's default pool (min(32, CPUs + 4) threads) would cap the concurrency below the bound
        with ThreadPoolExecutor(max_workers=self.max_concurrency, thread_name_prefix="judge-http") as pool:

            async def one(text: str) -> str | Exception:
                async with semaphore:
                    try:
                        return await loop.run_in_executor(pool, self._post_with_retries, text)
                    except Exception as e:  # returned: one sample's failure
                        return e

            return list(await asyncio.gather(*(one(t) for t in texts)))

    def generate(self, texts: Sequence[str]) -> list[str | Exception]:
        """Synchronous :meth:`agenerate`."""
        return run_coroutine(self.agenerate(texts))


# non_tensor_batch keys of the judge worker's requests and answers (object arrays, one entry per judge prompt)
JUDGE_PROMPTS_KEY = "judge_prompts"
JUDGE_ANSWERS_KEY = "judge_answers"


class WorkerGroupJudgeBackend:
    """Judge prompts answered by a ``judge`` worker group (``worker_group.generate_judge_answers``), the rows split
    over its ranks (padded to a multiple of the world size, the padding dropped from the answers).

    ``worker_group`` may be None when the backend is built before the workers exist (the reward manager is built
    in the driver before ``init_workers``); :meth:`bind` attaches it later. A failed group call becomes one
    :class:`JudgeRequestError` per prompt, so ``on_error`` decides, as for a failed HTTP request.
    """

    def __init__(self, worker_group: Any = None) -> None:
        self.worker_group = worker_group

    def bind(self, worker_group: Any) -> None:
        """Use ``worker_group`` (a group of :class:`verl.workers.judge_worker.JudgeWorker`) from now on."""
        self.worker_group = worker_group

    def generate(self, texts: Sequence[str]) -> list[str | Exception]:
        """One answer (or Exception) per text, in order."""
        import numpy as np

        from verl.protocol import DataProto

        if self.worker_group is None:
            raise RuntimeError(
                "reward_model.judge.backend=worker: no judge worker group is bound yet; the trainer binds it in "
                "init_workers (or call WorkerGroupJudgeBackend.bind(group))"
            )
        if not texts:
            return []
        prompts = np.empty(len(texts), dtype=object)
        prompts[:] = list(texts)
        request = DataProto.from_dict(non_tensors={JUDGE_PROMPTS_KEY: prompts}, auto_padding=True)
        try:
            out = self.worker_group.generate_judge_answers(request)
            answers = list(out.non_tensor_batch[JUDGE_ANSWERS_KEY])
        except Exception as e:  # the whole batch failed: every prompt reports it
            err = JudgeRequestError(f"judge worker group failed: {type(e).__name__}: {e}")
            return [err] * len(texts)
        if len(answers) != len(texts):
            err = JudgeRequestError(f"judge worker group returned {len(answers)} answers for {len(texts)} prompts")
            return [err] * len(texts)
        return [a if isinstance(a, BaseException) else str(a) for a in answers]

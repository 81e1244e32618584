"""Token-by-token answers of the rollout's OpenAI endpoint: an engine request whose sampled ids reach the endpoint's
event loop as they are decoded, and the text and tool-call hold-back rules that turn them into stream deltas.

- :class:`TokenFeed`: one request of the engine floor's request server
  (:class:`~verl.workers.rollout.request_server.RequestServer`) with an ``on_token`` callback. The callback runs on
  the serving thread: it hands each id to the event loop (``call_soon_threadsafe``) and ends the request at the
  token that completes a ``stop`` string (a tail of the ids decoded, confirmed on the whole answer), so a stop string
  costs no more decode steps, streamed or not. The answer (:class:`~verl.workers.rollout.request_server.TokenOutput`:
  ids, the engine's log-probs, stop reason) comes from the request's future, as for a plain ``generate``.
- :class:`TextDeltas`: incremental detokenization. Each id re-decodes the answer so far (``skip_special_tokens``,
  as the whole answer is decoded), and only text that cannot change any more goes out: trailing U+FFFD characters
  (the first bytes of a character whose other bytes come with the next ids) are held, as is a tail that could be the
  start of a stop string, and, for tokenizers that clean up tokenization spaces, the text from the last whitespace
  on (``" 's"`` may still become ``"'s"``). Text after a stop string never goes out. :meth:`TextDeltas.finish`
  sends the rest of the final text, so the deltas concatenate to exactly the text of the non-streamed answer.
- :class:`ContentHold`: with tool calls active, the content before the format's opening marker
  (``ToolParser.call_start``, e.g. hermes ``<tool_call>``) streams; whitespace right before the marker (and an
  answer's leading whitespace) is held until text follows it, since the whole answer's message strips it; from the
  marker on nothing streams as content. Formats without a marker hold the whole answer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from verl.workers.rollout.request_server import RequestServer, TokenOutput, TokenRequest, TurnSampling

logger = logging.getLogger(__name__)

__all__ = ["ContentHold", "TextDeltas", "TokenFeed", "stop_prefix_len"]


def stop_prefix_len(text: str, stops: tuple[str, ...]) -> int:
    """Length of the longest tail of ``text`` that is a proper prefix of one of ``stops`` (0 when none)."""
    best = 0
    for stop in stops:
        for k in range(min(len(stop) - 1, len(text)), best, -1):
            if text.endswith(stop[:k]):
                best = k
                break
    return best


class TokenFeed:
    """One engine request of a choice, its ids streamed to ``loop`` (see the module docstring).

    Args:
        server: the rollout's request server.
        prompt_ids: the context the engine continues.
        max_tokens: the request's token budget.
        sampling: its sampling settings (stop ids, temperature/top-p).
        tokenizer: decodes the ids for the stop-string check.
        stops: the request's stop strings.
        loop: the event loop of the endpoint (the ids are queued there).
        stream: queue the ids for :meth:`tokens` (False: only the answer is read).
    """

    def __init__(
        self,
        server: RequestServer,
        prompt_ids: list[int],
        max_tokens: int,
        sampling: TurnSampling,
        tokenizer: Any,
        stops: tuple[str, ...],
        loop: asyncio.AbstractEventLoop,
        stream: bool = True,
    ) -> None:
        self.tokenizer = tokenizer
        self.stops = stops
        self.loop = loop
        self.stream = bool(stream)
        self.queue: asyncio.Queue[tuple[int, bool] | None] = asyncio.Queue()
        self._ids: list[int] = []  # the answer's ids so far (serving thread), closing EOS/stop id left out
        self._window = 4 * max((len(s) for s in stops), default=0) + 8  # ids that surely hold a stop string's text
        # a plain answer without stop strings needs no callback (vLLM then reads its tokens only when it ends)
        on_token = self._on_token if self.stream or stops else None
        self.request = TokenRequest(list(prompt_ids), int(max_tokens), sampling=sampling, on_token=on_token)
        self.request.future.add_done_callback(lambda _: self._post(None))
        self.submitted_at = time.perf_counter()
        server.submit(self.request)

    def _post(self, item: tuple[int, bool] | None) -> None:
        if not self.stream:
            return
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, item)
        except RuntimeError:  # the endpoint's loop is closed: nobody reads the stream any more
            self.request.cancel()

    def _on_token(self, token: int, ends: bool) -> bool:
        """The serving thread's callback: queue the id; True ends the request (a stop string is complete)."""
        self._post((token, ends))
        if ends or not self.stops:
            return False
        self._ids.append(token)
        tail = self.tokenizer.decode(self._ids[-self._window :], skip_special_tokens=True)
        if not any(s in tail for s in self.stops):
            return False
        text = self.tokenizer.decode(self._ids, skip_special_tokens=True)  # confirm on the whole answer
        return any(s in text for s in self.stops)

    async def tokens(self) -> AsyncIterator[list[tuple[int, bool]]]:
        """``[(id, ends)]``: the tokens sampled since the last read, as soon as there is one (one each while the reader
        keeps up; several when the engine is faster than the stream is written); ends when the engine answered."""
        if not self.stream:
            raise RuntimeError("TokenFeed.tokens() needs stream=True")
        while True:
            items = [await self.queue.get()]
            while items[-1] is not None and not self.queue.empty():
                items.append(self.queue.get_nowait())
            done = items[-1] is None
            if done:
                items.pop()
            if items:
                yield items
            if done:
                return

    async def result(self) -> TokenOutput:
        """The engine's answer (ids, log-probs, stop reason)."""
        return await asyncio.wrap_future(self.request.future)

    def cancel(self) -> None:
        """Stop the request (it stops costing compute at the engine's next step)."""
        self.request.cancel()


class TextDeltas:
    """Incremental detokenization of one answer (see the module docstring).

    Args:
        tokenizer: the model's tokenizer.
        stops: the request's stop strings (their text and what follows never goes out).
    """

    def __init__(self, tokenizer: Any, stops: tuple[str, ...]) -> None:
        self.tokenizer = tokenizer
        self.stops = stops
        self.cleanup = bool(getattr(tokenizer, "clean_up_tokenization_spaces", False))
        self.ids: list[int] = []
        self.sent = ""  # the text that went out
        self.stopped = False

    def add(self, tokens: list[tuple[int, bool]]) -> str:
        """Sampled ids ``[(id, ends)]`` (``ends``: the EOS/stop id closing the answer, not part of its text); the text
        that can go out now (maybe empty)."""
        new = [int(t) for t, ends in tokens if not ends]
        if not new or self.stopped:
            return ""
        self.ids += new
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        hits = [i for i in (text.find(s) for s in self.stops) if i >= 0]
        if hits:
            self.stopped = True
            return self._send(text[: min(hits)])
        text = text[: len(text) - min(3, len(text) - len(text.rstrip("\ufffd")))]
        text = text[: len(text) - stop_prefix_len(text, self.stops)]
        if self.cleanup:
            cut = max(text.rfind(" "), text.rfind("\n"))
            if cut >= 0:
                text = text[:cut]
        return self._send(text)

    def _send(self, text: str) -> str:
        if len(text) <= len(self.sent) or not text.startswith(self.sent):
            return ""
        delta, self.sent = text[len(self.sent) :], text
        return delta

    def finish(self, final: str) -> str:
        """The rest of ``final`` (the whole answer's text) after what went out."""
        if not final.startswith(self.sent):  # not expected: the held-back rules keep what went out a prefix
            logger.warning("openai endpoint: streamed text %r is not a prefix of the answer %r", self.sent, final)
            return ""
        delta, self.sent = final[len(self.sent) :], final
        return delta


class ContentHold:
    """Which part of the streamed text goes out as ``delta.content`` when tool calls are active (module docstring).

    Args:
        marker: the format's opening marker of a tool call (None: hold everything until the end).
    """

    def __init__(self, marker: str | None) -> None:
        self.marker = marker
        self.text = ""
        self.sent = 0
        self.held = not marker

    def feed(self, delta: str) -> str:
        """Add streamed text; return the content that can go out now."""
        self.text += delta
        if self.held:
            return ""
        at = self.text.find(self.marker, max(0, self.sent - len(self.marker)))
        if at >= 0:
            self.held = True
            end = at
        else:
            end = len(self.text) - stop_prefix_len(self.text, (self.marker,))
        end = max(self.sent, len(self.text[:end].rstrip()))  # whitespace goes out only once text follows it
        out, self.sent = self.text[self.sent : end], end
        return out

    @property
    def content(self) -> str:
        """The content that went out."""
        return self.text[: self.sent]

"""The judge's OpenAI backend against this project's own server (``verl serve``, hf engine, tiny model): requests
are accepted and answered, concurrently, and the answers reach the parser."""

from __future__ import annotations

import os

from verl.rewards.judge import LLMJudge, OpenAIJudgeBackend
from verl.serve import ServeConfig


def test_judge_talks_to_verl_serve(tiny_model_dir, start_server):
    config = ServeConfig(model=tiny_model_dir, engine="hf", max_batch_size=8, batch_wait_ms=50, max_new_tokens=8)
    answers: list[str] = []

    def parse(answer: str) -> float:  # the tiny model writes random bytes: score their count
        answers.append(answer)
        return float(len(answer))

    with start_server(config) as server:
        backend = OpenAIJudgeBackend(
            server.url + "/v1",
            model=os.path.basename(tiny_model_dir),
            max_new_tokens=4,
            max_concurrency=4,
            max_retries=0,
        )
        results = LLMJudge(backend, parse_fn=parse, on_error="skip").score(["q1", "q2", "q3"], ["a", "b", "c"])
    assert all(r.request_failures == 0 and r.score is not None for r in results), [r.error for r in results]
    assert len(answers) == 3 and [r.score for r in results] == [float(len(a)) for a in answers]

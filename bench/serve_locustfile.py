"""Locust users for the inference service: each user posts ``/generate`` requests back to back.

Run by ``bench/serve_load.py`` (which starts the server and collects the figures), or by hand against a running
server::

    locust -f bench/serve_locustfile.py --headless -u 50 -r 5 -t 60s --host http://127.0.0.1:8000

Environment: ``VERL_LOAD_MAX_NEW_TOKENS`` (default 64), ``VERL_LOAD_TEMPERATURE`` (default 0.7),
``VERL_LOAD_WAIT_S`` (think time between a user's requests, default 0: a closed loop that measures capacity).
A response other than 200 counts as a failure, named by its status code.
"""

from __future__ import annotations

import itertools
import os

from locust import HttpUser, constant, task

# Openings to continue: /generate sends the text as is (no chat template), and an instruct model answers a bare
# question with its end-of-turn token at once; openings get answers of a realistic length.
PROMPTS = (
    "The history of the printing press begins in",
    "Here are three tips for learning a new language. First,",
    "The lighthouse keeper climbed the stairs and",
    "A refrigerator keeps food cold by",
    "The main differences between cats and dogs are",
    "To make a simple tomato and rice dish, you",
    "The ocean is home to many animals, such as",
    "People enjoy listening to music because",
)
_prompt_cycle = itertools.cycle(PROMPTS)

MAX_NEW_TOKENS = int(os.environ.get("VERL_LOAD_MAX_NEW_TOKENS", "64"))
TEMPERATURE = float(os.environ.get("VERL_LOAD_TEMPERATURE", "0.7"))


class GenerateUser(HttpUser):
    """One client of the service: ``POST /generate`` with the documents' request body, again and again."""

    wait_time = constant(float(os.environ.get("VERL_LOAD_WAIT_S", "0")))

    @task
    def generate(self) -> None:
        body = {"prompt": next(_prompt_cycle), "max_new_tokens": MAX_NEW_TOKENS, "temperature": TEMPERATURE}
        with self.client.post("/generate", json=body, name="/generate", catch_response=True) as response:
            if response.status_code != 200:
                response.failure(f"HTTP {response.status_code}: {response.text[:200]}")
            elif "response" not in response.json():
                response.failure("no 'response' field in the answer")
            else:
                response.success()

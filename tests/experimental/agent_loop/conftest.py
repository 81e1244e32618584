"""A scripted model for agent-loop tests: each sample's prompt names a script (``Q<k>``), and the model's reply at
assistant turn ``t`` is the script's ``t``-th text followed by EOS, so trajectories are known token by token."""

from __future__ import annotations

import re
import threading
import time
from typing import Any

import pytest
import torch

from verl.base_config import omega_conf_to_dataclass
from verl.experimental.agent_loop.runner import AgentLoopRunner
from verl.models.tiny import make_byte_tokenizer
from verl.protocol import DataProto
from verl.workers.config import RolloutConfig
from verl.workers.rollout.base import build_rollout_output, resolve_special_ids

# ChatML-like, with the tool schemas in a system line and the assistant turn ended by the EOS token, so the
# turn-by-turn tokens equal the whole conversation's in strict mode
STRICT_TEMPLATE = (
    "{% if tools %}<|system|>{{ tools | tojson }}\n{% endif %}"
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}"
    "{% if m['role'] == 'assistant' %}<eos>{% else %}{{ '\\n' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
# the same but with a newline after the assistant's EOS: differs from turn-by-turn tokens by whitespace only
NEWLINE_TEMPLATE = STRICT_TEMPLATE.replace("<eos>{% else %}", "<eos>{{ '\\n' }}{% else %}")


def chat_tokenizer(template: str = STRICT_TEMPLATE) -> Any:
    tok = make_byte_tokenizer()
    tok.chat_template = template
    return tok


class ScriptedEngine:
    """A rollout engine (``generate_sequences``) that answers from ``scripts[name][turn]``; ``delay_s`` per call."""

    def __init__(self, tokenizer: Any, scripts: dict[str, list[str]], delay_s: float = 0.0) -> None:
        self.tokenizer = tokenizer
        self.scripts = scripts
        self.delay_s = delay_s
        self.batch_sizes: list[int] = []
        self.lock = threading.Lock()

    def __call__(self, prompts: DataProto) -> DataProto:
        with self.lock:
            self.batch_sizes.append(len(prompts))
        time.sleep(self.delay_s)
        eos, pad = resolve_special_ids(prompts.meta_info, self.tokenizer)
        length = int(prompts.meta_info["response_length"])
        rows = []
        for ids, mask in zip(prompts.batch["input_ids"], prompts.batch["attention_mask"]):
            text = self.tokenizer.decode(ids[mask.bool()].tolist(), skip_special_tokens=False)
            name = re.search(r"Q\d+", text).group(0)
            turn = text.count("<|assistant|>") - 1
            reply = self.tokenizer.encode(self.scripts[name][turn], add_special_tokens=False) + [eos[0]]
            rows.append(reply[:length])
        responses = torch.full((len(rows), max(len(r) for r in rows)), pad, dtype=torch.long)
        for i, r in enumerate(rows):
            responses[i, : len(r)] = torch.tensor(r)
        return build_rollout_output(prompts, responses, eos, pad, length)


def rollout_config(**multi_turn: Any) -> dict[str, Any]:
    """A rollout section for the runner: lengths, ``multi_turn`` keys (``agent_*`` keys go to ``agent``)."""
    agent = {k[len("agent_") :]: multi_turn.pop(k) for k in list(multi_turn) if k.startswith("agent_")}
    lengths = {k: multi_turn.pop(k) for k in ("prompt_length", "response_length") if k in multi_turn}
    return {
        "prompt_length": lengths.get("prompt_length", 512),
        "response_length": lengths.get("response_length", 512),
        "multi_turn": {"enable": True, "format": "hermes", **multi_turn},
        "agent": {"default_agent_loop": "tool_agent", **agent},
    }


def prompt_batch(tokenizer: Any, questions: list[str], extra_info: list[dict] | None = None) -> DataProto:
    """Left-padded chat prompts of ``questions`` with ``raw_prompt`` and ``extra_info`` columns."""
    import numpy as np

    messages = [[{"role": "user", "content": q}] for q in questions]
    texts = [tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=False) for m in messages]
    ids = [tokenizer.encode(t, add_special_tokens=False) for t in texts]
    width = max(len(i) for i in ids)
    input_ids = torch.full((len(ids), width), tokenizer.pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(ids), width), dtype=torch.long)
    for k, row in enumerate(ids):
        input_ids[k, width - len(row) :] = torch.tensor(row)
        attention_mask[k, width - len(row) :] = 1
    raw = np.empty(len(messages), dtype=object)
    raw[:] = messages
    infos = np.empty(len(messages), dtype=object)
    infos[:] = extra_info or [{} for _ in messages]
    return DataProto.from_dict(
        tensors={"input_ids": input_ids, "attention_mask": attention_mask},
        non_tensors={"raw_prompt": raw, "extra_info": infos, "index": np.arange(len(messages), dtype=object)},
        meta_info={"eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id},
    )


def run(tokenizer: Any, engine: ScriptedEngine, config: dict[str, Any], batch: DataProto) -> DataProto:
    # the runner takes the typed rollout section, as the engine hands it over
    section = omega_conf_to_dataclass(config, RolloutConfig)
    return AgentLoopRunner(section, tokenizer, engine).generate_sequences(batch)


@pytest.fixture
def tok() -> Any:
    return chat_tokenizer()


@pytest.fixture
def kit() -> Any:
    """The helpers above, for test modules (conftest modules are not importable under importlib mode)."""
    from types import SimpleNamespace

    return SimpleNamespace(
        ScriptedEngine=ScriptedEngine,
        rollout_config=rollout_config,
        prompt_batch=prompt_batch,
        run=run,
        chat_tokenizer=chat_tokenizer,
        STRICT_TEMPLATE=STRICT_TEMPLATE,
        NEWLINE_TEMPLATE=NEWLINE_TEMPLATE,
    )

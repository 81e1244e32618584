"""Tool calling in /v1/chat/completions over real HTTP: the tools rendered by the chat template, the model's
Hermes-style call returned as message.tool_calls, and the conversation continued with role: tool messages.

The model's output is scripted (the engine's decode replaced by a fixed answer per conversation state), so the
test checks the serving path token for token, not a random tiny model."""

from __future__ import annotations

import json

import httpx
import pytest

from verl.serve import ServeConfig
from verl.serve.engine import HFServeEngine

TEMPLATE = (
    "{% if tools %}<|system|>{{ tools | tojson }}{{ '\\n' }}{% endif %}"
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}"
    "{% for c in m.get('tool_calls') or [] %}<tool_call>"
    "{{ {'name': c['function']['name'], 'arguments': c['function']['arguments']} | tojson }}</tool_call>"
    "{% endfor %}{{ '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "12*34"}}</tool_call>'
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string"}},
                "required": ["expression"],
            },
        },
    }
]


@pytest.fixture
def scripted(tiny_model_dir, tmp_path, start_server, monkeypatch):
    """A server over the tiny model with a tool-rendering chat template whose decode is scripted: after a tool reply
    it answers "The answer is 408", otherwise it calls the calculator. ``prompts`` records what it was given."""
    import shutil

    from transformers import AutoTokenizer

    model_dir = str(tmp_path / "model")
    shutil.copytree(tiny_model_dir, model_dir)
    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.chat_template = TEMPLATE
    tok.save_pretrained(model_dir)
    prompts_seen: list[str] = []

    def generate_batch(self, prompts, on_step=None):
        # the engine call of the request server: each row's scripted answer (then EOS) fed through the step hook
        import torch

        from verl.protocol import DataProto

        ids, mask = prompts.batch["input_ids"], prompts.batch["attention_mask"].bool()
        answers = []
        for row in range(ids.shape[0]):
            text = self.tokenizer.decode(ids[row][mask[row]].tolist(), skip_special_tokens=False)
            prompts_seen.append(text)
            answer = "The answer is 408" if text.rstrip().endswith("<|tool|>408\n<|assistant|>") else CALL
            answers.append(self.tokenizer.encode(answer, add_special_tokens=False) + [self.eos_ids[0]])
        length = int(prompts.meta_info["response_length"])
        responses = torch.full((len(answers), length), self.pad_id, dtype=torch.long)
        for step in range(length):
            tokens = torch.tensor([a[step] if step < len(a) else self.pad_id for a in answers])
            responses[:, step] = tokens
            if on_step(step, slice(0, len(answers)), tokens, torch.tensor([step >= len(a) - 1 for a in answers])).all():
                break
        return DataProto.from_dict(tensors={"responses": responses, "response_mask": torch.ones_like(responses)})

    monkeypatch.setattr(HFServeEngine, "generate_batch", generate_batch)
    with start_server(ServeConfig(model=model_dir, engine="hf", dtype="float32", max_new_tokens=128)) as srv:
        yield srv.url, prompts_seen


def test_tool_calls_round_trip(scripted) -> None:
    url, prompts = scripted
    with httpx.Client(base_url=url, timeout=60) as c:
        user = {"role": "user", "content": "What is 12*34?"}
        r = c.post("/v1/chat/completions", json={"messages": [user], "tools": TOOLS})
        assert r.status_code == 200, r.text
        (choice,) = r.json()["choices"]
        assert choice["finish_reason"] == "tool_calls"
        message = choice["message"]
        assert message["content"] is None and message["role"] == "assistant"
        (call,) = message["tool_calls"]
        assert call["type"] == "function" and call["id"].startswith("call_")
        assert call["function"] == {"name": "calculator", "arguments": '{"expression": "12*34"}'}
        assert prompts[-1].startswith('<|system|>[{"type": "function", "function": {"name": "calculator"')

        # the client runs the tool and sends the assistant call (content null, as OpenAI clients do) and the reply
        follow = [user, message, {"role": "tool", "tool_call_id": call["id"], "content": "408"}]
        r = c.post("/v1/chat/completions", json={"messages": follow, "tools": TOOLS})
        assert r.status_code == 200, r.text
        (choice,) = r.json()["choices"]
        assert choice == {
            "index": 0,
            "message": {"role": "assistant", "content": "The answer is 408"},
            "finish_reason": "stop",
        }
        assert prompts[-1].endswith(f"<|user|>What is 12*34?\n<|assistant|>{CALL}\n<|tool|>408\n<|assistant|>")

        # tool_choice none: no schemas in the prompt, the call text is plain content
        r = c.post("/v1/chat/completions", json={"messages": [user], "tools": TOOLS, "tool_choice": "none"})
        (choice,) = r.json()["choices"]
        assert choice["message"] == {"role": "assistant", "content": CALL} and choice["finish_reason"] == "stop"
        assert prompts[-1] == "<|user|>What is 12*34?\n<|assistant|>"


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        ({"tool_choice": "required"}, "tool_choice: 'required' cannot be enforced"),
        ({"tools": [{"type": "function", "function": {"description": "no name"}}]}, "tools[0].function.name"),
    ],
)
def test_bad_tool_requests(scripted, extra, fragment) -> None:
    url, _ = scripted
    body = {"messages": [{"role": "user", "content": "x"}], "tools": TOOLS, **extra}
    r = httpx.post(url + "/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 400 and fragment in json.loads(r.text)["error"]["message"], r.text


def _events(response) -> list:
    out = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            data = line[len("data: ") :]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def test_streaming_tool_calls_arrive_as_one_delta(scripted) -> None:
    url, _ = scripted
    user = {"role": "user", "content": "What is 12*34?"}
    with httpx.Client(base_url=url, timeout=60) as c:
        with c.stream("POST", "/v1/chat/completions", json={"messages": [user], "tools": TOOLS, "stream": True}) as r:
            assert r.status_code == 200
            events = _events(r)
        assert events[-1] == "[DONE]"
        deltas = [e["choices"][0]["delta"] for e in events[:-1]]
        assert deltas[0] == {"role": "assistant", "content": ""}
        assert not any(d.get("content") for d in deltas)  # the call's text is never streamed as content
        (call_delta,) = [d for d in deltas if "tool_calls" in d]
        (call,) = call_delta["tool_calls"]
        assert call["index"] == 0 and call["id"].startswith("call_") and call["type"] == "function"
        assert call["function"] == {"name": "calculator", "arguments": '{"expression": "12*34"}'}
        assert events[-2]["choices"][0]["finish_reason"] == "tool_calls"

        # after the tool's reply the answer is plain text: it streams piece by piece, as without tools
        follow = [user, {"role": "assistant", "content": None, "tool_calls": [{k: call[k] for k in ("id", "type",
                  "function")}]}, {"role": "tool", "tool_call_id": call["id"], "content": "408"}]  # fmt: skip
        body = {"messages": follow, "tools": TOOLS, "stream": True}
        with c.stream("POST", "/v1/chat/completions", json=body) as r:
            events = _events(r)
        pieces = [e["choices"][0]["delta"].get("content", "") for e in events[:-1]]
        assert "".join(pieces) == "The answer is 408" and sum(1 for p in pieces if p) > 1
        assert events[-2]["choices"][0]["finish_reason"] == "stop"


def test_tool_call_stream_holds_back_only_what_may_be_a_call() -> None:
    from verl.experimental.agent_loop.openai_tool_calls import ToolCallStream
    from verl.experimental.agent_loop.tool_parser import ToolParser

    stream = ToolCallStream(ToolParser.get_tool_parser("hermes", None))
    text = "Let me compute. " + CALL
    out = [stream.feed(text[i : i + 3]) for i in range(0, len(text), 3)]
    assert "".join(out) == "Let me compute. " and "<" not in "".join(out)
    deltas, reason = stream.finish("stop")
    assert reason == "tool_calls" and deltas[-1]["tool_calls"][0]["function"]["name"] == "calculator"

    plain = ToolCallStream(ToolParser.get_tool_parser("hermes", None))
    sent = "".join(plain.feed(p) for p in ("a <tool", "_ca", "xyz <", "b"))  # "<tool_ca" was not the marker after all
    deltas, reason = plain.finish("length")
    assert sent + "".join(d["content"] for d in deltas) == "a <tool_caxyz <b" and reason == "length"

    broken = ToolCallStream(ToolParser.get_tool_parser("hermes", None))
    broken.feed('ok <tool_call>{"name": ')
    assert broken.finish("length") == ([{"content": '<tool_call>{"name": '}], "length")

"""What the OpenAI endpoint costs per request: the same trajectories through the in-process ``tool_agent`` loop and
through ``openai_agent`` with an agent written with the ``openai`` SDK (and one with plain ``httpx``).

Every trajectory is a calculator exchange: the model calls ``calculator`` (``12*34``), the tool answers ``408``, the
model answers ``The answer is 408``: two generation requests. The engine is scripted (it answers instantly from the
script, byte tokenizer, a ChatML-like template), so the time measured is the loops' own: for ``tool_agent`` the
parsing, the tool call and the tokenization; for ``openai_agent`` also the HTTP server, JSON, the OpenAI schemas,
the agent's thread and client. All sides' trajectories (prompt, response ids, masks) are checked identical.

The sides alternate for ``--rounds`` rounds after a warm-up round; reported: median wall seconds per batch, process
CPU seconds, and the endpoint's extra milliseconds per request (``(endpoint - in-process) / requests``).

    python bench/endpoint_overhead.py --smoke
    python bench/endpoint_overhead.py
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bench._common import markdown_table, save_result  # noqa: E402
from verl.base_config import omega_conf_to_dataclass  # noqa: E402
from verl.experimental.agent_loop.runner import AgentLoopRunner  # noqa: E402
from verl.models.tiny import make_byte_tokenizer  # noqa: E402
from verl.protocol import DataProto  # noqa: E402
from verl.workers.config import RolloutConfig  # noqa: E402
from verl.workers.rollout.base import build_rollout_output, resolve_special_ids  # noqa: E402

TEMPLATE = (
    "{% if tools %}<|system|>{{ tools | tojson }}\n{% endif %}"
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}"
    "{% if m['role'] == 'assistant' %}<eos>{% else %}{{ '\\n' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
SCRIPT = ['<tool_call>{"name": "calculator", "arguments": {"expression": "12*34"}}</tool_call>', "The answer is 408"]
TOOLS_YAML = "tools:\n  - class_name: verl.tools.calculator_tool.CalculatorTool\n    config:\n      type: native\n"

AGENT_SOURCE = """
import json
import httpx
from openai import AsyncOpenAI

def _calc(expression):
    a, b = expression.split("*")
    return str(int(a) * int(b))


async def sdk_agent(task, base_url, api_key):
    messages, TOOLS = list(task["messages"]), task["extra_info"]["tools"]  # the tool_agent's calculator schema
    async with AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0) as client:
        r = await client.chat.completions.create(model="policy", messages=messages, tools=TOOLS)
        message = r.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls or []:
            result = _calc(json.loads(call.function.arguments)["expression"])
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
        await client.chat.completions.create(model="policy", messages=messages, tools=TOOLS)
    return 1.0


async def httpx_agent(task, base_url, api_key):
    messages, TOOLS = list(task["messages"]), task["extra_info"]["tools"]
    headers = {"Authorization": f"Bearer {api_key}"}
    async with httpx.AsyncClient(base_url=base_url, headers=headers) as client:
        r = (await client.post("/chat/completions", json={"messages": messages, "tools": TOOLS})).json()
        message = r["choices"][0]["message"]
        messages.append(message)
        for call in message.get("tool_calls") or []:
            result = _calc(json.loads(call["function"]["arguments"])["expression"])
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
        await client.post("/chat/completions", json={"messages": messages, "tools": TOOLS})
    return 1.0
"""


class ScriptedEngine:
    """Answers turn ``t`` of every conversation with ``SCRIPT[t]`` and EOS, instantly."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.replies = [tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id] for text in SCRIPT]

    def __call__(self, prompts: DataProto) -> DataProto:
        eos, pad = resolve_special_ids(prompts.meta_info, self.tokenizer)
        length = int(prompts.meta_info["response_length"])
        rows = []
        for ids, mask in zip(prompts.batch["input_ids"], prompts.batch["attention_mask"]):
            text = self.tokenizer.decode(ids[mask.bool()].tolist(), skip_special_tokens=False)
            rows.append(self.replies[min(len(re.findall(r"<\|assistant\|>", text)) - 1, 1)][:length])
        responses = torch.full((len(rows), max(map(len, rows))), pad, dtype=torch.long)
        for i, r in enumerate(rows):
            responses[i, : len(r)] = torch.tensor(r)
        return build_rollout_output(prompts, responses, eos, pad, length)


def make_batch(tokenizer: Any, n: int, tools: list[dict]) -> DataProto:
    """``n`` rows of the question, prompts rendered with the tool schemas as ``tool_agent`` renders them."""
    messages = [[{"role": "user", "content": f"Q{i}: what is 12*34?"}] for i in range(n)]
    ids = [
        tokenizer.encode(
            tokenizer.apply_chat_template(m, tools=tools, add_generation_prompt=True, tokenize=False),
            add_special_tokens=False,
        )
        for m in messages
    ]
    width = max(map(len, ids))
    input_ids = torch.full((n, width), tokenizer.pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((n, width), dtype=torch.long)
    for k, row in enumerate(ids):
        input_ids[k, width - len(row) :] = torch.tensor(row)
        attention_mask[k, width - len(row) :] = 1
    raw, extra = np.empty(n, dtype=object), np.empty(n, dtype=object)
    raw[:] = messages
    extra[:] = [{"tools": tools} for _ in range(n)]
    return DataProto.from_dict(
        tensors={"input_ids": input_ids, "attention_mask": attention_mask},
        non_tensors={"raw_prompt": raw, "extra_info": extra, "index": np.arange(n, dtype=object)},
        meta_info={"eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id},
    )


def runner(tokenizer: Any, engine: ScriptedEngine, loop: str, tools_path: str, agent: str | None) -> AgentLoopRunner:
    rollout = {
        "prompt_length": 512,
        "response_length": 256,
        "multi_turn": {"enable": True, "format": "hermes", "tool_config_path": tools_path},
        "agent": {"default_agent_loop": loop, "num_workers": 1, "openai": {"agent": agent}},
    }
    return AgentLoopRunner(omega_conf_to_dataclass(rollout, RolloutConfig), tokenizer, engine)


def trajectories(out: DataProto) -> list[tuple]:
    width = out.batch["responses"].shape[1]
    rows = []
    for i in range(len(out)):
        attn = out.batch["attention_mask"][i]
        n = int(attn[-width:].sum())
        prompt = out.batch["prompts"][i][attn[:-width].bool()].tolist()
        rows.append((prompt, out.batch["responses"][i, :n].tolist(), out.batch["response_mask"][i, :n].tolist()))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16, help="trajectories per batch")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="4 trajectories, 1 round")
    args = parser.parse_args()
    if args.smoke:
        args.batch, args.rounds = 4, 1
    torch.set_num_threads(1)
    tokenizer = make_byte_tokenizer()
    tokenizer.chat_template = TEMPLATE
    engine = ScriptedEngine(tokenizer)
    work = Path(tempfile.mkdtemp(prefix="endpoint_overhead_"))
    tools_path = work / "tools.yaml"
    tools_path.write_text(TOOLS_YAML)
    agent_file = work / "bench_agents.py"
    agent_file.write_text(AGENT_SOURCE)

    sides = {"tool_agent (in-process)": runner(tokenizer, engine, "tool_agent", str(tools_path), None)}
    schemas = [t.tool_schema.model_dump(exclude_none=True) for t in sides["tool_agent (in-process)"].tools.values()]
    for name, fn in (("openai_agent, openai SDK", "sdk_agent"), ("openai_agent, httpx", "httpx_agent")):
        sides[name] = runner(tokenizer, engine, "openai_agent", str(tools_path), f"{agent_file}:{fn}")
    batch = make_batch(tokenizer, args.batch, schemas)
    wall: dict[str, list[float]] = {k: [] for k in sides}
    cpu: dict[str, list[float]] = {k: [] for k in sides}
    reference = None
    for round_ in range(args.rounds + 1):  # round 0 warms up (imports, the SDK's first client)
        for name, side in sides.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            out = side.generate_sequences(batch)
            elapsed, elapsed_cpu = time.perf_counter() - start, time.process_time() - start_cpu
            rows = trajectories(out)
            if reference is None:
                reference = rows
            if rows != reference:
                raise SystemExit(f"{name}: the trajectories differ from the in-process loop's")
            if round_:
                wall[name].append(elapsed)
                cpu[name].append(elapsed_cpu)
    requests = 2 * args.batch
    base = statistics.median(wall["tool_agent (in-process)"])
    table = []
    for name in sides:
        w, c = statistics.median(wall[name]), statistics.median(cpu[name])
        table.append([name, w, c, 1000 * w / requests, 1000 * (w - base) / requests])
    header = ["side", "wall s / batch", "CPU s / batch", "ms / request", "extra ms / request vs in-process"]
    print(f"{args.batch} trajectories x 2 requests, median of {args.rounds} rounds, scripted engine")
    print(markdown_table(header, table))
    path = save_result(
        "endpoint_overhead",
        {
            "batch": args.batch,
            "rounds": args.rounds,
            "requests_per_batch": requests,
            "wall_s": wall,
            "cpu_s": cpu,
            "table": [dict(zip(header, row)) for row in table],
        },  # fmt: skip
        smoke=args.smoke,
    )
    print(f"saved {path}")


if __name__ == "__main__":
    main()

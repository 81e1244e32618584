"""Time limits, a full queue, LoRA adapters, the command line and a clean shutdown, over real HTTP."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest
import torch

from verl.serve import ServeConfig


@pytest.fixture(scope="module")
def long_context_model_dir(tmp_path_factory) -> str:
    """A tiny Llama with a 4096-token context: a 3000-token greedy answer takes seconds (it never emits EOS)."""
    from verl.models.tiny import TinyModelSpec, make_tiny_model_dir

    spec = TinyModelSpec(max_position_embeddings=4096, num_hidden_layers=4, hidden_size=128, intermediate_size=256)
    return make_tiny_model_dir(str(tmp_path_factory.mktemp("tiny_4k")), spec=spec)


@pytest.fixture(scope="module")
def limited(long_context_model_dir, start_server):
    config = ServeConfig(
        model=long_context_model_dir, engine="hf", dtype="float32", max_batch_size=4, batch_wait_ms=200,
        max_queue=4, request_timeout_s=1.0, max_new_tokens=3000,
    )  # fmt: skip
    with start_server(config) as srv:
        _warm_up(srv.url)
        yield srv


def _warm_up(url: str) -> None:
    """The first batch pays one-off costs (kernel set-up): keep them out of the timed checks."""
    r = httpx.post(url + "/generate", json={"prompt": "warm", "max_new_tokens": 4}, timeout=60)
    assert r.status_code in (200, 504), r.text  # 504: the one-off costs alone ran past a short time limit


@pytest.fixture(scope="module")
def patient(long_context_model_dir, start_server):
    """Long answers and a generous time limit: only the client can end a request early."""
    config = ServeConfig(
        model=long_context_model_dir, engine="hf", dtype="float32", request_timeout_s=60.0, max_new_tokens=3000
    )
    with start_server(config) as srv:
        _warm_up(srv.url)
        yield srv


def _post_all(url: str, bodies: list[dict]) -> list[tuple[httpx.Response, float]]:
    """POST the bodies to /generate concurrently; each response with its latency in seconds."""

    async def one(c: httpx.AsyncClient, body: dict) -> tuple[httpx.Response, float]:
        start = time.monotonic()
        r = await c.post("/generate", json=body)
        return r, time.monotonic() - start

    async def run() -> list[tuple[httpx.Response, float]]:
        async with httpx.AsyncClient(base_url=url, timeout=60) as c:
            return await asyncio.gather(*(one(c, b) for b in bodies))

    return asyncio.run(run())


def test_timeout_cancels_only_the_slow_request(limited):
    (long, t_long), (short, t_short) = _post_all(
        limited.url,
        [
            {"prompt": "long", "max_new_tokens": 3000, "temperature": 0.0},
            {"prompt": "short", "max_new_tokens": 4, "temperature": 0.0},
        ],
    )
    # the short request shared the batch and came back as soon as it was done
    assert short.status_code == 200, short.text
    assert t_short < t_long
    assert long.status_code == 504, long.text
    assert long.json()["error"]["code"] == "timeout" and "time limit" in long.json()["error"]["message"]
    assert 0.9 < t_long < 5.0
    # the cancelled row stopped at its next step: the engine is idle right away (3000 tokens take ~3 s)
    deadline = time.monotonic() + 1.0
    while httpx.get(limited.url + "/health").json()["running"] and time.monotonic() < deadline:
        time.sleep(0.02)
    assert httpx.get(limited.url + "/health").json()["running"] == 0
    ok = httpx.post(limited.url + "/generate", json={"prompt": "after", "max_new_tokens": 4}, timeout=10)
    assert ok.status_code == 200


def test_full_queue_is_refused_with_retry_after(limited):
    bodies = [{"prompt": f"q{i}", "max_new_tokens": 3000, "temperature": 0.0} for i in range(12)]
    results = _post_all(limited.url, bodies)
    codes = [r.status_code for r, _ in results]
    refused = [r for r, _ in results if r.status_code == 503]
    assert refused, codes
    for r in refused:
        assert int(r.headers["Retry-After"]) >= 1
        assert r.json()["error"]["code"] == "queue_full"
    # 4 decoding + 4 waiting at most; everything else was refused at once; every request got an answer
    # (504 past the time limit, or 200 for a prompt whose greedy answer reached EOS early)
    assert len(refused) >= 12 - 8
    assert set(codes) <= {200, 503, 504}, codes


def _lora_adapter(base_dir: str, out_dir: str) -> str:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base_dir)
    peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    torch.manual_seed(1)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.5)  # B starts at zero: make the adapter change the model
    peft_model.save_pretrained(out_dir)
    return out_dir


def _greedy_reference(model_dir: str, adapter_dir: str | None, prompt_ids: list[int], n: int) -> list[int]:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    if adapter_dir is not None:
        model = PeftModel.from_pretrained(model, adapter_dir).merge_and_unload()
    out = model.generate(
        torch.tensor([prompt_ids]), max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=256
    )
    return out[0, len(prompt_ids) :].tolist()


def test_lora_adapter_is_served(tiny_model_dir, tmp_path, start_server, byte_tokenizer):
    adapter = _lora_adapter(tiny_model_dir, str(tmp_path / "adapter"))
    prompt = "lora"
    ids = byte_tokenizer(prompt)["input_ids"]
    expected = byte_tokenizer.decode(_greedy_reference(tiny_model_dir, adapter, ids, 6), skip_special_tokens=True)
    base = byte_tokenizer.decode(_greedy_reference(tiny_model_dir, None, ids, 6), skip_special_tokens=True)
    assert expected != base
    body = {"prompt": prompt, "max_new_tokens": 6, "temperature": 0.0}
    # an export that kept the adapter beside the base weights (merge_lora=False): MODEL_DIR/lora_adapter/
    export = str(tmp_path / "hf_model")
    shutil.copytree(tiny_model_dir, export)
    shutil.copytree(adapter, os.path.join(export, "lora_adapter"))
    for config in (
        ServeConfig(model=tiny_model_dir, lora=adapter, engine="hf", dtype="float32"),
        ServeConfig(model=adapter, engine="hf", dtype="float32"),  # base from adapter_config.json
        ServeConfig(model=export, engine="hf", dtype="float32"),
    ):
        with start_server(config) as srv:
            r = httpx.post(srv.url + "/generate", json=body, timeout=60)
            assert r.status_code == 200, r.text
            assert r.json()["response"] == expected
            merged_dirs = list(srv.server.config.app.state.serve.source.cleanup)
        assert merged_dirs and not any(os.path.exists(d) for d in merged_dirs)  # temp merge removed at shutdown


def test_a_training_checkpoint_is_served_merged(tiny_model_dir, tmp_path, byte_tokenizer):
    from transformers import AutoModelForCausalLM

    from verl.checkpoint import FSDPCheckpointManager
    from verl.serve.engine import resolve_model_source

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    with torch.no_grad():
        model.lm_head.weight.mul_(2)  # not the base model's weights
    step_dir = tmp_path / "global_step_3"
    FSDPCheckpointManager(model, processing_class=byte_tokenizer).save_checkpoint(str(step_dir / "actor"), 3)
    source = resolve_model_source(str(step_dir))
    try:
        served = AutoModelForCausalLM.from_pretrained(source.path)
        assert torch.equal(served.lm_head.weight, model.lm_head.weight)
        assert os.path.isfile(os.path.join(source.path, "tokenizer.json"))
    finally:
        for directory in source.cleanup:
            shutil.rmtree(directory, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_cli_serves_and_shuts_down_cleanly(tiny_model_dir):
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "verl.serve", tiny_model_dir, "--port", str(port), "--engine", "hf",
         "--log-level", "info"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 180
        while True:
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, proc.stdout.read()
            assert time.monotonic() < deadline, "the server did not come up"
            time.sleep(0.2)
        r = httpx.post(url + "/v1/completions", json={"prompt": "cli", "max_tokens": 3}, timeout=30)
        assert r.status_code == 200, r.text
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out
    assert "Uvicorn running on http://127.0.0.1:" in out
    assert "Application shutdown complete" in out


def test_verl_cli_knows_serve():
    from verl.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["serve", "--help"])
    assert exc.value.code == 0


def test_client_disconnect_cancels_its_stream(patient):
    body = {"prompt": "stream", "max_new_tokens": 3000, "temperature": 0.0, "stream": True}
    with httpx.Client(base_url=patient.url, timeout=30) as c:
        with c.stream("POST", "/generate", json=body) as r:
            assert r.status_code == 200
            # keep the line iterator referenced: a dropped one is closed by the garbage collector, which closes the
            # response, i.e. disconnects early (that race made this test flaky)
            lines = r.iter_lines()
            first = next(lines)
            assert first.startswith('data: {"response"'), first
            # the row is decoding (the health route reads the batcher from the event loop: give it a moment)
            deadline = time.monotonic() + 2.0
            while c.get("/health").json()["running"] != 1 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert c.get("/health").json()["running"] == 1
            del lines
        # leaving the block closed the connection mid-stream: the row stops long before its 3000 tokens
    deadline = time.monotonic() + 1.0
    while httpx.get(patient.url + "/health").json()["running"] and time.monotonic() < deadline:
        time.sleep(0.02)
    assert httpx.get(patient.url + "/health").json()["running"] == 0


def test_client_that_gives_up_frees_its_row(patient):
    def gone() -> float:
        key = 'verl_serve_requests_total{endpoint="/generate",status="499"} '
        lines = [ln for ln in httpx.get(patient.url + "/metrics").text.splitlines() if ln.startswith(key)]
        return float(lines[0].split()[-1]) if lines else 0.0

    before = gone()
    body = {"prompt": "impatient", "max_new_tokens": 3000, "temperature": 0.0}
    start = time.monotonic()
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(patient.url + "/generate", json=body, timeout=0.3)
    # the server notices the closed connection within its 0.5 s poll and stops the row (3000 tokens take ~3 s)
    while httpx.get(patient.url + "/health").json()["running"] and time.monotonic() - start < 1.5:
        time.sleep(0.02)
    assert httpx.get(patient.url + "/health").json()["running"] == 0
    assert gone() == before + 1  # answered as "client closed request", not as a time-out

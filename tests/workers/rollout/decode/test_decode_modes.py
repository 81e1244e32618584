"""The decode step on the static-cache forward runs eager, compiled (torch.compile) or as a CUDA graph, and all
three give the same tokens for the same seed; finished rows are compacted into smaller buckets without changing
any row."""

from __future__ import annotations

import pytest
import torch

from verl.models.tiny import TinyModelSpec, make_tiny_causal_lm, randomize_norm_weights
from verl.workers.rollout.base import SamplingSettings
from verl.workers.rollout.decode import DecodeLoop, attention_window, bucket_size, resolve_decode_mode
from verl.workers.rollout.hf_rollout import HFRollout

PAD = 256
# many end tokens: rows finish at different steps, so the loop compacts its batch several times
EOS = list(range(0, 90))


def _prompts(bs: int = 6, length: int = 7) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 250, (bs, length), generator=gen)
    mask = torch.ones_like(ids)
    for row, pad in enumerate([0, 2, 3, 5, 1, 4][:bs]):
        ids[row, :pad] = PAD
        mask[row, :pad] = 0
    return ids, mask, (mask.cumsum(-1) - 1).clamp(min=0)


def _settings(greedy: bool, **kw) -> SamplingSettings:
    base = dict(
        do_sample=not greedy, temperature=0.8, top_p=0.9, top_k=50, response_length=10, min_new_tokens=2,
        calculate_log_probs=True,
    )  # fmt: skip
    base.update(kw)
    return SamplingSettings(**base)


def _valid(tokens: torch.Tensor) -> torch.Tensor:
    """Positions up to and including each row's first end token (log-probs after it are not defined)."""
    is_end = torch.isin(tokens, torch.tensor(EOS, device=tokens.device)).long()
    return (is_end.cumsum(-1) - is_end) == 0


def _generate(decoder: DecodeLoop, settings: SamplingSettings, eos=EOS, device="cpu", seed: int = 7):
    ids, mask, pos = (t.to(device) for t in _prompts())
    torch.manual_seed(seed)
    return decoder.generate(ids, mask, pos, settings, eos_ids=eos, pad_id=PAD)


class LogitsOnly(torch.nn.Module):
    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, input_ids, attention_mask=None, position_ids=None):
        return self.inner(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    return make_tiny_causal_lm(seed=0).eval()


def test_bucket_sizes_and_mode_resolution() -> None:
    assert [bucket_size(n) for n in (1, 2, 3, 5, 8, 9, 16, 17, 100)] == [1, 2, 4, 8, 8, 16, 16, 24, 104]
    with pytest.raises(ValueError, match="at least one row"):
        bucket_size(0)
    assert resolve_decode_mode(True, torch.device("cuda")) == "eager"
    assert resolve_decode_mode(False, torch.device("cuda")) == "cuda_graph"
    assert resolve_decode_mode(False, torch.device("cpu")) in ("eager", "compile")
    with pytest.raises(ValueError, match="decode mode 'fast'"):
        DecodeLoop(make_tiny_causal_lm(), mode="fast")
    with pytest.raises(ValueError, match="needs a CUDA device"):
        _generate(DecodeLoop(make_tiny_causal_lm(), mode="cuda_graph"), _settings(True))


def test_compaction_keeps_every_row_equal_to_the_reference_loop(model, monkeypatch) -> None:
    """Sampling with early EOS: the eager loop drops finished rows mid-way and still draws, row for row, what the
    cache-free full forward draws under the same seed."""
    regroups = []
    original = DecodeLoop._regroup

    def spy(self, st, rows, keep):
        regroups.append(rows)
        return original(self, st, rows, keep)

    monkeypatch.setattr(DecodeLoop, "_regroup", spy)
    settings = _settings(False)
    fast, fast_lp = _generate(DecodeLoop(model), settings)
    assert regroups and all(r < 6 for r in regroups)
    ids, mask, pos = _prompts()
    torch.manual_seed(7)
    ref, ref_lp = DecodeLoop(LogitsOnly(model)).generate(ids, mask, pos, settings, EOS, PAD)
    assert torch.equal(fast, ref)
    # log-probs agree up to each row's end; after it the fast loop computes nothing (0) for dropped rows
    valid = _valid(fast)
    torch.testing.assert_close(fast_lp[valid], ref_lp[valid], atol=1e-4, rtol=1e-4)
    assert bool((fast_lp[~valid] == 0).any())
    ended = [row.index(t) for row in fast.tolist() for t in row if t in EOS][:1]
    assert ended, "no row ended early: the test does not exercise compaction"


@pytest.mark.parametrize("greedy", [True, False])
def test_traced_step_has_no_graph_break_and_matches_eager(model, greedy) -> None:
    """fullgraph=True: the step traces into one graph (no host sync, no data-dependent Python), the property CUDA
    graph capture needs; bucket padding (6 rows -> 8) and compaction do not change the tokens."""
    torch._dynamo.reset()  # other tests compiled the same forward: start under the recompile limit
    settings = _settings(greedy)
    eager = _generate(DecodeLoop(model, mode="eager"), settings)
    traced = DecodeLoop(model, mode="compile", check_every=2)
    traced.compile_options = {"backend": "eager", "fullgraph": True}
    out = _generate(traced, settings)
    assert traced.mode == "compile"  # a graph break would have failed the compilation, and the loop fallen back
    assert torch.equal(out[0], eager[0])
    valid = _valid(eager[0])
    torch.testing.assert_close(out[1][valid], eager[1][valid], atol=1e-5, rtol=1e-5)
    # a second call reuses the buffers of the buckets (no new allocation)
    buffers = dict(traced._states)
    again = _generate(traced, settings)
    assert torch.equal(again[0], eager[0]) and traced._states.keys() == buffers.keys()


@pytest.mark.slow
def test_inductor_compiled_step_matches_eager(model) -> None:
    """torch.compile with inductor (C++ on CPU, Triton on GPU): same tokens as eager, greedy and sampled."""
    decoder = DecodeLoop(model, mode="compile")
    for greedy in (True, False):
        settings = _settings(greedy)
        eager = _generate(DecodeLoop(model, mode="eager"), settings)
        out = _generate(decoder, settings)
        assert torch.equal(out[0], eager[0])
        valid = _valid(eager[0])
        torch.testing.assert_close(out[1][valid], eager[1][valid], atol=1e-4, rtol=1e-4)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")
@pytest.mark.parametrize("decode_weights", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_graph_step_matches_eager_on_cuda(dtype, decode_weights) -> None:
    """The replayed graph runs the eager step's kernels: the same tokens (in bf16 too, against an eager loop that
    reads the whole cache as the graph does, so no reduction differs in length), on the model's modules and on the
    stacked weight copy."""
    model = make_tiny_causal_lm(seed=0).eval().to("cuda")
    graphed = DecodeLoop(model, mode="cuda_graph", decode_weights=decode_weights)
    for greedy in (True, False):
        settings = _settings(greedy)
        reference = DecodeLoop(model, mode="eager", decode_weights=decode_weights)
        reference.attend_filled_only = dtype == torch.float32
        with torch.autocast("cuda", dtype=dtype, enabled=dtype != torch.float32):
            eager = _generate(reference, settings, device="cuda")
            out = _generate(graphed, settings, device="cuda")
        assert torch.equal(out[0], eager[0])
        valid = _valid(eager[0])
        torch.testing.assert_close(out[1][valid], eager[1][valid], atol=1e-3, rtol=1e-3)
    # in-place weight updates (the optimizer's) reach the graphs captured above (same settings and bucket): with a
    # zero LM head all logits tie, argmax takes the first allowed id: 90 while the end ids 0..89 are forbidden
    # (min_new_tokens=2), then 0, which ends every row
    captured = len(graphed._graphs)
    with torch.no_grad():
        model.lm_head.weight.zero_()
    # under the autocast of the capture: a call outside it decodes into float32 buffers, which are other graphs
    with torch.autocast("cuda", dtype=dtype, enabled=dtype != torch.float32):
        out, _ = _generate(graphed, _settings(True), device="cuda")
    assert out.tolist() == [[90, 90, 0]] * 6
    assert len(graphed._graphs) == captured  # replayed, not captured again


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")
@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_windowed_cuda_graphs_match_eager_on_cuda(arch) -> None:
    """A 130-token response (a 192-slot cache: attention windows of 64, 128 and 192 slots) decoded by the graphs in
    bf16 gives the tokens of an eager loop reading the same windows, one graph per window, and with the filled-only
    eager loop in fp32; Llama, and Qwen3 with its per-head q/k norms (drawn weights) on the weight copy."""
    model = make_tiny_causal_lm(TinyModelSpec(arch=arch), seed=0).eval()
    randomize_norm_weights(model)
    model = model.to("cuda")
    settings = _settings(False, response_length=130, min_new_tokens=130)
    graphed = DecodeLoop(model, mode="cuda_graph")
    reference = DecodeLoop(model, mode="eager", decode_weights=True)
    reference.attend_filled_only = False
    with torch.autocast("cuda", dtype=torch.bfloat16):
        eager = _generate(reference, settings, eos=[], device="cuda")
        out = _generate(graphed, settings, eos=[], device="cuda")
    assert torch.equal(out[0], eager[0]) and len(graphed._graphs) == 3
    torch.testing.assert_close(out[1], eager[1], atol=1e-3, rtol=1e-3)
    fp32 = _generate(DecodeLoop(model, mode="cuda_graph"), settings, eos=[], device="cuda")
    filled_only = DecodeLoop(model, mode="eager", decode_weights=True)
    assert torch.equal(fp32[0], _generate(filled_only, settings, eos=[], device="cuda")[0])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")
def test_compile_cuda_graph_step_matches_eager_on_cuda() -> None:
    """The step with the inductor-compiled forward captured as a CUDA graph (compile_cuda_graph) decodes the eager
    loop's greedy tokens (fp32: no near-tie for a reordered sum to flip), with log-probs within rounding, and replays
    without capturing again on a second call."""
    torch._dynamo.reset()
    model = make_tiny_causal_lm(seed=0).eval().to("cuda")
    loop = DecodeLoop(model, mode="compile_cuda_graph")
    eager = _generate(DecodeLoop(model, mode="eager", decode_weights=True), _settings(True), device="cuda")
    out = _generate(loop, _settings(True), device="cuda")
    # no fallback (a failed compilation would have switched to cuda_graph, a failed capture to eager)
    assert loop.mode == "compile_cuda_graph" and loop._compiled._torchdynamo_orig_callable == loop.forward.decode
    assert torch.equal(out[0], eager[0])
    valid = _valid(eager[0])
    torch.testing.assert_close(out[1][valid], eager[1][valid], atol=1e-4, rtol=1e-4)
    graphs = len(loop._graphs)
    assert torch.equal(_generate(loop, _settings(True), device="cuda")[0], eager[0]) and len(loop._graphs) == graphs


class _EagerGraph:
    """Stands in for a captured CUDA graph on CPU: ``replay`` runs the step eagerly under the capture's autocast."""

    def __init__(self, loop: DecodeLoop, st, c, window) -> None:
        self.loop, self.st, self.c, self.window = loop, st, c, window
        self.autocast = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else None

    def replay(self) -> None:
        with torch.autocast("cpu", dtype=self.autocast or torch.bfloat16, enabled=self.autocast is not None):
            self.loop._step(self.st, self.c, self.window)


class _CpuGraphLoop(DecodeLoop):
    """The graph modes' bookkeeping (buffers, graph keys, weight keys, fallbacks) on CPU, with eager 'graphs'. A
    capture runs the warm-up step first and restores the step's counters, as the real one does (the compiled forward
    compiles there); ``capture_error`` makes every capture fail after its warm-up, as an op CUDA graphs cannot
    capture does."""

    captures = 0
    capture_error: RuntimeError | None = None

    def _check_graph_device(self, device) -> None:
        pass

    def _capture(self, st, c, window):
        saved = [t.clone() for t in st.scalars()]
        try:
            self._step(st, c, window)
            if self.capture_error is not None:
                raise self.capture_error
        finally:
            for t, s in zip(st.scalars(), saved):
                t.copy_(s)
        self.captures += 1
        return _EagerGraph(self, st, c, window)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_graphs_are_kept_across_in_place_weight_updates_and_recaptured_on_a_new_cache_dtype(dtype) -> None:
    """What decides a recapture, on CPU: an in-place weight change keeps every graph (bf16 autocast too); a call in
    another cache dtype (outside the capture's autocast) gets new buffers and graphs; re-allocated parameters free
    the graphs."""
    model = make_tiny_causal_lm(seed=0).eval()
    loop = _CpuGraphLoop(model, mode="cuda_graph")
    assert loop.mode == "cuda_graph"
    amp = dict(device_type="cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16)
    with torch.autocast(**amp):
        _generate(loop, _settings(True))
        _generate(loop, _settings(False))
    captures, graphs = loop.captures, len(loop._graphs)
    assert captures == graphs >= 2
    with torch.no_grad():
        model.lm_head.weight.zero_()  # in place, as an optimizer step
    with torch.autocast(**amp):
        out, _ = _generate(loop, _settings(True))
    assert out.tolist() == [[90, 90, 0]] * 6  # the new weights are read
    assert loop.captures == captures and len(loop._graphs) == graphs
    # outside the autocast (the bf16 case of test_cuda_graph_step_matches_eager_on_cuda before its fix): float32
    # buffers, so the bf16 graphs are dropped and one is captured for this call
    _generate(loop, _settings(True))
    if dtype == torch.bfloat16:
        assert loop.captures == captures + 1 and len(loop._graphs) == 1
    else:
        assert loop.captures == captures
    # parameters re-allocated (not in place): the graphs would read freed storage, so they are captured again
    before = loop.captures
    with torch.no_grad():
        model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.clone())
    _generate(loop, _settings(True))
    assert loop.captures == before + 1


def test_attention_windows_cover_the_filled_slots_in_blocks_of_the_capacity() -> None:
    # a 64-token prompt and 256 new tokens (capacity 320): windows of 64 slots, the last one the whole cache
    assert [attention_window(f, 320) for f in (1, 64, 65, 128, 129, 300, 320)] == [64, 64, 128, 128, 192, 320, 320]
    # a long response: 8 windows of 576 slots (a multiple of 64) cover 4,608
    assert [attention_window(f, 4608) for f in (513, 576, 577, 4100)] == [576, 576, 1152, 4608]
    assert attention_window(5, 320, windows=1) == 320  # one window: the whole cache
    assert attention_window(17, 17) == 17  # an eager loop's exact capacity caps the window
    with pytest.raises(ValueError, match="0 < filled <= capacity"):
        attention_window(321, 320)


def test_graph_steps_attend_over_windows_and_decode_the_eager_tokens(model, monkeypatch) -> None:
    """A 130-token response in the cuda_graph mode (emulated on CPU) steps through the windows 64, 128 and 192 of its
    192-slot cache: one graph per bucket and window, each step's window covering its filled slots, and the tokens and
    log-probs of the eager loop that attends over the filled slots only; with one window per cache it reads the whole
    cache, as before."""
    reads: list[tuple[int, int]] = []
    original = DecodeLoop._step

    def spy(self, st, c, live):
        reads.append((int(st.cur), live))
        return original(self, st, c, live)

    settings = _settings(False, response_length=130, min_new_tokens=130)
    eager = _generate(DecodeLoop(model, mode="eager"), settings, eos=[])
    monkeypatch.setattr(DecodeLoop, "_step", spy)
    loop = _CpuGraphLoop(model, mode="cuda_graph")
    out = _generate(loop, settings, eos=[])
    # every step reads its filled slots (slot cur included) and at most the rest of its 64-slot block
    assert reads and all(cur < live <= cur + 64 and live % 64 == 0 for cur, live in reads)
    assert sorted({live for _, live in reads}) == [64, 128, 192] and loop.captures == len(loop._graphs) == 3
    assert torch.equal(out[0], eager[0])
    torch.testing.assert_close(out[1], eager[1], atol=1e-5, rtol=1e-5)
    reads.clear()
    whole = _CpuGraphLoop(model, mode="cuda_graph")
    whole.attention_windows = 1
    assert torch.equal(_generate(whole, settings, eos=[])[0], eager[0])
    assert {live for _, live in reads} == {192} and whole.captures == 1


def test_rollout_keeps_one_decoder_and_follows_enforce_eager(model, rollout_config, make_prompts, byte_prompts) -> None:
    from verl.workers.rollout.decode import CPU_AUTO_MODE

    rollout = HFRollout(model, rollout_config(do_sample=False))
    first = rollout.decode_loop(torch.device("cpu"))
    assert first.mode == CPU_AUTO_MODE and rollout.decode_loop(torch.device("cpu")) is first
    rollout.generate_sequences(make_prompts(byte_prompts))
    assert rollout._decoder is first  # reused across calls (compiled forward / graphs and buffers kept)
    eager = HFRollout(model, rollout_config(do_sample=False, enforce_eager=True))
    assert eager.decode_loop(torch.device("cpu")).mode == "eager"
    # on CUDA, enforce_eager=false means CUDA graphs (the mode is resolved without touching a GPU)
    assert rollout.decode_loop(torch.device("cuda")).mode == "cuda_graph"


def test_engine_kwargs_hf_pick_the_mode_and_the_weight_copy(model, rollout_config, make_prompts, byte_prompts) -> None:
    """``rollout.engine_kwargs.hf``: decode_mode overrides enforce_eager's choice, decode_weights the copy; a graph
    mode on CPU, or against enforce_eager=true, is refused naming the key; the PPO config refuses them on vLLM."""
    from verl.trainer.config import load_config
    from verl.utils.errors import ConfigError

    def rollout(**hf):
        return HFRollout(model, rollout_config(do_sample=False, engine_kwargs={"vllm": {}, "hf": hf}))

    compiled = rollout(decode_mode="compile", decode_weights=True)
    loop = compiled.decode_loop(torch.device("cpu"))
    assert loop.mode == "compile" and loop.decode_weights
    assert rollout(decode_mode="compile_cuda_graph").decode_loop(torch.device("cuda")).mode == "compile_cuda_graph"
    assert rollout(decode_weights=False).decode_loop(torch.device("cuda")).decode_weights is False
    assert rollout().decode_loop(torch.device("cuda")).decode_weights  # the graph default
    copied = rollout(decode_weights=True)
    out = copied.generate_sequences(make_prompts(byte_prompts))
    plain = HFRollout(model, rollout_config(do_sample=False)).generate_sequences(make_prompts(byte_prompts))
    assert torch.equal(out.batch["responses"], plain.batch["responses"])
    with pytest.raises(ValueError, match="decode_mode=cuda_graph needs a CUDA device"):
        rollout(decode_mode="cuda_graph").decode_loop(torch.device("cpu"))
    key = "actor_rollout_ref.rollout.engine_kwargs.hf"
    with pytest.raises(ConfigError, match="contradicts actor_rollout_ref.rollout.enforce_eager=true"):
        load_config([f"{key}.decode_mode=cuda_graph", "actor_rollout_ref.rollout.enforce_eager=true"])
    with pytest.raises(ConfigError, match="configures the hf engine's decode loop; rollout.name=vllm"):
        load_config([f"{key}.decode_weights=true", "actor_rollout_ref.rollout.name=vllm"])
    assert load_config([f"{key}.decode_mode=compile_cuda_graph"]).actor_rollout_ref.rollout.engine_kwargs.hf.decode_mode


# What torch 2.11's inductor raised compiling the whole step (sampler included) on CUDA: its split-scan codegen for
# the vocabulary-wide cumsum failed with this TypeError, which dynamo hands on wrapped (InductorError)
SPLIT_SCAN_ERROR = "list indices must be integers or slices, not NoneType"


def _loop(model: torch.nn.Module, mode: str, backend) -> DecodeLoop:
    """A loop in ``mode`` whose forward compiles with ``backend``; the graph modes emulated on CPU."""
    loop = (_CpuGraphLoop if mode in ("cuda_graph", "compile_cuda_graph") else DecodeLoop)(model, mode=mode)
    loop.compile_options = {"backend": backend, "fullgraph": True}
    return loop


@pytest.mark.parametrize("mode", ["compile", "compile_cuda_graph"])
def test_compiled_modes_compile_the_forward_and_run_the_sampler_eagerly(model, mode, monkeypatch) -> None:
    """The compiled callable wraps the forward's ``decode``; the graph dynamo hands the backend is the forward (logits
    out, no cumsum / sort / searchsorted of the sampler in it), and every sampler call runs outside compilation."""
    torch._dynamo.reset()
    graphs = []

    def record(gm: torch.fx.GraphModule, example_inputs):
        graphs.append(gm)
        return gm.forward

    compiling = []
    choose = DecodeLoop._choose

    def spy(logits, st, c):
        compiling.append(torch.compiler.is_compiling())
        return choose(logits, st, c)

    monkeypatch.setattr(DecodeLoop, "_choose", staticmethod(spy))
    settings = _settings(False)
    eager = _generate(DecodeLoop(model, decode_weights=mode != "compile"), settings)
    loop = _loop(model, mode, record)
    out = _generate(loop, settings)
    assert loop.mode == mode and loop._compiled._torchdynamo_orig_callable == loop.forward.decode
    assert torch.equal(out[0], eager[0])
    assert graphs and compiling and not any(compiling)
    ops = {str(n.target) for gm in graphs for n in gm.graph.nodes if n.op in ("call_function", "call_method")}
    assert not {op for op in ops if any(s in op for s in ("cumsum", "sort", "searchsorted", "topk"))}, ops
    (logits,) = [n for n in graphs[0].graph.nodes if n.op == "output"][0].args[0]
    assert logits.meta["example_value"].shape[-1] == model.config.vocab_size


def _failing_backend(error: type[Exception], calls: list[int]):
    def backend(gm, example_inputs):
        calls.append(1)
        if error is TypeError:
            raise TypeError(SPLIT_SCAN_ERROR)  # dynamo wraps it (BackendCompilerFailed)
        raise torch._inductor.exc.InductorError(TypeError(SPLIT_SCAN_ERROR), None)

    return backend


@pytest.mark.parametrize("error", [TypeError, torch._inductor.exc.InductorError])
@pytest.mark.parametrize(
    ("mode", "capture_fails", "falls_back_to"),
    [("compile", False, "eager"), ("compile_cuda_graph", False, "cuda_graph"), ("compile_cuda_graph", True, "eager")],
)
def test_a_failed_compilation_falls_back_with_one_warning(model, mode, capture_fails, falls_back_to, error, caplog):
    """The failing backend raises what inductor raised on CUDA: compile -> eager, compile_cuda_graph -> cuda_graph
    (the uncompiled step captured), and -> eager when that capture fails too; one warning line per fallback naming
    the new mode and the error's first line; no compiled forward or graph of the failed mode is kept; the tokens and
    log-probs are the eager loop's, on this call and the next (which compiles nothing again)."""
    torch._dynamo.reset()
    calls: list[int] = []
    loop = _loop(model, mode, _failing_backend(error, calls))
    if capture_fails:
        loop.capture_error = RuntimeError("operation not permitted when stream is capturing\nmore detail")
    settings = _settings(False)
    eager = _generate(DecodeLoop(model, decode_weights=loop.decode_weights), settings)
    with caplog.at_level("WARNING", logger="verl.workers.rollout.decode.loop"):
        out = _generate(loop, settings)
    assert loop.mode == falls_back_to and loop.requested_mode == mode and len(calls) == 1
    assert torch.equal(out[0], eager[0])
    valid = _valid(eager[0])
    torch.testing.assert_close(out[1][valid], eager[1][valid], atol=1e-5, rtol=1e-5)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 + capture_fails, lines
    assert lines[0] == (
        f"decode mode {mode}: compiling the decode forward failed (TypeError: {SPLIT_SCAN_ERROR}); "
        f"falling back to decode mode {'cuda_graph' if mode == 'compile_cuda_graph' else 'eager'}"
    )
    if capture_fails:
        assert lines[1] == (
            "decode mode cuda_graph: capturing the decode step as a CUDA graph failed (RuntimeError: operation not "
            "permitted when stream is capturing); falling back to decode mode eager"
        )
    assert loop._compiled is None
    # graphs: only the uncompiled step's, captured after the fallback (a failed capture stores none)
    assert len(loop._graphs) == getattr(loop, "captures", 0) and (falls_back_to == "cuda_graph") == bool(loop._graphs)
    assert bool(loop._states) == (falls_back_to == "cuda_graph")  # eager keeps no bucket buffers
    caplog.clear()
    again = _generate(loop, settings)
    assert torch.equal(again[0], eager[0]) and len(calls) == 1 and not caplog.records and loop._compiled is None


def test_an_error_of_the_compiled_forward_itself_is_not_swallowed(model) -> None:
    """Only compilation errors fall back: an error the compiled forward raises when it runs reaches the caller."""
    torch._dynamo.reset()

    def backend(gm, example_inputs):
        def run(*args):
            raise ValueError("the forward itself failed")

        return run

    loop = _loop(model, "compile", backend)
    with pytest.raises(ValueError, match="the forward itself failed"):
        _generate(loop, _settings(True))
    assert loop.mode == "compile"

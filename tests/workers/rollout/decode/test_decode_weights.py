"""The static-cache forward's stacked weight copy (verl/workers/rollout/decode/decode_weights.py): the tokens and
log-probs of the model's own modules, no weight cast inside a step, the model's later weights on every call, and the
CUDA-graph modes' bookkeeping around it (emulated on CPU; the CUDA tests run the real graphs)."""

from __future__ import annotations

import collections

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tests.workers.rollout.decode.test_decode_modes import _CpuGraphLoop, _generate, _settings, _valid
from verl.models.tiny import TinyModelSpec, make_tiny_causal_lm, randomize_norm_weights
from verl.workers.rollout.decode import DecodeLoop
from verl.workers.rollout.decode.decode_weights import DecodeWeights, decode_weights_unsupported


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3", "mistral"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_stacked_copy_decodes_the_modules_tokens(arch, dtype) -> None:
    """Greedy and sampled, fp32 and bf16 autocast over fp32 weights, Llama (no biases), Qwen2 (q/k/v biases) and
    Qwen3 (per-head q/k norms, drawn weights): the same tokens as the modules, log-probs within rounding."""
    model = make_tiny_causal_lm(TinyModelSpec(arch=arch), seed=0).eval()
    randomize_norm_weights(model)
    for greedy in (True, False):
        with torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
            modules = _generate(DecodeLoop(model, decode_weights=False), _settings(greedy))
            stacked = _generate(DecodeLoop(model, decode_weights=True), _settings(greedy))
        assert torch.equal(stacked[0], modules[0])
        valid = _valid(modules[0])
        torch.testing.assert_close(stacked[1][valid], modules[1][valid], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_qwen3_head_norms_of_the_stacked_projection_are_the_modules_and_pass_v_through(dtype) -> None:
    """norm_qk_heads on the q/k/v heads of one stacked projection: the q heads get q_norm's output, the k heads
    k_norm's (their weights differ), in the modules' dtype (fp32 under autocast, as theirs), and v comes back
    exactly."""
    from verl.workers.rollout.decode.static_cache import norm_qk_heads

    model = make_tiny_causal_lm(TinyModelSpec(arch="qwen3"), seed=0).eval()
    randomize_norm_weights(model)
    attn = model.model.layers[0].self_attn
    heads, kv_heads, dim = 4, 2, attn.head_dim
    qkv = torch.randn(3, 1, heads + 2 * kv_heads, dim).to(dtype)
    with torch.no_grad():
        out = norm_qk_heads(qkv, attn.q_norm, attn.k_norm, heads, kv_heads)
        q, k = attn.q_norm(qkv[:, :, :heads]), attn.k_norm(qkv[:, :, heads : heads + kv_heads])
    assert out.dtype == q.dtype == torch.float32
    torch.testing.assert_close(out[:, :, :heads], q, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(out[:, :, heads : heads + kv_heads], k, atol=1e-6, rtol=1e-6)
    assert torch.equal(out[:, :, heads + kv_heads :], qkv[:, :, heads + kv_heads :].float())
    assert not torch.allclose(attn.q_norm.weight, attn.k_norm.weight)
    attn.k_norm.variance_epsilon = 1e-3
    assert "q_norm and k_norm differ in eps" in decode_weights_unsupported(model)


def test_copy_is_in_the_compute_dtype_and_stacks_projections() -> None:
    model = make_tiny_causal_lm(TinyModelSpec(arch="qwen2"), seed=0).eval()
    weights = DecodeWeights(model, torch.bfloat16, "cpu")
    layer, attn, mlp = weights.layers[0], model.model.layers[0].self_attn, model.model.layers[0].mlp
    q, k = attn.q_proj.weight.shape[0], attn.k_proj.weight.shape[0]
    assert layer.qkv.dtype == torch.bfloat16 and layer.qkv.shape[0] == q + 2 * k
    assert torch.equal(layer.qkv[q : q + k], attn.k_proj.weight.to(torch.bfloat16))
    assert torch.equal(layer.qkv_bias[q + k :], attn.v_proj.bias.to(torch.bfloat16))
    ffn = mlp.gate_proj.weight.shape[0]
    assert torch.equal(layer.gate_up[ffn:], mlp.up_proj.weight.to(torch.bfloat16))
    assert layer.o_bias is None and layer.gate_up_bias is None  # Qwen2: biases on q/k/v only
    params = sum(p.numel() for n, p in model.named_parameters() if "norm" not in n and "embed" not in n)
    assert weights.nbytes() == params * 2


class _Ops(TorchDispatchMode):
    """Every aten call of a region with its first tensor argument's dtype and shape."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: collections.Counter = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        first = next((a for a in args if isinstance(a, torch.Tensor)), None)
        if first is not None:
            self.calls[(func.overloadpacket.__name__, first.dtype, tuple(first.shape))] += 1
        return func(*args, **(kwargs or {}))


def _step_ops(decode_weights: bool) -> tuple[collections.Counter, set[tuple[int, ...]]]:
    """The aten calls of one decode step under bf16 autocast without its weight cache (as inside a CUDA graph)."""
    model = make_tiny_causal_lm(TinyModelSpec(arch="qwen2", intermediate_size=96), seed=0).eval()
    loop = DecodeLoop(model, decode_weights=decode_weights)
    ops = _Ops()
    original = loop._step

    def spy(st, c, live):
        with ops:
            original(st, c, live)

    loop._step = spy
    with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False):
        _generate(loop, _settings(True, response_length=3, min_new_tokens=3))
    matrices = {tuple(p.shape) for p in model.parameters() if p.dim() == 2}
    return ops.calls, matrices


def test_a_step_on_the_copy_casts_no_weight_and_runs_fewer_matmuls() -> None:
    """On the modules every linear layer casts its fp32 weight in every step (what a CUDA graph replays); on the
    copy none does, and q/k/v and gate/up are one matmul each."""
    plain, matrices = _step_ops(False)
    stacked, _ = _step_ops(True)

    def weight_casts(calls):
        return sum(n for (op, dtype, shape), n in calls.items() if op == "_to_copy" and shape in matrices)

    def matmuls(calls):
        return sum(n for (op, _, _), n in calls.items() if op in ("mm", "addmm", "bmm", "matmul", "linear"))

    assert weight_casts(plain) > 0 and weight_casts(stacked) == 0
    assert matmuls(stacked) < matmuls(plain)
    assert sum(stacked.values()) < sum(plain.values())


def test_a_step_on_the_copy_writes_each_layers_keys_and_values_with_one_kernel() -> None:
    """The copy's step rotates q, k and v in one addcmul per layer and writes keys and values with one
    ``index_copy_`` (the modules write them separately): fewer kernels is what a CUDA graph step costs."""
    plain, _ = _step_ops(False)
    stacked, _ = _step_ops(True)
    layers = TinyModelSpec(arch="qwen2").num_hidden_layers

    def count(calls, name):
        return sum(n for (op, _, _), n in calls.items() if op == name)

    writes = count(stacked, "index_copy_")  # one per layer and step
    assert writes > 0 and writes % layers == 0
    assert count(plain, "index_copy_") == 2 * writes and count(stacked, "addcmul") == writes


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rotary_over_every_head_rotates_q_and_k_and_passes_v_through_exactly(dtype) -> None:
    """``apply_rope_heads`` with ``rotary_tables``: the q and k heads get the model's rotary embedding (to one
    rounding: the kernel may fuse a product into the sum), the v heads come back bit for bit."""
    from verl.workers.rollout.decode.static_cache import _apply_rope, apply_rope_heads, rotary_tables

    gen = torch.Generator().manual_seed(0)
    bs, rotated, passed, dim = 5, 6, 2, 16
    x = (torch.randn(bs, rotated + passed, 1, dim, generator=gen) * 4).to(dtype)
    angles = torch.rand(bs, 1, 1, dim // 2, generator=gen) * 300
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
    cos_all, sin_all = rotary_tables(cos, sin, rotated, passed)
    assert cos_all.shape == sin_all.shape == (bs, rotated + passed, 1, dim)
    out = apply_rope_heads(x, cos_all, sin_all, dtype)
    assert out.dtype == dtype and out.shape == x.shape
    assert torch.equal(out[:, rotated:], x[:, rotated:])
    expected = _apply_rope(x[:, :rotated], cos, sin).to(dtype)
    ulp = {torch.float32: 2**-23, torch.bfloat16: 2**-7}[dtype]
    torch.testing.assert_close(out[:, :rotated], expected, atol=1e-6, rtol=ulp)
    # a real rotation, not a pass-through: q and k move, their norms (per half-pair) stay
    assert not torch.equal(out[:, :rotated], x[:, :rotated])
    torch.testing.assert_close(
        out[:, :rotated].float().norm(dim=-1), x[:, :rotated].float().norm(dim=-1), rtol=2e-2, atol=1e-3
    )


def test_each_call_reads_the_models_current_weights() -> None:
    """An in-place update (an optimizer step) and a weight sync through ``.data`` both reach the copy at the next
    call: with a zero LM head every logit ties and greedy takes the first allowed id (90 while the end ids 0..89 are
    forbidden by min_new_tokens=2, then 0, which ends every row)."""
    model = make_tiny_causal_lm(seed=0).eval()
    loop = DecodeLoop(model, decode_weights=True)
    before, _ = _generate(loop, _settings(True))
    assert before.tolist() != [[90, 90, 0]] * 6
    copy = loop.forward.decode_weights
    model.lm_head.weight.data.copy_(torch.zeros_like(model.lm_head.weight))
    out, _ = _generate(loop, _settings(True))
    assert out.tolist() == [[90, 90, 0]] * 6
    assert loop.forward.decode_weights is copy  # refreshed in place, not rebuilt


def test_graph_modes_take_the_copy_by_default_and_keep_their_graphs_across_updates() -> None:
    """cuda_graph (emulated on CPU): the copy is on by default, graphs replay the refreshed copy after an in-place
    update, and a call in another compute dtype builds a new copy and captures again."""
    model = make_tiny_causal_lm(seed=0).eval()
    loop = _CpuGraphLoop(model, mode="cuda_graph")
    assert loop.decode_weights and not DecodeLoop(model, mode="eager").decode_weights
    amp = dict(device_type="cpu", dtype=torch.bfloat16)
    with torch.autocast(**amp):
        _generate(loop, _settings(True))
    captures = loop.captures
    with torch.no_grad():
        model.lm_head.weight.zero_()
    # a new autocast region: autocast's own weight cache (the prefill's casts) lives as long as one region
    with torch.autocast(**amp):
        out, _ = _generate(loop, _settings(True))
    assert out.tolist() == [[90, 90, 0]] * 6 and loop.captures == captures
    assert loop.forward.decode_weights.dtype == torch.bfloat16
    _generate(loop, _settings(True))  # fp32: a new copy, new buffers, new graphs
    assert loop.forward.decode_weights.dtype == torch.float32 and loop.captures == captures + 1
    loop.release()
    assert loop.forward.decode_weights is None


def test_compile_cuda_graph_captures_the_compiled_forward() -> None:
    """compile_cuda_graph (emulated on CPU, traced with the eager backend): the graph runs the step with the compiled
    forward of the weight copy, and the tokens are the eager loop's; on CPU the mode is refused."""
    torch._dynamo.reset()  # other tests' loops compiled the same forward: start under the recompile limit
    model = make_tiny_causal_lm(seed=0).eval()
    loop = _CpuGraphLoop(model, mode="compile_cuda_graph")
    loop.compile_options = {"backend": "eager", "fullgraph": True}
    assert loop.decode_weights
    for greedy in (True, False):
        assert torch.equal(_generate(loop, _settings(greedy))[0], _generate(DecodeLoop(model), _settings(greedy))[0])
    assert loop.mode == "compile_cuda_graph" and loop._compiled._torchdynamo_orig_callable == loop.forward.decode
    with pytest.raises(ValueError, match="'compile_cuda_graph' needs a CUDA device"):
        _generate(DecodeLoop(model, mode="compile_cuda_graph"), _settings(True))


def test_models_the_copy_cannot_serve_use_their_modules() -> None:
    """A LoRA-wrapped model keeps its adapter layers: no copy by default, refused when asked for."""
    peft = pytest.importorskip("peft")
    model = make_tiny_causal_lm(seed=0).eval()
    lora = peft.get_peft_model(model, peft.LoraConfig(r=2, target_modules=["q_proj", "v_proj"]))
    assert decode_weights_unsupported(lora.get_base_model()).startswith("layer 0 q_proj is a ")
    assert not _CpuGraphLoop(lora, mode="cuda_graph").decode_weights
    with pytest.raises(ValueError, match="decode_weights=True: layer 0 q_proj"):
        DecodeLoop(lora, decode_weights=True)


@pytest.mark.parametrize("slots", [64, 37])
def test_fused_attention_equals_the_two_matmuls(slots) -> None:
    """The CUDA path's one-kernel attention (query heads of a key/value head as rows of one SDPA block) equals the
    CPU path's two matmuls, masked slots included (fp32, checked here on CPU)."""
    from verl.workers.rollout.decode.static_cache import _decode_attention, _decode_attention_fused

    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(3, h, n, 16, generator=gen) for h, n in ((6, 1), (2, slots), (2, slots)))
    ok = torch.rand(3, slots, generator=gen) > 0.3
    ok[:, 0] = True
    bias = torch.zeros(3, slots).masked_fill_(~ok, torch.finfo(torch.float32).min)[:, None, None, :]
    fused = _decode_attention_fused(q, k, v, bias, 0.25)
    torch.testing.assert_close(fused, _decode_attention(q, k, v, bias, 0.25), atol=1e-5, rtol=1e-5)
    # a masked slot does not count: changing its value changes nothing
    k2 = k.clone()
    k2[~ok[:, None, :, None].expand_as(k)] = 100.0
    torch.testing.assert_close(_decode_attention_fused(q, k2, v, bias, 0.25), fused)


@pytest.mark.parametrize("free", [True, False])
def test_free_cache_engine_frees_the_decode_buffers_after_the_outermost_hold(free, rollout_config, monkeypatch):
    """``rollout.free_cache_engine`` on a CUDA device (faked here): the hf engine's weight copy (and KV caches,
    graphs) are freed when the outermost generation hold ends, not inside it; false keeps them for the next rollout."""
    from verl.workers.rollout.hf_rollout import HFRollout

    model = make_tiny_causal_lm(seed=0).eval()
    config = rollout_config(
        do_sample=False, free_cache_engine=free, engine_kwargs={"vllm": {}, "hf": {"decode_weights": True}}
    )
    rollout = HFRollout(model, config)
    loop = rollout.decode_loop(torch.device("cpu"))
    _generate(loop, _settings(True))
    monkeypatch.setattr(rollout, "_device", lambda: torch.device("cuda"))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    with rollout.stay_ready():
        with rollout.stay_ready():
            pass
        assert loop.forward.decode_weights is not None  # an outer hold is still open
    assert (loop.forward.decode_weights is None) == free

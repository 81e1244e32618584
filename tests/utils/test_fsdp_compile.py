"""``actor.use_torch_compile`` compiles each decoder layer in place; ``use_remove_padding: null`` packs where the
packed forward equals the padded one."""

from __future__ import annotations

import torch

from verl.models.tiny import make_tiny_causal_lm
from verl.utils.fsdp_utils import compile_decoder_layers, resolve_remove_padding


def test_compile_decoder_layers_keeps_the_model_and_its_outputs() -> None:
    model = make_tiny_causal_lm(seed=0)
    ids = torch.randint(0, 250, (2, 6))
    expected = model(input_ids=ids).logits
    params = {n: p.data_ptr() for n, p in model.named_parameters()}
    assert compile_decoder_layers(model, backend="eager") == len(model.model.layers)
    assert all(layer._compiled_call_impl is not None for layer in model.model.layers)
    torch.testing.assert_close(model(input_ids=ids).logits, expected)
    assert {n: p.data_ptr() for n, p in model.named_parameters()} == params  # same parameters: optimizer unchanged


def test_compile_falls_back_to_the_whole_module() -> None:
    module = torch.nn.Sequential(torch.nn.Linear(3, 3))
    assert compile_decoder_layers(module, backend="eager") == 1
    assert module._compiled_call_impl is not None


def test_remove_padding_auto_packs_where_the_packed_forward_equals_the_padded_one() -> None:
    model = make_tiny_causal_lm()
    assert resolve_remove_padding(True, model) is True and resolve_remove_padding(False, model) is False
    for attn in ("eager", "sdpa", "flash_attention_2"):  # rows for sdpa/eager, one row for flash-attention
        model.config._attn_implementation = attn
        assert resolve_remove_padding(None, model) is True
        assert resolve_remove_padding(None, model, prefix_grouper=True) is False  # it needs the padded rows
        assert resolve_remove_padding(True, model, prefix_grouper=True) is True  # the explicit setting is refused
    model.config._attn_implementation = "sdpa"
    model.config.vision_config = {"hidden_size": 8}  # a VLM's images pack into one row only: padded under sdpa
    assert resolve_remove_padding(None, model) is False
    model.config._attn_implementation = "flash_attention_2"
    assert resolve_remove_padding(None, model) is True


def test_remove_padding_auto_leaves_other_modules_padded() -> None:
    from types import SimpleNamespace

    class RemoteCodeLM(torch.nn.Module):  # a model whose own masks may ignore restarting position ids
        config = SimpleNamespace(_attn_implementation="sdpa")

    assert resolve_remove_padding(None, RemoteCodeLM()) is False
    assert resolve_remove_padding(None, torch.nn.Linear(2, 2)) is False


def test_remove_padding_auto_sees_through_peft() -> None:
    import pytest

    peft = pytest.importorskip("peft")
    model = make_tiny_causal_lm()
    model.config._attn_implementation = "sdpa"
    wrapped = peft.get_peft_model(model, peft.LoraConfig(r=2, target_modules=["q_proj"]))
    assert resolve_remove_padding(None, wrapped) is True


def _failing_backend(gm, example_inputs):
    raise TypeError("list indices must be integers or slices, not NoneType")  # what inductor raised on an H200


def test_auto_compile_runs_the_layers_eagerly_when_compiling_fails(caplog) -> None:
    import pytest
    from torch._dynamo.exc import TorchDynamoException

    model = make_tiny_causal_lm(seed=0)
    ids = torch.randint(0, 250, (2, 6))
    expected = model(input_ids=ids).logits
    torch._dynamo.reset()
    assert compile_decoder_layers(model, eager_on_failure=True, backend=_failing_backend) == len(model.model.layers)
    with caplog.at_level("WARNING", logger="verl.utils.fsdp_utils"):
        torch.testing.assert_close(model(input_ids=ids).logits, expected)
        torch.testing.assert_close(model(input_ids=ids).logits, expected)
    warnings = [r for r in caplog.records if "run eagerly" in r.getMessage()]
    assert len(warnings) == 1 and "list indices" in warnings[0].getMessage()  # one line, for all layers
    # an explicit use_torch_compile=true stops on the error
    strict = make_tiny_causal_lm(seed=0)
    torch._dynamo.reset()
    compile_decoder_layers(strict, backend=_failing_backend)
    with pytest.raises(TorchDynamoException):
        strict(input_ids=ids)
    torch._dynamo.reset()


def test_remove_padding_auto_sees_through_fsdp2_and_its_subclass() -> None:
    """``fully_shard`` swaps the model's class for a subclass defined in torch.distributed."""
    model = make_tiny_causal_lm()
    model.__class__ = type("FSDPLlamaForCausalLM", (torch.distributed.fsdp.FSDPModule, type(model)), {})
    model.__class__.__module__ = "torch.distributed.fsdp._fully_shard._fully_shard"
    model.config._attn_implementation = "sdpa"
    assert resolve_remove_padding(None, model) is True

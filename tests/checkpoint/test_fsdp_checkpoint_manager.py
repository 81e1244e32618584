"""Tests of verl/checkpoint/fsdp_checkpoint_manager.py (a role directory: shards, extra state, ``huggingface/``,
``lora_adapter/``) on a plain tiny causal LM, on FSDP2 with one rank and with LoRA; and of
``layout.atomic_step_dir`` over two gloo ranks."""

from __future__ import annotations

import copy
import json
import logging
import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from verl.checkpoint.fsdp_checkpoint_manager import ALL_CONTENTS, FSDPCheckpointManager

IDS = torch.tensor([[257, 10, 20, 30, 40, 50]])


def _step(model: torch.nn.Module, opt: torch.optim.Optimizer, sched) -> None:
    loss = model(input_ids=IDS, labels=IDS).loss
    opt.zero_grad()
    loss.backward()
    opt.step()
    sched.step()


def _optimize(model: torch.nn.Module):
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))


def _setup(tokenizer, seed: int, tied: bool = False):
    from verl.models.tiny import TinyModelSpec, make_tiny_causal_lm

    spec = TinyModelSpec(arch="qwen2", tie_word_embeddings=True) if tied else None
    model = make_tiny_causal_lm(spec, tokenizer=tokenizer, seed=seed)
    return (model, *_optimize(model))


def _clone_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _assert_equal_states(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert set(got) == set(want)
    for k, v in want.items():
        assert torch.equal(got[k], v), k


def test_files_written_and_bit_exact_resume(tmp_path, byte_tokenizer) -> None:
    from verl.checkpoint.layout import finalize_checkpoint, find_latest_ckpt_path

    model, opt, sched = _setup(byte_tokenizer, seed=0)
    _step(model, opt, sched)
    actor = str(tmp_path / "global_step_1" / "actor")
    FSDPCheckpointManager(model, opt, sched, processing_class=byte_tokenizer).save_checkpoint(
        actor, global_step=1, extra={"epoch": 0}
    )
    finalize_checkpoint(str(tmp_path), 1)
    assert find_latest_ckpt_path(str(tmp_path)) == os.path.dirname(actor)
    assert sorted(os.listdir(actor)) == [
        "extra_state_world_size_1_rank_0.pt",
        "huggingface",
        "model_world_size_1_rank_0.safetensors",
        "optim_world_size_1_rank_0.safetensors",
    ]
    hf_files = set(os.listdir(os.path.join(actor, "huggingface")))
    assert {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"} <= hf_files
    assert not [f for f in hf_files if f.startswith("model")], hf_files  # no weights unless hf_model is saved
    with open(os.path.join(actor, "huggingface", "config.json")) as f:
        assert json.load(f)["architectures"] == ["LlamaForCausalLM"]

    _step(model, opt, sched)
    reference = _clone_state(model)

    model2, opt2, sched2 = _setup(byte_tokenizer, seed=9)  # different init: everything must come from disk
    torch.manual_seed(123)  # and whatever the RNG holds
    extra = FSDPCheckpointManager(model2, opt2, sched2).load_checkpoint(actor)
    assert extra == {"global_step": 1, "epoch": 0}
    assert sched2.last_epoch == 1
    _step(model2, opt2, sched2)
    _assert_equal_states(model2.state_dict(), reference)


@pytest.mark.parametrize("tied", [False, True], ids=["llama", "qwen2-tied"])
def test_hf_model_content_and_fallback_load(tmp_path, byte_tokenizer, tied: bool, caplog) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, opt, sched = _setup(byte_tokenizer, seed=0, tied=tied)
    _step(model, opt, sched)
    full = str(tmp_path / "full")
    FSDPCheckpointManager(model, opt, sched, byte_tokenizer, save_contents=ALL_CONTENTS).save_checkpoint(full)
    assert "model_world_size_1_rank_0.safetensors" in os.listdir(full)
    hf_dir = os.path.join(full, "huggingface")
    loaded = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32)
    _assert_equal_states(loaded.state_dict(), _clone_state(model))
    assert AutoTokenizer.from_pretrained(hf_dir)("hi").input_ids == byte_tokenizer("hi").input_ids

    # no shards, only the full weights in huggingface/: the model loads from there
    only_hf = str(tmp_path / "only_hf")
    FSDPCheckpointManager(model, opt, sched, byte_tokenizer, save_contents=["hf_model", "extra"]).save_checkpoint(
        only_hf
    )
    assert not [f for f in os.listdir(only_hf) if f.endswith(".safetensors")]
    model2, opt2, _ = _setup(byte_tokenizer, seed=3, tied=tied)
    FSDPCheckpointManager(model2, load_contents=["model"]).load_checkpoint(only_hf)
    _assert_equal_states(model2.state_dict(), _clone_state(model))
    if tied:
        assert model2.lm_head.weight.data_ptr() == model2.model.embed_tokens.weight.data_ptr()
    # saved without optimizer state (save_contents without "optimizer"): the resume says so and goes on, the
    # optimizer keeps its fresh state
    with caplog.at_level(logging.WARNING):
        FSDPCheckpointManager(model2, opt2).load_checkpoint(only_hf)
    assert "holds no optimizer state" in caplog.text and "restarts from zero moments" in caplog.text
    assert not opt2.state


def test_errors_and_no_ops(tmp_path, byte_tokenizer) -> None:
    model, opt, sched = _setup(byte_tokenizer, seed=0)
    with pytest.raises(ValueError, match="unknown checkpoint content 'weights'"):
        FSDPCheckpointManager(model, save_contents=["weights"])
    manager = FSDPCheckpointManager(model, opt, sched)
    assert manager.load_checkpoint(None) == {}
    with pytest.raises(FileNotFoundError, match="does not exist"):
        manager.load_checkpoint(str(tmp_path / "missing"))
    extra_only = str(tmp_path / "extra_only")
    FSDPCheckpointManager(model, opt, sched, save_contents=["extra"]).save_checkpoint(extra_only)
    with pytest.raises(FileNotFoundError, match="no model shards .* and no full weights in"):
        manager.load_checkpoint(extra_only)


def test_fsdp2_tiny_lm_single_rank(tmp_path, single_rank_group, byte_tokenizer) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor
    from transformers import AutoModelForCausalLM

    from verl.utils.fsdp_utils import apply_fsdp2, get_full_model_state_dict

    def full(model) -> dict[str, torch.Tensor]:  # copied: on one rank the gathered tensors may alias the params
        return {k: v.clone() for k, v in get_full_model_state_dict(model).items()}

    def make(seed: int):
        model, _, _ = _setup(byte_tokenizer, seed=seed)
        apply_fsdp2(model, mesh=init_device_mesh("cpu", (1,)))
        return (model, *_optimize(model))

    model, opt, sched = make(0)
    _step(model, opt, sched)
    actor = str(tmp_path / "actor")
    FSDPCheckpointManager(model, opt, sched, byte_tokenizer, save_contents=ALL_CONTENTS).save_checkpoint(
        actor, global_step=4
    )
    saved = full(model)
    hf = AutoModelForCausalLM.from_pretrained(os.path.join(actor, "huggingface"), dtype=torch.float32)
    _assert_equal_states(hf.state_dict(), saved)
    _step(model, opt, sched)
    reference = full(model)

    model2, opt2, sched2 = make(1)
    assert FSDPCheckpointManager(model2, opt2, sched2).load_checkpoint(actor) == {"global_step": 4}
    assert isinstance(model2.lm_head.weight, DTensor)
    assert isinstance(opt2.state[model2.lm_head.weight]["exp_avg"], DTensor)
    _assert_equal_states(full(model2), saved)
    _step(model2, opt2, sched2)
    _assert_equal_states(full(model2), reference)


def _lora_setup(tokenizer, seed: int):
    from verl.models.lora import apply_lora

    model, _, _ = _setup(tokenizer, seed=seed)
    model = apply_lora(model, lora_rank=2, lora_alpha=8, target_modules=["q_proj", "v_proj"])
    return (model, *_optimize(model))


def test_lora_adapter_resume_and_merge(tmp_path, byte_tokenizer) -> None:
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from verl.model_merger import merge_checkpoint

    model, opt, sched = _lora_setup(byte_tokenizer, seed=0)
    _step(model, opt, sched)  # lora_B starts at zero: one step makes the adapters count
    lora = {k: v.detach().clone() for k, v in model.state_dict().items() if "lora_" in k}
    assert lora and all(v.abs().sum() > 0 for v in lora.values())
    actor = str(tmp_path / "global_step_1" / "actor")
    FSDPCheckpointManager(model, opt, sched, byte_tokenizer, save_contents=ALL_CONTENTS).save_checkpoint(actor)
    adapter_dir = os.path.join(actor, "lora_adapter")
    assert {"adapter_config.json", "adapter_model.safetensors"} <= set(os.listdir(adapter_dir))
    with open(os.path.join(adapter_dir, "adapter_config.json")) as f:
        cfg = json.load(f)
    assert cfg["r"] == 2 and cfg["lora_alpha"] == 8 and sorted(cfg["target_modules"]) == ["q_proj", "v_proj"]
    adapter = load_file(os.path.join(adapter_dir, "adapter_model.safetensors"))
    q_a = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
    assert len(adapter) == len(lora) and torch.equal(adapter[q_a], lora[q_a.replace("lora_A.", "lora_A.default.")])

    merged_live = copy.deepcopy(model).merge_and_unload().state_dict()
    base = model.base_model.model.model.layers[0].self_attn.q_proj
    w = base.base_layer.weight + 8 / 2 * base.lora_B.default.weight @ base.lora_A.default.weight
    torch.testing.assert_close(merged_live["model.layers.0.self_attn.q_proj.weight"], w)
    _step(model, opt, sched)
    reference = _clone_state(model)

    model2, opt2, sched2 = _lora_setup(byte_tokenizer, seed=5)
    FSDPCheckpointManager(model2, opt2, sched2).load_checkpoint(actor)
    _assert_equal_states({k: v for k, v in model2.state_dict().items() if "lora_" in k}, lora)
    _step(model2, opt2, sched2)
    _assert_equal_states(model2.state_dict(), reference)

    out = merge_checkpoint(actor, str(tmp_path / "merged"))
    merged = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).state_dict()
    assert not [k for k in merged if "lora" in k or "base_layer" in k]
    for got in (merged, AutoModelForCausalLM.from_pretrained(os.path.join(actor, "huggingface")).state_dict()):
        assert set(got) == set(merged_live)
        for k, v in merged_live.items():
            torch.testing.assert_close(got[k], v, rtol=1e-6, atol=1e-7, msg=k)


# ------------------------------------------------------------------------------------ atomic_step_dir, 2 ranks


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _atomic_step_dir_rank(rank: int, world: int, port: int, root: str) -> None:
    from verl.checkpoint.layout import atomic_step_dir

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    result: dict = {}
    step_dir = os.path.join(root, "global_step_1")
    try:
        with atomic_step_dir(step_dir) as tmp:
            result["tmp"] = tmp
            with open(os.path.join(tmp, f"rank_{rank}.txt"), "w") as f:
                f.write("first")
        result["saved"] = sorted(os.listdir(step_dir))
        try:
            with atomic_step_dir(step_dir) as tmp:
                with open(os.path.join(tmp, f"rank_{rank}.txt"), "w") as f:
                    f.write("second")
                if rank == 1:
                    raise RuntimeError("disk full on rank 1")
            result["error"] = None
        except RuntimeError as e:
            result["error"] = str(e)
        result["after"] = {n: open(os.path.join(step_dir, n)).read() for n in sorted(os.listdir(step_dir))}
        result["root"] = sorted(os.listdir(root))
    finally:
        dist.destroy_process_group()
    with open(os.path.join(root, f"result_{rank}.json"), "w") as f:
        json.dump(result, f)


def test_atomic_step_dir_two_ranks(tmp_path) -> None:
    root = str(tmp_path / "ckpt")
    os.makedirs(root)
    port, world = _free_port(), 2
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_atomic_step_dir_rank, args=(r, world, port, root)) for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0]
    results = []
    for rank in range(world):
        with open(os.path.join(root, f"result_{rank}.json")) as f:
            results.append(json.load(f))
    # one temp dir, shared by both ranks, renamed once both wrote their part
    assert results[0]["tmp"] == results[1]["tmp"] and os.path.basename(results[0]["tmp"]).startswith(".tmp-")
    assert results[0]["saved"] == results[1]["saved"] == ["rank_0.txt", "rank_1.txt"]
    # rank 1 failed the second save: both ranks raise, the first save is intact, no temp dir is left
    assert results[1]["error"] == "disk full on rank 1"
    assert results[0]["error"] == f"checkpoint {os.path.join(root, 'global_step_1')} not saved: ranks [1] failed"
    for result in results:
        assert result["after"] == {"rank_0.txt": "first", "rank_1.txt": "first"}
        assert [n for n in result["root"] if not n.startswith("result_")] == ["global_step_1"]

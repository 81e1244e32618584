"""Packing (``use_remove_padding``) with images: a batch of tiny random Qwen2-VL / Qwen2.5-VL rollouts scored in
one packed row gives the padded forward's log-probs and gradients, rows without images mixed in."""

from __future__ import annotations

import pytest
import torch

from verl.data.rl_dataset import RLHFDataset, collate_fn
from verl.data.synthetic_vision import write_colour_parquet
from verl.models.tiny_vlm import make_tiny_vlm, make_tiny_vlm_processor
from verl.models.vlm import pack_vision_inputs, vision_forward_kwargs
from verl.protocol import DataProto
from verl.utils.padding import pack_padded_batch
from verl.workers.actor.dp_actor import MULTI_MODAL_ROW_KEY, DataParallelPPOActor
from verl.workers.rollout.hf_rollout import HFRollout

from .test_vlm_rollout_actor import actor_config, rollout_config


@pytest.fixture(scope="module")
def processor():
    return make_tiny_vlm_processor()


def width_pad(tok) -> int:
    return tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id


def rollouts(tmp_path, processor, model) -> DataProto:
    """Six rollouts of colour questions; rows 1 and 4 lose their image (plain text prompts of other lengths)."""
    path = write_colour_parquet(str(tmp_path / "train.parquet"), n=6, seed=2)
    dataset = RLHFDataset(path, processor.tokenizer, {"max_prompt_length": 64}, processor=processor)
    rows = [dataset[i] for i in range(6)]
    tok = processor.tokenizer
    for i in (1, 4):
        ids = tok.apply_chat_template([{"role": "user", "content": "name a colour" + " please" * i}], tokenize=True)
        ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
        width, pad = rows[i]["input_ids"].shape[0], width_pad(tok)
        mask = torch.tensor([0] * (width - len(ids)) + [1] * len(ids))
        rows[i] = {**rows[i], "input_ids": torch.tensor([pad] * (width - len(ids)) + ids), "attention_mask": mask}
        rows[i].update(position_ids=(mask.cumsum(0) - 1).clamp(min=0), raw_prompt_ids=ids, multi_modal_inputs=None)
    prompts = DataProto.from_single_dict(collate_fn(rows))
    prompts.meta_info.update(eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    out = HFRollout(model, rollout_config(response_length=6)).generate_sequences(prompts)
    out.meta_info.update(temperature=1.0, micro_batch_size=3)
    return out


def test_packed_vision_inputs_keep_each_samples_positions() -> None:
    input_ids = torch.tensor([[0, 5, 6, 7], [8, 9, 10, 11]])
    mask = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]])
    packed = pack_padded_batch(input_ids, mask)
    rope = torch.arange(3 * 2 * 4).reshape(3, 2, 4)
    extra = {"pixel_values": torch.ones(2, 3), "mm_token_type_ids": torch.tensor([[0, 1, 1, 0], [0, 0, 0, 0]])}
    out = pack_vision_inputs({**extra, "position_ids": rope}, packed.indices, packed.position_ids)
    assert out["pixel_values"] is extra["pixel_values"]
    assert out["mm_token_type_ids"].tolist() == [[1, 1, 0, 0, 0, 0, 0]]
    assert out["position_ids"].shape == (4, 1, 7)
    assert out["position_ids"][0, 0].tolist() == [0, 1, 2, 0, 1, 2, 3]  # text positions: the sample boundaries
    assert out["position_ids"][1:, 0].tolist() == [[1, 2, 3, 4, 5, 6, 7], [9, 10, 11, 12, 13, 14, 15],
                                                    [17, 18, 19, 20, 21, 22, 23]]  # fmt: skip
    with pytest.raises(ValueError, match=r"M-RoPE positions \[3, bs, seq\]"):
        pack_vision_inputs({"position_ids": rope[0]}, packed.indices, packed.position_ids)


@pytest.mark.parametrize("arch", ["qwen2_vl", "qwen2_5_vl"])
def test_packed_log_probs_and_gradients_equal_the_padded_ones(arch, tmp_path, processor) -> None:
    model, _ = make_tiny_vlm(arch, processor=processor, seed=4)
    out = rollouts(tmp_path, processor, model)
    rows = out.non_tensor_batch["multi_modal_inputs"]
    assert [r is None for r in rows] == [False, True, False, False, True, False]
    mask = out.batch["response_mask"].bool()
    padded_actor = DataParallelPPOActor(actor_config(), model, use_remove_padding=False)
    packed_actor = DataParallelPPOActor(actor_config(), model, use_remove_padding=True)
    padded, _ = padded_actor.compute_log_prob(out)
    packed, _ = packed_actor.compute_log_prob(out)
    assert torch.allclose(packed[mask], padded[mask], atol=1e-4)
    assert torch.allclose(packed[mask], out.batch["rollout_log_probs"][mask], atol=1e-4)
    dyn = {**out.meta_info, "use_dynamic_bsz": True, "max_token_len": int(out.batch["attention_mask"].sum(1).max()) + 4}
    packed_dyn, _ = packed_actor.compute_log_prob(DataProto(out.batch, out.non_tensor_batch, dyn))
    assert torch.allclose(packed_dyn[mask], padded[mask], atol=1e-4)

    # one backward through each path: the same gradients on the vision tower and the language model
    grads = []
    for actor in (padded_actor, packed_actor):
        model.zero_grad()
        micro = out.batch.select("input_ids", "attention_mask", "position_ids", "responses")
        extra = vision_forward_kwargs(model, micro["input_ids"], micro["attention_mask"], list(rows))
        assert extra["pixel_values"].shape[0] > 0
        micro[MULTI_MODAL_ROW_KEY] = torch.arange(6)
        log_probs, _ = actor._forward_micro_batch(micro, 1.0, False, multi_modal_rows=list(rows))
        (log_probs * mask).sum().backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and any("visual" in n for n in grads[0])
    for name, grad in grads[0].items():
        assert torch.allclose(grads[1][name], grad, atol=1e-4, rtol=1e-3), name

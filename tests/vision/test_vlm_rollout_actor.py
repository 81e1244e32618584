"""Vision-language RL on a tiny random Qwen2-VL / Qwen2.5-VL (CPU, fp32): images from parquet through RLHFDataset,
generation with images in the ``hf`` engine, and the actor's recomputed log-probs equal to the rollout's."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from verl.data.rl_dataset import RLHFDataset, collate_fn
from verl.data.synthetic_vision import write_colour_parquet
from verl.models.tiny_vlm import make_tiny_vlm, make_tiny_vlm_processor
from verl.models.vlm import freeze_vision_tower, vision_forward_kwargs
from verl.protocol import DataProto
from verl.trainer.config import load_config
from verl.workers.actor.dp_actor import DataParallelPPOActor
from verl.workers.rollout.hf_rollout import HFRollout


def actor_config(**overrides):
    actor = OmegaConf.create(OmegaConf.to_container(load_config([]).actor_rollout_ref.actor, resolve=True))
    actor.dtype = "float32"
    actor.ppo_mini_batch_size = 4
    actor.ppo_micro_batch_size_per_gpu = 2
    for key, value in overrides.items():
        OmegaConf.update(actor, key, value)
    return actor


def rollout_config(**overrides):
    base = dict(
        name="hf", temperature=1.0, top_p=1.0, top_k=-1, do_sample=True, prompt_length=64, response_length=5,
        min_new_tokens=0, dtype="float32", max_num_seqs=3, calculate_log_probs=True, seed=0,
        val_kwargs=dict(do_sample=False, temperature=0.0, top_p=1.0, top_k=-1, n=1),
    )  # fmt: skip
    base.update(overrides)
    return OmegaConf.create(base)


@pytest.fixture(scope="module")
def processor():
    return make_tiny_vlm_processor()


@pytest.fixture(scope="module")
def dataset(tmp_path_factory, processor):
    path = write_colour_parquet(str(tmp_path_factory.mktemp("colour") / "train.parquet"), n=6, seed=1)
    return RLHFDataset(path, processor.tokenizer, {"max_prompt_length": 64}, processor=processor)


def prompts_of(dataset, indices) -> DataProto:
    batch = DataProto.from_single_dict(collate_fn([dataset[i] for i in indices]))
    tok = dataset.tokenizer
    batch.meta_info.update(eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    return batch


def test_dataset_turns_placeholders_into_image_tokens(dataset, processor) -> None:
    item = dataset[0]
    mm = item["multi_modal_inputs"]
    grid = mm["image_grid_thw"]
    assert grid.shape == (1, 3) and mm["pixel_values"].shape[0] == int(grid.prod())
    image_id = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    # one placeholder per merged 2x2 patch group, inside the left-padded prompt
    assert int((item["input_ids"] == image_id).sum()) == int(grid.prod()) // 4
    # raw_prompt_ids (for vLLM, which expands images itself) keep one placeholder per image
    assert item["attention_mask"][-1] == 1
    assert item["attention_mask"].sum() == len(item["raw_prompt_ids"]) - 1 + int(grid.prod()) // 4
    assert len(item["multi_modal_data"]["image"]) == 1 and item["multi_modal_data"]["image"][0].mode == "RGB"
    text = processor.tokenizer.decode(item["raw_prompt_ids"])
    assert "What colour is the image?" in text and "<image>" not in text


def test_dataset_rejects_placeholder_image_mismatch(tmp_path, processor) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from verl.data.synthetic_vision import colour_rows

    rows = colour_rows(2)
    rows[1]["prompt"] = [{"role": "user", "content": "no placeholder here"}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "bad.parquet")
    with pytest.raises(ValueError, match=r"row 1: the prompt has 0 <image> placeholders but column 'images' holds 1"):
        RLHFDataset(str(tmp_path / "bad.parquet"), processor.tokenizer, {"max_prompt_length": 64}, processor=processor)
    with pytest.raises(ValueError, match="no processor was given"):
        RLHFDataset(str(tmp_path / "bad.parquet"), processor.tokenizer, {"max_prompt_length": 64})


@pytest.mark.parametrize("arch", ["qwen2_vl", "qwen2_5_vl"])
def test_rollout_log_probs_equal_actor_log_probs(arch, dataset, processor) -> None:
    model, _ = make_tiny_vlm(arch, processor=processor, seed=3)
    prompts = prompts_of(dataset, range(6))
    out = HFRollout(model, rollout_config()).generate_sequences(prompts)
    assert out.batch["responses"].shape == (6, 5)
    assert "multi_modal_inputs" in out.non_tensor_batch  # the prompt's images stay with the rollout rows
    out.meta_info.update(temperature=1.0, micro_batch_size=4)
    actor = DataParallelPPOActor(actor_config(), model, use_remove_padding=False)
    log_probs, _ = actor.compute_log_prob(out)
    mask = out.batch["response_mask"].bool()
    assert mask.sum() > 6
    assert torch.allclose(log_probs[mask], out.batch["rollout_log_probs"][mask], atol=1e-4)
    with pytest.raises(
        ValueError, match="no row carries multi_modal_inputs"
    ):  # placeholders without their images are refused, not silently scored
        vision_forward_kwargs(model, out.batch["input_ids"], out.batch["attention_mask"], [None] * 6)


def test_micro_batches_and_shuffled_minibatches_keep_each_samples_images(dataset, processor) -> None:
    model, _ = make_tiny_vlm("qwen2_vl", processor=processor, seed=5)
    prompts = prompts_of(dataset, [0, 1, 2, 3])
    out = HFRollout(model, rollout_config()).generate_sequences(prompts)
    out.meta_info.update(temperature=1.0)
    whole = DataParallelPPOActor(actor_config(), model).compute_log_prob(
        DataProto(out.batch, out.non_tensor_batch, {**out.meta_info, "micro_batch_size": 4})
    )[0]
    dyn_meta = {**out.meta_info, "use_dynamic_bsz": True, "max_token_len": out.batch["input_ids"].shape[1] + 5}
    dyn = DataParallelPPOActor(actor_config(), model).compute_log_prob(
        DataProto(out.batch, out.non_tensor_batch, dyn_meta)
    )[0]
    mask = out.batch["response_mask"].bool()
    assert torch.allclose(whole[mask], dyn[mask], atol=1e-5)

    # an update with shuffled mini-batches and the vision tower frozen: the tower stays, the language model moves
    out.batch["old_log_probs"] = whole
    out.batch["advantages"] = torch.randn_like(whole)
    frozen = freeze_vision_tower(model)
    assert frozen > 0
    visual_before = {n: p.detach().clone() for n, p in model.model.visual.named_parameters()}
    lm_before = model.lm_head.weight.detach().clone()
    optim = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    actor = DataParallelPPOActor(actor_config(**{"shuffle": True, "ppo_mini_batch_size": 2}), model, optim)
    metrics = actor.update_policy(out)
    assert all(torch.isfinite(torch.tensor(v)).all() for v in metrics["actor/pg_loss"])
    assert all(torch.equal(p, visual_before[n]) for n, p in model.model.visual.named_parameters())
    assert not torch.equal(model.lm_head.weight, lm_before)


def test_agent_loops_with_images_are_refused(dataset, processor) -> None:
    from verl.experimental.agent_loop.manager import AgentLoopManager

    model, _ = make_tiny_vlm("qwen2_vl", processor=processor)
    config = rollout_config(multi_turn={"enable": True})
    manager = AgentLoopManager(config, processor.tokenizer, HFRollout(model, config))
    with pytest.raises(ValueError, match="agent loops.*images"):
        manager.generate_sequences(prompts_of(dataset, [0, 1]))

"""The registered worker methods, called through a one-rank ``LocalWorkerGroup`` on tiny fp32 models.

Expected numbers come from plain transformers forwards of the saved model directories, never from the workers.
"""

from __future__ import annotations

import os

import pytest
import torch

from verl.protocol import DataProto
from verl.single_controller import create_worker_group
from verl.workers.fsdp_workers import ActorRolloutRefWorker, CriticWorker, RewardModelWorker

PROMPT_LEN, RESPONSE_LEN, BATCH, PAD = 5, 4, 4, 256


def _config(model_dir: str, *extra: str):
    from verl.trainer.config.loader import load_config

    return load_config(
        [
            f"actor_rollout_ref.model.path={model_dir}",
            "actor_rollout_ref.rollout.n=1",
            f"data.train_batch_size={BATCH}",
            f"data.max_response_length={RESPONSE_LEN}",
            f"actor_rollout_ref.actor.ppo_mini_batch_size={BATCH}",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
            "actor_rollout_ref.actor.dtype=float32",
            "actor_rollout_ref.actor.optim.lr=0.01",  # large enough to move a tiny model visibly in one step
            "actor_rollout_ref.rollout.dtype=float32",
            "algorithm.adv_estimator=gae",
            "critic.ppo_micro_batch_size_per_gpu=2",
            "critic.dtype=float32",
            "critic.optim.lr=0.001",
            *extra,
        ]
    )


def _actor_group(model_dir: str, role: str = "actor_rollout_ref", *extra: str):
    cfg = _config(model_dir, *extra)
    group = create_worker_group("local", ActorRolloutRefWorker, {"config": cfg.actor_rollout_ref, "role": role})
    group.init_model()
    return group


def _prompts() -> DataProto:
    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(0, 256, (BATCH, PROMPT_LEN), generator=gen)
    mask = torch.ones(BATCH, PROMPT_LEN, dtype=torch.long)
    mask[1, :2] = 0  # one left-padded prompt
    ids[1, :2] = PAD
    return DataProto.from_dict(
        tensors={"input_ids": ids, "attention_mask": mask, "position_ids": (mask.cumsum(-1) - 1).clamp(min=0)}
    )


def _scored_batch() -> DataProto:
    """A hand-built rollout: responses with 4, 2, 3, 1 valid tokens, fixed advantages and returns."""
    gen = torch.Generator().manual_seed(5)
    prompts = _prompts().batch
    lengths = [4, 2, 3, 1]
    responses = torch.full((BATCH, RESPONSE_LEN), PAD)
    response_mask = torch.zeros(BATCH, RESPONSE_LEN, dtype=torch.long)
    for i, n in enumerate(lengths):
        responses[i, :n] = torch.randint(0, 256, (n,), generator=gen)
        response_mask[i, :n] = 1
    attention_mask = torch.cat([prompts["attention_mask"], response_mask], dim=1)
    return DataProto.from_dict(
        tensors={
            "prompts": prompts["input_ids"],
            "responses": responses,
            "input_ids": torch.cat([prompts["input_ids"], responses], dim=1),
            "attention_mask": attention_mask,
            "position_ids": (attention_mask.cumsum(-1) - 1).clamp(min=0),
            "response_mask": response_mask,
            "advantages": torch.randn(BATCH, RESPONSE_LEN, generator=gen) * response_mask,
            "returns": torch.randn(BATCH, RESPONSE_LEN, generator=gen) * response_mask,
        },
        meta_info={"global_steps": 3},
    )


def _hf_response_log_probs(model: torch.nn.Module, data: DataProto) -> torch.Tensor:
    b = data.batch
    with torch.no_grad():
        logits = model(
            input_ids=b["input_ids"], attention_mask=b["attention_mask"], position_ids=b["position_ids"]
        ).logits[:, -RESPONSE_LEN - 1 : -1]
    lp = torch.log_softmax(logits.float(), -1).gather(-1, b["responses"].unsqueeze(-1)).squeeze(-1)
    return lp * b["response_mask"]


def _base_model(model_dir: str) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()


def _with_old_log_probs(group, data: DataProto) -> DataProto:
    return data.union(group.compute_log_prob(data).select(batch_keys=["old_log_probs"]))


def _params(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in module.named_parameters()}


# --------------------------------------------------------------------------------------------- actor / rollout / ref
def test_actor_rollout_ref_shapes_keys_and_update(tiny_model_dir: str) -> None:
    group = _actor_group(tiny_model_dir)
    out = group.generate_sequences(_prompts())
    shapes = {k: tuple(v.shape) for k, v in out.batch.items()}
    full = PROMPT_LEN + RESPONSE_LEN
    for key, shape in {
        "prompts": (BATCH, PROMPT_LEN),
        "responses": (BATCH, RESPONSE_LEN),
        "input_ids": (BATCH, full),
        "attention_mask": (BATCH, full),
        "position_ids": (BATCH, full),
        "response_mask": (BATCH, RESPONSE_LEN),
    }.items():
        assert shapes[key] == shape, key
    assert torch.equal(out.batch["input_ids"][:, :PROMPT_LEN], _prompts().batch["input_ids"])

    data = _scored_batch()
    expected = _hf_response_log_probs(_base_model(tiny_model_dir), data)
    lp = group.compute_log_prob(data)
    assert set(lp.batch.keys()) == {"old_log_probs", "entropys"}
    assert lp.batch["entropys"].shape == (BATCH, RESPONSE_LEN)
    mask = data.batch["response_mask"]
    torch.testing.assert_close(lp.batch["old_log_probs"] * mask, expected, atol=1e-5, rtol=0)
    # entropy of a distribution over 259 tokens lies in (0, log 259] (at response tokens: the packed forward, the
    # default, scores no padding)
    entropy = lp.batch["entropys"][mask.bool()]
    assert bool(((entropy > 0) & (entropy <= torch.log(torch.tensor(259.0)) + 1e-4)).all())
    ref = group.compute_ref_log_prob(data)
    torch.testing.assert_close(ref.batch["ref_log_prob"] * mask, expected, atol=1e-5, rtol=0)

    worker = group.workers[0]
    before = _params(worker.actor_module)
    metrics = group.update_actor(data.union(lp.select(batch_keys=["old_log_probs"]))).meta_info["metrics"]
    for key in ("actor/pg_loss", "actor/grad_norm", "actor/pg_clipfrac", "actor/lr", "perf/mfu/actor"):
        assert key in metrics, key
    assert "actor/entropy" not in metrics  # the old-log-prob pass reported it (entropys): the update skips it
    mfu = metrics["perf/mfu/actor"]
    assert 0 < (mfu[0] if isinstance(mfu, list) else mfu) < 1  # model FLOPs / (seconds x measured peak)
    # ratio 1 (old = current): pg_loss is minus the token-mean advantage
    adv = data.batch["advantages"]
    assert metrics["actor/pg_loss"][0] == pytest.approx(-float((adv * mask).sum() / mask.sum()), abs=1e-5)
    changed = [n for n, p in worker.actor_module.named_parameters() if not torch.equal(p, before[n])]
    assert len(changed) == len(before)
    after_lp = group.compute_log_prob(data).batch["old_log_probs"] * mask
    assert (after_lp - expected).abs().max() > 1e-3
    # the reference is a separate frozen copy: still the initial model
    torch.testing.assert_close(
        group.compute_ref_log_prob(data).batch["ref_log_prob"] * mask, expected, atol=1e-5, rtol=0
    )


@pytest.mark.parametrize("role", ["actor", "rollout", "ref", "actor_rollout", "actor_ref"])
def test_roles_build_only_their_parts(tiny_model_dir: str, role: str) -> None:
    group = _actor_group(tiny_model_dir, role)
    worker = group.workers[0]
    assert (worker.actor is not None) == (role in ("actor", "actor_rollout", "actor_ref"))
    assert (worker.rollout is not None) == (role in ("rollout", "actor_rollout"))
    assert (worker.ref_policy is not None) == (role in ("ref", "actor_ref"))
    data = _scored_batch()
    if role in ("ref", "actor_ref"):  # actor_ref: an asynchronous trainer's rank with a KL, no engine
        ref = group.compute_ref_log_prob(data).batch["ref_log_prob"]
        assert ref.shape == (BATCH, RESPONSE_LEN)
    if role == "rollout":
        assert group.generate_sequences(_prompts()).batch["responses"].shape == (BATCH, RESPONSE_LEN)
        with pytest.raises(RuntimeError, match="update_actor is not available .* role .rollout.; it needs one of"):
            group.update_actor(data)
    if role in ("actor", "actor_ref"):
        with pytest.raises(RuntimeError, match=f"generate_sequences is not available .* role .{role}.; it needs one"):
            group.generate_sequences(_prompts())


def test_save_load_round_trip_restores_params_and_optimizer(tiny_model_dir: str, tmp_path) -> None:
    group = _actor_group(tiny_model_dir)
    worker = group.workers[0]
    data = _with_old_log_probs(group, _scored_batch())
    group.update_actor(data)  # optimizer state exists only after a step
    saved_params = _params(worker.actor_module)
    saved_optim = {
        (n, k): v.clone()
        for n, p in worker.actor_module.named_parameters()
        for k, v in worker.actor_optimizer.state[p].items()
    }
    ckpt = str(tmp_path / "global_step_1" / "actor")
    group.save_checkpoint(ckpt, global_step=1)
    # one rank: its shards hold everything; huggingface/ has the config and tokenizer, not a copy of the weights
    for kind in ("model", "optim"):
        assert os.path.isfile(os.path.join(ckpt, f"{kind}_world_size_1_rank_0.safetensors"))
    assert os.path.isfile(os.path.join(ckpt, "huggingface", "config.json"))
    assert not os.path.exists(os.path.join(ckpt, "huggingface", "model.safetensors"))

    group.update_actor(data)  # move away from the checkpoint
    assert not torch.equal(next(worker.actor_module.parameters()), next(iter(saved_params.values())))
    group.load_checkpoint(ckpt)
    for name, param in worker.actor_module.named_parameters():
        assert torch.equal(param, saved_params[name]), name
    restored = {n: worker.actor_optimizer.state[p] for n, p in worker.actor_module.named_parameters()}
    for (name, key), value in saved_optim.items():
        assert torch.equal(restored[name][key], value), (name, key)

    # a fresh group loading the checkpoint takes the same next step as the original one
    fresh = _actor_group(tiny_model_dir)
    fresh.load_checkpoint(ckpt)
    group.update_actor(data)
    fresh.update_actor(data)
    for (name, a), b in zip(worker.actor_module.named_parameters(), fresh.workers[0].actor_module.parameters()):
        assert torch.equal(a, b), name


def test_update_reference_takes_the_actor_weights_and_checkpoints_keep_it(tiny_model_dir: str, tmp_path) -> None:
    """trainer.ref_update_freq's worker call: the reference then scores as the actor does; checkpoints hold it
    (reference/) so a fresh worker resumes with the updated reference, not the initial model."""
    group = _actor_group(tiny_model_dir, "actor_ref")
    data = _with_old_log_probs(group, _scored_batch())
    group.update_actor(data)
    mask = data.batch["response_mask"]
    actor_lp = group.compute_log_prob(data).batch["old_log_probs"] * mask
    initial = group.compute_ref_log_prob(data).batch["ref_log_prob"] * mask
    assert (actor_lp - initial).abs().max() > 1e-3
    ckpt = str(tmp_path / "actor")
    group.save_checkpoint(ckpt, global_step=1)
    assert not os.path.exists(os.path.join(ckpt, "reference"))  # never updated: the model path restores it
    group.update_reference()
    torch.testing.assert_close(group.compute_ref_log_prob(data).batch["ref_log_prob"] * mask, actor_lp)
    group.save_checkpoint(ckpt, global_step=1)
    assert os.path.isfile(os.path.join(ckpt, "reference", "model_world_size_1_rank_0.safetensors"))
    fresh = _actor_group(tiny_model_dir, "actor_ref")
    fresh.load_checkpoint(ckpt)
    torch.testing.assert_close(fresh.compute_ref_log_prob(data).batch["ref_log_prob"] * mask, actor_lp)


def test_lora_reference_is_the_base_model(tiny_model_dir: str) -> None:
    pytest.importorskip("peft")
    group = _actor_group(tiny_model_dir, "actor_rollout_ref", "actor_rollout_ref.model.lora_rank=4")
    worker = group.workers[0]
    assert worker.ref_module is None  # no second model: the adapters are switched off instead
    trainable = [n for n, p in worker.actor_module.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)

    data = _scored_batch()
    mask = data.batch["response_mask"]
    base = _hf_response_log_probs(_base_model(tiny_model_dir), data)
    group.update_actor(_with_old_log_probs(group, data))
    ref = group.compute_ref_log_prob(data).batch["ref_log_prob"] * mask
    actor = group.compute_log_prob(data).batch["old_log_probs"] * mask
    torch.testing.assert_close(ref, base, atol=1e-5, rtol=0)
    assert (actor - base).abs().max() > 1e-3


def test_use_fused_kernels_reaches_actor_and_reference_with_the_same_log_probs(tiny_model_dir: str) -> None:
    """``model.use_fused_kernels=true``: the actor, old-log-prob and reference passes run the chunked LM head
    (verl/workers/actor/fused_head.py) and give the plain path's log-probs."""
    fused = _actor_group(tiny_model_dir, "actor_rollout_ref", "actor_rollout_ref.model.use_fused_kernels=true")
    worker = fused.workers[0]
    assert worker.actor.use_fused_kernels and worker.ref_policy.use_fused_kernels
    data = _scored_batch()
    mask = data.batch["response_mask"]
    base = _hf_response_log_probs(_base_model(tiny_model_dir), data)
    ref = fused.compute_ref_log_prob(data).batch["ref_log_prob"] * mask
    old = fused.compute_log_prob(data).batch["old_log_probs"] * mask
    torch.testing.assert_close(ref, base, atol=1e-5, rtol=0)
    torch.testing.assert_close(old, base, atol=1e-5, rtol=0)


# --------------------------------------------------------------------------------------------------- bad input
def test_batch_not_dividing_across_ranks_is_refused_with_arithmetic(tiny_model_dir: str) -> None:
    cfg = _config(tiny_model_dir)
    # the config validator refuses this too; the worker checks again for callers that bypass it (Python API)
    cfg.actor_rollout_ref.actor.ppo_mini_batch_size = 3
    with pytest.raises(ValueError, match=r"ppo_mini_batch_size=3 prompts x rollout.n=1 = 3 sequences .* 2 ranks"):
        create_worker_group(
            "local", ActorRolloutRefWorker, {"config": cfg.actor_rollout_ref, "role": "actor"}, world_size=2
        )
    cfg = _config(tiny_model_dir)
    group = create_worker_group(
        "local", ActorRolloutRefWorker, {"config": cfg.actor_rollout_ref, "role": "actor"}, world_size=2
    )
    with pytest.raises(ValueError, match=r"5 rows evenly over 2 ranks \(5 % 2 = 1\).*pads to 6 rows"):
        group.update_actor(_scored_batch().union(_scored_batch()).select_idxs([0, 1, 2, 3, 0]))


def test_nan_loss_stops_the_update_naming_step_and_micro_batch(tiny_model_dir: str) -> None:
    group = _actor_group(tiny_model_dir)
    worker = group.workers[0]
    data = _with_old_log_probs(group, _scored_batch())
    data.batch["advantages"][2, 0] = float("nan")  # row 2 is in micro-batch 1 (micro-batches of 2 rows)
    before = _params(worker.actor_module)
    with pytest.raises(RuntimeError, match=r"non-finite loss .* global step 3, epoch 0, mini-batch 0, micro-batch 1"):
        group.update_actor(data)
    for name, param in worker.actor_module.named_parameters():
        assert torch.equal(param, before[name]), f"{name} changed although the update failed"


# ------------------------------------------------------------------------------------------------------ critic
def test_critic_values_update_and_deterministic_value_head(tiny_model_dir: str) -> None:
    cfg = _config(tiny_model_dir)
    group = create_worker_group("local", CriticWorker, {"config": cfg.critic})
    group.init_model()
    module = group.workers[0].critic_module
    dropouts = [m.p for m in module.modules() if isinstance(m, torch.nn.Dropout)]
    assert all(p == 0.0 for p in dropouts), dropouts

    data = _scored_batch()
    values = group.compute_values(data).batch["values"]
    assert values.shape == (BATCH, RESPONSE_LEN)
    assert torch.equal(values, torch.zeros_like(values))  # the head starts at zero

    # train mode (as in update_critic) gives the same values twice: no dropout noise in the value head
    module.train()
    dev = next(module.parameters()).device  # where the worker placed the model (cuda:0 on a GPU machine)
    ids, attn = data.batch["input_ids"].to(dev), data.batch["attention_mask"].to(dev)
    with torch.no_grad():
        first = module(input_ids=ids, attention_mask=attn).logits
        second = module(input_ids=ids, attention_mask=attn).logits
    assert torch.equal(first, second)

    mask = data.batch["response_mask"].float()
    returns = data.batch["returns"]
    errors = []
    for _ in range(5):
        step = DataProto.from_dict(tensors={**dict(data.batch.items()), "values": values})
        metrics = group.update_critic(step).meta_info["metrics"]
        assert "critic/vf_loss" in metrics
        values = group.compute_values(data).batch["values"]
        errors.append(float((((values - returns) ** 2) * mask).sum() / mask.sum()))
    initial_error = float(((returns**2) * mask).sum() / mask.sum())
    assert errors[-1] < initial_error


# ------------------------------------------------------------------------------------------------ reward model
@pytest.fixture(scope="module")
def tiny_rm_dir(tmp_path_factory) -> str:
    from transformers import LlamaConfig, LlamaForSequenceClassification

    from verl.models.tiny import make_byte_tokenizer

    path = str(tmp_path_factory.mktemp("tiny_rm"))
    tok = make_byte_tokenizer()
    config = LlamaConfig(
        vocab_size=259,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        intermediate_size=64,
        num_labels=1,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
    )
    torch.manual_seed(11)
    LlamaForSequenceClassification(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_reward_model_scores_at_last_valid_token(tiny_rm_dir: str, tiny_model_dir: str) -> None:
    from transformers import AutoModelForSequenceClassification

    cfg = _config(tiny_model_dir, f"reward_model.model.path={tiny_rm_dir}", "reward_model.enable=true")
    group = create_worker_group("local", RewardModelWorker, {"config": cfg.reward_model})
    group.init_model()
    data = _scored_batch()
    scores = group.compute_rm_score(data).batch["rm_scores"]
    assert scores.shape == (BATCH, RESPONSE_LEN)

    # reference: each row alone, with no padding at all, scored at its final token
    model = AutoModelForSequenceClassification.from_pretrained(tiny_rm_dir, dtype=torch.float32).eval()
    b = data.batch
    for i in range(BATCH):
        valid = b["attention_mask"][i].bool()
        ids = b["input_ids"][i][valid].unsqueeze(0)
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            expected = float(model(input_ids=ids).logits[0, 0].float())
        last = int(b["response_mask"][i].sum()) - 1
        assert float(scores[i, last]) == pytest.approx(expected, abs=2e-2), i
        others = torch.cat([scores[i, :last], scores[i, last + 1 :]])
        assert torch.equal(others, torch.zeros_like(others))


def test_reward_model_packed_scoring_equals_padded(tiny_rm_dir: str, tiny_model_dir: str) -> None:
    """``reward_model.model.use_remove_padding`` (verl's January key) packs the valid tokens into rows and reads
    the head at each sequence's last token: the padded path's scores; ``fsdp_config.param_offload`` is accepted, the
    sharding keys are refused in one line."""
    extra = (f"reward_model.model.path={tiny_rm_dir}", "reward_model.enable=true", "reward_model.dtype=float32")
    data = _scored_batch()
    # row 0 ends in a valid token that is the pad id (an EOS that doubles as pad): both paths read the token before
    last0 = int(data.batch["response_mask"][0].sum()) - 1
    data.batch["responses"][0, last0] = PAD
    data.batch["input_ids"][0, PROMPT_LEN + last0] = PAD
    scores = {}
    for packed in (False, True):
        cfg = _config(tiny_model_dir, *extra, f"reward_model.model.use_remove_padding={packed}",
                      "reward_model.model.fsdp_config.param_offload=true")  # fmt: skip
        group = create_worker_group("local", RewardModelWorker, {"config": cfg.reward_model})
        group.init_model()
        scores[packed] = group.compute_rm_score(data).batch["rm_scores"]
    assert scores[True].abs().sum() > 0
    torch.testing.assert_close(scores[True], scores[False], atol=1e-5, rtol=1e-5)
    with pytest.raises(Exception, match=r"reward_model.model.fsdp_config.fsdp_size: the reward model is not sharded"):
        _config(tiny_model_dir, *extra, "reward_model.model.fsdp_config.fsdp_size=2")


@pytest.mark.parametrize("packed", [False, True])
def test_reward_model_share_bounds_micro_batches_with_the_same_scores(
    tiny_rm_dir: str, tiny_model_dir: str, packed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``reward_model.gpu_memory_utilization`` colocated (upstream's ``reward_model.rollout.gpu_memory_utilization``):
    a share of a (fake) device total that holds the weights and one row's activations scores one row per
    micro-batch, with the scores of the unbounded path; weights over the share fail at init in one line."""
    import verl.workers.reward_model_worker as rm_worker
    from verl.workers.reward_model_budget import attention_bytes_per_token, estimated_bytes_per_token, module_bytes

    extra = (f"reward_model.model.path={tiny_rm_dir}", "reward_model.enable=true", "reward_model.dtype=float32",
             f"reward_model.model.use_remove_padding={packed}")  # fmt: skip
    data = _scored_batch()
    width = data.batch["input_ids"].shape[1]
    plain = create_worker_group("local", RewardModelWorker, {"config": _config(tiny_model_dir, *extra).reward_model})
    plain.init_model()
    expected = plain.compute_rm_score(data).batch["rm_scores"]
    module = plain.workers[0].module
    weights = module_bytes(module)
    row = width * (
        estimated_bytes_per_token(module.config, torch.float32) + attention_bytes_per_token(module.config, width)
    )
    # share 0.5 of a total holding the weights and 1.5 rows: one (padded) row per micro-batch
    monkeypatch.setattr(rm_worker, "device_memory_bytes", lambda device: 2 * (weights + row + row // 2))
    cfg = _config(tiny_model_dir, *extra, "+reward_model.rollout.gpu_memory_utilization=0.5")
    assert cfg.reward_model.gpu_memory_utilization == 0.5 and not cfg.reward_model.enable_resource_pool
    bounded = create_worker_group("local", RewardModelWorker, {"config": cfg.reward_model})
    bounded.init_model()
    worker = bounded.workers[0]
    sizes: list[int] = []
    score_micro = worker._score_micro
    monkeypatch.setattr(worker, "_score_micro", lambda ids, mask: sizes.append(len(ids)) or score_micro(ids, mask))
    scores = bounded.compute_rm_score(data).batch["rm_scores"]
    assert sum(sizes) == BATCH and (sizes == [1] * BATCH if not packed else 1 < len(sizes) < BATCH), sizes
    assert expected.abs().sum() > 0
    torch.testing.assert_close(scores, expected, atol=1e-6, rtol=1e-6)
    if not packed:
        # CUDA's path, peaks faked: a one-row probe, then rows sized by the measured bytes per token (here a third of
        # the estimate: three rows fit where one did)
        def fake_peak(device: torch.device, run) -> tuple[torch.Tensor, int]:
            out = run()
            return out, sizes[-1] * row // 3  # the rows just scored, at a third of the estimated bytes

        worker.budget.probe = True
        monkeypatch.setattr(rm_worker, "measured_peak", fake_peak)
        sizes.clear()
        torch.testing.assert_close(bounded.compute_rm_score(data).batch["rm_scores"], expected, atol=1e-6, rtol=1e-6)
        assert sizes == [1, 3], sizes
    monkeypatch.setattr(rm_worker, "device_memory_bytes", lambda device: 2 * weights)
    too_small = create_worker_group("local", RewardModelWorker, {"config": cfg.reward_model})
    with pytest.raises(ValueError, match=r"gpu_memory_utilization=0.5: the reward model's weights take"):
        too_small.init_model()


def test_use_torch_compile_compiles_the_actor_layers_after_sharding(tiny_model_dir) -> None:
    group = _actor_group(tiny_model_dir, "actor", "actor_rollout_ref.actor.use_torch_compile=true")
    module = group.workers[0].actor_module
    assert all(layer._compiled_call_impl is not None for layer in module.model.layers)
    assert group.workers[0].actor.log_prob_kernels.compiled  # and the log-prob/entropy chunk kernels
    plain = _actor_group(tiny_model_dir, "actor").workers[0]
    assert all(layer._compiled_call_impl is None for layer in plain.actor_module.model.layers)
    assert plain.actor.log_prob_kernels is None  # null on CPU: eager


def test_generation_held_across_calls_and_served_by_request(tiny_model_dir: str) -> None:
    """``hold_generation`` keeps a rank ready across ``generate_sequences`` calls (the same greedy tokens as unheld
    calls); ``open_request_server`` serves token requests with the rank's engine (the tokens of plain generation)
    and releases the rank when closed. The worker knows nothing of agent loops: these are the whole surface."""
    import asyncio

    group = _actor_group(tiny_model_dir, "actor_rollout")
    (worker,) = group.workers
    greedy = {"do_sample": False}
    plain = group.generate_sequences(DataProto(_prompts().batch, {}, dict(greedy)))
    group.hold_generation(True)
    try:
        held = [group.generate_sequences(DataProto(_prompts().batch, {}, dict(greedy))) for _ in range(2)]
        assert worker._generation_held is not None
    finally:
        group.hold_generation(False)
    assert worker._generation_held is None
    for out in held:
        assert torch.equal(out.batch["responses"], plain.batch["responses"])
    (server,) = group.open_request_server(greedy)
    try:
        prompt = _prompts().batch["input_ids"][0].tolist()  # row 0 has no padding
        answer = asyncio.run(server.generate(prompt, RESPONSE_LEN))
    finally:
        server.close()
    n = int(plain.batch["response_mask"][0].sum())
    assert answer.token_ids == plain.batch["responses"][0, :n].tolist()
    assert worker._generation_held is None

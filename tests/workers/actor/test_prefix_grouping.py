"""actor.use_prefix_grouper: one forward of a prompt group's shared prompt gives the plain path's numbers (fp32)."""

from __future__ import annotations

import copy
import os

import pytest
import torch
from omegaconf import OmegaConf

import verl.trainer.config.experiment_name  # noqa: F401  (registers the YAML's ${verl.experiment_name:...})
from verl.models.tiny import TinyModelSpec, make_tiny_causal_lm
from verl.protocol import DataProto
from verl.utils.prefix_grouper_checks import config_errors
from verl.workers.actor.dp_actor import DataParallelPPOActor
from verl.workers.actor.prefix_grouping import (
    build_grouped_layout,
    packed_lengths,
    prompt_group_ids,
    split_grouped_micro_batches,
)

YAML = os.path.join(os.path.dirname(__file__), "../../../verl/trainer/config/ppo_trainer.yaml")
PROMPT_LEN, RESP_LEN = 7, 5
# (prompt length, response lengths of its group): unequal group sizes and response lengths, left-padded prompts
GROUPS = [(5, [5, 2, 4]), (7, [1, 3]), (3, [4, 5, 1, 2]), (2, [3])]


def actor_config(**overrides):
    cfg = OmegaConf.load(YAML)
    OmegaConf.resolve(cfg)
    actor = cfg.actor_rollout_ref.actor
    actor.dtype = "float32"
    actor.grad_clip = 0.0  # SGD(lr=1) deltas are exactly -grad
    actor.ppo_mini_batch_size = 10
    actor.ppo_micro_batch_size_per_gpu = 10
    actor.entropy_coeff = 0.01
    for key, value in overrides.items():
        OmegaConf.update(actor, key, value)
    return actor


def make_data(seed: int = 0, interleave: bool = False) -> DataProto:
    """Rows of the :data:`GROUPS` (left-padded prompts, right-padded responses), contiguous or interleaved."""
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for p_len, r_lens in GROUPS:
        prompt = torch.randint(0, 256, (p_len,), generator=gen)
        for r_len in r_lens:
            rows.append((prompt, torch.randint(0, 256, (r_len,), generator=gen)))
    if interleave:
        rows = rows[::2] + rows[1::2]
    bs = len(rows)
    input_ids = torch.full((bs, PROMPT_LEN + RESP_LEN), 256)
    mask = torch.zeros(bs, PROMPT_LEN + RESP_LEN, dtype=torch.long)
    for i, (prompt, resp) in enumerate(rows):
        input_ids[i, PROMPT_LEN - len(prompt) : PROMPT_LEN] = prompt
        input_ids[i, PROMPT_LEN : PROMPT_LEN + len(resp)] = resp
        mask[i, PROMPT_LEN - len(prompt) : PROMPT_LEN + len(resp)] = 1
    tensors = {
        "input_ids": input_ids,
        "attention_mask": mask,
        "position_ids": (mask.cumsum(-1) - 1).clamp(min=0),
        "responses": input_ids[:, PROMPT_LEN:].clone(),
        "response_mask": mask[:, PROMPT_LEN:].clone(),
        "advantages": torch.randn(bs, RESP_LEN, generator=gen),
        "ref_log_prob": -torch.rand(bs, RESP_LEN, generator=gen),
    }
    return DataProto.from_dict(tensors=tensors, meta_info={"temperature": 0.7, "global_steps": 3})


@pytest.fixture(scope="module", params=["eager", "sdpa"])
def model(request):
    module = make_tiny_causal_lm(TinyModelSpec(arch="qwen2"))
    module.set_attn_implementation(request.param)
    return module


def log_probs(model, data: DataProto, grouped: bool, **meta):
    data.meta_info.update(meta)
    actor = DataParallelPPOActor(actor_config(use_prefix_grouper=grouped), model)
    return actor.compute_log_prob(data, calculate_entropy=True, calculate_sum_pi_squared=True)


@pytest.mark.parametrize("interleave", [False, True])
@pytest.mark.parametrize("meta", [{"micro_batch_size": 10}, {"micro_batch_size": 3}, {"use_dynamic_bsz": True}])
def test_log_probs_entropy_equal_the_plain_path(model, interleave: bool, meta: dict) -> None:
    data = make_data(interleave=interleave)
    meta = {**meta, "max_token_len": 16} if meta.get("use_dynamic_bsz") else meta
    plain = log_probs(model, data, False, micro_batch_size=10)
    grouped = log_probs(model, data, True, **meta)
    mask = data.batch["response_mask"].bool()
    for a, b in zip(plain, grouped, strict=True):
        assert torch.allclose(a[mask], b[mask], atol=1e-5)
        assert (b[~mask] == 0).all()


def sgd_update(model, data: DataProto, grouped: bool, **overrides):
    module = copy.deepcopy(model)
    before = {n: p.detach().clone() for n, p in module.named_parameters()}
    opt = torch.optim.SGD(module.parameters(), lr=1.0)
    cfg = actor_config(use_prefix_grouper=grouped, use_kl_loss=True, **overrides)
    metrics = DataParallelPPOActor(cfg, module, opt).update_policy(data)
    return metrics, {n: p.detach() - before[n] for n, p in module.named_parameters()}


@pytest.mark.parametrize(
    "overrides",
    [{}, {"ppo_micro_batch_size_per_gpu": 3}, {"use_dynamic_bsz": True, "ppo_max_token_len_per_gpu": 14}],
)
def test_update_gradients_equal_the_plain_path(model, overrides: dict) -> None:
    data = make_data(interleave=True)
    data.batch["old_log_probs"] = log_probs(model, data, False, micro_batch_size=10)[0] + 0.05
    m_plain, d_plain = sgd_update(model, data, False)
    m_grouped, d_grouped = sgd_update(model, data, True, **overrides)
    for key in ("actor/pg_loss", "actor/kl_loss", "actor/entropy"):
        assert m_plain[key][0] == pytest.approx(m_grouped[key][0], abs=1e-6), key
    assert any(d.abs().max() > 1e-4 for d in d_plain.values())
    for name, delta in d_plain.items():
        assert torch.allclose(delta, d_grouped[name], atol=1e-5), name


def test_groups_are_rows_with_the_same_valid_prompt() -> None:
    batch = make_data(interleave=True).batch
    ids = prompt_group_ids(batch).tolist()
    owner = [g for g, (_, lens) in enumerate(GROUPS) for _ in lens]
    owner = owner[::2] + owner[1::2]
    assert len(set(ids)) == len(GROUPS)
    assert all((ids[i] == ids[j]) == (owner[i] == owner[j]) for i in range(len(ids)) for j in range(len(ids)))


def test_layout_packs_the_prompt_once_and_masks_other_responses() -> None:
    batch = make_data().batch[:3]  # the first group: prompt of 5, responses of 5, 2, 4
    layout = build_grouped_layout(batch)
    assert layout.input_ids.shape == (1, 5 + 5 + 2 + 4)
    assert layout.position_ids[0].tolist() == [0, 1, 2, 3, 4] + [5, 6, 7, 8, 9] + [5, 6] + [5, 6, 7, 8]
    allowed = layout.allowed[0]
    assert allowed[5:10, :5].all() and allowed[10:12, :5].all()  # every response sees the whole prompt
    assert not allowed[10:12, 5:10].any() and not allowed[12:, 5:12].any()  # but no other response
    assert not allowed[:5, 5:].any() and allowed[:5, :5].equal(torch.ones(5, 5, dtype=torch.bool).tril())
    assert layout.src.tolist()[:3] == [4, 5, 6] and layout.src.tolist()[5] == 4  # the prompt's last token first


def packed_tokens(micro) -> int:
    """Tokens of a micro-batch packed per prompt group: each group's prompt once plus its responses."""
    mask, ids = micro["attention_mask"], prompt_group_ids(micro)
    heads = [ids.tolist().index(g) for g in range(int(ids.max()) + 1)]
    return int(mask[heads, :PROMPT_LEN].sum()) + int(mask[:, PROMPT_LEN:].sum())


@pytest.mark.parametrize(("dynamic", "limit", "cut"), [(False, 3, {2}), (False, 4, set()), (True, 12, {0, 2})])
def test_micro_batches_keep_groups_whole_and_cut_only_oversized_ones(dynamic: bool, limit: int, cut: set) -> None:
    data = make_data(interleave=True)  # a split by consecutive rows would cut every group
    owner = [g for g, (_, lens) in enumerate(GROUPS) for _ in lens]
    owner = torch.tensor(owner[::2] + owner[1::2])
    micros, order = split_grouped_micro_batches(data.batch, limit, dynamic, limit)
    assert sorted(order) == list(range(len(data)))
    pieces: dict[int, int] = {}
    start = 0
    for micro in micros:
        rows = order[start : start + len(micro)]
        start += len(micro)
        assert packed_tokens(micro) <= limit or len(micro) == 1 if dynamic else len(micro) <= limit
        for g in set(owner[rows].tolist()):
            pieces[g] = pieces.get(g, 0) + 1
    assert {g for g, n in pieces.items() if n > 1} == cut


def test_refusals_name_the_key_and_the_fix(model) -> None:
    with pytest.raises(ValueError, match="use_prefix_grouper=true .*use_remove_padding=false"):
        DataParallelPPOActor(actor_config(use_prefix_grouper=True), model, use_remove_padding=True)
    with pytest.raises(ValueError, match="use_prefix_grouper=true .*use_fused_kernels=false"):
        DataParallelPPOActor(actor_config(use_prefix_grouper=True), model, use_fused_kernels=True)
    flash = copy.deepcopy(model)
    flash.config._attn_implementation = "flash_attention_2"
    with pytest.raises(ValueError, match="use_prefix_grouper=true needs .*attn_implementation=sdpa"):
        DataParallelPPOActor(actor_config(use_prefix_grouper=True), flash).compute_log_prob(make_data())

    cfg = OmegaConf.load(YAML)
    arr = cfg.actor_rollout_ref
    assert config_errors(cfg) == []
    arr.actor.use_prefix_grouper = True
    assert config_errors(cfg) == []
    arr.model.use_remove_padding = True
    arr.model.attn_implementation = "flash_attention_2"
    arr.actor.ulysses_sequence_parallel_size = 2
    errors = config_errors(cfg)
    assert len(errors) == 2 and all("\n" not in e and "use_prefix_grouper=true" in e for e in errors)
    assert "attn_implementation=flash_attention_2" in errors[0] and "use_remove_padding=false" in errors[1]


def test_packed_lengths_count_each_prompt_once() -> None:
    batch = make_data(interleave=True).batch
    expected = sorted(p + sum(lens) for p, lens in GROUPS)
    assert sorted(packed_lengths(batch)) == expected


@pytest.mark.parametrize("dynamic", [False, True])
def test_worker_old_log_prob_ref_and_update_through_the_grouped_forward(
    tiny_model_dir: str, dynamic: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The FSDP worker with use_prefix_grouper (actor + reference on one worker): same numbers as without."""
    from verl.single_controller import create_worker_group
    from verl.trainer.config.loader import load_config
    from verl.workers.fsdp_workers import ActorRolloutRefWorker

    def group(grouped: bool):
        extra = [
            f"actor_rollout_ref.actor.use_dynamic_bsz={dynamic}",
            "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=20",
        ]
        cfg = load_config(
            [
                f"actor_rollout_ref.model.path={tiny_model_dir}",
                "actor_rollout_ref.rollout.n=1",
                "algorithm.adv_estimator=gae",
                "data.train_batch_size=10",
                f"data.max_prompt_length={PROMPT_LEN}",
                f"data.max_response_length={RESP_LEN}",
                "actor_rollout_ref.actor.ppo_mini_batch_size=10",
                "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=5",
                "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=5",
                "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=20",
                f"actor_rollout_ref.rollout.log_prob_use_dynamic_bsz={dynamic}",
                f"actor_rollout_ref.ref.log_prob_use_dynamic_bsz={dynamic}",
                "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=20",
                "actor_rollout_ref.actor.dtype=float32",
                "actor_rollout_ref.actor.optim.lr=0.01",
                "actor_rollout_ref.rollout.dtype=float32",
                f"actor_rollout_ref.actor.use_prefix_grouper={grouped}",
                *extra,
            ]
        )
        g = create_worker_group(
            "local", ActorRolloutRefWorker, {"config": cfg.actor_rollout_ref, "role": "actor_rollout_ref"}
        )
        g.init_model()
        return g

    import verl.workers.actor.dp_actor as dp_actor

    calls: list[int] = []
    grouped_forward = dp_actor.grouped_response_forward
    monkeypatch.setattr(
        dp_actor, "grouped_response_forward", lambda *a, **k: calls.append(1) or grouped_forward(*a, **k)
    )
    mask = make_data(interleave=True).batch["response_mask"].bool()
    results = []
    for grouped in (False, True):
        data = make_data(interleave=True)
        del data.meta_info["temperature"]  # the worker sets the rollout's
        g = group(grouped)
        old = g.compute_log_prob(data)
        ref = g.compute_ref_log_prob(data)
        batch = data.union(old.select(batch_keys=["old_log_probs"]))
        metrics = g.update_actor(batch).meta_info["metrics"]
        after = g.compute_log_prob(data).batch["old_log_probs"]
        results.append((old.batch["old_log_probs"], ref.batch["ref_log_prob"], metrics, after))
        assert bool(calls) == grouped  # old-log-prob, reference and update passes all went through it
    (old_p, ref_p, m_p, after_p), (old_g, ref_g, m_g, after_g) = results
    torch.testing.assert_close(old_g[mask], old_p[mask], atol=1e-5, rtol=0)
    torch.testing.assert_close(ref_g[mask], ref_p[mask], atol=1e-5, rtol=0)
    assert m_g["actor/pg_loss"][0] == pytest.approx(m_p["actor/pg_loss"][0], abs=1e-6)
    assert m_g["actor/grad_norm"][0] == pytest.approx(m_p["actor/grad_norm"][0], rel=1e-5)
    assert (after_p[mask] - old_p[mask]).abs().max() > 1e-3  # the update moved the policy ...
    torch.testing.assert_close(after_g[mask], after_p[mask], atol=1e-5, rtol=0)  # ... the same way


@pytest.mark.parametrize("arch", ["qwen2-mixed-layers", "mistral"])
def test_sliding_window_layers_keep_their_window(arch: str) -> None:
    """A window of 3 positions, shorter than the rows: the sliding layers see the same keys as in the plain forward."""
    from transformers import AutoModelForCausalLM, MistralConfig, Qwen2Config

    common = dict(vocab_size=300, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
    common.update(intermediate_size=64, sliding_window=3, attn_implementation="sdpa")
    if arch == "mistral":
        config = MistralConfig(**common)
    else:
        config = Qwen2Config(use_sliding_window=True, max_window_layers=1, **common)
        assert config.layer_types == ["full_attention", "sliding_attention"]
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    data = make_data(interleave=True)
    mask = data.batch["response_mask"].bool()
    plain = log_probs(model, data, False, micro_batch_size=10)[0]
    grouped = log_probs(model, data, True, micro_batch_size=10)[0]
    assert torch.allclose(plain[mask], grouped[mask], atol=1e-5)
    # the window matters here: the same weights without it give other log-probs
    unwindowed = AutoModelForCausalLM.from_config(
        type(config)(**{**common, "sliding_window": None}), dtype=torch.float32
    )
    unwindowed.load_state_dict(model.state_dict())
    assert not torch.allclose(plain[mask], log_probs(unwindowed, data, False, micro_batch_size=10)[0][mask], atol=1e-3)


def test_gradient_checkpointing_and_bf16_autocast_take_the_packed_rows(model) -> None:
    data = make_data(interleave=True)
    data.batch["old_log_probs"] = log_probs(model, data, False, micro_batch_size=10)[0] + 0.05
    _, d_plain = sgd_update(model, data, False)
    checkpointed = copy.deepcopy(model)
    checkpointed.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    _, d_grouped = sgd_update(checkpointed, data, True)
    for name, delta in d_plain.items():
        assert torch.allclose(delta, d_grouped[name], atol=1e-5), name
    mask = data.batch["response_mask"].bool()
    data.meta_info["micro_batch_size"] = 10
    bf16 = [
        DataParallelPPOActor(actor_config(use_prefix_grouper=g, dtype="bfloat16"), model).compute_log_prob(data)[0]
        for g in (False, True)
    ]
    assert torch.allclose(bf16[0][mask], bf16[1][mask], atol=2e-2)

"""FlowRL in the actor: the log Z head's prompt pass equals the recipe's slice of the full forward, the update
trains head and policy the same whatever path scores the responses, and the head stays out of what the policy
exports (checkpoint's Hugging Face weights, the merger, the rollout engine's weight stream)."""

from __future__ import annotations

import copy
import os

import pytest
import torch

from tests.workers.actor.test_dp_actor import RESP_LEN, make_data, with_old_log_probs
from tests.workers.actor.test_dp_actor import actor_config as base_config
from verl.models.log_z_head import LOG_Z_HEAD, attach_log_z_head, is_training_only, without_training_only
from verl.models.tiny import make_tiny_causal_lm
from verl.workers.actor.dp_actor import DataParallelPPOActor
from verl.workers.actor.log_z import pooled_prompt_states, prompt_log_z

FLOWRL = {"policy_loss.loss_mode": "flowrl", "policy_loss.flowrl_beta": 2.0}


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    module = make_tiny_causal_lm()
    with torch.random.fork_rng():
        torch.manual_seed(0)
        attach_log_z_head(module, layers=2, dropout=0.0)
    return module


def flowrl_data(model: torch.nn.Module):
    data = with_old_log_probs(DataParallelPPOActor(base_config(), model), make_data(bs=4, seed=7))
    data.batch["ref_log_prob"] = data.batch["old_log_probs"] - 0.1
    data.batch["old_log_probs"] = data.batch["old_log_probs"] + 0.05 * torch.randn(4, RESP_LEN)
    return data


def test_prompt_pass_equals_the_recipe_slice_of_the_full_forward(model) -> None:
    data = make_data(bs=4, seed=1)
    batch = data.batch
    with torch.no_grad():
        out = model(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            position_ids=batch["position_ids"],
            output_hidden_states=True,
        )
        # the recipe: hidden_states[-1][:, : -response_length - 1], pooled under the same slice of the mask
        hidden = out.hidden_states[-1][:, : -RESP_LEN - 1]
        mask = batch["attention_mask"][:, : -RESP_LEN - 1].unsqueeze(-1).float()
        expected = getattr(model, LOG_Z_HEAD)((hidden * mask).sum(1) / mask.sum(1).clamp_min(1)).squeeze(-1)
        got = prompt_log_z(model, batch)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    assert got.shape == (4,)


def test_pooling_skips_padding_and_the_last_prompt_position() -> None:
    hidden = torch.arange(12.0).reshape(1, 4, 3)
    pooled = pooled_prompt_states(hidden, torch.tensor([[0, 1, 1, 1]]))
    torch.testing.assert_close(pooled, hidden[:, 1:3].mean(1))


def _update(model, data, rmpad: bool, fused: bool = False):
    module = copy.deepcopy(model)
    before = {n: p.detach().clone() for n, p in module.named_parameters()}
    opt = torch.optim.SGD(module.parameters(), lr=1.0)
    cfg = base_config(**FLOWRL)
    actor = DataParallelPPOActor(cfg, module, opt, use_remove_padding=rmpad, use_fused_kernels=fused)
    metrics = actor.update_policy(data)
    return metrics, {n: p.detach() - before[n] for n, p in module.named_parameters()}


def test_update_trains_head_and_policy_alike_on_every_path(model) -> None:
    data = flowrl_data(model)
    base_metrics, base = _update(model, data, rmpad=False)
    assert base[f"{LOG_Z_HEAD}.net.0.weight"].abs().max() > 0, "the log Z head did not learn"
    policy = [n for n in base if not is_training_only(n)]
    assert any(base[n].abs().max() > 0 for n in policy), "the policy did not learn"
    for key in ("actor/log_z", "actor/importance_weight", "actor/tb_residual_rms", "actor/pg_loss"):
        assert key in base_metrics
    for rmpad, fused in ((True, False), (False, True)):
        _, other = _update(model, data, rmpad=rmpad, fused=fused)
        for name in base:
            torch.testing.assert_close(other[name], base[name], atol=2e-5, rtol=1e-4, msg=name)


def test_an_actor_model_without_the_head_is_named() -> None:
    data = flowrl_data(make_tiny_causal_lm())
    module = make_tiny_causal_lm()
    actor = DataParallelPPOActor(base_config(**FLOWRL), module, torch.optim.SGD(module.parameters(), lr=0.1))
    with pytest.raises(RuntimeError, match="no log Z head"):
        actor.update_policy(data)


def test_the_head_stays_out_of_exports(model, tmp_path, byte_tokenizer) -> None:
    from transformers import AutoModelForCausalLM

    from verl.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager
    from verl.model_merger import merge_checkpoint

    names = [n for n, _ in without_training_only(model.state_dict().items())]
    assert names and not any(n.startswith(LOG_Z_HEAD) for n in names)
    assert any(n.startswith(LOG_Z_HEAD) for n in model.state_dict())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    contents = ["model", "optimizer", "extra", "hf_model"]
    manager = FSDPCheckpointManager(model, opt, None, byte_tokenizer, save_contents=contents)
    manager.save_checkpoint(str(tmp_path / "actor"), global_step=1)
    merged = merge_checkpoint(str(tmp_path / "actor"), str(tmp_path / "merged"))
    for hf_dir in (str(tmp_path / "actor" / "huggingface"), merged):
        loaded, info = AutoModelForCausalLM.from_pretrained(hf_dir, output_loading_info=True)
        assert not info["unexpected_keys"] and not info["missing_keys"], (hf_dir, info)
        assert not hasattr(loaded, LOG_Z_HEAD)
    # the head is in the resumable shards, with the policy
    restored = copy.deepcopy(model)
    with torch.no_grad():
        getattr(restored, LOG_Z_HEAD).net[0].weight.zero_()
    FSDPCheckpointManager(restored, torch.optim.SGD(restored.parameters(), lr=0.1)).load_checkpoint(
        str(tmp_path / "actor")
    )
    torch.testing.assert_close(getattr(restored, LOG_Z_HEAD).net[0].weight, getattr(model, LOG_Z_HEAD).net[0].weight)
    assert os.path.isdir(merged)

"""vLLM on every actor rank: two FSDP2 ranks (Ray backend, gloo on CPU), each with its own vLLM engine inside the
actor's torch.distributed world (vLLM's ``external_launcher``).

Checked against plain transformers, never against the workers themselves:

- ``rollout.name=auto`` picks vLLM for 2 ranks, and each rank generates its half of the batch with its own engine;
- greedy responses and their log-probs equal transformers' on the initial weights;
- after an actor update the layered weight sync reaches both engines: their greedy responses and log-probs equal
  transformers' on the updated weights (read back from the saved checkpoint), and differ from the ones before;
- the two replicas sample from different random streams (same prompts, different responses).
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

pytestmark = [
    pytest.mark.slow,
    pytest.mark.vllm,
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None, reason="vllm is not installed (pip install -e .[vllm])"
    ),
]

ray = pytest.importorskip("ray")

PROMPT_LEN, RESPONSE_LEN, BATCH, PAD, EOS = 8, 6, 8, 256, 258
LOGPROB_ATOL = 1e-3  # vLLM's CPU kernels vs transformers' eager attention, fp32


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    """A tiny Qwen2 (tied embeddings) whose head dim (64) vLLM's CPU attention supports, with a byte tokenizer."""
    from verl.models.tiny import TinyModelSpec, make_tiny_model_dir

    spec = TinyModelSpec(
        arch="qwen2", hidden_size=128, num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True
    )
    return make_tiny_model_dir(str(tmp_path_factory.mktemp("vllm_ranks")), spec=spec)


def _group(model_dir: str, tp: int):
    from verl.single_controller import create_worker_group
    from verl.trainer.config.loader import load_config
    from verl.workers.fsdp_workers import ActorRolloutRefWorker

    cfg = load_config(
        [
            f"actor_rollout_ref.model.path={model_dir}",
            "actor_rollout_ref.rollout.name=auto",  # must resolve to vllm on 2 ranks
            "actor_rollout_ref.rollout.n=1",
            f"data.train_batch_size={BATCH}",
            f"data.max_prompt_length={PROMPT_LEN}",
            f"data.max_response_length={RESPONSE_LEN}",
            f"actor_rollout_ref.actor.ppo_mini_batch_size={BATCH}",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
            "actor_rollout_ref.actor.dtype=float32",
            "actor_rollout_ref.actor.optim.lr=0.05",  # one Adam step moves every weight of the tiny model visibly
            "actor_rollout_ref.actor.grad_clip=0.0",
            "actor_rollout_ref.rollout.dtype=float32",
            "actor_rollout_ref.rollout.calculate_log_probs=true",
            "actor_rollout_ref.rollout.max_num_seqs=8",
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
            "algorithm.adv_estimator=gae",  # the advantages are given; any estimator without a group size
            f"actor_rollout_ref.rollout.tensor_model_parallel_size={tp}",
            "trainer.n_gpus_per_node=2",
        ]
    )
    group = create_worker_group(
        "ray",
        ActorRolloutRefWorker,
        {"config": cfg.actor_rollout_ref, "role": "actor_rollout_ref"},
        world_size=2,
        use_gpu=False,
    )
    group.init_model()
    return group


def _prompts(rows: list[list[int]], **meta):
    from verl.protocol import DataProto

    ids = torch.full((len(rows), PROMPT_LEN), PAD, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, PROMPT_LEN - len(row) :] = torch.tensor(row)
        mask[i, PROMPT_LEN - len(row) :] = 1
    position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
    return DataProto.from_dict(
        tensors={"input_ids": ids, "attention_mask": mask, "position_ids": position_ids},
        meta_info={"eos_token_id": EOS, "pad_token_id": PAD, **meta},
    )


def _transformers_reference(model_path: str, prompts) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Greedy ``responses`` ``[bs, RESPONSE_LEN]`` (stopping at EOS, as the engines do), their ``response_mask`` and
    the log-probs of those tokens ``[bs, RESPONSE_LEN]`` under a plain transformers forward of ``model_path``."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    b = prompts.batch
    with torch.no_grad():
        full = model.generate(
            input_ids=b["input_ids"],
            attention_mask=b["attention_mask"],
            max_new_tokens=RESPONSE_LEN,
            min_new_tokens=RESPONSE_LEN,  # fixed width; the mask below cuts each row after its first EOS
            do_sample=False,
            eos_token_id=None,
            pad_token_id=PAD,
        )
        responses = full[:, PROMPT_LEN:]
        is_eos = (responses == EOS).long()
        mask = (is_eos.cumsum(-1) - is_eos == 0).long()  # 1 up to and including the first EOS
        attention = torch.cat([b["attention_mask"], mask], -1)
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        logits = model(input_ids=full, attention_mask=attention, position_ids=positions).logits
    log_probs = torch.log_softmax(logits[:, PROMPT_LEN - 1 : -1].float(), -1)
    log_probs = log_probs.gather(-1, responses.unsqueeze(-1)).squeeze(-1)
    return torch.where(mask.bool(), responses, PAD), mask, log_probs * mask


def _assert_matches(out, reference, what: str) -> None:
    responses, mask, log_probs = reference
    assert torch.equal(out.batch["response_mask"], mask), what
    assert torch.equal(out.batch["responses"], responses), what
    torch.testing.assert_close(out.batch["rollout_log_probs"], log_probs, atol=LOGPROB_ATOL, rtol=0, msg=what)


@pytest.mark.parametrize("tp", [1, 2], ids=["dp2_tp1", "dp1_tp2"])
def test_each_rank_generates_with_its_own_engine_and_follows_the_update(ray_cpu, model_dir, tmp_path, tp) -> None:
    """tp=1: two replicas, each generating its rank's half of the batch; tp=2: one engine over both ranks, which
    pool their halves, generate them together and each return their own."""
    texts = [b"2+3=", b"hello", b"a", b"12*7=?", b"xy", b"abcdefg", b"RL!", b"zz"]
    greedy = _prompts([list(t) for t in texts], do_sample=False)
    group = _group(model_dir, tp)
    try:
        info = group.rollout_info()
        assert [i["name"] for i in info] == ["vllm", "vllm"]
        assert len({i["pid"] for i in info}) == 2  # an engine (or engine rank) in each rank's process
        dp = 2 // tp
        assert [(i["tp_size"], i["dp_rank"], i["dp_size"]) for i in info] == [(tp, r // tp, dp) for r in range(2)]
        assert [i["weight_syncs"] for i in info] == [1, 1]  # the initial sync from the actor

        before = group.generate_sequences(greedy)
        _assert_matches(before, _transformers_reference(model_dir, greedy), "initial weights")

        # one PPO step on the generated batch: advantages +1 / -1 per row, ratio 1 (old = current log-probs)
        batch = before.select(batch_keys=["input_ids", "attention_mask", "position_ids", "responses", "response_mask"])
        batch = batch.union(group.compute_log_prob(batch).select(batch_keys=["old_log_probs"]))
        sign = torch.tensor([1.0, -1.0] * (BATCH // 2))[:, None]
        batch.batch["advantages"] = sign * batch.batch["response_mask"].float()
        batch.meta_info["global_steps"] = 1
        group.update_actor(batch)
        assert [i["weight_syncs"] for i in group.rollout_info()] == [2, 2]

        after = group.generate_sequences(greedy)
        group.save_checkpoint(str(tmp_path / "ckpt"))  # each rank writes its own shards; merged for transformers
        from verl.model_merger import merge_checkpoint

        merged = merge_checkpoint(str(tmp_path / "ckpt"), str(tmp_path / "merged"))
        updated = _transformers_reference(merged, greedy)
        _assert_matches(after, updated, "updated weights")
        # the comparison is meaningful: the update changed what both engines generate
        for rows in (slice(0, BATCH // 2), slice(BATCH // 2, BATCH)):
            assert not torch.equal(after.batch["responses"][rows], before.batch["responses"][rows])

        if dp > 1:
            # same prompt on every row, sampled: each replica draws from its own random stream
            sampled = group.generate_sequences(_prompts([list(b"hello")] * BATCH, do_sample=True, temperature=1.0))
            halves = sampled.batch["responses"].split(BATCH // 2)
            assert halves[0].tolist() != halves[1].tolist()
    finally:
        group.shutdown_rollout()  # stops the engines, which unlink their CPU shared memory (killing them would not)
        group.shutdown()

"""The weight-transfer path (gloo on loopback: one receiver, and a pool of two), partial rollouts continued after a
sync, the LoRA adapter push reaching the rollout engine, and the async_training config checks. All in this process:
the ends of a transfer run in threads."""

from __future__ import annotations

import queue
import threading

import pytest
import torch

from verl.single_controller.base.worker import find_free_port
from verl.trainer.config import load_config
from verl.utils.errors import ConfigError
from verl.workers.rollout.weight_transfer import WeightTransferGroup, load_named_tensors


def _pair(port: int) -> tuple[WeightTransferGroup, WeightTransferGroup]:
    groups: dict[int, WeightTransferGroup] = {}

    def make(rank: int) -> None:
        groups[rank] = WeightTransferGroup("127.0.0.1", port, rank=rank, timeout_s=30)
        groups[rank].connect()

    sender = threading.Thread(target=make, args=(0,))
    sender.start()
    make(1)
    sender.join()
    return groups[0], groups[1]


def test_transfer_streams_tensors_and_meta():
    sender, receiver = _pair(find_free_port())
    tensors = [("a.weight", torch.randn(3, 4)), ("b.bias", torch.arange(5, dtype=torch.int64))]
    sent: list[int] = []
    thread = threading.Thread(target=lambda: sent.append(sender.send(iter(tensors), {"version": 7})))
    thread.start()
    meta, stream = receiver.receive()
    got = list(stream)
    thread.join()
    assert meta == {"version": 7}
    assert [n for n, _ in got] == ["a.weight", "b.bias"]
    for (_, want), (_, have) in zip(tensors, got):
        assert have.dtype == want.dtype and torch.equal(have, want)
    assert sent == [12 * 4 + 5 * 8] and receiver.pushes == 1 and receiver.bytes_last == sent[0]


def test_one_push_reaches_every_receiver_of_a_pool():
    """Two rollout processes (receivers 1 and 2) get the same tensors from one send: a broadcast, not two pushes."""
    port = find_free_port()
    groups: dict[int, WeightTransferGroup] = {}

    def make(rank: int) -> None:
        groups[rank] = WeightTransferGroup("127.0.0.1", port, rank=rank, timeout_s=30, receivers=2)
        groups[rank].connect()

    threads = [threading.Thread(target=make, args=(rank,)) for rank in (0, 1)]
    for t in threads:
        t.start()
    make(2)
    for t in threads:
        t.join()
    tensors = [("w", torch.randn(4, 3))]
    got: dict[int, list] = {}

    def receive(rank: int) -> None:
        meta, stream = groups[rank].receive()
        got[rank] = [meta, list(stream)]

    receiver = threading.Thread(target=receive, args=(1,))
    receiver.start()
    sender = threading.Thread(target=lambda: groups[0].send(iter(tensors), {"version": 3}))
    sender.start()
    receive(2)
    receiver.join()
    sender.join()
    for rank in (1, 2):
        meta, stream = got[rank]
        assert meta == {"version": 3} and torch.equal(stream[0][1], tensors[0][1])
    assert groups[0].pushes == 1
    with pytest.raises(ValueError, match="1..2"):
        WeightTransferGroup("127.0.0.1", find_free_port(), rank=3, receivers=2)


def test_load_named_tensors_refuses_unknown_names():
    module = torch.nn.Linear(2, 2)
    assert load_named_tensors(module, [("weight", torch.ones(2, 2))]) == 1
    assert torch.equal(module.weight, torch.ones(2, 2))
    with pytest.raises(KeyError, match="lora_A"):
        load_named_tensors(module, [("layer.lora_A.weight", torch.ones(2, 2))])
    with pytest.raises(ValueError, match="shape"):
        load_named_tensors(module, [("weight", torch.ones(3, 2))])


def _rollout_cfg(model_dir: str, extra: list[str] = ()):
    return load_config(
        [
            f"actor_rollout_ref.model.path={model_dir}",
            "data.train_files=unused.parquet",
            "actor_rollout_ref.rollout.name=hf",
            "actor_rollout_ref.rollout.response_length=12",
            "data.max_response_length=12",
            *extra,
        ]
    )


def test_partial_rollout_continues_exactly(tiny_model_dir: str):
    """Greedy decoding interrupted twice (the weights unchanged) equals the uninterrupted generation: the
    continuation resumes each row from exactly the tokens and positions where it stopped."""
    from verl.models.tiny import make_byte_tokenizer
    from verl.protocol import DataProto
    from verl.trainer.fully_async_policy.partial_rollout import generate_resumable
    from verl.workers.fsdp_workers import ActorRolloutRefWorker

    cfg = _rollout_cfg(tiny_model_dir)
    worker = ActorRolloutRefWorker(cfg.actor_rollout_ref, role="rollout")
    worker.init_model()
    tok = make_byte_tokenizer()
    texts = ["1+1=", "22*3=", "7-2="]
    enc = [tok(t)["input_ids"] for t in texts]
    width = max(len(e) for e in enc)
    ids = torch.tensor([[tok.pad_token_id] * (width - len(e)) + e for e in enc])
    mask = (torch.arange(width)[None] >= torch.tensor([width - len(e) for e in enc])[:, None]).long()
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    meta = {"do_sample": False, "eos_token_id": tok.eos_token_id, "pad_token_id": tok.pad_token_id}
    prompts = DataProto.from_dict({"input_ids": ids, "attention_mask": mask, "position_ids": pos}, meta_info=meta)
    # eos_token_id of a token that never comes, so every row runs the full length and gets interrupted
    full = worker.rollout.generate_sequences(prompts)
    calls = {"n": 0, "synced": 0}

    def pending() -> bool:
        calls["n"] += 1
        return calls["n"] in (4, 9)

    def take() -> None:
        calls["synced"] += 1

    out, interruptions = generate_resumable(worker.rollout, prompts, pending, take)
    assert interruptions == 2 and calls["synced"] == 2
    assert torch.equal(out.batch["responses"], full.batch["responses"])
    assert torch.equal(out.batch["response_mask"], full.batch["response_mask"])
    assert torch.equal(out.batch["position_ids"], full.batch["position_ids"])


def test_lora_adapter_push_reaches_the_rollout_engine(tiny_model_dir: str):
    """Only adapter tensors travel, and afterwards the rollout model's log-probs equal the actor's (before the
    push they differ: the actor's adapter is non-zero, the rollout's fresh one is zero)."""
    from verl.trainer.fully_async_policy.rollout_process import RolloutReplicaBody
    from verl.workers.fsdp_workers import ActorRolloutRefWorker

    port = find_free_port()
    cfg = _rollout_cfg(tiny_model_dir, ["actor_rollout_ref.model.lora_rank=4", "actor_rollout_ref.model.lora_alpha=8"])
    actor = ActorRolloutRefWorker(cfg.actor_rollout_ref, role="actor")
    actor.init_model()
    with torch.no_grad():
        for name, p in actor.actor_module.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    syncs: queue.Queue = queue.Queue()
    proc = RolloutReplicaBody(cfg, ("127.0.0.1", port, "gloo", 1, 1), syncs, threading.Event(), partial_rollout=False)
    ids = torch.tensor([[5, 17, 33, 48, 60, 72]])

    def logits(module: torch.nn.Module) -> torch.Tensor:
        with torch.no_grad():
            return module(input_ids=ids).logits

    assert not torch.allclose(logits(actor.actor_module), logits(proc.worker.rollout.module))
    joiner = threading.Thread(target=proc.connect)
    joiner.start()
    actor.init_weight_sender("127.0.0.1", port, "gloo")
    joiner.join()
    syncs.put(1)
    sent: list[int] = []
    pusher = threading.Thread(target=lambda: sent.append(actor.send_rollout_weights(1)))
    pusher.start()
    proc.take_sync()
    pusher.join()
    lora_bytes = sum(p.numel() * 4 for n, p in actor.actor_module.named_parameters() if "lora_" in n)
    assert sent == [lora_bytes] and proc.version == 1
    torch.testing.assert_close(logits(actor.actor_module), logits(proc.worker.rollout.module), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["async_training.mode=fully_async", "async_training.staleness_threshold=-1"], "staleness_threshold=-1"),
        (
            ["async_training.mode=one_step_off", "async_training.partial_rollout=true"],
            "one_step_off rollouts are whole batches",
        ),
        (["async_training.mode=fully_async", "async_training.use_rollout_log_probs=true"], "calculate_log_probs"),
        (["async_training.mode=fully_async", "async_training.trigger_parameter_sync_step=0"], "must be >= 1"),
        (["async_training.mode=sometimes"], "async_training.mode"),
    ],
)
def test_async_training_config_checks(overrides: list[str], message: str):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        load_config(["data.train_files=x.parquet", *overrides])

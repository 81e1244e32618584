"""The weight-sync digest: a normal sync passes; a sync that drops a tensor in transit, never loads one, or
corrupts one stops with WeightSyncMismatchError naming the tensor (full weights and LoRA adapters, the hf engine
of the asynchronous rollout process; the vLLM engine's fused parameters)."""

from __future__ import annotations

import queue
import threading

import pytest
import torch

from verl.single_controller.base.worker import find_free_port
from verl.trainer.config import load_config
from verl.workers.rollout import weight_transfer
from verl.workers.rollout.weight_digest import (
    DigestingStream,
    WeightSyncMismatchError,
    check_push_report,
    check_vllm_sync,
    check_weight_sync,
    expected_for_packed,
    module_digest,
    tensor_digest,
)


def test_digest_sums_add_up_and_see_small_changes():
    a, b = torch.randn(4, 3), torch.randn(2, 3)
    both = tensor_digest(torch.cat([a, b]))
    parts = tensor_digest(a) + tensor_digest(b)
    assert parts.numel == both.numel == 18
    assert abs(parts.total - both.total) < 1e-9 and abs(parts.sumsq - both.sumsq) < 1e-9
    nudged = a.clone()
    nudged[1, 2] += 1e-4  # one element, far below anything a sampled checksum would see
    with pytest.raises(WeightSyncMismatchError, match="w: trainer sum"):
        check_weight_sync({"w": tensor_digest(a)}, {"w": tensor_digest(nudged)}, "test", "k")
    check_weight_sync({"w": tensor_digest(a)}, {"w": tensor_digest(a.clone())}, "test", "k")


def test_dtype_rounding_is_allowed_but_not_a_missed_update():
    w = torch.randn(64, 64)
    check_weight_sync({"w": tensor_digest(w)}, {"w": tensor_digest(w.to(torch.bfloat16))}, "test", "k")
    stale = (w * 1.02).to(torch.bfloat16)  # an update the engine never received, above bf16's rounding
    with pytest.raises(WeightSyncMismatchError, match="1 of 1 tensors differ"):
        check_weight_sync({"w": tensor_digest(w)}, {"w": tensor_digest(stale)}, "test", "k")


def test_error_lists_the_first_tensors_and_counts_the_rest():
    sent = {f"layer{i}.weight": tensor_digest(torch.ones(3) * i) for i in range(8)}
    held = {name: tensor_digest(torch.zeros(3)) for name in sent}
    held["extra.weight"] = tensor_digest(torch.ones(2))
    with pytest.raises(WeightSyncMismatchError) as err:
        check_weight_sync(sent, held, "push 3", "actor_rollout_ref.rollout.check_weight_sync")
    text = str(err.value)
    # layer0 is all zeros on both sides; layers 1..7 differ, extra.weight was never sent
    assert "8 of 9 tensors differ" in text and "layer1.weight" in text and "(and 3 more)" in text
    assert "push 3" in text and "actor_rollout_ref.rollout.check_weight_sync=false" in text


def test_digesting_stream_records_what_was_pulled():
    stream = DigestingStream(iter([("a", torch.ones(2)), ("b", torch.ones(3))]))
    assert next(stream)[0] == "a" and stream.pulled == {"a"}
    assert [n for n, _ in stream] == ["b"] and list(stream.digests) == ["a", "b"]


def test_vllm_fused_parameters_compare_with_the_sum_of_their_parts():
    packed = {"qkv_proj": ["q_proj", "k_proj", "v_proj"]}
    prefix = "model.layers.0.self_attn."
    parts = [prefix + "q_proj.weight", prefix + "k_proj.weight", prefix + "v_proj.weight"]
    assert expected_for_packed(prefix + "qkv_proj.weight", packed) == parts
    assert expected_for_packed("model.norm.weight", packed) == ["model.norm.weight"]
    q, k, v, emb = torch.randn(8, 4), torch.randn(4, 4), torch.randn(4, 4), torch.randn(5, 4)
    sent = {prefix + "q_proj.weight": q, prefix + "k_proj.weight": k, prefix + "v_proj.weight": v}
    sent.update({"model.embed_tokens.weight": emb, prefix + "o_proj.weight": torch.randn(4, 4)})
    digests = {n: tensor_digest(t) for n, t in sent.items()}
    padded = torch.cat([emb, torch.zeros(3, 4)])  # a padded vocabulary adds zeros
    report = {
        "held": {
            prefix + "qkv_proj.weight": tensor_digest(torch.cat([q, k, v])),
            "model.embed_tokens.weight": tensor_digest(padded),
        },
        "unreadable": [prefix + "o_proj.weight"],  # repacked by the CPU backend: checked by what the engine read
        "packed": packed,
    }
    check_vllm_sync(digests, set(sent), report, "vllm")
    with pytest.raises(WeightSyncMismatchError, match="never read .*o_proj"):
        check_vllm_sync(digests, set(sent) - {prefix + "o_proj.weight"}, report, "vllm")
    report["held"][prefix + "qkv_proj.weight"] = tensor_digest(torch.cat([q, k, v * 1.01]))
    with pytest.raises(WeightSyncMismatchError, match="qkv_proj.weight: trainer sum"):
        check_vllm_sync(digests, set(sent), report, "vllm")


# ------------------------------------------------------------------------------- the asynchronous push, in threads
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


def _push(tiny_model_dir: str, extra: list[str] = ()) -> tuple[dict, dict]:
    """An actor worker pushes its (changed) weights to a rollout process's hf engine over the gloo transfer;
    returns what the actor sent (digests) and what the process reports it holds."""
    from verl.trainer.fully_async_policy.rollout_process import RolloutReplicaBody
    from verl.workers.fsdp_workers import ActorRolloutRefWorker

    port = find_free_port()
    cfg = _rollout_cfg(tiny_model_dir, list(extra))
    actor = ActorRolloutRefWorker(cfg.actor_rollout_ref, role="actor")
    actor.init_model()
    lora = int(cfg.actor_rollout_ref.model.lora_rank) > 0
    with torch.no_grad():  # the trainer's weights move away from the ones the rollout process loaded
        for name, p in actor.actor_module.named_parameters():
            if ("lora_B" in name) if lora else p.is_floating_point():
                p.add_(0.01 * torch.randn_like(p))
    acks: queue.Queue = queue.Queue()
    syncs: queue.Queue = queue.Queue()
    wire = ("127.0.0.1", port, "gloo", 1, 1)
    proc = RolloutReplicaBody(cfg, wire, syncs, threading.Event(), partial_rollout=False, acks=acks)
    joiner = threading.Thread(target=proc.connect)
    joiner.start()
    actor.init_weight_sender("127.0.0.1", port, "gloo")
    joiner.join()
    syncs.put(1)
    pusher = threading.Thread(target=actor.send_rollout_weights, args=(1,))
    pusher.start()
    proc.take_sync()
    pusher.join()
    return actor.last_sent_digest(), acks.get(timeout=5)


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_a_normal_push_passes(tiny_model_dir, lora):
    extra = ["actor_rollout_ref.model.lora_rank=4", "actor_rollout_ref.model.lora_alpha=8"] if lora else []
    sent, report = _push(tiny_model_dir, extra)
    assert report["engine"] == "hf" and set(report["held"]) == set(sent)
    assert all(("lora_" in n) == lora for n in sent)
    check_push_report(sent, report, "push 1")


def test_a_tensor_never_loaded_stops_the_run(tiny_model_dir, monkeypatch):
    real = weight_transfer.load_named_tensors

    def skip_one(module, named_tensors):  # a loader that silently leaves one tensor behind
        return real(module, ((n, t) for n, t in named_tensors if n != "model.layers.1.mlp.up_proj.weight"))

    monkeypatch.setattr(weight_transfer, "load_named_tensors", skip_one)
    sent, report = _push(tiny_model_dir)
    with pytest.raises(
        WeightSyncMismatchError, match=r"1 of \d+ tensors differ: model\.layers\.1\.mlp\.up_proj\.weight"
    ):
        check_push_report(sent, report, "push 1")


def test_an_adapter_dropped_in_transit_stops_the_run(tiny_model_dir, monkeypatch):
    """A transfer that loses one LoRA adapter tensor (the failure that masquerades as staleness, verl #7495)."""
    real_send = weight_transfer.WeightTransferGroup.send

    def lossy_send(self, named_tensors, meta=None):
        dropped = [False]

        def keep(name: str) -> bool:
            if "lora_B" in name and not dropped[0]:
                dropped[0] = True
                return False
            return True

        return real_send(self, ((n, t) for n, t in named_tensors if keep(n)), meta)

    monkeypatch.setattr(weight_transfer.WeightTransferGroup, "send", lossy_send)
    extra = ["actor_rollout_ref.model.lora_rank=4", "actor_rollout_ref.model.lora_alpha=8"]
    sent, report = _push(tiny_model_dir, extra)
    with pytest.raises(WeightSyncMismatchError, match=r"1 of \d+ tensors differ: \S*lora_B\S*: trainer sum"):
        check_push_report(sent, report, "push 1")


def test_module_digest_splits_adapters_from_base_weights():
    module = torch.nn.ModuleDict({"lin": torch.nn.Linear(2, 2), "lora_A": torch.nn.Linear(2, 1, bias=False)})
    assert set(module_digest(module)) == {"lin.weight", "lin.bias"}
    assert set(module_digest(module, lora_only=True)) == {"lora_A.weight"}

"""CPU offloading between worker calls and the pooling of sequence-parallel rows (single process)."""

from __future__ import annotations

import logging

import pytest
import torch

from verl.workers.parallel_state import OffloadPolicy, all_loaded, gather_group_batch, move_optimizer_state, own_rows


class _Recorder(torch.nn.Linear):
    """A module that records where it is moved (``to`` is how offloading moves FSDP2 shards too)."""

    def __init__(self) -> None:
        super().__init__(2, 2)
        self.moves: list[str] = []

    def to(self, *args, **kwargs):  # type: ignore[override]
        self.moves.append(str(args[0]))
        return self


def _trained(module: torch.nn.Module) -> torch.optim.Optimizer:
    opt = torch.optim.AdamW(module.parameters(), lr=0.1)
    module(torch.ones(1, 2)).sum().backward()
    opt.step()
    return opt


def test_optimizer_state_moves_to_the_given_device() -> None:
    module = torch.nn.Linear(2, 2)
    opt = _trained(module)
    move_optimizer_state(opt, "meta")
    devices = {v.device.type for state in opt.state.values() for v in state.values() if torch.is_tensor(v)}
    assert devices == {"meta"}
    move_optimizer_state(None, "cpu")  # a reference model has no optimizer


def test_offload_is_a_logged_no_op_on_cpu() -> None:
    # a handler on the module's own logger: other code may stop "verl" records from propagating to the root
    log = logging.getLogger("verl.workers.parallel_state")
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = records.append  # type: ignore[method-assign]
    old_level = log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        module = _Recorder()
        cfg = {"param_offload": True, "optimizer_offload": True}
        policy = OffloadPolicy(module, _trained(module), cfg, torch.device("cpu"), "critic.fsdp_config")
    finally:
        log.removeHandler(handler)
        log.setLevel(old_level)
    assert not policy.active and module.moves == []
    messages = [r.getMessage() for r in records]
    assert any(
        "critic.fsdp_config.param_offload/optimizer_offload: the model already lives in CPU" in m for m in messages
    )
    with policy.loaded(with_optimizer=True):
        pass
    assert module.moves == []


def test_offloaded_model_comes_to_the_device_for_a_call_and_leaves_after_it(monkeypatch) -> None:
    import verl.workers.parallel_state as ps

    optimizer_moves: list[str] = []
    monkeypatch.setattr(ps, "move_optimizer_state", lambda opt, device: optimizer_moves.append(str(device)))
    module = _Recorder()
    opt = _trained(module)
    # an accelerator device (meta stands in for it: only the moves are observed, nothing is copied)
    policy = OffloadPolicy(module, opt, {"param_offload": True, "optimizer_offload": True}, "meta", "actor")
    assert policy.active and module.moves == ["cpu"] and optimizer_moves == ["cpu"]  # offloaded when built
    with policy.loaded():  # a forward-only call: the optimizer state stays in CPU memory
        assert module.moves == ["cpu", "meta"] and optimizer_moves == ["cpu"]
    assert module.moves == ["cpu", "meta", "cpu"]
    with pytest.raises(ValueError), policy.loaded(with_optimizer=True):
        assert optimizer_moves == ["cpu", "cpu", "meta"]
        raise ValueError("the call fails")
    # offloaded again although the call raised
    assert module.moves[-1] == "cpu" and optimizer_moves[-1] == "cpu"
    only_params = OffloadPolicy(_Recorder(), None, {"param_offload": True, "optimizer_offload": True}, "meta", "ref")
    assert not only_params.optim  # nothing to move without an optimizer
    with all_loaded(only_params, None):
        assert only_params.module.moves == ["cpu", "meta"]
    assert only_params.module.moves == ["cpu", "meta", "cpu"]


def test_without_a_group_the_batch_is_this_ranks_own() -> None:
    from verl.protocol import DataProto

    data = DataProto.from_dict(tensors={"x": torch.arange(6).view(3, 2)})
    pooled, rows = gather_group_batch(data, None)
    assert pooled is data and rows == slice(0, 3)
    assert own_rows(pooled, rows) is pooled
    assert own_rows(pooled, slice(1, 2)).batch["x"].tolist() == [[2, 3]]

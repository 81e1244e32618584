"""fsdp_config.forward_prefetch / model_dtype reach FSDP2's fully_shard (verl/utils/fsdp_utils.apply_fsdp2)."""

from __future__ import annotations

import copy

import torch
from torch import nn

from verl.utils import fsdp_utils


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.lin(x))


class Toy(nn.Module):
    _no_split_modules = ["Block"]

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([Block() for _ in range(3)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


def _prefetch_targets(layer: nn.Module) -> list:
    state = layer._get_fsdp_state()  # FSDP2's per-module state (torch.distributed.fsdp)
    return list(state._states_to_forward_prefetch)


def test_forward_prefetch_chains_the_decoder_layers(single_rank_group) -> None:
    torch.manual_seed(0)
    plain = Toy()
    x = torch.randn(2, 4)
    want = plain(x)
    sharded = fsdp_utils.apply_fsdp2(copy.deepcopy(plain), forward_prefetch=True)
    torch.testing.assert_close(sharded(x), want)
    layers = list(sharded.layers)
    assert [len(_prefetch_targets(m)) for m in layers] == [1, 1, 0]  # each layer prefetches the next one
    off = fsdp_utils.apply_fsdp2(copy.deepcopy(plain))
    assert [len(_prefetch_targets(m)) for m in off.layers] == [0, 0, 0]


def test_model_dtype_bf16_gathers_parameters_in_bf16(single_rank_group) -> None:
    torch.manual_seed(0)
    model = fsdp_utils.apply_fsdp2(Toy(), param_dtype=fsdp_utils.gather_dtype("bfloat16"))
    seen: list[torch.dtype] = []
    model.layers[0].lin.register_forward_hook(lambda m, i, o: seen.append(m.weight.dtype))
    model(torch.randn(2, 4, dtype=torch.bfloat16))
    assert seen == [torch.bfloat16]
    assert all(p.dtype == torch.float32 for p in model.parameters())  # the sharded master copy stays fp32

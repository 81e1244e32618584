"""The Python API's text reward and the CLI's reward manager see the same text of a multi-turn row (tool and user
turns included, as upstream verl's NaiveRewardManager decodes it) and score it at the same token."""

from __future__ import annotations

import numpy as np
import torch

from verl.api.models import RewardModel
from verl.protocol import DataProto
from verl.trainer.ppo.batch_rollout import decode_generations
from verl.workers.reward_manager import NaiveRewardManager

PROMPT_LEN, RESP_LEN = 6, 32


def multi_turn_batch(tok) -> DataProto:
    """Row 0: assistant turn, tool turn (response_mask 0), assistant turn + EOS, padding. Row 1: single turn."""
    pad, eos = tok.pad_token_id, tok.eos_token_id
    rows = [
        ("Q: 2+2", [("call add", 1), ("\n<tool>4</tool>\n", 0), ("so 4", 1)]),
        ("Q: 1", [("1", 1)]),
    ]
    prompts = torch.full((len(rows), PROMPT_LEN), pad)
    responses = torch.full((len(rows), RESP_LEN), pad)
    attention = torch.zeros((len(rows), PROMPT_LEN + RESP_LEN), dtype=torch.long)
    response_mask = torch.zeros((len(rows), RESP_LEN), dtype=torch.long)
    for i, (prompt, turns) in enumerate(rows):
        p = list(prompt.encode())
        prompts[i, PROMPT_LEN - len(p) :] = torch.tensor(p)
        attention[i, PROMPT_LEN - len(p) : PROMPT_LEN] = 1
        ids: list[int] = []
        masks: list[int] = []
        for text, trained in turns:
            ids += list(text.encode())
            masks += [trained] * len(text.encode())
        ids, masks = ids + [eos], masks + [1]
        responses[i, : len(ids)] = torch.tensor(ids)
        response_mask[i, : len(ids)] = torch.tensor(masks)
        attention[i, PROMPT_LEN : PROMPT_LEN + len(ids)] = 1
    tensors = {
        "prompts": prompts,
        "responses": responses,
        "input_ids": torch.cat([prompts, responses], dim=1),
        "attention_mask": attention,
        "response_mask": response_mask,
    }
    non_tensors = {
        "data_source": np.array(["parity"] * len(rows), dtype=object),
        "reward_model": np.array([{"ground_truth": "4"}, {"ground_truth": "1"}], dtype=object),
    }
    return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors)


def test_api_text_reward_and_reward_manager_see_the_same_multi_turn_text(byte_tokenizer) -> None:
    data = multi_turn_batch(byte_tokenizer)
    # the middle of row 0's response is a tool turn: response_mask has zeros between ones
    row_mask = data.batch["response_mask"][0].tolist()
    first_zero = row_mask.index(0)
    assert 1 in row_mask[first_zero:]

    seen_by_manager: list[tuple[str, str]] = []

    def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        seen_by_manager.append((solution_str, ground_truth))
        return float(len(solution_str))

    seen_by_api: list[tuple[list[str], list[str]]] = []

    def text_reward(prompts: list[str], responses: list[str]) -> list[float]:
        seen_by_api.append((prompts, responses))
        return [float(len(r)) for r in responses]

    manager = NaiveRewardManager(byte_tokenizer, num_examine=0, compute_score=compute_score, num_workers=0)
    cli = manager(data, return_dict=True)["reward_tensor"]
    api = RewardModel(text_reward).as_reward_manager(byte_tokenizer)(data, return_dict=True)["reward_tensor"]

    expected = ["call add\n<tool>4</tool>\nso 4", "1"]
    assert [s for s, _ in seen_by_manager] == expected
    (api_prompts, api_responses) = seen_by_api[0]
    assert api_responses == expected
    assert api_prompts == ["Q: 2+2", "Q: 1"]
    # both score at the same token: the last valid response token (the EOS after the last assistant turn)
    assert torch.equal(cli, api)
    assert cli[0].nonzero().flatten().tolist() == [len(expected[0])]
    # the logged generations show the same text
    prompts, responses, extra = decode_generations(byte_tokenizer, data)
    assert (prompts, responses, extra["ground_truth"]) == (["Q: 2+2", "Q: 1"], expected, ["4", "1"])

"""verl's small utility modules: py_functional, import_utils, model, tokenizer, profiler timers, fs alias, and the
role helpers of verl.trainer.ppo.utils."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from verl import DataProto
from verl.trainer.ppo.utils import Role, compute_response_mask, need_critic, need_reference_policy, need_reward_model
from verl.utils.fs import copy_local_path_from_hdfs
from verl.utils.import_utils import import_external_libs, load_extern_type
from verl.utils.model import update_model_config
from verl.utils.profiler import marked_timer, simple_timer
from verl.utils.py_functional import append_to_dict, convert_to_regular_types, timeout_limit, union_two_dict


def test_py_functional() -> None:
    metrics: dict[str, list] = {}
    append_to_dict(metrics, {"loss": 0.5})
    append_to_dict(metrics, {"loss": 0.3, "kl": 0.1})
    assert metrics == {"loss": [0.5, 0.3], "kl": [0.1]}
    assert union_two_dict({"a": 1}, {"b": 2}) == {"a": 1, "b": 2}
    with pytest.raises(AssertionError, match="meta_info key 'a'"):
        union_two_dict({"a": 1}, {"a": 2})
    cfg = OmegaConf.create({"x": [1, {"y": 2}]})
    assert convert_to_regular_types({"c": cfg, "n": np.int64(3), "t": (1, np.float32(0.5))}) == {
        "c": {"x": [1, {"y": 2}]},
        "n": 3,
        "t": [1, 0.5],
    }


def test_timeout_limit() -> None:
    @timeout_limit(seconds=0.2)
    def slow(x):
        time.sleep(2)
        return x

    @timeout_limit(seconds=5)
    def fast(x):
        if x < 0:
            raise KeyError("negative")
        return x * 2

    with pytest.raises(TimeoutError, match="slow timed out after 0.2 seconds"):
        slow(1)
    assert fast(3) == 6
    with pytest.raises(KeyError, match="negative"):
        fast(-1)
    with pytest.raises(ValueError, match="seconds must be > 0"):
        timeout_limit(0)


def test_load_extern_type_and_external_libs(tmp_path: Path) -> None:
    src = tmp_path / "my_types.py"
    src.write_text("class Thing:\n    value = 7\n")
    assert load_extern_type(str(src), "Thing").value == 7
    assert load_extern_type(None, "Thing") is None
    assert load_extern_type("json", "dumps")({"a": 1}) == '{"a": 1}'
    with pytest.raises(AttributeError, match="Custom type 'Other' not found.*\\['Thing'\\]"):
        load_extern_type(str(src), "Other")
    with pytest.raises(FileNotFoundError, match="missing.py"):
        load_extern_type(str(tmp_path / "missing.py"), "Thing")
    import_external_libs(["json", "csv"])
    with pytest.raises(ModuleNotFoundError):
        import_external_libs("no_such_module_xyz")


def test_update_model_config_and_response_mask() -> None:
    cfg = SimpleNamespace(hidden_size=8, rope_scaling=SimpleNamespace(factor=1.0, type="linear"))
    update_model_config(cfg, {"hidden_size": 16, "rope_scaling": {"factor": 2.0}, "new_key": {"a": 1}})
    assert cfg.hidden_size == 16 and cfg.rope_scaling.factor == 2.0 and cfg.rope_scaling.type == "linear"
    assert cfg.new_key == {"a": 1}
    data = DataProto.from_dict(
        {"responses": torch.zeros(2, 3), "attention_mask": torch.tensor([[0, 1, 1, 1, 0], [1, 1, 1, 1, 1]])}
    )
    assert compute_response_mask(data).tolist() == [[1, 1, 0], [1, 1, 1]]


def test_timers_accumulate() -> None:
    timing: dict[str, float] = {}
    with simple_timer("gen", timing):
        time.sleep(0.01)
    with marked_timer("gen", timing, color="red"):
        time.sleep(0.01)
    with pytest.raises(RuntimeError), marked_timer("fail", timing):
        raise RuntimeError("x")
    assert timing["gen"] >= 0.02 and "fail" in timing


def test_roles_and_fs_alias(tmp_path: Path) -> None:
    assert need_reference_policy({Role.ActorRollout: object, Role.RefPolicy: object})
    assert not need_reference_policy({Role.ActorRollout: object})
    assert need_reward_model({Role.RewardModel: object}) and not need_reward_model({})
    cfg = OmegaConf.create({"critic": {"enable": None}, "algorithm": {"adv_estimator": "gae"}})
    assert need_critic(cfg)
    cfg.algorithm.adv_estimator = "grpo"
    assert not need_critic(cfg)
    (tmp_path / "f.txt").write_text("x")
    assert copy_local_path_from_hdfs(str(tmp_path / "f.txt")) == str(tmp_path / "f.txt")


def test_hf_tokenizer_sets_a_pad_token(tiny_model_dir: str) -> None:
    from verl.utils import hf_processor, hf_tokenizer

    tok = hf_tokenizer(tiny_model_dir)
    assert tok.pad_token_id is not None
    assert hf_processor(tiny_model_dir) is None  # a text model has no multimodal processor
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        import verl.utils

        _ = verl.utils.nope


def test_set_pad_token_id_uses_eos() -> None:
    from verl.utils.tokenizer import set_pad_token_id

    tok = SimpleNamespace(pad_token_id=None, pad_token=None, eos_token_id=2, eos_token="</s>")
    set_pad_token_id(tok)
    assert (tok.pad_token_id, tok.pad_token) == (2, "</s>")

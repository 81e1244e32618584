"""A model directory's own code: what ``trust_remote_code`` becomes at load, and what the config checks can see."""

from __future__ import annotations

import json
import os

import pytest

from verl.models.loader import load_causal_lm, load_tokenizer
from verl.models.remote_code import code_entries, trust_remote_code_for, visible_code
from verl.utils import security
from verl.utils.security import SecurityPolicy, UnsafeOperationError


@pytest.fixture(autouse=True)
def _safe_policy(monkeypatch):
    monkeypatch.setattr(security, "_policy", None)
    monkeypatch.delenv(security.ENV_ALLOW_UNSAFE, raising=False)


def test_a_directory_without_auto_map_runs_no_code_so_the_key_changes_nothing(tiny_model_dir) -> None:
    assert code_entries(tiny_model_dir) == []
    assert trust_remote_code_for(tiny_model_dir, True) is False  # with the switch off: nothing to refuse
    assert load_causal_lm(tiny_model_dir, trust_remote_code=True) is not None
    assert load_tokenizer(tiny_model_dir, trust_remote_code=True) is not None


def test_a_directory_with_code_is_refused_before_it_runs_and_allowed_by_the_switch(model_dir_with_code) -> None:
    assert code_entries(model_dir_with_code) == [
        "config.json: AutoModelForCausalLM -> modeling_custom.CustomForCausalLM"
    ]
    assert trust_remote_code_for(model_dir_with_code, False) is False
    # the directory's module raises when imported: the refusal comes first
    with pytest.raises(
        UnsafeOperationError, match=r"trust_remote_code=true with .* modeling_custom\.CustomForCausalLM"
    ):
        load_causal_lm(model_dir_with_code, trust_remote_code=True)
    security.set_security_policy(SecurityPolicy(allow_unsafe_operations=True))
    assert trust_remote_code_for(model_dir_with_code, True) is True


def test_an_unreadable_config_counts_as_code(tmp_path) -> None:
    (tmp_path / "config.json").write_text("{not json", encoding="utf-8")
    assert code_entries(str(tmp_path)) == ["config.json: unreadable (JSONDecodeError)"]
    with pytest.raises(UnsafeOperationError):
        trust_remote_code_for(str(tmp_path), True)


def test_what_the_config_checks_can_see(tmp_path, model_dir_with_code, monkeypatch) -> None:
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))  # an empty cache: nothing downloaded
    assert visible_code(model_dir_with_code)
    assert visible_code("smollm2-135m-instruct") == []  # bundled: converted from GGUF, configs of our own
    assert visible_code("Qwen/Qwen3-0.6B") is None  # not downloaded: the load decides
    assert visible_code(str(tmp_path / "missing")) is None
    tokenizer_code = tmp_path / "tok"
    tokenizer_code.mkdir()
    (tokenizer_code / "tokenizer_config.json").write_text(json.dumps({"auto_map": {"AutoTokenizer": ["t.T", None]}}))
    assert visible_code(os.fspath(tokenizer_code)) == ["tokenizer_config.json: AutoTokenizer -> ['t.T', None]"]

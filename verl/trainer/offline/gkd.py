"""Generalized Knowledge Distillation and on-policy distillation: the student learns from a teacher's per-token
distributions on a mix of its own samples and the dataset's responses.

R. Agarwal et al., "On-Policy Distillation of Language Models: Learning from Self-Generated Mistakes" (ICLR 2024,
arXiv:2306.13649), with the key names of TRL's ``GKDConfig`` (``lmbda``, ``beta``, ``temperature``,
``max_new_tokens``). Each optimizer step is on-policy with probability ``gkd.lmbda``: the student samples a response
to every prompt of the step (the ``hf`` rollout engine on the student's own weights, temperature
``gkd.temperature``) and those replace the dataset's responses. Losses (:mod:`verl.algorithms.distillation`):

- ``gkd.loss_type=jsd``: the generalised JSD between the student's and the teacher's next-token distributions at
  every response position (``gkd.beta``: 0 forward KL, 1 reverse KL), both softened by ``gkd.temperature``;
- ``gkd.loss_type=reverse_kl``: on-policy distillation with the per-token reverse KL as a dense reward,
  ``r_t = -kl_coef (log p_s(y_t) - log p_t(y_t))``, used as the advantage of a REINFORCE loss (needs ``lmbda = 1``).

Checkpoints, resume, logging and the final export are those of every offline trainer
(:class:`~verl.trainer.offline.base.OfflineTrainer`); the teacher is frozen and not checkpointed.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, ClassVar

import torch
from omegaconf import DictConfig

from verl.algorithms.distillation import generalized_jsd_loss, reverse_kl_pg_loss
from verl.data.sft_dataset import pad_batch
from verl.models.loader import resolve_model_path
from verl.models.vlm import config_has_vision
from verl.trainer.config.offline_schema import GKDConfig
from verl.trainer.config.validation import ConfigError
from verl.trainer.offline.base import OfflineTrainer
from verl.trainer.offline.common import LossOutput, add_stat, autocast
from verl.trainer.offline.sft import SFTTrainer
from verl.utils.seeding import keyed_seed
from verl.utils.torch_functional import logprobs_from_logits
from verl.workers.actor.token_scoring import next_token_logits_at
from verl.workers.teacher import TeacherModel


class GKDTrainer(SFTTrainer):
    """Distil ``teacher`` into ``model`` on ``{prompt, response}`` rows (the SFT data format).

    ``GKDTrainer(model="student_dir", teacher="smollm2-135m-instruct", dataset=rows, config={"gkd.lmbda": 1.0})
    .train(max_steps=20, per_device_train_batch_size=4, learning_rate=1e-5, output_dir="out")``. ``teacher`` may
    be a path (default ``teacher.path``) or a module; its tokenizer must equal the student's. Logged: ``loss``,
    ``distill/on_policy`` (1 on a step with student samples), ``distill/reverse_kl`` (mean over response tokens of
    ``log p_s - log p_t`` of the trained tokens: an estimate of KL(student || teacher) on on-policy steps),
    ``response_length``, ``grad_norm``, ``lr``.
    """

    config_schema: ClassVar[type] = GKDConfig

    def __init__(
        self,
        model: torch.nn.Module | str,
        teacher: torch.nn.Module | str | None = None,
        tokenizer: Any = None,
        dataset: Any = None,
        eval_dataset: Any = None,
        max_length: int = 1024,
        max_prompt_length: int | None = None,
        namespace: str | None = None,
        config: dict[str, Any] | DictConfig | None = None,
        teacher_tokenizer: Any = None,
    ) -> None:
        # GKD distils text models: the teacher scores token ids only, so a student with a vision tower is refused
        if isinstance(model, str) and config_has_vision(resolve_model_path(model)):
            raise ConfigError(f"model.path={model}: GKD distils text models; this is a vision-language model")
        self.processor = None
        # SFTTrainer's constructor adds only the data keys: call the base directly to record the teacher as well
        overrides: dict[str, Any] = {"data.max_length": max_length, "data.max_prompt_length": max_prompt_length}
        if isinstance(teacher, str):
            overrides["teacher.path"] = teacher
        OfflineTrainer.__init__(
            self,
            model=model,
            tokenizer=tokenizer,
            dataset=dataset,
            eval_dataset=eval_dataset,
            namespace=namespace,
            config=config,
            overrides=overrides,
        )
        if self.world_size > 1:
            # the student samples with the hf engine on its own (unsharded) module: one process only for now
            raise ConfigError(
                f"GKD runs in one process; got a world size of {self.world_size} (launch without torchrun)"
            )
        tcfg = self.config.teacher
        teacher_source: Any = teacher if isinstance(teacher, torch.nn.Module) else str(teacher or tcfg.path)
        if teacher_tokenizer is None and tcfg.tokenizer_path:
            from verl.models.loader import load_tokenizer

            teacher_tokenizer = load_tokenizer(str(tcfg.tokenizer_path))
        self.teacher = TeacherModel(
            teacher_source,
            self.tokenizer,
            tokenizer=teacher_tokenizer,
            device=self.device,
            dtype=self.compute_dtype,
            trust_remote_code=bool(self.config.model.trust_remote_code),
        )
        self._on_policy_step = False
        self._rollout: Any = None

    # ------------------------------------------------------------------------------------------ on-policy data
    def _student_rollout(self) -> Any:
        from verl.workers.rollout.hf_rollout import HFRollout

        if self._rollout is None:
            g = self.config.gkd
            self._rollout = HFRollout(
                self.model,
                {
                    "response_length": int(g.max_new_tokens),
                    "temperature": float(g.temperature),
                    "do_sample": True,
                    "max_num_seqs": int(self.config.data.micro_batch_size_per_gpu),
                    "dtype": str(self.config.model.dtype),
                },
                self.tokenizer,
            )
        return self._rollout

    def generate_on_policy(self, items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """The rows of ``items`` with their responses replaced by the student's samples: ``{"input_ids",
        "loss_mask"}`` lists, the prompt (the tokens before the first ``loss_mask == 1``) kept, EOS included."""
        from verl.protocol import DataProto

        pad_id = self.train_dataset.pad_token_id if self.train_dataset is not None else self.tokenizer.pad_token_id
        prompts = []
        for item in items:
            ids, mask = list(item["input_ids"]), list(item["loss_mask"])
            start = mask.index(1) if 1 in mask else len(ids)
            if start == 0:
                raise ValueError("gkd: a row has no prompt tokens before its response; on-policy sampling needs one")
            prompts.append(ids[:start])
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), int(pad_id), dtype=torch.long)
        attention_mask = torch.zeros_like(input_ids)
        for i, p in enumerate(prompts):  # left-padded, as the rollout engine expects
            input_ids[i, width - len(p) :] = torch.tensor(p)
            attention_mask[i, width - len(p) :] = 1
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        batch = DataProto.from_dict(
            tensors={"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids},
            meta_info={"seed": keyed_seed(int(self.config.trainer.seed), self.global_step)},
        )
        out = self._student_rollout().generate_sequences(batch.to(self.device))
        responses, response_mask = out.batch["responses"].cpu(), out.batch["response_mask"].cpu()
        rows = []
        for p, r, m in zip(prompts, responses, response_mask):
            resp = r[m.bool()].tolist()
            rows.append({"input_ids": p + resp, "loss_mask": [0] * len(p) + [1] * len(resp)})
        return rows

    def _step_is_on_policy(self) -> bool:
        """Whether the coming step trains on student samples: a draw with probability ``gkd.lmbda`` from a
        generator seeded by ``trainer.seed`` and the step, so a resumed run makes the same choices."""
        lmbda = float(self.config.gkd.lmbda)
        return random.Random(keyed_seed(int(self.config.trainer.seed), self.global_step)).random() < lmbda

    def _micro_batches(self, items: Sequence[dict[str, Any]], dataset: Any) -> list[dict[str, torch.Tensor]]:
        if not self._on_policy_step:
            return super()._micro_batches(items, dataset)
        rows = self.generate_on_policy(items)
        size = int(self.config.data.micro_batch_size_per_gpu)
        out = []
        for start in range(0, len(rows), size):
            chunk = rows[start : start + size]
            tensors = pad_batch([r["input_ids"] for r in chunk], [r["loss_mask"] for r in chunk], dataset.pad_token_id)
            out.append({k: v.to(self.device) for k, v in tensors.items()})
        return out

    def _train_step(self, items: Sequence[dict[str, Any]]) -> dict[str, float]:
        self._on_policy_step = self._step_is_on_policy()
        try:
            metrics = super()._train_step(items)
        finally:
            self._on_policy_step = False
        return metrics

    # --------------------------------------------------------------------------------------------------- loss
    def _compute_loss(self, batch: dict[str, torch.Tensor]) -> LossOutput:
        g = self.config.gkd
        ids = batch["input_ids"]
        scored = torch.zeros_like(batch["loss_mask"], dtype=torch.bool)
        scored[:, :-1] = batch["loss_mask"][:, 1:].bool()  # position t predicts token t + 1
        # both LM heads run at the K positions that predict a response token only: [1, K, vocab]
        with autocast(self.device, self.compute_dtype):
            s_logits, targets, positions = next_token_logits_at(
                self.model, ids, batch["attention_mask"], batch["position_ids"], scored, pack=self.use_remove_padding
            )
        s_logits = s_logits[..., : self.teacher.vocab_size].float()
        t_logits = self.teacher.logits_at(ids, batch["attention_mask"], batch["position_ids"], positions)
        mask = torch.ones_like(targets, dtype=torch.float32)
        temperature = float(g.temperature)
        s_logp = logprobs_from_logits(s_logits / temperature, targets)
        t_logp = logprobs_from_logits(t_logits / temperature, targets)
        if g.loss_type == "jsd":
            loss_sum = generalized_jsd_loss(s_logits, t_logits, mask, float(g.beta), temperature, reduction="sum")
        else:
            loss_sum = reverse_kl_pg_loss(s_logp, t_logp, mask, float(g.kl_coef), reduction="sum")
        tokens = float(mask.sum().item())
        stats: dict[str, tuple[float, float]] = {"loss": (float(loss_sum.detach().item()), tokens)}
        stats["distill/reverse_kl"] = (float(((s_logp.detach() - t_logp) * mask).sum().item()), tokens)
        stats["distill/on_policy"] = (float(self._on_policy_step), 1.0)
        add_stat(stats, "response_length", batch["loss_mask"][:, 1:].sum(-1))
        return LossOutput(loss_sum=loss_sum, stats=stats)


def run_gkd(config: DictConfig) -> dict[str, float]:
    """Train from a full ``gkd_trainer`` config (the CLI's run function)."""
    return GKDTrainer.from_config(config).fit()

"""A judge model on the workers' floor: :class:`HFJudgeBackend` (the judge's weights loaded in this process and
decoded by the ``hf`` rollout engine: ``reward_model.judge.backend=hf``) and :class:`JudgeWorker`, the ``judge`` role
of a PPO run with ``reward_model.judge.backend=worker``.

Each rank of the worker loads ``reward_model.judge.model`` exactly as the in-driver ``hf`` backend does
(:meth:`HFJudgeBackend.from_config`), and answers its share of the judge prompts. Unmapped, the group shares the
processes of ``global_pool`` with the actor (colocated, like the teacher);
``trainer.resource_pool_mapping.judge=<pool>`` puts it on a resource pool of its own. The driver's
:class:`verl.rewards.judge.WorkerGroupJudgeBackend` sends the prompts and collects the answers.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from verl.base_config import omega_conf_to_dataclass
from verl.data.prompt_batch import encode_prompts
from verl.models.loader import load_causal_lm, load_tokenizer, resolve_model_path
from verl.protocol import DataProto
from verl.rewards.judge.backends import JUDGE_ANSWERS_KEY, JUDGE_PROMPTS_KEY
from verl.sections.reward_model import JudgeConfig
from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import Dispatch, register
from verl.utils.device import get_device_name, get_torch_device
from verl.utils.errors import ConfigError
from verl.workers.fsdp_setup import private_section, set_torch_threads
from verl.workers.rollout.hf_rollout import HFRollout


class HFJudgeBackend:
    """A judge model in this process, decoded by the ``hf`` rollout engine (greedy when ``temperature == 0``).

    Args:
        model: a causal LM module, or a model path / bundled name loaded with ``verl.models.loader``.
        tokenizer: the judge's tokenizer (loaded from the path when None); its chat template is applied.
        max_new_tokens, temperature, max_num_seqs (rows per generate call), max_prompt_length (longer judge
        prompts are cut from the left, keeping the verdict instructions at the end in view), seed.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        max_new_tokens: int = JudgeConfig.max_new_tokens,
        temperature: float = JudgeConfig.temperature,
        max_num_seqs: int = JudgeConfig.max_concurrency,
        max_prompt_length: int = 2048,
        seed: int = 0,
        device: str | None = None,
    ) -> None:
        if isinstance(model, str | os.PathLike):
            path = resolve_model_path(str(model))
            tokenizer = tokenizer if tokenizer is not None else load_tokenizer(path)
            model = load_causal_lm(path, dtype=torch.float32)
        if tokenizer is None:
            raise ValueError("HFJudgeBackend: pass tokenizer= with a model module")
        if device is not None:
            model = model.to(device)
        model.eval().requires_grad_(False)
        self.module = model
        self.tokenizer = tokenizer
        self.max_prompt_length = int(max_prompt_length)
        self.rollout = HFRollout(
            model,
            {
                "response_length": int(max_new_tokens),
                "prompt_length": int(max_prompt_length),
                "temperature": float(temperature) if temperature > 0 else 1.0,
                "do_sample": temperature > 0,
                "max_num_seqs": int(max_num_seqs),
                "seed": int(seed),
            },
            tokenizer,
        )

    @classmethod
    def from_config(cls, config: JudgeConfig | Mapping[str, Any], device: Any = None) -> HFJudgeBackend:
        """The backend of a ``reward_model.judge`` section (``model``, ``max_new_tokens``, ``temperature``;
        ``max_concurrency`` rows per generate call; a partial mapping is completed from :class:`JudgeConfig`) on
        ``device`` (None: where the model loads, the CPU). The one loader of both the in-driver ``hf`` backend and
        the ``judge`` worker's ranks."""
        cfg = omega_conf_to_dataclass(config, JudgeConfig)
        if not cfg.model:
            raise ValueError("reward_model.judge.model: the hf and worker judge backends need the judge's model path")
        return cls(
            str(cfg.model),
            device=device,
            max_new_tokens=cfg.max_new_tokens,
            temperature=cfg.temperature,
            max_num_seqs=cfg.max_concurrency,
        )

    def generate(self, texts: Sequence[str]) -> list[str | Exception]:
        """Answers of the judge for ``texts`` (one generate pass, micro-batched)."""
        if not texts:
            return []
        prompts = encode_prompts(
            list(texts), self.tokenizer, max_prompt_length=self.max_prompt_length, truncation="left"
        )
        out = self.rollout.generate_sequences(prompts)
        responses, mask = out.batch["responses"], out.batch["response_mask"]
        return [self.tokenizer.decode(r[m.bool()].tolist(), skip_special_tokens=True) for r, m in zip(responses, mask)]


class JudgeWorker(Worker):
    """One :class:`HFJudgeBackend` per rank.

    ``config`` is the ``reward_model.judge`` section (a ``DictConfig``, dict or ``JudgeConfig``). The judge needs
    no collectives (every rank decodes its own rows), so no process group is started for it.
    """

    def __init__(self, config: Any):
        super().__init__()
        set_torch_threads()
        self.config = private_section(config, JudgeConfig)
        self.device_name = get_device_name(os.environ.get("VERL_DEVICE", "auto"))
        self.compute_device = get_torch_device(self.device_name)
        self.backend: HFJudgeBackend | None = None

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        """Load the judge (``reward_model.judge.model``) on this rank's device."""
        if not self.config.model:
            raise ConfigError("reward_model.judge.model: reward_model.judge.backend=worker needs the judge's model")
        device = self.compute_device if self.compute_device.type != "cpu" else None
        self.backend = HFJudgeBackend.from_config(self.config.to_dict(), device=device)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def generate_judge_answers(self, data: DataProto) -> DataProto:
        """Answers of this rank's rows: ``non_tensor_batch["judge_prompts"]`` (object array ``[rows]`` of judge
        prompt texts) -> ``non_tensor_batch["judge_answers"]`` (object array ``[rows]`` of answer texts). The
        dispatch splits the driver's batch over the ranks (padded when the world size does not divide it)."""
        if self.backend is None:
            raise RuntimeError("JudgeWorker.generate_judge_answers called before init_model")
        texts = [str(t) for t in data.non_tensor_batch[JUDGE_PROMPTS_KEY]]
        answers = np.empty(len(texts), dtype=object)
        answers[:] = self.backend.generate(texts) if texts else []
        return DataProto.from_dict(non_tensors={JUDGE_ANSWERS_KEY: answers})

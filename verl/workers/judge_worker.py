"""The ``judge`` role of a PPO run with ``reward_model.judge.backend=worker``: the judge model on worker ranks.

Each rank loads ``reward_model.judge.model`` with the project's ``hf`` rollout engine, exactly as the in-driver
``hf`` backend does (:meth:`verl.rewards.judge.HFJudgeBackend.from_config`), and answers its share of
the judge prompts. Unmapped, the group shares the processes of ``global_pool`` with the actor (colocated, like the
teacher); ``trainer.resource_pool_mapping.judge=<pool>`` puts it on a resource pool of its own. The driver's
:class:`verl.rewards.judge.WorkerGroupJudgeBackend` sends the prompts and collects the answers.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from verl.protocol import DataProto
from verl.rewards.judge.backends import JUDGE_ANSWERS_KEY, JUDGE_PROMPTS_KEY, HFJudgeBackend
from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import Dispatch, register


class JudgeWorker(Worker):
    """One :class:`HFJudgeBackend` per rank.

    ``config`` is the ``reward_model.judge`` section (a ``DictConfig``, dict or ``JudgeConfig``). The judge needs
    no collectives (every rank decodes its own rows), so no process group is started for it.
    """

    def __init__(self, config: Any):
        super().__init__()
        from verl.utils.device import get_device_name, get_torch_device
        from verl.workers.config import JudgeConfig
        from verl.workers.fsdp_setup import private_section, set_torch_threads

        set_torch_threads()
        self.config = private_section(config, JudgeConfig)
        self.device_name = get_device_name(os.environ.get("VERL_DEVICE", "auto"))
        self.compute_device = get_torch_device(self.device_name)
        self.backend: HFJudgeBackend | None = None

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        """Load the judge (``reward_model.judge.model``) on this rank's device."""
        from verl.utils.errors import ConfigError

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

"""``PPOTrainer``: the documents' PPO/GRPO API as a thin layer over the ``main_ppo`` driver and workers.

Nothing here re-implements the algorithm. The trainer builds a validated ``ppo_trainer`` config from the
documents' keys (see :data:`DOC_KEYS` and ``docs/api.md``), creates the same worker groups as
``python -m verl.trainer.main_ppo`` (local backend) around the user's own model objects, and runs each step through
:meth:`verl.trainer.ppo.ray_trainer.RayPPOTrainer.step` on a left-padded prompt batch it builds.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from verl.api.models import ActorModel, CriticModel, RewardModel, TextRewardManager, as_actor_model
from verl.api.ppo_config import DOC_KEYS, build_ppo_config  # noqa: F401  (importable from here, as before)
from verl.api.rollout import RolloutManager, vLLMActor
from verl.data.prompt_batch import encode_prompts
from verl.protocol import DataProto
from verl.sections.rollout import agent_loops_on
from verl.trainer.base import BaseTrainer

logger = logging.getLogger(__name__)

# document metric name -> verl metric names, first present wins
DOC_METRIC_NAMES: dict[str, tuple[str, ...]] = {
    "reward": ("critic/score/mean",),
    "kl": ("actor/reward_kl_penalty", "actor/kl_loss", "actor/ppo_kl"),
    "policy_loss": ("actor/pg_loss",),
    "value_loss": ("critic/vf_loss",),
    "entropy": ("actor/entropy",),
    "response_length": ("response_length/mean",),
    "lr": ("actor/lr",),
    "grad_norm": ("actor/grad_norm",),
}

# driver attributes readable on the PPOTrainer (for evaluators written against RayPPOTrainer)
DRIVER_ATTRS = (
    "actor_rollout_wg",
    "critic_wg",
    "rm_wg",
    "worker_groups",
    "reward_fn",
    "val_reward_fn",
    "val_dataloader",
    "use_reference_policy",
    "use_critic",
    "last_batch",
)

BUILTIN_REWARDS = ("kl", "length")


def _zero_reward(prompts: list[str], responses: list[str]) -> list[float]:
    """The KL-only default: no task score (the KL penalty in the reward is the whole signal)."""
    return [0.0] * len(responses)


def _length_reward_fn(tokenizer: Any, max_len: int) -> Callable[[list[str], list[str]], list[float]]:
    def length_reward(prompts: list[str], responses: list[str]) -> list[float]:
        """Fraction of the response budget used: ``len(tokens) / max_response_length`` in [0, 1]."""
        return [min(1.0, len(tokenizer.encode(r, add_special_tokens=False)) / max_len) for r in responses]

    return length_reward


def _takes_verl_sample_contract(fn: Callable[..., Any]) -> bool:
    import inspect

    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "solution_str" in params or "solution_strs" in params


def _is_reward_manager(fn: Any) -> bool:
    import inspect

    from verl.workers.reward_manager.abstract import AbstractRewardManager

    if isinstance(fn, (AbstractRewardManager, TextRewardManager)):
        return True
    try:
        return "return_dict" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


class PPOTrainer(BaseTrainer):
    """PPO-family training of a user's model objects (PPO with a critic, GRPO, RLOO, REINFORCE++, ...).

    Args:
        actor_model: an :class:`ActorModel` (or any causal LM module, wrapped), trained in place.
        critic_model: a :class:`CriticModel` (or a causal LM, given a value head); selects ``algorithm="ppo"`` by
            default. Without one the default algorithm is GRPO.
        tokenizer: the policy's tokenizer (default: ``actor_model.tokenizer``); pad/eos are aligned with the model.
        config: document keys (``batch_size``, ``rollout_batch_size``, ``kl_coef``, ``lr``, ``algorithm``, ...) and
            any dotted ``main_ppo`` key (``"actor_rollout_ref.rollout.n": 4``); see ``docs/api.md``.
        data_provider: a :class:`verl.api.data.DataProvider` (or any iterable of prompt batches) for :meth:`train`.
        reward_fn: ``fn(prompts: list[str], responses: list[str]) -> list[float]``; or verl's per-sample contract
            ``fn(data_source, solution_str, ground_truth, extra_info=None)``; or a reward manager
            (``fn(data, return_dict=True)``); or a :class:`RewardModel`; or a built-in name: ``"kl"`` (default:
            no task score, the reward is ``-kl_coef * KL(policy || reference)`` per token) or ``"length"``.
        namespace: isolates runs sharing a machine: checkpoints and logs go under ``<dir>/<namespace>/``.
        reward_model: alternative spelling of a :class:`RewardModel` reward.
        resume_from: a checkpoint directory this API (or ``main_ppo``) saved: training continues from it (see
            :meth:`load_checkpoint`).
        tools: multi-turn rollouts with tools: ``BaseTool`` objects (``verl.tools.*`` or your subclasses) or the
            path of a tool-config YAML; turns on ``rollout.multi_turn`` with the ``hf`` engine (docs/agent_loop.md).
        agent_loop: the agent loop of every prompt: a registered name (default ``"tool_agent"`` with tools) or an
            ``AgentLoopBase`` subclass. Prompts must then be strings or chat messages.
    """

    def __init__(
        self,
        actor_model: torch.nn.Module,
        critic_model: torch.nn.Module | None = None,
        tokenizer: Any = None,
        config: Mapping[str, Any] | DictConfig | None = None,
        data_provider: Any = None,
        reward_fn: Any = None,
        namespace: str | None = None,
        reward_model: RewardModel | None = None,
        resume_from: str | None = None,
        tools: Any = None,
        agent_loop: Any = None,
    ) -> None:
        from verl.api.agents import resolve_agent_options
        from verl.trainer.ppo.runner import apply_runtime_switches, seed_everything
        from verl.utils.security import SecurityPolicy, set_security_policy

        super().__init__()  # evaluators, exporters, history

        tokenizer = tokenizer if tokenizer is not None else getattr(actor_model, "tokenizer", None)
        if tokenizer is None:
            raise ValueError("PPOTrainer needs a tokenizer: PPOTrainer(..., tokenizer=tok) or an Actor with one")
        self.actor_model: ActorModel = as_actor_model(actor_model, tokenizer)
        self.tokenizer = tokenizer
        if critic_model is not None and not isinstance(critic_model, CriticModel):
            critic_model = CriticModel(critic_model)
        self.critic_model: CriticModel | None = critic_model
        if reward_fn is None and reward_model is not None:
            reward_fn = reward_model
        agent_keys, self.agent_tools = resolve_agent_options(tools, agent_loop)
        if agent_keys:  # the user's own keys win over the agent defaults
            config = OmegaConf.to_container(config, resolve=True) if isinstance(config, DictConfig) else config
            config = {**agent_keys, **dict(config or {})}
        reward_name = reward_fn if isinstance(reward_fn, str) else ("kl" if reward_fn is None else None)
        if reward_name is not None and reward_name not in BUILTIN_REWARDS:
            raise ValueError(f"reward_fn={reward_name!r}: built-in rewards are {list(BUILTIN_REWARDS)}")
        self.config: DictConfig = build_ppo_config(
            config or {},
            has_critic=critic_model is not None,
            namespace=namespace,
            kl_in_reward=reward_name == "kl",
            rollout_engine="vllm" if isinstance(self.actor_model, vLLMActor) else None,
        )
        self.namespace = self.config.trainer.get("namespace")
        trainer_cfg = self.config.trainer
        seed_everything(int(trainer_cfg.seed), bool(trainer_cfg.deterministic))
        apply_runtime_switches(trainer_cfg)
        self.security = SecurityPolicy.from_config(self.config)
        set_security_policy(self.security)

        self.reward_model, reward_manager = self._build_reward(reward_fn, reward_name)
        self.data_provider = data_provider
        self._grad_hooks: list[Any] = []
        self._driver = self._build_driver(reward_manager)
        self.rollout_manager = RolloutManager(self._driver)
        self._install_data_parallel()
        if resume_from is not None:
            self.load_checkpoint(resume_from)

    # ------------------------------------------------------------------------------------------------ set-up
    def _build_reward(self, reward_fn: Any, builtin: str | None) -> tuple[RewardModel | None, Any]:
        """The user-facing :class:`RewardModel` (or None) and the reward manager the driver calls."""
        tok = self.tokenizer
        if builtin == "kl":
            reward = RewardModel(_zero_reward)
        elif builtin == "length":
            reward = RewardModel(_length_reward_fn(tok, int(self.config.data.max_response_length)))
        elif isinstance(reward_fn, RewardModel):
            reward = reward_fn
        elif not callable(reward_fn):
            raise TypeError(f"reward_fn must be callable, a RewardModel or a built-in name, got {reward_fn!r}")
        elif _is_reward_manager(reward_fn):
            return None, reward_fn
        elif _takes_verl_sample_contract(reward_fn):
            from verl.trainer.ppo.reward import load_reward_manager

            return None, load_reward_manager(self.config, tok, num_examine=0, compute_score=reward_fn)
        else:
            reward = RewardModel(reward_fn)
        return reward, reward.as_reward_manager(tok)

    def _build_driver(self, reward_manager: Any) -> Any:
        """The ``main_ppo`` driver, its worker roles (:meth:`RayPPOTrainer.worker_roles`) built around the user's
        model objects on the local backend."""
        from verl.trainer.config import critic_enabled
        from verl.trainer.ppo.ray_trainer import RayPPOTrainer

        cfg = self.config
        ranks = int(cfg.trainer.nnodes) * int(cfg.trainer.n_gpus_per_node)
        if str(cfg.trainer.backend) != "local" or ranks != 1:
            raise ValueError(
                f"PPOTrainer runs its workers in this process around your model objects (trainer.backend=local, one "
                f"rank), got trainer.backend={cfg.trainer.backend} with {ranks} ranks: for data parallelism launch one "
                "process per rank (a data DeviceMesh, docs/api.md), for Ray use python -m verl.trainer.main_ppo"
            )
        if critic_enabled(cfg) and self.critic_model is None:
            raise ValueError(
                f"algorithm.adv_estimator={cfg.algorithm.adv_estimator!r} trains a critic: pass critic_model="
            )
        rollout = None
        if isinstance(self.actor_model, vLLMActor):
            rollout = self.actor_model.build_rollout(cfg.actor_rollout_ref.rollout)
        role_kwargs = {
            "actor_rollout": {
                "actor_module": self.actor_model,
                "tokenizer": self.tokenizer,
                "rollout": rollout,
            },
            "critic": {"critic_module": self.critic_model, "tokenizer": self.tokenizer},
        }
        driver = RayPPOTrainer(
            config=cfg,
            tokenizer=self.tokenizer,
            reward_fn=reward_manager,
            run_identity=self._run_identity(),
            role_kwargs=role_kwargs,
            agent_tools=self.agent_tools,
        )
        driver.init_workers()
        return driver

    def _run_identity(self) -> dict[str, Any]:
        """What this trainer's checkpoints are of: the user's model objects (config and parameter count, taken
        before the workers wrap them), the algorithm and LoRA rank; checked before every resume as in main_ppo."""
        from verl.checkpoint.identity import make_identity, model_fingerprint_from_module
        from verl.trainer.config import critic_enabled

        cfg = self.config
        models = {"actor": model_fingerprint_from_module(self.actor_model)}
        if critic_enabled(cfg) and self.critic_model is not None:
            models["critic"] = model_fingerprint_from_module(self.critic_model)
        lora_rank = int(cfg.actor_rollout_ref.model.lora_rank or 0)
        return make_identity("ppo", str(cfg.algorithm.adv_estimator), models, lora_rank)

    def _install_data_parallel(self) -> None:
        from verl.api.device_mesh import data_parallel_mesh, install_gradient_averaging

        self.dp_mesh = data_parallel_mesh(self.actor_model.device_meshes)
        if self.dp_mesh is not None:
            self._grad_hooks = install_gradient_averaging(self.actor_model, self.dp_mesh)
            if self.critic_model is not None:
                self._grad_hooks += install_gradient_averaging(self.critic_model, self.dp_mesh)

    # ---------------------------------------------------------------------------------------------- accessors
    @property
    def actor_tokenizer(self) -> Any:
        """The policy tokenizer (pad/eos aligned with the actor)."""
        return self.tokenizer

    @property
    def global_steps(self) -> int:
        """Steps taken so far."""
        return int(self._driver.global_steps)

    def __getattr__(self, name: str) -> Any:
        # evaluators written for the driver (verl.api.evaluation) read these attributes of "the trainer"
        if name in DRIVER_ATTRS and "_driver" in self.__dict__:
            return getattr(self._driver, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def driver(self) -> Any:
        """The underlying :class:`RayPPOTrainer` (same object ``main_ppo`` runs)."""
        return self._driver

    @property
    def checkpoint_dir(self) -> str:
        """``trainer.default_local_dir`` with the namespace applied."""
        return self._driver.checkpoint_dir

    # ---------------------------------------------------------------------------------------------- steps
    def make_batch(self, prompts: Any, attention_mask: torch.Tensor | None = None) -> DataProto:
        """Left-padded ``input_ids``/``attention_mask``/``position_ids`` ``[batch, prompt_len]`` of ``prompts``
        (token ids, strings, chat messages, a DataProvider batch or a DataProto), sliced to this rank's share when
        a data-parallel mesh is set."""
        data_cfg = self.config.data
        batch = encode_prompts(
            prompts,
            self.tokenizer,
            attention_mask=attention_mask,
            prompt_key=str(data_cfg.prompt_key),
            max_prompt_length=int(data_cfg.max_prompt_length),
            truncation=str(data_cfg.truncation),
            apply_chat_template=bool(data_cfg.apply_chat_template),
        )
        if agent_loops_on(self.config.actor_rollout_ref.rollout):
            from verl.api.agents import add_raw_chat

            batch = add_raw_chat(batch, prompts, str(data_cfg.prompt_key))
        if self.dp_mesh is not None and self.dp_mesh.size > 1:
            rows = self.dp_mesh.shard(len(batch))
            batch = batch.slice(rows.start, rows.stop)
        return batch

    def step(self, prompts: Any, attention_mask: torch.Tensor | None = None) -> dict[str, float]:
        """One full PPO iteration (rollout -> reward -> log-probs -> advantages -> updates) on ``prompts``.

        Returns the step's metrics under verl's names (``actor/pg_loss``, ``critic/score/mean``, ...) plus the
        documents' names (:data:`DOC_METRIC_NAMES`) and ``loss``: the actor's objective
        ``pg_loss - entropy_coeff * entropy + kl_loss_coef * kl_loss`` (the last term with ``use_kl_loss``).
        """
        return self._finish_step(self._driver.step(self.make_batch(prompts, attention_mask)))

    def _finish_step(self, metrics: dict[str, Any]) -> dict[str, float]:
        """Add the document names, run evaluators and exporters, record the step."""
        out = dict(metrics)
        out.update(self.document_metrics(metrics))
        return self._run_plugins(out)

    def document_metrics(self, metrics: Mapping[str, Any]) -> dict[str, float]:
        """The documents' metric names computed from verl's metrics of one step (see :data:`DOC_METRIC_NAMES`)."""
        out: dict[str, float] = {}
        for name, sources in DOC_METRIC_NAMES.items():
            for src in sources:
                if src in metrics:
                    out[name] = float(metrics[src])
                    break
        actor = self.config.actor_rollout_ref.actor
        loss = float(metrics.get("actor/pg_loss", float("nan")))
        loss -= float(actor.entropy_coeff) * float(metrics.get("actor/entropy", 0.0))
        if actor.use_kl_loss:
            loss += float(actor.kl_loss_coef) * float(metrics.get("actor/kl_loss", 0.0))
        out["loss"] = loss
        return out

    def train(self, num_steps: int | None = None, epochs: int | None = None) -> Iterator[dict[str, float]]:
        """Step over the data provider's batches, yielding each step's metrics (see :meth:`step`).

        Runs ``epochs`` passes (default ``trainer.total_epochs``) and stops early after ``num_steps`` steps. A
        :class:`DataProvider` left inside a pass (an earlier ``num_steps``, a resumed checkpoint) continues that
        pass first; a pass it had already served to the end does not count.
        """
        provider = self.data_provider
        if provider is None:
            raise ValueError("PPOTrainer.train() needs a data_provider (PPOTrainer(..., data_provider=...))")
        epochs = int(self.config.trainer.total_epochs if epochs is None else epochs)
        if num_steps is not None and num_steps <= 0:
            return
        done, passes = 0, 0
        while passes < epochs:
            resuming = int(getattr(provider, "position", 0)) > 0
            served = 0
            for batch in provider:
                served += 1
                yield self.step(batch)
                done += 1
                if num_steps is not None and done >= num_steps:
                    return
            if not (resuming and served == 0):
                passes += 1

    # ---------------------------------------------------------------------------------------- checkpoints
    def save_checkpoint(
        self, path: str | None = None, save_optimizer: bool = True, save_training_state: bool = True
    ) -> str:
        """Write ``<path>/actor`` (and ``critic``): every rank's shard of the weights, of the optimizer state when
        ``save_optimizer``, and the scheduler/RNG state and ``data.pt`` (global step, KL coefficient, data
        position) when ``save_training_state``; returns the directory.

        The same writer as ``main_ppo`` (:meth:`RayPPOTrainer.save_checkpoint`): written atomically and marked
        complete (``checkpoint_complete.json``). ``path`` defaults to ``<checkpoint_dir>/global_step_N``, which
        also moves the ``latest_checkpointed_iteration.txt`` tracker and applies retention; a namespace is
        appended to an explicit path too. A full checkpoint (the defaults) can be resumed from.
        """
        from verl.utils.fs import namespaced_path

        contents = ["model"] + (["optimizer"] if save_optimizer else []) + (["extra"] if save_training_state else [])
        extra: dict[str, Any] = {}
        provider = self.data_provider
        if callable(getattr(provider, "state_dict", None)):
            extra["data_provider"] = provider.state_dict()
        return self._driver.save_checkpoint(
            path=namespaced_path(path, self.namespace) if path else None, save_contents=contents, extra_state=extra
        )

    def load_checkpoint(self, path: str | None = None) -> int:
        """Continue training from a full checkpoint; returns the restored step count.

        ``path``: a directory :meth:`save_checkpoint` (or ``main_ppo``) wrote; None takes the latest complete one
        under :attr:`checkpoint_dir`. Restores the actor (and critic) weights, optimizer and lr scheduler, the RNG
        states, the step count, the KL coefficient, the generation counter and the data provider's position, so
        the following steps are those of an uninterrupted run. An incomplete or weights-only checkpoint raises, and
        so does a checkpoint of another model (architecture, shapes, roles, LoRA rank; with ``path=None`` also
        another algorithm): :class:`~verl.checkpoint.identity.CheckpointMismatchError`, before anything loads.
        """
        from verl.checkpoint.layout import find_latest_ckpt_path
        from verl.utils.fs import namespaced_path

        mode = "resume_path"  # a checkpoint of another model is refused; one of another algorithm only warns
        if path is None:
            path = find_latest_ckpt_path(self.checkpoint_dir)
            if path is None:
                raise FileNotFoundError(f"no complete checkpoint under {self.checkpoint_dir!r} to resume from")
            mode = "auto"  # found, not named: another algorithm's checkpoint is refused too
        elif not os.path.isdir(path) and self.namespace and os.path.isdir(namespaced_path(path, self.namespace)):
            path = namespaced_path(path, self.namespace)  # the path given to save_checkpoint, before the namespace
        step = self._driver.load_checkpoint(path, mode=mode)
        state = self._driver.resumed_state or {}
        provider = self.data_provider
        if "data_provider" in state and callable(getattr(provider, "load_state_dict", None)):
            provider.load_state_dict(state["data_provider"])
        return step

    def close(self) -> None:
        """Release the workers and remove the gradient hooks; exporters with ``close()`` are closed."""
        for handle in self._grad_hooks:
            handle.remove()
        self._grad_hooks = []
        self._close_exporters()
        self._driver.release_rollout()
        for group in self._driver.worker_groups.values():
            if callable(getattr(group, "shutdown", None)):
                group.shutdown()

    # ------------------------------------------------------------------------------------------ dataflow
    def update(self) -> Any:
        """The dataflow stage that turns scored rollouts into one PPO update (see :mod:`verl.api.dataflow`)."""
        from verl.api.dataflow import UpdateStage

        return UpdateStage(trainer=self)

    def __repr__(self) -> str:
        algo = self.config.algorithm.adv_estimator
        return f"PPOTrainer(algorithm={algo!r}, steps={self.global_steps}, namespace={self.namespace!r})"

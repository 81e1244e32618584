"""The PPO driver's worker groups: :class:`DriverWorkers`, the part of
:class:`~verl.trainer.ppo.ray_trainer.RayPPOTrainer` held as ``trainer.workers``.

It holds the groups by role (``actor_rollout``, ``critic``, ``rm``, ``teacher``, ``judge``), what decides them
(the roles a run uses, ``role_worker_mapping`` swapping a role's class, ``role_kwargs`` adding constructor
arguments, a verl ``ResourcePoolManager``'s pools) and the driver's agent loops. It creates the groups, loads their
models and stops the rollout engines; which batches go to which group is the driver's business.
"""

from __future__ import annotations

import logging
from typing import Any

from omegaconf import DictConfig, OmegaConf

from verl.trainer.ppo.utils import normalize_role_worker_mapping
from verl.trainer.ppo.worker_roles import pool_settings, worker_roles

__all__ = ["DriverWorkers"]

logger = logging.getLogger(__name__)

# the order models load in: the actor last (the biggest), as in verl
LOAD_ORDER = ("critic", "rm", "teacher", "judge", "actor_rollout")


def worker_nsight_runtime_env(config: DictConfig) -> dict[str, Any] | None:
    """Ray actor options launching every worker under Nsight Systems when ``global_profiler.tool=nsys`` has steps:
    ``{"runtime_env": {"nsight": <global_tool_config.nsys.worker_nsight_options>}}`` with null options left out and
    ``capture-range-end`` null set to ``repeat-shutdown:<6 x len(steps)>`` (upstream v0.9's
    ``verl/single_controller/ray/base.py``); None otherwise (the local backend ignores Ray options)."""
    glob = config.global_profiler
    if glob.tool != "nsys" or not glob.steps:
        return None
    options = dict(OmegaConf.to_container(glob.global_tool_config.nsys.worker_nsight_options))
    if "capture-range-end" in options and options["capture-range-end"] is None:
        options["capture-range-end"] = f"repeat-shutdown:{6 * len(glob.steps)}"
    return {"runtime_env": {"nsight": {k: v for k, v in options.items() if v is not None}}}


class DriverWorkers:
    """The worker groups of one run.

    ``config`` is the whole PPO config: the workers' constructor arguments come from every section (model, actor,
    rollout, critic, reward model, teacher, judge, trainer placement, ``ray_kwargs``). ``used`` names the optional
    roles this run has (``reference``, ``critic``, ``reward_model``, ``teacher``, ``judge``: booleans). ``groups``
    are already created groups (``{"actor_rollout": wg, ...}``, the Python API's); ``name_prefix`` prefixes the
    worker processes' names (the run's namespace)."""

    def __init__(
        self,
        config: DictConfig,
        used: dict[str, bool],
        groups: dict[str, Any] | None = None,
        role_worker_mapping: dict[Any, type] | None = None,
        role_kwargs: dict[str, dict[str, Any]] | None = None,
        resource_pool_manager: Any = None,
        agent_tools: list[Any] | None = None,
        name_prefix: str = "verl_",
    ) -> None:
        self.config = config
        self.used = dict(used)
        self.groups: dict[str, Any] = groups or {}
        # role ("actor_rollout", "critic", "rm") -> worker class, replacing the FSDP worker of that role (verl's name)
        self.role_worker_mapping = normalize_role_worker_mapping(role_worker_mapping)  # verl's Role keys too
        self.role_kwargs = {role: dict(kwargs) for role, kwargs in (role_kwargs or {}).items()}
        # verl's constructor argument: roles on a ResourcePoolManager's pools
        self.resource_pool_manager = resource_pool_manager
        self.agent_tools = list(agent_tools or [])  # the Python API's tools, for the agent loops
        self.agent_loop_manager: Any = None  # the driver's agent loops when rollout.multi_turn.enable
        self.name_prefix = name_prefix

    @property
    def actor(self) -> Any:
        """The actor (with rollout and reference) group; None before :meth:`start` without given groups."""
        return self.groups.get("actor_rollout")

    @property
    def critic(self) -> Any:
        return self.groups.get("critic")

    @property
    def rm(self) -> Any:
        return self.groups.get("rm")

    @property
    def teacher(self) -> Any:
        return self.groups.get("teacher")

    @property
    def judge(self) -> Any:
        return self.groups.get("judge")

    def roles(self) -> dict[str, tuple[type, dict[str, Any]]]:
        """Role -> (worker class, constructor arguments) of this run (:func:`~verl.trainer.ppo.worker_roles.
        worker_roles`, the one place roles are decided)."""
        return worker_roles(self.config, self.role_worker_mapping, self.role_kwargs, **self.used)

    def start(self, horizon: int) -> None:
        """Create the groups (colocated in one process per rank; unless given) and load the models. ``horizon``:
        the steps the learning-rate schedulers span (set on the actor and critic ``optim`` sections first)."""
        from verl.single_controller import create_colocated_worker_groups
        from verl.trainer.config.parallel_checks import resolve_backend
        from verl.utils.device import get_device_name

        for section in (self.config.actor_rollout_ref.actor.optim, self.config.critic.optim):
            OmegaConf.set_struct(section, False)
            section.total_training_steps = horizon
        if not self.groups:
            trainer_cfg = self.config.trainer
            self.groups = create_colocated_worker_groups(
                backend=resolve_backend(trainer_cfg),
                roles=self.roles(),
                world_size=int(trainer_cfg.nnodes) * int(trainer_cfg.n_gpus_per_node),
                use_gpu=get_device_name(trainer_cfg.device) == "cuda",
                name_prefix=self.name_prefix,
                nnodes=int(trainer_cfg.nnodes),
                # roles on resource pools (verl's mapping); unmapped roles share global_pool, one process per rank
                **pool_settings(trainer_cfg, self.resource_pool_manager),
                placement_timeout_s=float(self.config.ray_kwargs.placement_timeout_s),
                ray_options=worker_nsight_runtime_env(self.config),
            )
        for name in LOAD_ORDER:
            if name in self.groups:
                self.groups[name].init_model()

    def refresh_reference(self, step: int) -> bool:
        """``trainer.ref_update_freq``: at the start of each step that is a multiple of it, the reference policy
        takes the actor's weights (SPIN's iterations, when verl-recipe's spin trainer does it). True when it did."""
        freq = int(self.config.trainer.ref_update_freq)
        if freq <= 0 or step % freq != 0 or not self.used.get("reference"):
            return False
        self.actor.update_reference()
        return True

    def release_rollout(self) -> None:
        """Stop the rollout engines before the worker processes go away: a vLLM engine then frees its process
        groups and a tensor-parallel CPU engine its shared memory, which killed processes would leave behind. One
        rank runs in this process, whose exit releases its engine: it is left alone."""
        group = self.actor
        stop = getattr(group, "shutdown_rollout", None)
        if not callable(stop) or int(getattr(group, "world_size", 1)) <= 1:
            return
        try:
            stop()
        except Exception as err:  # noqa: BLE001 - teardown must not hide the run's result
            logger.warning("stopping the rollout engines failed: %s", err)

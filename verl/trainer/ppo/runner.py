"""``run_ppo(config)``: build everything a PPO/GRPO run needs from a validated config, train, export, plot.

This is what ``python -m verl.trainer.main_ppo`` and ``make demo`` execute.
"""

from __future__ import annotations

import logging
import os
import random
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig

from verl.base_config import get_config_value
from verl.utils.errors import ConfigLineError

logger = logging.getLogger(__name__)


def seed_everything(seed: int, deterministic: bool = False) -> None:
    """Seed python, numpy and torch; optionally ask torch for deterministic kernels."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if deterministic:
        # cuBLAS picks reduction orders per workspace unless told a fixed one (read when CUDA starts)
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=True)


def apply_runtime_switches(trainer_cfg: DictConfig) -> None:
    """Security policy, threads and the debug switch, applied to the driver and inherited by local workers."""
    from verl.utils.security import SecurityPolicy, set_security_policy

    set_security_policy(SecurityPolicy.from_config(trainer_cfg))
    threads = trainer_cfg.torch_threads
    if threads:
        torch.set_num_threads(int(threads))
        os.environ["VERL_TORCH_THREADS"] = str(int(threads))
    from verl.utils.logging_utils import configure_logging

    configure_logging(bool(trainer_cfg.enable_debug_mode), trainer_cfg.third_party_log_level)
    device = trainer_cfg.device
    if device != "auto":
        os.environ["VERL_DEVICE"] = device


def ray_init_kwargs(config: DictConfig) -> dict[str, Any]:
    """The keyword arguments of ``ray.init`` from ``ray_kwargs.ray_init`` (verl's key); null values are left out.

    No ``address`` (or ``"local"``) and no ``$RAY_ADDRESS``: :func:`init_ray` starts a local Ray listening on
    127.0.0.1 only; an ``address`` or ``$RAY_ADDRESS`` joins that cluster, and then the arguments that only a new
    instance takes are left out. The workers' default environment (quiet tokenizers, the driver's device choice,
    :func:`verl.trainer.constants_ppo.get_ppo_ray_runtime_env`) is merged under ``ray_init.runtime_env``.
    """
    from omegaconf import OmegaConf

    from verl.single_controller.ray.cluster import requested_cluster
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

    section = config.ray_kwargs.ray_init or {}
    kwargs = {k: v for k, v in OmegaConf.to_container(OmegaConf.create(section), resolve=True).items() if v is not None}
    env_vars = get_ppo_ray_runtime_env(config)["env_vars"]
    runtime_env = dict(kwargs.pop("runtime_env", None) or {})
    # Ray wants strings; YAML turns OMP_NUM_THREADS=2 into an int
    runtime_env["env_vars"] = {**env_vars, **{k: str(v) for k, v in dict(runtime_env.get("env_vars") or {}).items()}}
    kwargs["runtime_env"] = runtime_env
    kwargs.setdefault("include_dashboard", False)
    kwargs.setdefault("log_to_driver", True)
    if requested_cluster(kwargs.get("address")) is not None:
        # joining a running cluster: its resources were fixed by `ray start`, and ray.init refuses these
        for key in ("num_cpus", "num_gpus", "include_dashboard"):
            kwargs.pop(key, None)
    return kwargs


def init_ray(config: DictConfig) -> None:
    """Start (on loopback) or join Ray for a run on the ``ray`` backend (no-op when Ray is already initialised);
    see :func:`verl.single_controller.ray.start_or_join_ray`."""
    import ray

    from verl.single_controller.ray.cluster import start_or_join_ray

    if ray.is_initialized():
        return
    kwargs = ray_init_kwargs(config)
    started = start_or_join_ray(**kwargs)
    where = "a new local instance" if started else kwargs.get("address") or os.environ.get("RAY_ADDRESS")
    logger.info("Ray: %s; cluster resources %s", where, ray.cluster_resources())


def write_ray_timeline(path: str | None) -> None:
    """``ray_kwargs.timeline_json_file``: Ray's timeline of this run's tasks (chrome://tracing JSON), written
    atomically to ``path`` (nothing when ``path`` is empty)."""
    if not path:
        return
    import ray

    path = os.path.abspath(os.path.expanduser(path))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    partial = f"{path}.partial"
    ray.timeline(filename=partial)
    os.replace(partial, path)
    print(f"Ray timeline: {path}")


def _score_summary(metrics: dict[str, float]) -> str:
    core = {k: v for k, v in metrics.items() if k.startswith("val-core/") and "/mean@" in k}
    return ", ".join(f"{k} = {v:.4f}" for k, v in sorted(core.items())) or "(no validation metrics)"


def create_rl_dataset(data_paths: Any, data_config: Any, tokenizer: Any, processor: Any = None, is_train: bool = True):
    """The dataset of ``data_paths`` (verl's ``create_rl_dataset``): ``RLHFDataset``, or the class named by
    ``data.custom_cls.path`` / ``.name``, built as ``cls(data_files=..., tokenizer=..., processor=..., config=...)``.

    A custom class must subclass ``torch.utils.data.Dataset`` (TypeError naming it otherwise). ``is_train`` names the
    config key (``data.train_files`` / ``data.val_files``) in the error raised for a file that cannot be used, and
    passes ``data.train_max_samples`` (when > 0) as the class's ``max_samples`` argument, as upstream does.
    """
    import torch.utils.data

    from verl.base_config import omega_conf_to_dataclass
    from verl.data.config import DataConfig
    from verl.data.rl_dataset import RLHFDataset
    from verl.trainer.config.validation import ConfigError

    key = "data.train_files" if is_train else "data.val_files"
    custom = data_config.get("custom_cls") if hasattr(data_config, "get") else None
    dataset_cls: Any = RLHFDataset
    if custom is not None and custom.get("path"):
        from verl.utils.import_utils import load_extern_type

        try:
            dataset_cls = load_extern_type(custom.get("path"), custom.get("name"))
        except (FileNotFoundError, AttributeError, ValueError, ImportError, RuntimeError) as e:
            raise ConfigError(f"data.custom_cls: {e}") from e
        if not (isinstance(dataset_cls, type) and issubclass(dataset_cls, torch.utils.data.Dataset)):
            raise TypeError(
                f"The custom dataset class '{custom.get('name')}' from '{custom.get('path')}' must inherit from "
                "torch.utils.data.Dataset"
            )
    kwargs: dict[str, Any] = {}
    max_samples = int(omega_conf_to_dataclass(data_config, DataConfig).train_max_samples) if is_train else -1
    if max_samples > 0:  # data.train_max_samples (upstream passes it to the dataset class as max_samples)
        import inspect

        params = inspect.signature(dataset_cls).parameters
        if "max_samples" not in params and not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            raise ConfigError(
                f"data.train_max_samples={max_samples}: the dataset class {dataset_cls.__name__} takes no "
                "max_samples argument; add one to it or drop the key"
            )
        kwargs["max_samples"] = max_samples
    try:
        return dataset_cls(
            data_files=data_paths, tokenizer=tokenizer, processor=processor, config=data_config, **kwargs
        )
    except ConfigError:
        raise
    except (ValueError, FileNotFoundError) as e:
        raise ConfigError(f"{key}: {e}") from e


def build_datasets(config: DictConfig, tokenizer, processor: Any = None) -> tuple[Any, Any, Any]:
    """Train dataset, validation dataset (or None) and the resumable train sampler.

    A file that cannot be used (missing, empty, a missing column, a row of the wrong type) raises
    :class:`ConfigError` naming the config key, the file, the row and the column, so ``main_ppo`` reports it like
    any other bad input (exit code 2, no traceback). ``data.custom_cls`` selects a dataset class of your own.
    ``processor``: a vision-language model's processor, for rows with images.
    """
    from verl.data.rl_dataset import create_rl_sampler
    from verl.trainer.config.validation import ConfigError

    data_cfg = config.data
    if not data_cfg.train_files:
        raise ConfigError("data.train_files: not set; give the training parquet file(s), e.g. data.train_files=...")
    train_dataset = create_rl_dataset(data_cfg.train_files, data_cfg, tokenizer, processor, is_train=True)
    val_dataset = None
    if data_cfg.val_files:
        val_dataset = create_rl_dataset(data_cfg.val_files, data_cfg, tokenizer, processor, is_train=False)
    sampler = create_rl_sampler(data_cfg, train_dataset)
    return train_dataset, val_dataset, sampler


def async_trainer_cls(config: DictConfig) -> type | None:
    """The trainer of ``async_training.mode`` (docs/async_training.md): one-step-off-policy or fully asynchronous;
    None for synchronous training."""
    mode = get_config_value(config, "async_training.mode")  # absent (a partial config): synchronous
    if mode == "one_step_off":
        from verl.trainer.one_step_off_policy.ray_trainer import OneStepOffRayPPOTrainer

        return OneStepOffRayPPOTrainer
    if mode == "fully_async":
        from verl.trainer.fully_async_policy.fully_async_trainer import FullyAsyncRayPPOTrainer

        return FullyAsyncRayPPOTrainer
    return None


def check_lora_adapter_path(model_cfg: Any) -> None:
    """``actor_rollout_ref.model.lora_adapter_path`` (a local one; a remote one is checked after its copy in the
    worker): a one-line ``ConfigError`` naming the key and the missing file, or the rank that disagrees."""
    from verl.models.lora import adapter_path_problem
    from verl.utils.errors import ConfigError
    from verl.utils.fs import is_non_local

    path = model_cfg.lora_adapter_path
    if path is None or is_non_local(str(path)):
        return
    problem = adapter_path_problem(os.path.expanduser(str(path)), int(model_cfg.lora_rank))
    if problem:
        raise ConfigError(problem)


def prepare_run(config: DictConfig) -> dict[str, Any]:
    """Before anything loads: the checkpoint directory policy, the model paths (hub ids fetched once), a saved
    LoRA adapter's files, and the check that the checkpoint this run would resume or save over is one of this run
    (model, algorithm, data order, mode); returns the run identity. Raises one-line errors (``ConfigError`` family)."""
    from verl.trainer.ppo.run_identity import ppo_run_identity

    trainer_cfg = config.trainer
    # before anything loads: a used directory under resume_mode=disable is refused now, not after the model loads
    from verl.checkpoint.layout import check_checkpoint_root, checkpoint_root, prepare_checkpoint_root

    prepare_checkpoint_root(
        checkpoint_root(trainer_cfg),
        str(trainer_cfg.resume_mode),
        overwrite=bool(trainer_cfg.overwrite_checkpoints),
    )
    from verl.trainer.run_paths import resolve_config_paths

    resolve_config_paths(config)  # hub ids: from the HF cache or downloaded once, before anything reads them
    check_lora_adapter_path(config.actor_rollout_ref.model)  # a bad saved adapter: one line, before workers start
    # a checkpoint of another model (algorithm, roles, LoRA rank) where this run would resume or save is refused
    # now, from config.json and the completion markers, before any weights load (CheckpointMismatchError: exit 2)
    identity = ppo_run_identity(config)
    check_checkpoint_root(trainer_cfg, identity)
    from verl.trainer.ppo.memory_check import check_ppo_memory

    # a CPU run whose micro-batches cannot fit the free memory is refused now (MemoryBudgetError), not killed later
    estimate = check_ppo_memory(config, identity)
    if estimate is not None:
        logger.debug("memory: %s", estimate)
    return identity


def build_ppo_trainer(
    config: DictConfig,
    role_worker_mapping: dict[Any, type] | None = None,
    trainer_cls: type | None = None,
    identity: dict[str, Any] | None = None,
) -> Any:
    """Everything before the workers: checkpoint directory policy, seeds, Ray, tokenizer, datasets, reward
    managers; returns the :class:`RayPPOTrainer` (call ``init_workers()`` then ``fit()``).

    ``role_worker_mapping`` replaces the worker class of a role (``actor_rollout``, ``critic``, ``rm``, or verl's
    ``Role`` members); ``trainer_cls`` is a :class:`RayPPOTrainer` subclass to build instead (a recipe's trainer
    that overrides a stage); ``identity``: :func:`prepare_run`'s result when the caller ran it already.
    """
    from verl.models.loader import load_tokenizer
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer
    from verl.trainer.ppo.reward import check_reward_endpoints, check_reward_sources, load_reward_manager
    from verl.utils.tokenizer import use_chat_template

    trainer_cfg = config.trainer
    if identity is None:
        identity = prepare_run(config)
    seed_everything(int(trainer_cfg.seed), bool(trainer_cfg.deterministic))
    apply_runtime_switches(trainer_cfg)
    from verl.trainer.config.parallel_checks import resolve_backend

    if resolve_backend(trainer_cfg) == "ray":
        init_ray(config)

    tokenizer_path = config.data.tokenizer or config.actor_rollout_ref.model.tokenizer_path
    trust = bool(config.data.trust_remote_code)  # upstream's data.trust_remote_code: the driver's tokenizer/processor
    tokenizer = load_tokenizer(tokenizer_path or config.actor_rollout_ref.model.path, trust_remote_code=trust)
    use_chat_template(tokenizer, config.actor_rollout_ref.model.custom_chat_template)  # v0.9's custom_chat_template
    from verl.models.vlm import check_image_patch_size, processor_for_model

    # a vision-language model's processor (verl's hf_processor), None for text models
    processor = processor_for_model(config.actor_rollout_ref.model.path, tokenizer, trust_remote_code=trust)
    check_image_patch_size(config.data.image_patch_size, processor)
    if processor is None and config.actor_rollout_ref.actor.freeze_vision_tower:  # said before the model loads
        raise ConfigLineError(
            f"actor_rollout_ref.actor.freeze_vision_tower=true but {config.actor_rollout_ref.model.path} is a text "
            "model (no image processor, so no vision tower to freeze); drop the key or use a vision-language model"
        )
    train_dataset, val_dataset, sampler = build_datasets(config, tokenizer, processor)
    # a data source nobody can score, a reward service that is down or an agent file that is not there is found now,
    # not at the first reward or rollout
    check_reward_sources(config, {"data.train_files": train_dataset, "data.val_files": val_dataset})
    check_reward_endpoints(config)
    from verl.trainer.config.multi_turn_checks import check_agent_source

    check_agent_source(config)
    if config.actor_rollout_ref.rollout.name == "vllm":  # vLLM refuses a context past the model's positions
        from verl.workers.rollout.vllm_rollout import check_context_length

        check_context_length(config.actor_rollout_ref.model.path, config.actor_rollout_ref.rollout)
    from verl.checkpoint.layout import checkpoint_root
    from verl.trainer.config.step_plan import step_plan, write_plan

    # what one step consumes, for the report: written once the data is known good, so a run refused at start leaves
    # no run directory behind
    write_plan(step_plan(config), checkpoint_root(trainer_cfg))
    reward_fn = load_reward_manager(config, tokenizer, num_examine=0)
    val_reward_fn = load_reward_manager(config, tokenizer, num_examine=1)

    if trainer_cls is None:
        trainer_cls = async_trainer_cls(config) or RayPPOTrainer
    elif not (isinstance(trainer_cls, type) and issubclass(trainer_cls, RayPPOTrainer)):
        raise TypeError(f"trainer_cls must be a subclass of RayPPOTrainer, got {trainer_cls!r}")
    trainer = trainer_cls(
        run_identity=identity,
        config=config,
        tokenizer=tokenizer,
        reward_fn=reward_fn,
        val_reward_fn=val_reward_fn,
        train_dataset=train_dataset,
        val_dataset=val_dataset,
        train_sampler=sampler,
        role_worker_mapping=role_worker_mapping,
        processor=processor,
    )
    return trainer


def run_ppo(
    config: DictConfig, role_worker_mapping: dict[Any, type] | None = None, trainer_cls: type | None = None
) -> dict[str, Any]:
    """Train with the given config (``trainer_cls``: see :func:`build_ppo_trainer`).

    Returns ``{"val_before", "val_after", "output_dir", "hf_dir", "plot", "report", "stopped_by",
    "already_finished"}`` (``plot`` / ``report``: the paths of ``metrics.png`` / ``report.html``, None when not
    written; ``already_finished``: the checkpoint to resume was the last step, so nothing ran: one line said so).

    Raises :class:`~verl.trainer.ppo.run_health.NoTrainingStepsError` when the run ended having trained no step
    (and was not already finished, validation-only or stopped by a signal)."""
    trainer_cfg = config.trainer
    identity = prepare_run(config)
    # a finished run says so before the tokenizer, data and models load (the step count is known when set)
    if trainer_cfg.total_training_steps and _say_finished(config, int(trainer_cfg.total_training_steps)):
        return _finished_result(config)
    trainer = build_ppo_trainer(config, role_worker_mapping, trainer_cls, identity=identity)
    reward_fn, val_reward_fn = trainer.reward_fn, trainer.val_reward_fn
    if not trainer_cfg.total_training_steps and _say_finished(config, int(trainer.total_training_steps)):
        _close_reward_managers(reward_fn, val_reward_fn)
        return _finished_result(config)
    from verl.reporting.phase import watched

    with watched("starting workers (models, rollout engine)", prefix="start-up"):  # a line each 30 s it lasts
        trainer.init_workers()
    # debug mode: autograd anomaly detection for this run only (it is process-wide and slow)
    with torch.autograd.set_detect_anomaly(bool(trainer_cfg.enable_debug_mode)):
        trainer.fit()
    trainer.release_rollout()
    write_ray_timeline(config.ray_kwargs.timeline_json_file)

    _close_reward_managers(reward_fn, val_reward_fn)  # their reward worker processes are not needed any more
    # stopped_by: "SIGTERM"/"SIGINT" when a signal ended the run early (checkpoint saved; the CLI exits 128+N)
    result: dict[str, Any] = {
        "output_dir": trainer.checkpoint_dir,
        "hf_dir": None,
        "plot": None,
        "report": None,
        "stopped_by": trainer.stopped_by,
        "already_finished": False,
    }
    history = trainer.val_history
    result["val_before"] = history[0][1] if history and history[0][0] == 0 else {}
    result["val_after"] = history[-1][1] if history and history[-1][0] > 0 else {}
    if result["val_before"]:
        print(f"validation before training (step 0): {_score_summary(result['val_before'])}")
    if result["val_after"]:
        print(f"validation after training (step {history[-1][0]}): {_score_summary(result['val_after'])}")

    if trainer.stopped_by:  # an interrupted run is continued, not exported (fit() updated its report)
        return result
    from verl.trainer.ppo.run_health import check_trained_steps

    check_trained_steps(trainer)  # zero steps trained (not validation-only): NoTrainingStepsError, exit 1
    if trainer_cfg.export_hf and trainer.global_steps > 0:
        with watched("exporting the model"):
            result["hf_dir"] = trainer.export_hf(os.path.join(trainer.checkpoint_dir, "hf_model"))
        from verl.utils.export_info import write_export_info

        # the directory keeps its name (scripts read <run>/hf_model); the export says which run and step it is
        write_export_info(result["hf_dir"], str(trainer_cfg.experiment_name), trainer.global_steps)
        print(f"Hugging Face export: {result['hf_dir']}")
        trainer.update_report(redraw_plot=False)  # the report lists the export too
    from verl.reporting.report import PLOT_FILE, REPORT_FILE

    # metrics.png (trainer.plot) and report.html (trainer.report.enable): written by fit() at each save and its end
    reporter = trainer.reporter()
    for key, name in (("plot", PLOT_FILE), ("report", REPORT_FILE)):
        path = os.path.join(trainer.checkpoint_dir, name)
        if reporter is not None and getattr(reporter, key) and os.path.isfile(path):
            result[key] = path
            print(f"{key}: {path}")
    return result


def _close_reward_managers(*managers: Any) -> None:
    for manager in managers:
        if callable(getattr(manager, "close", None)):
            manager.close()


def _say_finished(config: DictConfig, total_steps: int) -> bool:
    """Print the one line of :func:`~verl.checkpoint.finished.finished_run_message` and return True when the
    checkpoint this run would resume is its last step (never for ``trainer.val_only``: that evaluates it)."""
    from verl.checkpoint.finished import FRESH_HINT, finished_run_message
    from verl.utils.fs import namespaced_path

    trainer_cfg = config.trainer
    if trainer_cfg.val_only:
        return False
    hint = FRESH_HINT + ("; the demo: make demo-fresh" if str(trainer_cfg.experiment_name) == "demo" else "")
    root = namespaced_path(str(trainer_cfg.default_local_dir), trainer_cfg.namespace)
    message = finished_run_message(trainer_cfg, total_steps, root, fresh_hint=hint)
    if message is None:
        return False
    print(f"[verl] {message}", flush=True)
    return True


def _finished_result(config: DictConfig) -> dict[str, Any]:
    from verl.utils.fs import namespaced_path

    trainer_cfg = config.trainer
    root = namespaced_path(str(trainer_cfg.default_local_dir), trainer_cfg.namespace)
    report = os.path.join(root, "report.html")
    return {
        "output_dir": root,
        "hf_dir": None,
        "plot": None,
        "report": report if os.path.isfile(report) else None,
        "stopped_by": None,
        "val_before": {},
        "val_after": {},
        "already_finished": True,
    }

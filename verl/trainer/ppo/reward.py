"""Build the reward function of a PPO run from its config, and apply it to a batch.

``custom_reward_function.path`` / ``.name`` name a Python file and a function in it with the contract
``fn(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> float | dict`` (``reward_kwargs`` are
bound with functools.partial). Otherwise ``reward_model.remote.url`` selects an HTTP scorer, and failing both the
rule scorers of ``verl.rewards.default_compute_score`` are used.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import torch

from verl.base_config import omega_conf_to_dataclass
from verl.trainer.config.schema import CustomRewardFunctionConfig, DataConfig, RewardModelConfig, TrainerConfig
from verl.utils.errors import UserCodeAttributeError, UserCodeImportError, UserCodeNotFoundError, UserCodeTypeError
from verl.utils.import_utils import load_module

T = TypeVar("T")
logger = logging.getLogger(__name__)


def _section(config: Any, key: str, section_type: type[T]) -> T:
    """``config.<key>`` as its typed section (keys the caller left out at their defaults)."""
    value = config.get(key) if hasattr(config, "get") else getattr(config, key, None)
    return omega_conf_to_dataclass(value, section_type)


def _plain(value: Any) -> Any:
    """DictConfig -> plain containers (so reward functions receive ordinary dicts)."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(value, DictConfig | ListConfig):
            return OmegaConf.to_container(value, resolve=True)
    except ImportError:  # pragma: no cover
        pass
    return value


def load_function_from_file(path: str, name: str) -> Callable[..., Any]:
    """Import the Python file at ``path`` and return its attribute ``name`` (must be callable).

    Errors name the file and the function.
    """
    file_path = os.path.abspath(os.path.expanduser(path))
    if not os.path.isfile(file_path):
        raise UserCodeNotFoundError(f"custom_reward_function.path: reward function file {file_path} does not exist")
    # registered in sys.modules so pickling (Ray) and dataclasses inside the file find the module by name
    try:
        module = load_module(file_path, module_name=f"custom_reward_module_{abs(hash(file_path))}")
    except (ImportError, RuntimeError) as e:
        cause = e.__cause__ or e
        raise UserCodeImportError(
            f"custom_reward_function.path: importing {file_path} failed: {type(cause).__name__}: {cause}"
        ) from cause
    if not hasattr(module, name):
        available = sorted(k for k, v in vars(module).items() if callable(v) and not k.startswith("_"))
        raise UserCodeAttributeError(
            f"custom_reward_function.name: reward function {name!r} not found in {file_path}; callables there: "
            f"{available}"
        )
    fn = getattr(module, name)
    # The module exists only in this process under a made-up name: reward worker processes get it by value.
    import cloudpickle

    cloudpickle.register_pickle_by_value(module)
    if not callable(fn):
        raise UserCodeTypeError(f"custom_reward_function.name: {name!r} in {file_path} is not callable")
    return fn


def get_custom_reward_fn(config: Any) -> Callable[..., Any] | None:
    """The user's reward function from ``custom_reward_function`` (``path``, ``name``, ``reward_kwargs``), with
    ``reward_kwargs`` bound by functools.partial; None when no path is set. A coroutine function (``async def``)
    is called like a plain one (:class:`verl.rewards.awaited.AwaitedCall`)."""
    section = _section(config, "custom_reward_function", CustomRewardFunctionConfig)
    if not section.path:
        return None
    from verl.rewards.awaited import awaited_if_coroutine

    # an `async def` scorer (upstream v0.9's reward loop awaits those) runs to completion on each call
    fn = awaited_if_coroutine(load_function_from_file(str(section.path), str(section.name or "compute_score")))
    reward_kwargs = dict(_plain(section.reward_kwargs or {}))
    if not reward_kwargs:
        return fn
    wrapped = functools.partial(fn, **reward_kwargs)
    functools.update_wrapper(wrapped, fn)
    return wrapped


def takes_batch(fn: Callable[..., Any]) -> bool:
    """True when ``fn`` follows the batch contract (a ``solution_strs`` or ``data_sources`` parameter)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "solution_strs" in params or "data_sources" in params


# Constructor arguments this project adds to verl's (tokenizer, num_examine, compute_score, reward_fn_key).
_SAFETY_KWARGS = ("on_error", "timeout_s", "batch_timeout_s", "num_workers")


def _drop_unaccepted_safety_kwargs(manager_cls: type, kwargs: dict[str, Any]) -> None:
    """A reward manager ported from verl takes only verl's constructor arguments: leave out this project's safety
    arguments it does not accept, and say so when the user set one of them explicitly."""
    try:
        params = inspect.signature(manager_cls.__init__).parameters
    except (TypeError, ValueError):
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    defaults = RewardModelConfig()
    for key in _SAFETY_KWARGS:
        if key in kwargs and key not in params:
            value = kwargs.pop(key)
            if value != getattr(defaults, key, None):
                logger.warning(
                    "reward_model.%s=%r is not applied: reward manager %s does not take a %r argument",
                    key,
                    value,
                    manager_cls.__name__,
                    key,
                )


def resolve_compute_score(config: Any, rm_cfg: RewardModelConfig, is_batch: bool) -> Any:
    """The scoring function of the reward manager: the custom function (``custom_reward_function.path``), the remote
    scorer (``reward_model.remote.url``; both set is an error), ``default_compute_score`` bound to the Sandbox Fusion
    server (``reward_model.sandbox_fusion.url``), or None (the manager's default). A per-sample function given to a
    batch manager (``is_batch``) is looped over."""
    from verl.workers.reward_manager.batch import per_sample_to_batch

    remote_cfg = rm_cfg.remote
    remote_url = remote_cfg.url
    custom_path = _section(config, "custom_reward_function", CustomRewardFunctionConfig).path
    if remote_url and custom_path:
        raise ValueError(
            f"both custom_reward_function.path ({custom_path}) and reward_model.remote.url ({remote_url}) are set; "
            "choose one reward source"
        )
    compute_score = get_custom_reward_fn(config)
    sandbox_cfg = rm_cfg.sandbox_fusion
    sandbox_url = sandbox_cfg.url
    if sandbox_url and compute_score is None and not remote_url:
        # verl: the default scorer runs code data sources on the Sandbox Fusion server
        from verl.rewards import default_compute_score
        from verl.rewards.sandbox_fusion import ProcessLocalSemaphore

        compute_score = functools.partial(
            default_compute_score,
            sandbox_fusion_url=str(sandbox_url),
            concurrent_semaphore=ProcessLocalSemaphore(int(sandbox_cfg.max_concurrent)),
            memory_limit_mb=int(sandbox_cfg.memory_limit_mb),
        )
    if remote_url:
        from verl.rewards.remote import make_remote_compute_score

        client = make_remote_compute_score(remote_cfg)
        compute_score = client.compute_score_batch if is_batch else client
    elif compute_score is not None and is_batch and not takes_batch(compute_score):
        # A per-sample function given to the batch manager is looped over.
        compute_score = per_sample_to_batch(compute_score)
    return compute_score


def _reward_loop_manager(manager_cls: type, rm_cfg: RewardModelConfig, tokenizer: Any, compute_score: Any) -> Any:
    """A reward-loop manager (``verl.experimental.reward_loop``, e.g. ``rate_limited``) as the trainer's reward
    function: built with ``config={"reward": reward_model.reward_kwargs}`` (its limits: ``max_concurrent``,
    ``max_rpm``, ``max_tpm``, ``estimated_tokens_per_request``, ``timeout``). Its own timeout replaces the reward
    worker processes, so a ``reward_model`` safety key set away from its default is refused."""
    defaults = RewardModelConfig()
    for key in _SAFETY_KWARGS:
        if getattr(rm_cfg, key) != getattr(defaults, key):
            raise ValueError(
                f"reward_model.{key}={getattr(rm_cfg, key)!r} does not apply to reward manager "
                f"{manager_cls.__name__}, which calls the reward function in the trainer process with its own limits; "
                "set reward_model.reward_kwargs.timeout (seconds per call) instead"
            )
    from dataclasses import fields

    from verl.experimental.reward_loop.reward_manager.limited import RateLimitSettings

    limits = dict(_plain(rm_cfg.reward_kwargs or {}))
    unknown = sorted(set(limits) - {f.name for f in fields(RateLimitSettings)})
    if unknown:
        raise ValueError(
            f"reward_model.reward_kwargs: {unknown} are not settings of reward manager {manager_cls.__name__}; it "
            f"takes {[f.name for f in fields(RateLimitSettings)]}"
        )
    return manager_cls(config={"reward": limits}, tokenizer=tokenizer, compute_score=compute_score)


def _importlib_reward_manager(config: Any) -> type | None:
    """The class of ``reward.reward_manager.module`` when ``reward.reward_manager.source=importlib`` (upstream
    v0.9): ``module.path`` a Python file, ``module.name`` the class in it; None for registered managers."""
    from omegaconf import DictConfig, OmegaConf

    from verl.utils.import_utils import load_extern_type

    manager = OmegaConf.select(config, "reward.reward_manager") if isinstance(config, DictConfig) else None
    if manager is None or manager.source != "importlib":
        return None
    cls = load_extern_type(manager.module.path, manager.module.name)
    if not isinstance(cls, type):
        raise TypeError(
            f"reward.reward_manager.module: {manager.module.name!r} in {manager.module.path} is not a class"
        )
    return cls


def load_reward_manager(config: Any, tokenizer: Any, num_examine: int, **reward_kwargs: Any) -> Any:
    """Build the reward manager named by ``reward_model.reward_manager`` (naive | batch | dapo | gdpo | judge | prime |
    registered).

    The scoring function is, in order: the custom function (``custom_reward_function.path``), the remote scorer
    (``reward_model.remote.url``), or ``default_compute_score`` (with ``reward_model.sandbox_fusion.url`` bound for
    code data sources); setting both a custom function and a remote URL
    is an error. ``on_error``, ``timeout_s``, ``batch_timeout_s``, ``num_workers``, ``data.reward_fn_key`` and
    (for dapo) ``overlong_buffer`` with ``data.max_response_length`` and (for gdpo) ``trainer.experiment_name`` come
    from the config; ``reward_kwargs`` go to the manager's constructor.
    """
    import verl.experimental.reward_loop.reward_manager  # noqa: F401  (registers ``rate_limited``)
    from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase
    from verl.workers.reward_manager import get_reward_manager_cls
    from verl.workers.reward_manager.batch import BatchRewardManager
    from verl.workers.reward_manager.dapo import DAPORewardManager
    from verl.workers.reward_manager.gdpo import GDPORewardManager
    from verl.workers.reward_manager.judge import JudgeRewardManager

    rm_cfg = _section(config, "reward_model", RewardModelConfig)
    data_cfg = _section(config, "data", DataConfig)
    name = rm_cfg.reward_manager or "naive"
    manager_cls = _importlib_reward_manager(config) or get_reward_manager_cls(str(name))
    if issubclass(manager_cls, RewardManagerBase):
        return _reward_loop_manager(manager_cls, rm_cfg, tokenizer, resolve_compute_score(config, rm_cfg, False))
    is_batch = issubclass(manager_cls, BatchRewardManager)

    compute_score = resolve_compute_score(config, rm_cfg, is_batch)
    kwargs: dict[str, Any] = {
        "compute_score": compute_score,
        "reward_fn_key": data_cfg.reward_fn_key or "data_source",
        "on_error": rm_cfg.on_error or "fail",
        "timeout_s": rm_cfg.timeout_s,
        "batch_timeout_s": rm_cfg.batch_timeout_s,
        "num_workers": rm_cfg.num_workers,
    }
    if issubclass(manager_cls, DAPORewardManager):
        kwargs["max_resp_len"] = data_cfg.max_response_length
        kwargs["overlong_buffer_cfg"] = rm_cfg.overlong_buffer.to_dict()
    if issubclass(manager_cls, GDPORewardManager):  # upstream's GDPO scorer picks the chat format by the run's name
        kwargs["experiment_name"] = _section(config, "trainer", TrainerConfig).experiment_name
    if issubclass(manager_cls, JudgeRewardManager):
        kwargs["judge_config"] = rm_cfg.judge.to_dict()
        if not rm_cfg.judge.rule_weight and rm_cfg.num_workers is None:
            # no rule reward is computed: no reward worker processes to start (the judge has its own limits)
            kwargs.update(num_workers=0, timeout_s=None, batch_timeout_s=None)
    # reward_model.reward_kwargs (= reward.reward_kwargs; e.g. max_resp_len=...; overlong_buffer_cfg is aliased to
    # reward_model.overlong_buffer by the config), then the caller's; a mapping is merged key by key, and a null
    # (DAPO recipe YAMLs ship max_resp_len: null) leaves the value taken from the config (data.max_response_length)
    for extra in (_plain(rm_cfg.reward_kwargs or {}), reward_kwargs):
        for key, value in dict(extra).items():
            if value is None and kwargs.get(key) is not None:
                continue
            if isinstance(value, dict) and isinstance(kwargs.get(key), dict):
                value = {**kwargs[key], **value}
            kwargs[key] = value
    if "compute_score" in reward_kwargs and rm_cfg.num_workers is None:
        # A live Python object from the caller (PPOTrainer(reward_fn=...)) may use state of this process (a
        # counter, a model, a tokenizer): it runs here, as a plain call, unless reward_model.num_workers asks for
        # killable worker processes; time limits cannot stop a call in this process, so none is set.
        kwargs.update(num_workers=0, timeout_s=None, batch_timeout_s=None)
        logger.info(
            "the reward function passed in Python runs in the trainer process without time limits; set "
            "reward_model.num_workers >= 1 to run it in worker processes with reward_model.timeout_s"
        )
    _drop_unaccepted_safety_kwargs(manager_cls, kwargs)
    try:
        return manager_cls(tokenizer, num_examine, **kwargs)
    except TypeError as err:  # an unknown constructor argument: name the config key that carried it
        if rm_cfg.reward_kwargs:
            raise TypeError(f"reward_model.reward_kwargs={_plain(rm_cfg.reward_kwargs)}: {err}") from err
        raise


def check_reward_endpoints(config: Any, timeout_s: float = 5.0) -> None:
    """Fail before training when a reward service of the config does not accept connections: a TCP connection
    to the host and port of ``reward_model.remote.url``, ``reward_model.sandbox_fusion.url`` and (judge reward
    manager, openai backend) ``reward_model.judge.url``, when set.
    Raises ConfigError naming the key, the URL and the reason."""
    import socket
    import urllib.parse

    from verl.trainer.config.validation import ConfigError

    rm_cfg = _section(config, "reward_model", RewardModelConfig)
    problems = []
    urls = {key: rm_cfg[key].url for key in ("remote", "sandbox_fusion")}
    if rm_cfg.reward_manager == "judge" and rm_cfg.judge.backend == "openai":
        urls["judge"] = rm_cfg.judge.url
    for key, url in urls.items():
        if not url:
            continue
        parsed = urllib.parse.urlparse(str(url))
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        try:
            with socket.create_connection((parsed.hostname or "", port), timeout=timeout_s):
                pass
        except OSError as e:
            problems.append(f"reward_model.{key}.url={url}: cannot connect to {parsed.hostname}:{port} ({e})")
    if problems:
        raise ConfigError(problems)


def check_reward_sources(config: Any, datasets: dict[str, Any]) -> None:
    """Fail before training when the rule scorers (``default_compute_score``) will be asked to score a data source
    they do not know: raises ConfigError naming the config key, the source, and the file and row it comes from.

    Nothing is checked when a custom function, a remote scorer or a reward model does the scoring. ``datasets``
    maps a config key (``data.train_files``) to a dataset with ``data_sources(key)``.
    """
    from verl.rewards import KNOWN_DATA_SOURCES, has_default_scorer
    from verl.trainer.config.validation import ConfigError

    rm_cfg = _section(config, "reward_model", RewardModelConfig)
    if (
        _section(config, "custom_reward_function", CustomRewardFunctionConfig).path
        or rm_cfg.remote.url
        or rm_cfg.enable
        or (rm_cfg.reward_manager == "judge" and not rm_cfg.judge.rule_weight)
    ):
        return
    key = _section(config, "data", DataConfig).reward_fn_key or "data_source"
    problems = []
    for name, dataset in datasets.items():
        if dataset is None or not hasattr(dataset, "data_sources"):
            continue
        for source, (path, row) in dataset.data_sources(key).items():
            if not has_default_scorer(source):
                problems.append(f"{name}: {path} row {row}: {key}={source!r}")
    if problems:
        raise ConfigError(
            "no reward function for these data sources: " + "; ".join(problems) + f". The built-in rule scorers know "
            f"{list(KNOWN_DATA_SOURCES)} (and aime*); set custom_reward_function.path to score other data"
        )


def compute_reward(data: Any, reward_fn: Callable[..., Any]) -> tuple[torch.Tensor, dict[str, list[Any]]]:
    """Apply a reward manager to a batch: ``(reward_tensor [bs, response_len], reward_extra_infos_dict)``.

    A batch where a trajectory gave several rows (``verl.trainer.ppo.sessions``) is scored on each trajectory's
    final row, the score shared with its other rows (:func:`~verl.trainer.ppo.sessions.score_final_rows`).
    Errors of the reward function propagate (they are never swallowed into a silent zero reward).
    """
    from verl.trainer.ppo.sessions import score_final_rows

    return score_final_rows(data, lambda rows: _apply_reward_fn(rows, reward_fn))


def _apply_reward_fn(data: Any, reward_fn: Callable[..., Any]) -> tuple[torch.Tensor, dict[str, list[Any]]]:
    result = reward_fn(data, return_dict=True)
    if isinstance(result, torch.Tensor):
        return result, {}
    if not isinstance(result, dict) or "reward_tensor" not in result:
        raise TypeError(
            f"reward function returned {type(result).__name__}; expected a tensor or a dict with 'reward_tensor'"
        )
    return result["reward_tensor"], dict(result.get("reward_extra_info") or {})


_ASYNC_POOL: ThreadPoolExecutor | None = None


def compute_reward_async(data: Any, reward_fn: Callable[..., Any]) -> Future:
    """Start ``compute_reward(data, reward_fn)`` in a background thread (``reward_model.launch_reward_fn_async``)
    so the driver can compute log-probs meanwhile; ``future.result()`` gives ``(reward_tensor, extra_infos)`` or
    re-raises the reward function's error. One worker thread: batches are scored in submission order."""
    global _ASYNC_POOL
    if _ASYNC_POOL is None:
        _ASYNC_POOL = ThreadPoolExecutor(max_workers=1, thread_name_prefix="reward-async")
    return _ASYNC_POOL.submit(compute_reward, data, reward_fn)

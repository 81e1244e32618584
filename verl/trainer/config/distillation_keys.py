"""Upstream verl v0.9's ``distillation`` keys resolved onto this project's on-policy distillation.

Upstream (``verl/trainer/config/distillation/distillation.yaml``, ``verl/workers/config/distillation.py``,
``examples/on_policy_distillation_trainer/*fsdp*.sh``) and here:

=================================================  ===============================================================
upstream                                           here
=================================================  ===============================================================
``enabled``                                        ``enable``
``teacher_models.<name>.model_path`` (one entry)   ``teacher.path``
``teacher_models.<name>.{key,model_path}`` (2+)    teachers routed per row by the ``teacher_key`` column (the default
                                                   entry ``teacher_model`` dropped, as upstream); each loaded once on
                                                   every teacher rank, ``inference.dtype`` per teacher; the
                                                   ``num_replicas`` x tp x dp sum must equal the pool (nnodes > 0)
``teacher_models.<name>.inference.dtype``          ``dtype``
``teacher_models.<name>.inference.max_model_len``  checked: ``prompt_length + response_length + 1`` must fit
``teacher_models.<name>.inference.name``           vllm | hf (a forward pass gives the same log-probs); others refused
``...inference.tensor_model_parallel_size`` x      checked: divides the teacher's ranks (upstream's replicas);
``data_parallel_size``, ``expert_parallel_size``   ep divides a replica; every rank holds a whole teacher here
``...inference.gpu_memory_utilization`` (set)      ``gpu_memory_utilization``: the teacher process's CUDA memory cap
``n_gpus_per_node`` x ``nnodes`` (``nnodes > 0``)  the teacher's pool ``trainer.resource_pool_spec.teacher_pool``
``distillation_loss.distillation_loss_coef``       ``coef`` (1.0 when ``use_task_rewards=false``, as upstream)
``distillation_loss.use_task_rewards=false``       ``task_reward_weight=0``
``distillation_loss.loss_mode`` (estimators)       the per-token estimator of the reward (``estimator_token_rewards``)
``distillation_loss.use_policy_gradient=false``    refused (a supervised loss on the actor: use ``main_gkd``)
``distillation_loss.loss_mode=forward_kl_topk``    refused (needs the teacher's top-k distribution)
=================================================  ===============================================================
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf

from verl.trainer.config.v1_modes import user_set

__all__ = ["resolve_distillation_keys"]

P = "distillation"
TEACHER_POOL = "teacher_pool"
DEFAULT_ENTRY = "teacher_model"  # upstream drops it when other teacher_models entries are added
ENTRY_KEYS = {"key", "model_path", "num_replicas", "inference"}
INFERENCE_KEYS = {
    "name",
    "dtype",
    "tensor_model_parallel_size",
    "expert_parallel_size",
    "data_parallel_size",
    "gpu_memory_utilization",
    "max_model_len",
}
# upstream's teacher server engines whose log-probs a forward pass of the same weights reproduces
TEACHER_ENGINES = {"vllm", "hf"}
DTYPES = {
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
    "float32": "float32",
    "fp32": "float32",
}


def _mirror(cfg: DictConfig, new: str, ours: str, value: Any, user: set[str], errors: list[str], changed: dict) -> None:
    """Write ``value`` (from upstream's key ``new``) to our key ``ours``; the user setting ours differently is an
    error naming both keys."""
    current = OmegaConf.select(cfg, ours)
    if current == value:
        return
    if user_set(ours, user):
        errors.append(f"{new} and {ours}={current} set the same thing differently (it asks {value}); keep one")
        return
    OmegaConf.update(cfg, ours, value, merge=False)
    changed[ours] = value


def _entry_shapes(entries: dict[str, Any], errors: list[str]) -> None:
    """Every ``teacher_models`` entry is a mapping of teacher keys (``inference`` of the server keys we read)."""
    for name, entry in entries.items():
        if not isinstance(entry, DictConfig):
            errors.append(f"{P}.teacher_models.{name}: expected a mapping (key, model_path, num_replicas, inference)")
            continue
        for key in sorted(set(entry.keys()) - ENTRY_KEYS):
            errors.append(f"{P}.teacher_models.{name}.{key}: not a teacher key here (only {sorted(ENTRY_KEYS)})")
        inference = entry.get("inference")
        if isinstance(inference, DictConfig):
            for key in sorted(set(inference.keys()) - INFERENCE_KEYS):
                errors.append(
                    f"{P}.teacher_models.{name}.inference.{key}: upstream's teacher server setting with no counterpart "
                    "here (the teacher is a forward pass in the teacher worker group); drop it"
                )


def _teacher(cfg: DictConfig, user: set[str], errors: list[str], changed: dict[str, Any]) -> None:
    """``teacher_models``: upstream drops the default entry ``teacher_model`` when others are added; one teacher
    left (with a ``model_path``) becomes ``teacher.path`` (and its inference dtype), two or more are routed per row
    by ``teacher_key`` (:func:`_teachers`)."""
    entries = {str(k): v for k, v in cfg.distillation.teacher_models.items()}
    _entry_shapes(entries, errors)
    entries = {k: v for k, v in entries.items() if isinstance(v, DictConfig)}
    if len(entries) > 1:
        default = entries.pop(DEFAULT_ENTRY, None)
        if default is not None and default.get("model_path"):
            errors.append(
                f"{P}.teacher_models.{DEFAULT_ENTRY}.model_path: upstream drops the default entry {DEFAULT_ENTRY} "
                f"when other teachers are added, so this teacher would be silently unused; give it a name of its own "
                f"(+{P}.teacher_models.<name>.model_path / .key)"
            )
    if len(entries) > 1:
        _teachers(cfg, entries, user, errors, changed)
        return
    given = {name: e for name, e in entries.items() if e.get("model_path")}
    if not given:
        return
    name, entry = next(iter(given.items()))
    where = f"{P}.teacher_models.{name}"
    _mirror(cfg, f"{where}.model_path", f"{P}.teacher.path", str(entry.model_path), user, errors, changed)
    inference = entry.get("inference")
    if not isinstance(inference, DictConfig):
        return
    _teacher_layout(cfg, where, inference, errors)
    _memory_share(cfg, {where: inference}, user, errors, changed)
    dtype = inference.get("dtype")
    if dtype is not None:
        if str(dtype) not in DTYPES:
            errors.append(f"{where}.inference.dtype={dtype}: one of {sorted(DTYPES)}")
        else:
            _mirror(cfg, f"{where}.inference.dtype", f"{P}.dtype", DTYPES[str(dtype)], user, errors, changed)
    _max_model_len(cfg, where, inference, errors)


def _max_model_len(cfg: DictConfig, where: str, inference: DictConfig, errors: list[str]) -> None:
    max_len = inference.get("max_model_len")
    if max_len is not None:
        need = int(cfg.data.max_prompt_length) + int(cfg.data.max_response_length) + 1
        if int(max_len) < need:
            errors.append(
                f"{where}.inference.max_model_len={max_len}: the teacher reads the prompt, the whole response and "
                f"one more token: needs >= data.max_prompt_length + data.max_response_length + 1 = {need}"
            )


def _memory_share(
    cfg: DictConfig, inferences: dict[str, DictConfig], user: set[str], errors: list[str], changed: dict
) -> None:
    """``inference.gpu_memory_utilization`` set by the user (on every teacher, the same share: the teachers share
    one process per rank here) -> ``distillation.gpu_memory_utilization``, with a teacher pool of its own only."""
    shares = {
        where: inf.get("gpu_memory_utilization")
        for where, inf in inferences.items()
        if user_set(f"{where}.inference.gpu_memory_utilization", user) and inf.get("gpu_memory_utilization") is not None
    }
    if not shares:
        return
    where, mem = next(iter(shares.items()))
    if len(set(map(float, shares.values()))) > 1 or len(shares) != len(inferences):
        listed = ", ".join(f"{w}={shares.get(w)}" for w in inferences)
        errors.append(
            f"{P}.teacher_models.*.inference.gpu_memory_utilization: the teachers share one process per rank here, "
            f"capped at one GPU share; set the same value on every teacher ({listed})"
        )
    elif not 0 < float(mem) <= 1:
        errors.append(f"{where}.inference.gpu_memory_utilization={mem}: a share of the GPU, in (0, 1]")
    elif int(cfg.distillation.nnodes) < 1:
        errors.append(
            f"{where}.inference.gpu_memory_utilization={mem} with the teacher colocated: a GPU memory share of "
            f"its own is not available here (it shares the actor's process); set {P}.nnodes >= 1 (a pool of its "
            "own, capped at this share) or drop the key"
        )
    else:
        _mirror(cfg, f"{where}.inference.gpu_memory_utilization", f"{P}.gpu_memory_utilization", float(mem),
                user, errors, changed)  # fmt: skip


def _teachers(
    cfg: DictConfig, entries: dict[str, DictConfig], user: set[str], errors: list[str], changed: dict[str, Any]
) -> None:
    """Several teachers routed by ``teacher_key`` (upstream's ``_resolve_teacher_models``): each needs
    ``model_path`` and a distinct ``key``; with a pool of its own (``nnodes > 0``) the teachers' ``num_replicas x
    tensor_model_parallel_size x data_parallel_size`` add up to the pool, as upstream requires. Every teacher rank
    holds each teacher here (verl/workers/teacher.py); ``inference.dtype`` stays per teacher."""
    if user_set(f"{P}.teacher.path", user) and cfg.distillation.teacher.path:
        errors.append(
            f"{P}.teacher.path and {len(entries)} {P}.teacher_models ({', '.join(sorted(entries))}) both name the "
            "teacher; keep teacher_models"
        )
    seen: dict[str, str] = {}
    pool = 0
    for name, entry in entries.items():
        where = f"{P}.teacher_models.{name}"
        missing = [k for k in ("model_path", "key") if entry.get(k) in (None, "")]
        if missing:
            errors.append(
                f"{where}: a teacher of several needs {' and '.join(missing)} (key: the {P}.teacher_key value "
                f"({cfg.distillation.teacher_key}) of the rows it scores)"
            )
            continue
        if str(entry.key) in seen:
            errors.append(f"{where}.key={entry.key}: also the key of {P}.teacher_models.{seen[str(entry.key)]}")
        seen[str(entry.key)] = name
        inference = entry.get("inference")
        inference = inference if isinstance(inference, DictConfig) else DictConfig({})
        _teacher_engine(where, inference, errors)
        replica = int(inference.get("tensor_model_parallel_size") or 1) * int(inference.get("data_parallel_size") or 1)
        pool += int(entry.get("num_replicas") or 0) * replica
        dtype = inference.get("dtype")
        if dtype is not None and str(dtype) not in DTYPES:
            errors.append(f"{where}.inference.dtype={dtype}: one of {sorted(DTYPES)}")
        _max_model_len(cfg, where, inference, errors)
    dist = cfg.distillation
    ranks = int(dist.nnodes) * int(dist.n_gpus_per_node)
    if int(dist.nnodes) > 0 and pool != ranks:
        errors.append(
            f"{P}.teacher_models: the teachers' num_replicas x tensor_model_parallel_size x data_parallel_size add "
            f"up to {pool}, but the teacher pool ({P}.nnodes x {P}.n_gpus_per_node) has {ranks} ranks; upstream "
            "requires them equal"
        )
    inferences = {f"{P}.teacher_models.{n}": e.inference for n, e in entries.items() if "inference" in e}
    _memory_share(cfg, inferences, user, errors, changed)


def _teacher_engine(where: str, inference: DictConfig, errors: list[str]) -> None:
    """``inference.name`` (vllm | hf) and ``expert_parallel_size`` dividing a replica, as upstream checks them."""
    engine = inference.get("name")
    if engine is not None and str(engine) not in TEACHER_ENGINES:
        errors.append(
            f"{where}.inference.name={engine}: {engine} is not an engine here; the teacher's log-probs are a forward "
            f"pass of its weights (the numbers vLLM returns): use inference.name=vllm or hf"
        )
    replica = int(inference.get("tensor_model_parallel_size") or 1) * int(inference.get("data_parallel_size") or 1)
    ep = int(inference.get("expert_parallel_size") or 1)
    if ep < 1 or replica < 1 or replica % ep:
        errors.append(
            f"{where}.inference.expert_parallel_size={ep} must divide a teacher replica's {replica} ranks "
            f"(tensor_model_parallel_size x data_parallel_size), as upstream requires"
        )


def _teacher_layout(cfg: DictConfig, where: str, inference: DictConfig, errors: list[str]) -> None:
    """``inference.name`` and the parallel sizes of upstream's single teacher server, checked as upstream checks them.

    The teacher's log-probs are a forward pass of its weights here (what vLLM's prompt log-probs compute), so the
    engine ``name`` may be ``vllm`` or ``hf``; other engines are refused. Upstream splits the teacher's ranks into
    replicas of ``tensor_model_parallel_size x data_parallel_size`` ranks, with ``expert_parallel_size`` dividing
    a replica: the same arithmetic must hold here for the pool (``distillation.nnodes x n_gpus_per_node``, or the
    actor's ranks when colocated), where every rank then holds a whole teacher (docs/judge_and_distillation.md).
    """
    dist = cfg.distillation
    if int(dist.nnodes) > 0:
        ranks, pool = int(dist.nnodes) * int(dist.n_gpus_per_node), f"{P}.nnodes x {P}.n_gpus_per_node"
    else:
        ranks, pool = int(cfg.trainer.nnodes) * int(cfg.trainer.n_gpus_per_node), "the actor's ranks: colocated"
    sizes = {k: int(inference.get(k) or 1) for k in ("tensor_model_parallel_size", "data_parallel_size")}
    replica = sizes["tensor_model_parallel_size"] * sizes["data_parallel_size"]
    if min(sizes.values()) < 1 or ranks % replica:
        errors.append(
            f"{where}.inference.tensor_model_parallel_size x data_parallel_size = {replica} must be >= 1 and divide "
            f"the teacher's {ranks} ranks ({pool}), as upstream splits them into replicas"
        )
        return
    _teacher_engine(where, inference, errors)


def _loss(cfg: DictConfig, user: set[str], errors: list[str], changed: dict[str, Any]) -> None:
    """``distillation_loss``: the supported forms, onto ``coef`` / ``task_reward_weight``."""
    loss = cfg.distillation.distillation_loss
    lp = f"{P}.distillation_loss"
    if not loss.use_policy_gradient:
        errors.append(
            f"{lp}.use_policy_gradient=false: a supervised distillation loss on the PPO actor is not provided; use "
            f"use_policy_gradient=true (the loss as a per-token reward) or python -m verl.trainer.main_gkd"
        )
    if loss.loss_mode == "forward_kl_topk":
        errors.append(
            f"{lp}.loss_mode=forward_kl_topk: needs the teacher's top-k distribution per token, which the teacher "
            "worker does not return; use k1, k2, k3 or abs (or main_gkd for full-distribution losses)"
        )
    actor = cfg.actor_rollout_ref.actor
    for key, ours in (("clip_ratio", actor.clip_ratio), ("clip_ratio_low", actor.clip_ratio_low),
                      ("clip_ratio_high", actor.clip_ratio_high)):  # fmt: skip
        ours = actor.clip_ratio if ours is None else ours
        if user_set(f"{lp}.{key}", user) and float(loss[key]) != float(ours):
            errors.append(
                f"{lp}.{key}={loss[key]}: the distillation term goes through the actor's policy loss here, clipped "
                f"by actor_rollout_ref.actor.{key} ({ours}); set that key instead"
            )
    if loss.use_task_rewards:
        if user_set(f"{lp}.distillation_loss_coef", user):
            _mirror(cfg, f"{lp}.distillation_loss_coef", f"{P}.coef", float(loss.distillation_loss_coef), user,
                    errors, changed)  # fmt: skip
        return
    if user_set(f"{lp}.distillation_loss_coef", user) and float(loss.distillation_loss_coef) != 1.0:
        errors.append(f"{lp}.distillation_loss_coef acts only with {lp}.use_task_rewards=true (as upstream); drop it")
    _mirror(cfg, f"{lp}.use_task_rewards=false", f"{P}.task_reward_weight", 0.0, user, errors, changed)
    _mirror(cfg, f"{lp}.use_task_rewards=false", f"{P}.coef", 1.0, user, errors, changed)


def resolve_distillation_keys(cfg: DictConfig, user: set[str], errors: list[str]) -> dict[str, Any]:
    """Apply upstream's ``distillation`` keys (module docstring) to ours in ``cfg``; refusals and conflicts go to
    ``errors``, one line each. Returns ``{key: new value}`` of what changed."""
    changed: dict[str, Any] = {}
    dist = cfg.get("distillation")
    if not isinstance(dist, DictConfig) or "enabled" not in dist:
        return changed
    if user_set(f"{P}.enabled", user) and user_set(f"{P}.enable", user) and bool(dist.enabled) != bool(dist.enable):
        errors.append(f"{P}.enabled={dist.enabled} and {P}.enable={dist.enable} set the same thing; keep one")
        return changed
    if user_set(f"{P}.enabled", user):
        _mirror(cfg, f"{P}.enabled", f"{P}.enable", bool(dist.enabled), user, errors, changed)
    elif bool(dist.enable) != bool(dist.enabled):
        dist.enabled = bool(dist.enable)
        changed[f"{P}.enabled"] = bool(dist.enable)
    if not dist.enable:
        return changed
    _teacher(cfg, user, errors, changed)
    _loss(cfg, user, errors, changed)
    nodes = int(dist.nnodes)
    if nodes > 0:
        per_node = int(dist.n_gpus_per_node)
        mapping = cfg.trainer.resource_pool_mapping
        if per_node < 1:
            errors.append(f"{P}.n_gpus_per_node={per_node}: a teacher pool ({P}.nnodes={nodes}) needs >= 1")
        elif "teacher" in mapping and mapping["teacher"] != TEACHER_POOL:
            errors.append(
                f"{P}.nnodes={nodes} (a teacher pool of its own) conflicts with trainer.resource_pool_mapping.teacher="
                f"{mapping['teacher']}; set only one of the two"
            )
        else:
            OmegaConf.update(cfg, f"trainer.resource_pool_spec.{TEACHER_POOL}", [per_node] * nodes, merge=False)
            OmegaConf.update(cfg, "trainer.resource_pool_mapping.teacher", TEACHER_POOL, merge=False)
            changed["trainer.resource_pool_mapping.teacher"] = TEACHER_POOL
    return changed

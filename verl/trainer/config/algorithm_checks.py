"""Cross-field checks of the algorithm keys: ``algorithm.rollout_correction.*`` and the settings the v0.9 losses and
estimators need (``policy_loss.dro_beta``, ``tau_pos``/``tau_neg``, ``loss_scale_factor``,
``calculate_sum_pi_squared``, ``gdpo_reward_keys``). Each problem is one line naming the key, why, and what to use."""

from __future__ import annotations

import warnings
from typing import Any

from omegaconf import DictConfig

from verl.algorithms.policy_loss_trust_region import sapo_temperatures
from verl.algorithms.rollout_correction import RS_LEVELS
from verl.algorithms.rollout_rejection import parse_is_threshold, parse_rs_options, parse_rs_thresholds
from verl.trainer.config.spo_checks import spo_enabled
from verl.utils.errors import ConfigWarning

_OTB = ("optimal_token_baseline", "tir_optimal_token_baseline")


def _check_rs(rc: DictConfig, prefix: str, errors: list[str]) -> None:
    """``rollout_rs`` is an earlier level (bounds on the weight) or upstream v0.9's divergence options (their
    thresholds parsed now, so a bad spec fails before the first step)."""
    rs = rc.rollout_rs
    if rs is None:
        if rc.rollout_rs_threshold_lower is not None:
            errors.append(f"{prefix}.rollout_rs_threshold_lower is set but {prefix}.rollout_rs is null: set both")
        return
    if rs in RS_LEVELS:
        upper = rc.rollout_rs_threshold
        try:
            upper = parse_is_threshold(rc.rollout_is_threshold)[0] if upper is None else float(upper)
        except ValueError:
            errors.append(f"{prefix}.rollout_rs={rs} takes a number as rollout_rs_threshold, got {upper!r}")
            return
        lower = rc.rollout_rs_threshold_lower
        if not upper > 0:
            errors.append(f"{prefix}.rollout_rs_threshold={upper} must be > 0")
        elif lower is not None and not float(lower) > 0:
            errors.append(f"{prefix}.rollout_rs_threshold_lower={lower} must be > 0")
        elif lower is not None and float(lower) > upper:
            errors.append(
                f"{prefix}.rollout_rs_threshold_lower={lower} is above the upper rejection threshold {upper} "
                f"({prefix}.rollout_rs_threshold, or rollout_is_threshold when that is null): every token would be "
                "rejected"
            )
        return
    if rc.rollout_rs_threshold_lower is not None:
        errors.append(
            f"{prefix}.rollout_rs_threshold_lower goes with rollout_rs=token|sequence|geometric; with {rs} give the "
            f"k1 bounds as rollout_rs_threshold='lower_upper'"
        )
    try:
        parse_rs_thresholds(parse_rs_options(rs), rc.rollout_rs_threshold)
    except ValueError as exc:
        errors.append(f"{prefix}.rollout_rs={rs}: {exc}")


def check_rollout_correction(cfg: DictConfig, errors: list[str]) -> None:
    """``algorithm.rollout_correction``: threshold specs parse, the rollout's log-probs are available when any
    correction is on, and bypass mode takes only what its loss honours (weights, divergence rejection,
    ``loss_type``); ``loss_type=reinforce`` and ``policy_loss.loss_mode=bypass_mode`` only in bypass mode."""
    rc = cfg.algorithm.get("rollout_correction")
    if rc is None:
        return
    prefix = "algorithm.rollout_correction"
    if rc.rollout_is_threshold is None:
        # upstream v0.9's scripts null it beside rollout_is=null (one_step_off_policy/shell/*_ris.sh): fine while unread
        readers = ["rollout_is"] if rc.rollout_is is not None else []
        if rc.rollout_rs in RS_LEVELS and rc.rollout_rs_threshold is None:
            readers.append(f"rollout_rs={rc.rollout_rs} without rollout_rs_threshold")
        if readers:
            errors.append(
                f"{prefix}.rollout_is_threshold is null but {' and '.join(readers)} reads it: give a threshold"
            )
            return
    else:
        try:
            parse_is_threshold(rc.rollout_is_threshold)
        except (TypeError, ValueError) as exc:
            errors.append(f"{prefix}.{exc}")
    _check_rs(rc, prefix, errors)
    veto = rc.rollout_token_veto_threshold
    if veto is not None and not 0 < float(veto) < 1:
        errors.append(f"{prefix}.rollout_token_veto_threshold={veto} must be in (0, 1) (a weight that small vetoes)")
    corrections = [k for k in ("rollout_is", "rollout_rs", "rollout_token_veto_threshold") if rc.get(k) is not None]
    loss_mode = str(cfg.actor_rollout_ref.actor.policy_loss.loss_mode)
    if rc.bypass_mode:
        if veto is not None:
            errors.append(
                f"{prefix}.rollout_token_veto_threshold is not applied in bypass mode (upstream's bypass loss has no "
                f"veto): use {prefix}.rollout_rs=token_k1 with rollout_rs_threshold='lower_upper'"
            )
        if rc.rollout_rs in RS_LEVELS:
            errors.append(
                f"{prefix}.rollout_rs={rc.rollout_rs} is the decoupled-mode rejection; in bypass mode use upstream's "
                f"options (token_k1, seq_mean_k1 = geometric, seq_sum_k1 = sequence, ...)"
            )
        corrected = rc.rollout_is is not None or rc.rollout_rs is not None or rc.loss_type == "reinforce"
        if corrected and loss_mode not in ("vanilla", "bypass_mode"):
            errors.append(
                f"actor_rollout_ref.actor.policy_loss.loss_mode={loss_mode}: with {prefix}.bypass_mode=true and a "
                f"correction or loss_type=reinforce the loss is upstream's bypass_mode (PPO clip or REINFORCE); "
                f"set loss_mode=vanilla, or drop the correction to keep {loss_mode}"
            )
    else:
        if rc.loss_type != "ppo_clip":
            errors.append(
                f"{prefix}.loss_type={rc.loss_type} acts in bypass mode only: set {prefix}.bypass_mode=true "
                "(or loss_type=ppo_clip)"
            )
        if loss_mode == "bypass_mode":
            errors.append(
                "actor_rollout_ref.actor.policy_loss.loss_mode=bypass_mode is selected by "
                f"{prefix}.bypass_mode=true (with loss_type ppo_clip|reinforce), not by hand: set bypass_mode=true"
            )
    if (corrections or rc.bypass_mode) and not cfg.actor_rollout_ref.rollout.calculate_log_probs:
        what = ", ".join(f"{prefix}.{k}" for k in corrections + (["bypass_mode"] if rc.bypass_mode else []))
        errors.append(f"{what} needs the rollout's log-probs: set actor_rollout_ref.rollout.calculate_log_probs=true")


def fit_rollout_log_probs(cfg: DictConfig, user_keys: set[str]) -> dict[str, Any]:
    """``actor_rollout_ref.rollout.calculate_log_probs=true`` when a rollout correction (``rollout_is``,
    ``rollout_rs``, ``rollout_token_veto_threshold``, ``bypass_mode``) reads the rollout's log-probs and the user did
    not set the key (upstream's rollout servers always return them; a ConfigWarning says so). Returns what changed."""
    rc = cfg.algorithm.get("rollout_correction")
    key = "actor_rollout_ref.rollout.calculate_log_probs"
    if rc is None or key in user_keys or cfg.actor_rollout_ref.rollout.calculate_log_probs:
        return {}
    readers = [k for k in ("rollout_is", "rollout_rs", "rollout_token_veto_threshold") if rc.get(k) is not None]
    readers += ["bypass_mode"] if rc.get("bypass_mode") else []
    if not readers:
        return {}
    cfg.actor_rollout_ref.rollout.calculate_log_probs = True
    warnings.warn(
        f"{key}=true: algorithm.rollout_correction.{readers[0]} reads the rollout's log-probs (set the key to "
        "silence this)",
        ConfigWarning,
        stacklevel=2,
    )
    return {key: True}


def fit_generation_batch(cfg: DictConfig, user_keys: set[str]) -> dict[str, Any]:
    """``data.gen_batch_size`` other than ``data.train_batch_size`` in synchronous training without dynamic sampling
    (``algorithm.filter_groups.enable=false``): upstream's trainers (the PPO trainer, DAPO's, FlowRL's) then draw
    ``gen_batch_size`` prompts a step and train on all of them, since nothing trims the batch. So does this trainer:
    ``data.train_batch_size`` becomes ``gen_batch_size``, and a ConfigWarning says so (not with SPO, which draws
    ``train_batch_size`` prompts out of it by priority). Returns what changed."""
    del user_keys  # the rule holds whoever set the two sizes
    gen = cfg.data.get("gen_batch_size")
    at = cfg.get("async_training")
    if gen is None or cfg.algorithm.filter_groups.enable or (at is not None and at.get("mode") is not None):
        return {}
    if spo_enabled(cfg):  # SPO draws train_batch_size prompts out of the generation batch by priority
        return {}
    gen, train = int(gen), int(cfg.data.train_batch_size)
    if gen == train or gen < 1:
        return {}
    cfg.data.train_batch_size = gen
    warnings.warn(
        f"data.gen_batch_size={gen} with data.train_batch_size={train} and dynamic sampling off: each step trains on "
        f"the whole generation batch of {gen} prompts, as upstream's trainers do (nothing trims it), so "
        f"data.train_batch_size is {gen}; set algorithm.filter_groups.enable=true to keep {train} varied groups of it",
        ConfigWarning,
        stacklevel=2,
    )
    return {"data.train_batch_size": gen}


def check_algorithm_keys(cfg: DictConfig, errors: list[str]) -> None:
    """What the upstream v0.9 losses and estimators need to run: ``dro_beta`` for ``dro``, positive SAPO
    temperatures and ``loss_scale_factor``, ``calculate_sum_pi_squared`` (and an old-log-prob pass) for the optimal
    token baselines, ``gdpo_reward_keys`` (with matching weights) for ``gdpo``."""
    actor = cfg.actor_rollout_ref.actor
    loss_mode = str(actor.policy_loss.loss_mode)
    if loss_mode == "dro" and not (actor.policy_loss.dro_beta is not None and float(actor.policy_loss.dro_beta) > 0):
        errors.append(
            f"actor_rollout_ref.actor.policy_loss.dro_beta={actor.policy_loss.dro_beta}: loss_mode=dro needs a "
            "positive beta (the weight of its squared log-ratio penalty, e.g. 0.1)"
        )
    if loss_mode == "sapo":
        tau_pos, tau_neg = sapo_temperatures(actor)
        if not (tau_pos > 0 and tau_neg > 0):
            errors.append(
                f"actor_rollout_ref.actor.tau_pos/tau_neg must be > 0 for loss_mode=sapo ({tau_pos}, {tau_neg}; "
                "policy_loss.tau_pos/tau_neg win where set)"
            )
    for path, value in (
        ("actor_rollout_ref.actor.loss_scale_factor", actor.loss_scale_factor),
        ("critic.loss_scale_factor", cfg.critic.loss_scale_factor),
    ):
        if value is not None and not float(value) > 0:
            errors.append(f"{path}={value} must be > 0 (or null: the response length)")
    algo = cfg.algorithm
    estimator = str(algo.adv_estimator)
    if estimator in _OTB:
        if not actor.calculate_sum_pi_squared:
            errors.append(
                f"algorithm.adv_estimator={estimator} needs sum_v pi(v)^2 per token from the old-log-prob pass: set "
                "actor_rollout_ref.actor.calculate_sum_pi_squared=true"
            )
        rc = algo.get("rollout_correction")
        if rc is not None and rc.bypass_mode:
            errors.append(
                f"algorithm.adv_estimator={estimator} reads the old-log-prob pass's sum_pi_squared, which "
                "algorithm.rollout_correction.bypass_mode=true skips: set bypass_mode=false"
            )
    if algo.use_pf_ppo and estimator != "gae":
        errors.append(
            f"algorithm.use_pf_ppo=true resamples after GAE only (as upstream); with adv_estimator={estimator} it "
            "would do nothing: set use_pf_ppo=false or adv_estimator=gae"
        )
    if estimator == "gdpo":
        keys = algo.gdpo_reward_keys
        if not keys:
            errors.append(
                "algorithm.adv_estimator=gdpo needs +algorithm.gdpo_reward_keys=[...]: the keys of the reward "
                "function's dict to normalise one by one (e.g. '[accuracy_reward, format_reward]')"
            )
        weights = algo.gdpo_reward_weights
        if keys and weights is not None and len(weights) != len(keys):
            errors.append(
                f"algorithm.gdpo_reward_weights has {len(weights)} entries for {len(keys)} gdpo_reward_keys: give one "
                "weight per key (or leave it out: all 1)"
            )


def check_ref_update(cfg: DictConfig, reference_used: bool, errors: list[str]) -> None:
    """``trainer.ref_update_freq > 0`` refreshes a reference policy that has weights of its own: one must be in use
    (a KL term, or ``loss_mode=online_dpo``) and not be a LoRA run's base model."""
    freq = int(cfg.trainer.ref_update_freq)
    if freq <= 0:
        return
    if not reference_used:
        errors.append(
            f"trainer.ref_update_freq={freq} refreshes the reference policy, which this run does not use (no KL term, "
            "loss_mode not online_dpo): drop it, or set actor_rollout_ref.actor.use_kl_loss=true"
        )
    from verl.models.lora import lora_enabled

    if lora_enabled(cfg.actor_rollout_ref.model):
        errors.append(
            f"trainer.ref_update_freq={freq} with LoRA: the reference is the base model under the adapters and has no "
            "weights of its own to refresh; train without LoRA to refresh it, or drop the key"
        )


def check_dynamic_sampling(cfg: DictConfig, errors: list[str]) -> None:
    """DAPO's dynamic sampling (``algorithm.filter_groups``) and its generation batch (``data.gen_batch_size``):
    a metric to filter on when enabled, and a generation batch different from the training batch only with it or in
    synchronous training, where :func:`fit_generation_batch` has made it the training batch (upstream's rule)."""
    fg = cfg.algorithm.filter_groups
    if fg.enable and not fg.metric:
        errors.append(
            "algorithm.filter_groups.metric is null: dynamic sampling keeps the groups whose metric varies; name it "
            "(acc, score, seq_reward, seq_final_reward or a key of the reward function's dict)"
        )
    gen = cfg.data.get("gen_batch_size")
    if gen is None:
        return
    train = int(cfg.data.train_batch_size)
    if int(gen) < 1:
        errors.append(f"data.gen_batch_size={gen} must be >= 1 (or null: data.train_batch_size)")
    elif int(gen) != train and not fg.enable and not spo_enabled(cfg):  # SPO samples from it
        mode = (cfg.get("async_training") or {}).get("mode")
        why = (
            f"async_training.mode={mode} requests whole batches of data.train_batch_size prompts here (upstream's "
            "fully asynchronous trainer streams them one at a time with gen_batch_size=1)"
            if mode
            else "a generation batch other than the training batch is drawn only by dynamic sampling "
            "(algorithm.filter_groups.enable=true), which keeps data.train_batch_size groups out of it"
        )
        errors.append(f"data.gen_batch_size={gen} with data.train_batch_size={train}: {why}; drop it")


# losses of one term per response (or pair) without a probability ratio, and those of them that need whole groups
_NO_RATIO_LOSSES = ("gvpo", "sppo", "online_dpo")
_GROUP_LOSSES = ("gvpo", "online_dpo")


def check_regression_losses(cfg: DictConfig, errors: list[str]) -> None:
    """The losses without a probability ratio, ``gvpo``, ``sppo`` and ``online_dpo``: no importance weights or
    bypass loss. ``gvpo`` and ``online_dpo`` also need each prompt group whole inside one micro-batch
    (verl/algorithms/policy_loss_gvpo.py, online_dpo.py): groups of at least two, fixed micro-batches of whole
    groups, no shuffle; ``gvpo_beta`` / ``dpo_beta`` positive, ``dpo_label_smoothing`` in [0, 0.5)."""
    actor = cfg.actor_rollout_ref.actor
    loss_mode = str(actor.policy_loss.loss_mode)
    if loss_mode not in _NO_RATIO_LOSSES:
        return
    _refuse_rollout_correction(cfg, f"loss_mode={loss_mode} has no probability ratio to correct", errors)
    prefix = "actor_rollout_ref.actor"
    if loss_mode == "gvpo" and not float(actor.gvpo_beta) > 0:
        errors.append(f"{prefix}.gvpo_beta={actor.gvpo_beta} must be > 0 for loss_mode=gvpo (the recipe uses 0.1)")
    if loss_mode == "online_dpo":
        if not float(actor.dpo_beta) > 0:
            errors.append(f"{prefix}.dpo_beta={actor.dpo_beta} must be > 0 for loss_mode=online_dpo (e.g. 0.1)")
        if not 0.0 <= float(actor.dpo_label_smoothing) < 0.5:
            errors.append(f"{prefix}.dpo_label_smoothing={actor.dpo_label_smoothing} must be in [0, 0.5)")
    if loss_mode in _GROUP_LOSSES:
        _check_whole_groups(cfg, loss_mode, errors)


def _refuse_rollout_correction(cfg: DictConfig, why: str, errors: list[str]) -> None:
    """One line when ``algorithm.rollout_correction`` reweights (``rollout_is``) or replaces (``bypass_mode``) the
    policy loss of a loss that cannot take it, ``why`` saying so."""
    rc = cfg.algorithm.rollout_correction
    if rc.rollout_is is not None or rc.bypass_mode:
        what = "rollout_is" if rc.rollout_is is not None else "bypass_mode"
        errors.append(f"algorithm.rollout_correction.{what} reweights or replaces the policy loss; {why}: unset it")


def _check_whole_groups(cfg: DictConfig, loss_mode: str, errors: list[str]) -> None:
    actor = cfg.actor_rollout_ref.actor
    prefix, n = "actor_rollout_ref.actor", int(cfg.actor_rollout_ref.rollout.n)
    if n < 2:
        errors.append(
            f"loss_mode={loss_mode} compares each prompt's responses: set actor_rollout_ref.rollout.n >= 2 (got {n})"
        )
    whole = f"loss_mode={loss_mode} needs each prompt group inside one micro-batch"
    if actor.use_dynamic_bsz:
        errors.append(
            f"{prefix}.use_dynamic_bsz=true packs micro-batches by tokens, cutting prompt groups; {whole}: set it "
            f"false and {prefix}.ppo_micro_batch_size_per_gpu to a multiple of rollout.n"
        )
    elif actor.ppo_micro_batch_size_per_gpu is not None and n >= 2 and int(actor.ppo_micro_batch_size_per_gpu) % n:
        errors.append(
            f"{prefix}.ppo_micro_batch_size_per_gpu={actor.ppo_micro_batch_size_per_gpu} is not a multiple of "
            f"actor_rollout_ref.rollout.n={n}; {whole}"
        )
    if actor.shuffle:
        errors.append(f"{prefix}.shuffle=true mixes the rows of prompt groups across mini-batches; {whole}: set false")


def check_flowrl(cfg: DictConfig, errors: list[str]) -> None:
    """``loss_mode=flowrl`` (verl/algorithms/flowrl.py): its own sequence importance weight (no rollout correction
    on top), a log Z head trained beside full weights (no LoRA, whose optimizer sees only the adapters), no Ulysses
    sequence parallelism (the prompt pass is not split over a group), and constants in range."""
    actor = cfg.actor_rollout_ref.actor
    if str(actor.policy_loss.loss_mode) != "flowrl":
        return
    prefix = "actor_rollout_ref.actor"
    why = "loss_mode=flowrl weighs each response by its own capped sequence importance weight (flowrl_weight_cap)"
    _refuse_rollout_correction(cfg, why, errors)
    from verl.models.lora import lora_enabled

    if lora_enabled(cfg.actor_rollout_ref.model):
        errors.append(
            "loss_mode=flowrl trains a log Z head beside the policy, and a LoRA run trains only its adapters: set "
            "actor_rollout_ref.model.lora_rank=0 (upstream's FlowRL recipe trains full weights too)"
        )
    if int(actor.ulysses_sequence_parallel_size) > 1:
        errors.append(
            f"{prefix}.ulysses_sequence_parallel_size={actor.ulysses_sequence_parallel_size}: loss_mode=flowrl's log Z "
            "pass over the prompts is not split over a sequence-parallel group here; set it to 1"
        )
    loss = actor.policy_loss
    for key in ("flowrl_beta", "flowrl_weight_cap"):
        if not float(loss[key]) > 0:
            errors.append(f"{prefix}.policy_loss.{key}={loss[key]} must be > 0 for loss_mode=flowrl")
    if int(loss.flowrl_proj_layers) < 1:
        errors.append(f"{prefix}.policy_loss.flowrl_proj_layers={loss.flowrl_proj_layers} must be >= 1")
    if not 0.0 <= float(loss.flowrl_proj_dropout) < 1.0:
        errors.append(f"{prefix}.policy_loss.flowrl_proj_dropout={loss.flowrl_proj_dropout} must be in [0, 1)")

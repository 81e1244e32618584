"""``BaseAlgorithm``: extend verl with your own PPO-family algorithm by subclassing.

A subclass defines its advantage (``compute_advantage``) and/or its policy loss (``compute_policy_loss``); the
rest of the step (rollout, reward, log-probs, KL, critic, optimizer, checkpoints, logging) is the one driver that
``main_ppo`` and :class:`verl.api.ppo.PPOTrainer` run. Nothing here is a second trainer: :meth:`register` puts the
two methods into the same registries as the built-ins (``register_adv_est`` / ``register_policy_loss``) under
:attr:`name`, and :meth:`config_overrides` selects them (``algorithm.adv_estimator`` and
``actor_rollout_ref.actor.policy_loss.loss_mode``). ``PPOTrainer(config={"algorithm": MyAlgorithm()})`` does both.

GRPO with a custom baseline (the group median instead of the mean)::

    class MedianGRPO(BaseAlgorithm):
        name = "grpo_median"

        def compute_advantage(self, token_level_rewards, response_mask, index, **kwargs):
            scores = token_level_rewards.sum(-1)
            baseline = torch.stack([scores[index == uid].median() for uid in index])
            adv = (scores - baseline).unsqueeze(-1) * response_mask
            return adv, adv

The registries live in the process that runs the workers: with the local backend (the Python API) that is the
driver's process; with Ray, define the subclass in a module the workers import.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

import torch

from verl.algorithms.registry import (
    call_with_supported_kwargs,
    get_adv_estimator_fn,
    get_policy_loss_fn,
    register_adv_est,
    register_policy_loss,
)


class BaseAlgorithm:
    """A named advantage estimator + policy loss pair, trained through the standard PPO driver.

    Class attributes:
        name: the registry name (default: the class name in snake case).
        base_estimator: the registered estimator :meth:`compute_advantage` delegates to unless overridden.
        base_policy_loss: the registered loss :meth:`compute_policy_loss` delegates to unless overridden.
        uses_critic: the advantage needs ``values`` (a critic is trained, as for GAE).
    """

    name: ClassVar[str | None] = None
    base_estimator: ClassVar[str] = "grpo"
    base_policy_loss: ClassVar[str] = "vanilla"
    uses_critic: ClassVar[bool] = False

    @classmethod
    def registry_name(cls) -> str:
        """:attr:`name`, else the class name in snake case (``MedianGRPO`` -> ``median_grpo``)."""
        if cls.name:
            return str(cls.name)
        return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", cls.__name__).lower()

    # -------------------------------------------------------------------------------------------- override
    def compute_advantage(
        self, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: Any = None, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(advantages, returns)``, both ``[batch, response_len]``, from the token-level rewards
        ``[batch, response_len]`` (task score at the last token, minus the KL penalty when it is in the reward),
        the ``response_mask`` and ``index`` (the ``uid`` group id of each row, a numpy object array). ``kwargs``
        holds ``values`` (with a critic), ``gamma``, ``lam``, ``norm_adv_by_std_in_grpo``, ``config``.

        Default: the registered :attr:`base_estimator`.
        """
        fn = get_adv_estimator_fn(self.base_estimator)
        return call_with_supported_kwargs(
            fn, token_level_rewards=token_level_rewards, response_mask=response_mask, index=index, **kwargs
        )

    def compute_policy_loss(
        self,
        old_log_prob: torch.Tensor,
        log_prob: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        loss_agg_mode: str = "token-mean",
        config: Any = None,
        rollout_is_weights: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """``(pg_loss, metrics)``: the scalar policy loss of a micro-batch (all tensors ``[batch, response_len]``;
        ``config`` is the actor config, ``loss_agg_mode`` how token losses are aggregated, see ``agg_loss``).

        Default: the registered :attr:`base_policy_loss` (PPO's clipped surrogate).
        """
        return get_policy_loss_fn(self.base_policy_loss)(
            old_log_prob=old_log_prob,
            log_prob=log_prob,
            advantages=advantages,
            response_mask=response_mask,
            loss_agg_mode=loss_agg_mode,
            config=config,
            rollout_is_weights=rollout_is_weights,
        )

    # ---------------------------------------------------------------------------------------------- wiring
    def register(self) -> str:
        """Register this instance's two methods as ``algorithm.adv_estimator`` and ``policy_loss.loss_mode``
        :meth:`registry_name`; returns the name. Registering another instance of the same class replaces the
        previous one; a different function under a taken name raises ValueError (see ``register_adv_est``)."""
        name = self.registry_name()
        register_adv_est(name)(self.compute_advantage)
        register_policy_loss(name)(self.compute_policy_loss)
        return name

    def config_overrides(self) -> dict[str, Any]:
        """The dotted config keys that select this algorithm (call :meth:`register` first)."""
        name = self.registry_name()
        out: dict[str, Any] = {
            "algorithm.adv_estimator": name,
            "actor_rollout_ref.actor.policy_loss.loss_mode": name,
        }
        if self.uses_critic:
            out["critic.enable"] = True
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.registry_name()!r})"

"""Upstream verl v0.9's named rollout-correction presets (``RolloutCorrectionConfig.<preset>()`` in
``verl/trainer/config/algorithm.py``) as classmethods of :class:`verl.algorithms.config.RolloutCorrectionConfig`.

Each returns a config whose ``rollout_is`` / ``rollout_is_threshold`` / ``rollout_rs`` / ``rollout_rs_threshold`` /
``bypass_mode`` / ``loss_type`` are those upstream's preset sets (the other fields keep their defaults); the table in
docs/algorithms.md lists them as command-line overrides. Naming: ``decoupled_*`` computes the old policy's
log-probs (three policies), ``bypass_*`` uses the rollout's as the old ones (``bypass_ppo_clip*``: the PPO ratio
carries the correction; ``bypass_pg*``: REINFORCE times the IS weights); ``token`` / ``seq`` IS is truncated (TIS)
at ``threshold``, ``icepop`` zeroes weights outside ``[threshold_lower, threshold]``; ``geo_rs`` rejects responses
whose mean log-ratio (``seq_mean_k1``) leaves ``rs_threshold`` (``"lower_upper"`` on the geometric-mean ratio),
``k3_rs`` those whose mean k3 divergence (``seq_mean_k3``) exceeds it; ``seq_is_rs`` rejects on the summed log-ratio
(``seq_sum_k1``).
"""

from __future__ import annotations

from typing import Any, Optional, Union

__all__ = ["RolloutCorrectionPresets"]

_GEO = "0.999_1.001"  # upstream's default geometric-ratio band
_K3 = 0.01  # upstream's default mean-k3 bound

Threshold = Optional[Union[str, float]]


class RolloutCorrectionPresets:
    """The preset constructors (mixed into ``RolloutCorrectionConfig``; ``cls(**fields)`` builds the section)."""

    @classmethod
    def _preset(cls, is_level: Optional[str], is_threshold: Any, rs: Optional[str], rs_threshold: Any, mode: str):
        fields: dict[str, Any] = {"rollout_is": is_level, "rollout_rs": rs}
        if is_level is not None:
            fields["rollout_is_threshold"] = is_threshold
        if rs is not None:
            fields["rollout_rs_threshold"] = rs_threshold
        if mode != "decoupled":
            fields.update(bypass_mode=True, loss_type=mode)
        return cls(**fields)

    # decoupled: old log-probs recomputed, IS weights on the rollout -> old gap
    @classmethod
    def decoupled_token_is(cls, threshold: float = 2.0):
        """Token-level TIS."""
        return cls._preset("token", threshold, None, None, "decoupled")

    @classmethod
    def decoupled_seq_is(cls, threshold: float = 2.0):
        """Sequence-level TIS."""
        return cls._preset("sequence", threshold, None, None, "decoupled")

    @classmethod
    def decoupled_token_icepop(cls, threshold: float = 5.0, threshold_lower: float = 0.5):
        """Token-level IcePop: weights outside ``[threshold_lower, threshold]`` become 0."""
        return cls._preset("token", f"{threshold_lower}_{threshold}", None, None, "decoupled")

    @classmethod
    def decoupled_seq_is_rs(cls, is_threshold: float = 2.0, rs_threshold: Threshold = "0.5_2.0"):
        """Sequence TIS plus rejection on the sequence's summed log-ratio (Seq-MIS)."""
        return cls._preset("sequence", is_threshold, "seq_sum_k1", rs_threshold, "decoupled")

    @classmethod
    def decoupled_geo_rs(cls, rs_threshold: Threshold = _GEO):
        """Geometric-mean ratio rejection only."""
        return cls._preset(None, None, "seq_mean_k1", rs_threshold, "decoupled")

    @classmethod
    def decoupled_geo_rs_seq_tis(cls, is_threshold: float = 2.0, rs_threshold: Threshold = _GEO):
        """Geometric rejection plus sequence TIS."""
        return cls._preset("sequence", is_threshold, "seq_mean_k1", rs_threshold, "decoupled")

    @classmethod
    def decoupled_geo_rs_token_tis(cls, is_threshold: float = 2.0, rs_threshold: Threshold = _GEO):
        """Geometric rejection plus token TIS."""
        return cls._preset("token", is_threshold, "seq_mean_k1", rs_threshold, "decoupled")

    @classmethod
    def decoupled_k3_rs(cls, rs_threshold: float = _K3):
        """Rejection on the mean k3 divergence only."""
        return cls._preset(None, None, "seq_mean_k3", rs_threshold, "decoupled")

    @classmethod
    def decoupled_k3_rs_seq_tis(cls, is_threshold: float = 2.0, rs_threshold: float = _K3):
        """k3 rejection plus sequence TIS."""
        return cls._preset("sequence", is_threshold, "seq_mean_k3", rs_threshold, "decoupled")

    @classmethod
    def decoupled_k3_rs_token_tis(cls, is_threshold: float = 2.0, rs_threshold: float = _K3):
        """k3 rejection plus token TIS."""
        return cls._preset("token", is_threshold, "seq_mean_k3", rs_threshold, "decoupled")

    # bypass: the rollout's log-probs are the old policy's
    @classmethod
    def bypass_ppo_clip(cls):
        """PPO clip against the rollout policy, no weights or rejection."""
        return cls._preset(None, None, None, None, "ppo_clip")

    @classmethod
    def bypass_ppo_clip_geo_rs(cls, rs_threshold: Threshold = _GEO):
        """PPO clip plus geometric rejection."""
        return cls._preset(None, None, "seq_mean_k1", rs_threshold, "ppo_clip")

    @classmethod
    def bypass_ppo_clip_k3_rs(cls, rs_threshold: float = _K3):
        """PPO clip plus k3 rejection."""
        return cls._preset(None, None, "seq_mean_k3", rs_threshold, "ppo_clip")

    @classmethod
    def bypass_pg_is(cls, threshold: float = 2.0):
        """REINFORCE times sequence TIS weights."""
        return cls._preset("sequence", threshold, None, None, "reinforce")

    @classmethod
    def bypass_pg_token_icepop(cls, threshold: float = 5.0, threshold_lower: float = 0.5):
        """REINFORCE times token IcePop weights."""
        return cls._preset("token", f"{threshold_lower}_{threshold}", None, None, "reinforce")

    @classmethod
    def bypass_pg_geo_rs(cls, rs_threshold: Threshold = _GEO):
        """REINFORCE plus geometric rejection."""
        return cls._preset(None, None, "seq_mean_k1", rs_threshold, "reinforce")

    @classmethod
    def bypass_pg_geo_rs_seq_tis(cls, is_threshold: float = 2.0, rs_threshold: Threshold = _GEO):
        """REINFORCE plus geometric rejection and sequence TIS."""
        return cls._preset("sequence", is_threshold, "seq_mean_k1", rs_threshold, "reinforce")

    @classmethod
    def bypass_pg_geo_rs_token_tis(cls, is_threshold: float = 2.0, rs_threshold: Threshold = _GEO):
        """REINFORCE plus geometric rejection and token TIS."""
        return cls._preset("token", is_threshold, "seq_mean_k1", rs_threshold, "reinforce")

    @classmethod
    def disabled(cls):
        """No correction."""
        return cls._preset(None, None, None, None, "decoupled")

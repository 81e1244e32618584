"""Interactions: simulated users that answer the model between turns (``rollout.multi_turn.interaction_config_path``).

``BaseInteraction`` is the interface; ``gsm8k_interaction.Gsm8kInteraction`` checks math answers and lets the
model try again; ``utils.interaction_registry.initialize_interactions_from_config`` loads a config file.
"""

from verl.interactions.base import BaseInteraction, InteractionResult

__all__ = ["BaseInteraction", "InteractionResult"]

"""Median-baseline REINFORCE with truncated importance weights, as a verl-style recipe.

Importing the package registers the recipe's advantage estimator (``recipe_median_baseline``), policy loss
(``recipe_truncated_is``) and reward manager (``recipe_difficulty``); ``main_mb.py`` runs a training job with them,
its dataset class (``data.custom_cls``) and its trainer (a ``RayPPOTrainer`` subclass logging a rollout metric).
"""

from recipe.mean_baseline import core_algos, reward_manager  # noqa: F401  (registration)

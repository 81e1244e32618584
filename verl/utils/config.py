"""verl's module path for config conversion: :func:`omega_conf_to_dataclass` (defined in :mod:`verl.base_config`).

Upstream's ``validate_config(config, use_reference_policy, use_critic)`` checks a config for upstream's own trainer;
its callers are verl-recipe's entry points (``recipe/<name>/main_<name>.py``), which drive upstream's trainer
internals. Importing it raises an ``ImportError`` saying how those recipes run here (:data:`RECIPE_MAIN_HINT`).
"""

from typing import Any

from verl.base_config import omega_conf_to_dataclass

__all__ = ["RECIPE_MAIN_HINT", "omega_conf_to_dataclass"]

# what a verl-recipe entry point (python -m recipe.<name>.main_<name>) that imports upstream's trainer internals is told
RECIPE_MAIN_HINT = (
    "verl-recipe's own entry points (python -m recipe.<name>.main_<name>) drive upstream verl's trainer internals, "
    "which this project does not have; DAPO, the entropy recipe, GVPO, SPPO, SPIN, FlowRL and SPO run as python -m "
    "verl.trainer.main_ppo --config-path recipe/<name>/config --config-name <name>_trainer <the script's overrides>, "
    "SPPO, SPIN and FlowRL with the settings docs/verl_recipes.md gives"
)


def __getattr__(name: str) -> Any:
    if name == "validate_config":
        raise ImportError(
            f"verl.utils.config.validate_config: upstream's checks for its own trainer are not provided here (this "
            f"trainer validates every config it builds); {RECIPE_MAIN_HINT}"
        )
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

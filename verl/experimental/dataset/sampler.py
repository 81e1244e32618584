"""Upstream verl's (pre-v0.9) curriculum-sampler base class, ``AbstractSampler``, which v0.9 no longer has either.

verl-recipe entry points written for that verl (``recipe.gvpo.gvpo_main_ppo``, ...) import it first; importing it
here raises an ``ImportError`` saying how those recipes run in this project
(:data:`verl.utils.config.RECIPE_MAIN_HINT`).
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name in ("AbstractSampler", "AbstractCurriculumSampler"):
        from verl.utils.config import RECIPE_MAIN_HINT

        raise ImportError(
            f"verl.experimental.dataset.sampler.{name}: upstream's curriculum-sampler classes are not provided here "
            f"(nor in verl v0.9); {RECIPE_MAIN_HINT}"
        )
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""Rule-based reward functions and ``default_compute_score``, which routes a sample to one by ``data_source``.

The reward function contract (verl's): ``fn(data_source, solution_str, ground_truth, extra_info=None, **kwargs)``
returns a float, or a dict with a ``"score"`` key plus extra values to log.

The data sources are those of verl's default scorer (plus a few aliases of MATH and the bundled ``arithmetic``
demo); the table is in docs/data_and_rewards.md. The LLM judge is :mod:`verl.rewards.judge`. verl's
``verl.rewards`` is this package.
"""

from __future__ import annotations

from typing import Any

GSM8K_SOURCES = ("openai/gsm8k",)
MATH_SOURCES = (
    "lighteval/MATH",
    "DigitalLearningGmbH/MATH-lighteval",
    "HuggingFaceH4/MATH-500",
    "hendrycks/competition_math",
    "EleutherAI/hendrycks_math",
    "lighteval/MATH-Hard",
)
# data_source == "math_dapo", or any source starting with "aime" (aime2024, aime2025, ...).
DAPO_SOURCES = ("math_dapo",)
DAPO_PREFIX = "aime"
NUMINA_SOURCES = (
    "numina_aops_forum",
    "numina_synthetic_math",
    "numina_amc_aime",
    "numina_synthetic_amc",
    "numina_cn_k12",
    "numina_olympiads",
)
CODE_SOURCES = ("codecontests", "apps", "codeforces", "taco")
GEO3K_SOURCES = ("hiyouga/geometry3k",)
SEARCH_R1_SOURCES = (
    "searchR1_nq",
    "searchR1_triviaqa",
    "searchR1_popqa",
    "searchR1_hotpotqa",
    "searchR1_2wikimultihopqa",
    "searchR1_musique",
    "searchR1_bamboogle",
)
ARITHMETIC_SOURCES = ("arithmetic",)
COLOUR_SOURCES = ("synthetic_colour",)
KNOWN_DATA_SOURCES = (
    GSM8K_SOURCES
    + MATH_SOURCES
    + DAPO_SOURCES
    + NUMINA_SOURCES
    + CODE_SOURCES
    + GEO3K_SOURCES
    + SEARCH_R1_SOURCES
    + ARITHMETIC_SOURCES
    + COLOUR_SOURCES
)


def has_default_scorer(data_source: str) -> bool:
    """Whether :func:`default_compute_score` has a rule scorer for ``data_source`` (checked before training)."""
    source = str(data_source)
    return source in KNOWN_DATA_SOURCES or source.startswith(DAPO_PREFIX)


def _pick(kwargs: dict[str, Any], *names: str) -> dict[str, Any]:
    return {k: kwargs[k] for k in names if k in kwargs}


def default_compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict[str, Any] | None = None,
    sandbox_fusion_url: str | None = None,
    concurrent_semaphore: Any = None,
    memory_limit_mb: int | None = None,
    **kwargs: Any,
) -> float | dict[str, Any]:
    """Score one response with the rule scorer of its ``data_source`` (verl's dispatch):

    - ``openai/gsm8k``: :mod:`.gsm8k` (kwargs ``method`` = strict | flexible, ``format_score``, ``score``);
    - MATH (``lighteval/MATH``, ``DigitalLearningGmbH/MATH-lighteval``, ``HuggingFaceH4/MATH-500``, ...):
      :mod:`.math` (last ``\\boxed{}``; string/rational check, then math-verify);
    - ``math_dapo`` and ``aime*`` (``aime2024``, ``aime2025``): :mod:`.math_dapo` (``Answer:`` line; 1 / -1, with
      ``acc`` and ``pred``; kwarg ``strict_box_verify``);
    - ``numina_*``: :mod:`.prime_math`;
    - ``codecontests``, ``apps``, ``codeforces``, ``taco``: on the Sandbox Fusion server at
      ``sandbox_fusion_url`` when given (:mod:`.sandbox_fusion`), else in the local sandbox (:mod:`.prime_code`);
      continuous score (fraction of the first 10 tests passed);
    - ``hiyouga/geometry3k``: :mod:`.geo3k`; ``searchR1_*``: :mod:`.search_r1_like_qa_em` (exact match);
    - ``arithmetic``: 1.0 when the last number equals the answer;
    - ``synthetic_colour``: :mod:`.colour` (the synthetic vision task).

    Returns a float, or the scorer's dict (``score`` plus extra values); a tuple result keeps its first element.
    Unknown sources raise NotImplementedError naming the source and the known ones.
    """
    source = str(data_source)
    if source in GSM8K_SOURCES:
        from verl.rewards import gsm8k

        res: Any = gsm8k.compute_score(solution_str, ground_truth, **_pick(kwargs, "method", "format_score", "score"))
    elif source in MATH_SOURCES:
        from verl.rewards import math as math_score

        res = math_score.compute_score(solution_str, ground_truth)
    elif source in DAPO_SOURCES or source.startswith(DAPO_PREFIX):
        from verl.rewards import math_dapo

        res = math_dapo.compute_score(solution_str, ground_truth, **_pick(kwargs, "strict_box_verify"))
    elif source in NUMINA_SOURCES:
        from verl.rewards import prime_math

        res = prime_math.compute_score(solution_str, ground_truth)
    elif source in CODE_SOURCES:
        if sandbox_fusion_url:
            from verl.rewards import sandbox_fusion

            res = sandbox_fusion.compute_score(
                sandbox_fusion_url, concurrent_semaphore, memory_limit_mb, solution_str, ground_truth, continuous=True
            )
        else:
            from verl.rewards import prime_code

            local_limits = {"memory_mb": int(memory_limit_mb)} if memory_limit_mb else {}
            res = prime_code.compute_score(solution_str, ground_truth, continuous=True, **local_limits)
    elif source in GEO3K_SOURCES:
        from verl.rewards import geo3k

        res = geo3k.compute_score(solution_str, ground_truth)
    elif source in SEARCH_R1_SOURCES:
        from verl.rewards import search_r1_like_qa_em

        res = search_r1_like_qa_em.compute_score(solution_str, ground_truth)
    elif source in ARITHMETIC_SOURCES:
        from verl.rewards import arithmetic

        res = arithmetic.compute_score(solution_str, ground_truth)
    elif source in COLOUR_SOURCES:
        from verl.rewards import colour

        res = colour.compute_score(solution_str, ground_truth)
    else:
        raise NotImplementedError(
            f"no reward function for data_source={data_source!r}; known sources: {list(KNOWN_DATA_SOURCES)} "
            f"(and any starting with {DAPO_PREFIX!r}). Set custom_reward_function.path to score other data."
        )
    if isinstance(res, dict):
        return res
    if isinstance(res, (int, float, bool)):
        return float(res)
    return float(res[0])


def _default_compute_score(*args: Any, **kwargs: Any) -> float | dict[str, Any]:
    """verl's older name of :func:`default_compute_score` (same arguments)."""
    return default_compute_score(*args, **kwargs)


__all__ = [
    "ARITHMETIC_SOURCES",
    "CODE_SOURCES",
    "DAPO_SOURCES",
    "GEO3K_SOURCES",
    "GSM8K_SOURCES",
    "KNOWN_DATA_SOURCES",
    "MATH_SOURCES",
    "NUMINA_SOURCES",
    "SEARCH_R1_SOURCES",
    "_default_compute_score",
    "default_compute_score",
]


def __getattr__(name: str) -> Any:
    # upstream v0.9 renamed its math.py to math_reward.py: `from verl.utils.reward_score import math_reward` (the
    # import path verl/utils/_moved.py serves) is this package's math module
    if name == "math_reward":
        import importlib

        return importlib.import_module(f"{__name__}.math")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

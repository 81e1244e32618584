"""``verl.utils.evaluation``: the evaluator base class and built-ins under the documents' import path.

The implementation is :mod:`verl.api.evaluation`; this module re-exports it, so
``from verl.utils.evaluation import Evaluator`` and ``from verl import Evaluator`` are the same class.
"""

from verl.api.evaluation import (
    AccuracyEvaluator,
    DiversityEvaluator,
    Evaluator,
    KLEvaluator,
    RewardEvaluator,
    distinct_n,
    generate_for_eval,
    ngram_entropy,
    repetition_rate,
)

__all__ = [
    "AccuracyEvaluator",
    "DiversityEvaluator",
    "Evaluator",
    "KLEvaluator",
    "RewardEvaluator",
    "distinct_n",
    "generate_for_eval",
    "ngram_entropy",
    "repetition_rate",
]

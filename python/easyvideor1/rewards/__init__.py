"""Verifiable rewards, one scorer per ``problem_type``; pure functions over strings.

>>> from easyvideor1.rewards import ScoreRequest, score
>>> score(ScoreRequest("<answer>B</answer>", "B", "multiple choice", options=("A. x", "B. y"))).overall
1.0
"""

from easyvideor1.rewards.registry import (
    UnknownProblemType,
    canonical_problem_type,
    get_scorer,
    load_scorer_modules,
    register_scorer,
    score,
    scorer_specs,
)
from easyvideor1.rewards.types import RewardResult, Score, ScoreRequest

__all__ = [
    "RewardResult",
    "Score",
    "ScoreRequest",
    "UnknownProblemType",
    "canonical_problem_type",
    "get_scorer",
    "load_scorer_modules",
    "register_scorer",
    "score",
    "scorer_specs",
]

"""Hostile responses: long runs that would make a careless regex quadratic must stay fast."""

from __future__ import annotations

import pytest

from easyvideor1.rewards.boolean import score_boolean
from easyvideor1.rewards.multiple_choice import score_multiple_choice
from easyvideor1.rewards.numerical import score_numerical
from easyvideor1.rewards.ocr import score_ocr
from easyvideor1.rewards.open_ended import score_open_ended
from easyvideor1.rewards.regression import score_regression
from easyvideor1.rewards.spatial_grounding import score_spatial_grounding
from easyvideor1.rewards.spatiotemporal_grounding import score_spatiotemporal_grounding
from easyvideor1.rewards.temporal_grounding import score_temporal_grounding
from easyvideor1.rewards.tracking import score_tracking
from easyvideor1.rewards.types import ScoreRequest

SCORERS = [
    (score_multiple_choice, "B"), (score_numerical, "3"), (score_regression, "3"), (score_boolean, "yes"),
    (score_temporal_grounding, "[1, 2]"), (score_spatial_grounding, "[0, 0, 1, 1]"),
    (score_tracking, '{"0": [0, 0, 1, 1]}'), (score_spatiotemporal_grounding, '{"time": [0, 1], "boxes": {"0": [0, 0, 1, 1]}}'),
    (score_ocr, "abc"), (score_open_ended, "a b c"),
]
N = 30_000
SPACES = " " * N
HOSTILE = {
    "digits": "1" * N, "open tags": "<answer>" * (N // 8), "brackets": "[" * N, "braces": "{" * N,
    "numbers": "1 " * (N // 2), "ranges": "1.5 to 3 " * (N // 9), "boxes": "\\boxed{" * (N // 7),
    "number words": "twenty " * (N // 7), "phrases": "the answer is " * (N // 14), "letters": "A " * (N // 2),
    "quotes": "'\"[{" * (N // 4), "nesting": "[" * (N // 2) + "]" * (N // 2), "punctuation": ".,;!?" * (N // 5),
    "option spaces": "Option" + SPACES + "x", "answer spaces": "answer is" + SPACES + "x",
    "letter spaces": "a" + SPACES + "x", "time spaces": "1" + SPACES + "x", "word spaces": "A" + SPACES + "cup",
    "fences": "```" + "x" * N,
}


@pytest.fixture(scope="module", autouse=True)
def imported_scorers():
    """Score once first: the lazy imports (rouge_score pulls in nltk) are not what is timed."""
    for scorer, truth in SCORERS:
        for answer in (truth, "something else"):  # a mismatch reaches ROUGE past the exact match
            scorer(ScoreRequest(f"<answer>{answer}</answer>", truth, "x"), {"answer_tag_policy": "last"})


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_responses_terminate_and_stay_in_range(name):
    """Catastrophic regex backtracking shows up as a hang (minutes), which the timeout turns into
    a failure; speed itself is measured by benchmarks/reward_throughput.py, not asserted here."""
    text = HOSTILE[name]
    for response in (text, f"<answer>{text}</answer>"):
        for scorer, truth in SCORERS:
            got = scorer(ScoreRequest(response, truth, "x"), {"answer_tag_policy": "last"})
            assert 0.0 <= got.accuracy <= 1.0

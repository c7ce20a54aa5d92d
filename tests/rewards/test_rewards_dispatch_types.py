"""The registry's dispatcher end to end over the text/number/geometry types, and their speed."""

from __future__ import annotations

import pytest

from easyvideor1.config.schema import RewardConfig
from easyvideor1.rewards import ScoreRequest, canonical_problem_type, score

# problem_type spelling -> (response, ground truth, options): every one a perfect answer.
PERFECT = {
    "Multiple Choice": ("<answer>B</answer>", "B", ("A. red", "B. blue")),
    "numerical": ("<answer>3</answer>", "3", None),
    "regression": ("<answer>12.5</answer>", "12.5", None),
    "yes/no": ("<answer>Yes.</answer>", "yes", None),
    "temporal grounding": ("<answer>[1.5, 3.0]</answer>", "[1.5, 3.0]", None),
    "spatial grounding": ("<answer>[10, 20, 50, 60]</answer>", "[10, 20, 50, 60]", None),
    "spatial-temporal grounding": ('<answer>{"time": [1, 2], "boxes": {"1.0": [0, 0, 8, 8]}}</answer>',
                                   '{"time": [1.0, 2.0], "boxes": {"1.0": [0, 0, 8, 8]}}', None),
    "tracking": ('<answer>{"0.0": [0, 0, 8, 8]}</answer>', '{"0.0": [0, 0, 8, 8]}', None),
    "open-ended": ("<answer>A red square.</answer>", "a red square", None),
    "OCR": ("<answer>HELLO 42</answer>", "HELLO 42", None),
    "math": ("<answer>\\frac{1}{2}</answer>", "0.5", None),
}

ALIASES = {
    "multiple choice": ["mc", "choice", "multiple-choice", "multiple_choice", "single choice"],
    "numerical": ["number", "numeric", "counting", "count"],
    "regression": ["reg", "estimation"],
    "boolean": ["yes/no", "yes-no", "yesno", "bool", "true/false", "binary"],
    "temporal grounding": ["tg", "video grounding", "moment retrieval"],
    "spatial grounding": ["sg", "grounding", "bbox", "referring", "referring expression"],
    "spatial-temporal grounding": ["stg", "spatio-temporal grounding", "spatiotemporal grounding",
                                   "spatial temporal grounding"],
    "tracking": ["track", "object tracking", "sot"],
    "open-ended": ["open ended", "video qa", "videoqa", "free-form", "freeform", "qa", "caption",
                   "captioning", "description"],
    "ocr": ["text recognition", "text reading"],
    "math": ["math reasoning", "mathematics"],
}


@pytest.mark.parametrize(("canonical", "alias"), [(c, a) for c, names in ALIASES.items() for a in [c, *names]])
def test_aliases_resolve(canonical, alias):
    assert canonical_problem_type(alias) == canonical
    assert canonical_problem_type(alias.upper().replace(" ", "_")) == canonical


@pytest.mark.parametrize("problem_type", sorted(PERFECT))
def test_perfect_answers_score_one(problem_type):
    response, truth, options = PERFECT[problem_type]
    got = score(ScoreRequest(response, truth, problem_type, options=options))
    assert got.error is None, got.error
    assert (got.overall, got.accuracy, got.format) == (pytest.approx(1.0), 1.0, 1.0), got.details


def test_overall_combines_accuracy_and_format():
    got = score(ScoreRequest("the answer is B", "B", "mc", options=("A. x", "B. y")))
    assert (got.accuracy, got.format, got.overall) == (1.0, 0.0, pytest.approx(0.9))
    got = score(ScoreRequest("<answer>purple</answer>", "B", "mc", options=("A. x", "B. y")))
    assert got.overall == pytest.approx(0.1 * 0.5)


def test_malformed_ground_truth_is_a_per_item_error():
    got = score(ScoreRequest("<answer>3</answer>", "lots", "numerical"))
    assert got.overall == 0.0 and "GroundTruthError" in got.error and "numerical" in got.error


def test_config_reaches_the_scorers():
    config = RewardConfig(answer_tag_policy="first", scorer_options={"numerical": {"rel_tol": 0.1}})
    got = score(ScoreRequest("<answer>105</answer><answer>7</answer>", "100", "count"), config)
    assert got.accuracy == 1.0 and got.details["extracted"] == "105"
    only = RewardConfig(answer_tag_policy="only")
    got = score(ScoreRequest("<answer>B</answer><answer>B</answer>", "B", "mc"), only)
    assert (got.accuracy, got.format) == (0.0, 0.5)

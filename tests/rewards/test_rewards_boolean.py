"""Yes/no scorer."""

from __future__ import annotations

import pytest

from easyvideor1.rewards.boolean import read_polarity, score_boolean
from easyvideor1.rewards.extract import GroundTruthError
from easyvideor1.rewards.types import ScoreRequest

OPTS = {"answer_tag_policy": "last"}


def yn(response, truth="yes"):
    return score_boolean(ScoreRequest(response, truth, "boolean"), OPTS)


@pytest.mark.parametrize(
    ("text", "polarity"),
    [("Yes.", "yes"), ("yes", "yes"), ("YES!", "yes"), ("no,", "no"), ("No, it is not.", "no"),
     ("True", "yes"), ("false", "no"), ("**Yes**", "yes"), ("The answer is no", "no"),
     ("Answer: yes", "yes"), ("\\boxed{no}", "no"), ('"yes"', "yes"),
     ("maybe", None), ("nothing", None), ("yesterday", None), ("", None), (None, None),
     ("I think yes", None)],
)
def test_read_polarity(text, polarity):
    assert read_polarity(text) == polarity


def test_scores():
    assert (yn("<answer>Yes.</answer>").accuracy, yn("<answer>Yes.</answer>").format) == (1.0, 1.0)
    assert (yn("<answer>no</answer>").accuracy, yn("<answer>no</answer>").format) == (0.0, 1.0)
    assert (yn("<answer>perhaps</answer>").accuracy, yn("<answer>perhaps</answer>").format) == (0.0, 0.5)
    assert (yn("yes").accuracy, yn("yes").format) == (1.0, 0.0)
    assert yn("<answer>false</answer>", truth="No").accuracy == 1.0
    assert yn("<answer>yes</answer>", truth="<answer>true</answer>").accuracy == 1.0


@pytest.mark.parametrize("truth", ["", "maybe", "2"])
def test_bad_ground_truth(truth):
    with pytest.raises(GroundTruthError, match="boolean"):
        yn("<answer>yes</answer>", truth)

"""Multiple-choice scorer: letter phrasings, option texts, articles that are not letters."""

from __future__ import annotations

import pytest

from easyvideor1.rewards.extract import GroundTruthError
from easyvideor1.rewards.multiple_choice import label_options, read_choice, score_multiple_choice
from easyvideor1.rewards.types import ScoreRequest

OPTIONS = ("A. red", "B. blue", "C. dark red", "D. a cup")
OPTS = {"answer_tag_policy": "last"}


def mc(response: str, truth: str = "B", options=OPTIONS, **opts):
    return score_multiple_choice(ScoreRequest(response, truth, "multiple choice", options=options),
                                 {**OPTS, **opts})


@pytest.mark.parametrize(
    "answer",
    ["B", "(B)", "[B]", "B.", "b", "Option B", "option (b)", "the answer is B", "B) red", "**B**",
     "B: blue", "\\boxed{B}", "$B$", "Answer: B", "The correct option is (B).", "blue", "Blue!",
     "I choose B because it matches", "I think it is the blue one"],
)
def test_letter_phrasings_score_one(answer):
    got = mc(f"<answer>{answer}</answer>")
    assert (got.accuracy, got.format) == (1.0, 1.0), got.details
    assert got.details["pred"] == "B" and got.details["gt"] == "B"


def test_wrong_letter_is_valid_but_wrong():
    got = mc("<answer>C</answer>")
    assert (got.accuracy, got.format) == (0.0, 1.0)


@pytest.mark.parametrize("answer", ["a cup", "A cup", "It is a cup."])
def test_article_a_is_not_letter_a(answer):
    got = mc(f"<answer>{answer}</answer>", truth="D")
    assert got.details["pred"] == "D" and got.accuracy == 1.0


def test_articles_without_matching_option_give_no_letter():
    got = mc("<answer>I think a cup</answer>", truth="A", options=("A. red", "B. blue"))
    assert got.details["pred"] is None
    assert (got.accuracy, got.format) == (0.0, 0.5)


def test_i_think_a_red_one_reads_the_option_text_not_the_article():
    got = mc("<answer>I think a red one</answer>", truth="B", options=("A. blue", "B. red"))
    assert got.details["pred"] == "B" and got.accuracy == 1.0


def test_longest_contained_option_wins():
    got = mc("<answer>it looks dark red to me</answer>", truth="C")
    assert got.details["pred"] == "C" and got.accuracy == 1.0


def test_hedging_between_letters_is_invalid():
    got = mc("<answer>A and B</answer>")
    assert got.details["pred"] is None and "ambiguous" in got.details["reason"]
    assert got.format == 0.5


def test_letter_outside_offered_options_is_invalid():
    got = mc("<answer>E</answer>", truth="A", options=("A. x", "B. y"))
    assert (got.accuracy, got.format) == (0.0, 0.5)
    assert "not among" in got.details["reason"]


def test_without_options_letters_a_to_j_are_valid():
    assert mc("<answer>J</answer>", truth="J", options=None).accuracy == 1.0
    assert mc("<answer>blue</answer>", truth="B", options=None).format == 0.5


def test_bare_option_texts_get_letters_in_order():
    assert label_options(["red", "blue"]) == [("A", "red"), ("B", "blue")]
    got = mc("<answer>blue</answer>", truth="B", options=("red", "blue"))
    assert got.accuracy == 1.0


def test_labelled_option_styles():
    assert label_options(["(A) x", "(B) y"]) == [("A", "x"), ("B", "y")]
    assert label_options(["A: x", "B: y"]) == [("A", "x"), ("B", "y")]
    # duplicate labels mean the strings are not labelled: letters are assigned
    assert label_options(["A. x", "A. y"]) == [("A", "A. x"), ("B", "A. y")]


@pytest.mark.parametrize("truth", ["B", "<answer>B</answer>", "(B)", "B. blue", "blue"])
def test_ground_truth_forms(truth):
    assert mc("<answer>B</answer>", truth=truth).accuracy == 1.0


@pytest.mark.parametrize("truth", ["", "green", "K", "Z"])
def test_malformed_ground_truth_raises(truth):
    with pytest.raises(GroundTruthError, match="multiple choice"):
        mc("<answer>B</answer>", truth=truth)


def test_no_tag_still_earns_accuracy_without_format():
    got = mc("After watching, the answer is B.")
    assert (got.accuracy, got.format) == (1.0, 0.0)


@pytest.mark.parametrize("response", ["", "<answer></answer>", "<answer>   </answer>"])
def test_empty_answers(response):
    got = mc(response)
    assert got.accuracy == 0.0 and got.details["pred"] is None


def test_read_choice_reports_the_rule():
    labelled = label_options(OPTIONS)
    assert read_choice("B", labelled) == ("B", "letter")
    assert read_choice("blue", labelled) == ("B", "option_text")
    assert read_choice("green", labelled)[0] is None

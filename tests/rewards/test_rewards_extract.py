"""Answer extraction and the shared format-score rule."""

from __future__ import annotations

import pytest

from easyvideor1.errors import ConfigError
from easyvideor1.rewards.extract import (
    Extraction,
    extract_answer,
    format_score,
    last_boxed,
    strip_answer_tags,
)


@pytest.mark.parametrize(
    ("response", "text"),
    [
        ("<answer>B</answer>", "B"),
        ("<ANSWER> B </Answer>", "B"),
        ("< answer >x</ answer >", "x"),
        ("<answer>\n  two words \n</answer>", "two words"),
        ("<think>hmm</think>\n<answer>[1, 2]</answer>", "[1, 2]"),
        ("text <answer>cut off at the end", "cut off at the end"),
    ],
)
def test_answer_tag_variants(response, text):
    got = extract_answer(response)
    assert got == Extraction(text, "answer_tag", True, 1)


def test_content_is_not_normalised():
    got = extract_answer("<answer>  Mixed CASE, punctuation!  </answer>")
    assert got.text == "Mixed CASE, punctuation!"


@pytest.mark.parametrize(("policy", "text"), [("last", "b"), ("first", "a"), ("only", None)])
def test_several_tags_follow_the_policy(policy, text):
    got = extract_answer("<answer>a</answer> then <answer>b</answer>", policy)
    assert got.text == text
    assert got.tag_found and got.tag_count == 2
    if policy == "only":
        assert "only" in got.reason
        assert format_score(got, valid=True) == 0.5


def test_unclosed_tag_followed_by_another_tag():
    got = extract_answer("<answer>first <answer>second</answer>", "first")
    assert got.text == "first" and got.tag_count == 2


def test_unknown_policy_is_a_config_error():
    with pytest.raises(ConfigError, match="answer_tag_policy"):
        extract_answer("<answer>x</answer>", "middle")


def test_empty_tag_is_found_with_empty_text():
    got = extract_answer("<answer></answer>")
    assert got.text == "" and got.tag_found
    assert format_score(got, valid=False) == 0.5


@pytest.mark.parametrize(
    ("response", "text", "source"),
    [
        ("so \\boxed{\\frac{1}{2}} it is", "\\frac{1}{2}", "boxed"),
        ("\\boxed{1} then \\boxed{{2}}", "{2}", "boxed"),
        ("The final answer is 42.\nThanks", "42", "final_answer_phrase"),
        ("Final answer: C", "C", "final_answer_phrase"),
        ("the answer is yes", "yes", "final_answer_phrase"),
        ("<think>maybe the answer is A</think> B", "B", "after_think"),
        ("<think>\\boxed{3}</think>\n4", "4", "after_think"),
        ("  just text  ", "just text", "raw"),
        ("the answer isn't obvious", "the answer isn't obvious", "raw"),
    ],
)
def test_fallbacks(response, text, source):
    got = extract_answer(response)
    assert (got.text, got.source, got.tag_found, got.tag_count) == (text, source, False, 0)
    assert format_score(got, valid=True) == 0.0


@pytest.mark.parametrize("response", ["", "   \n", None, "<think>only thoughts</think>  "])
def test_nothing_to_extract(response):
    got = extract_answer(response)
    assert got.text is None and got.source == "none" and got.reason


def test_format_score_rule():
    tagged = extract_answer("<answer>x</answer>")
    untagged = extract_answer("x")
    assert format_score(tagged, True) == 1.0
    assert format_score(tagged, False) == 0.5
    assert format_score(untagged, True) == 0.0
    assert format_score(untagged, False) == 0.0


def test_last_boxed_nested_and_unbalanced():
    assert last_boxed("\\boxed{a{b}c}") == "a{b}c"
    assert last_boxed("\\boxed{open {") == "open {"
    assert last_boxed("no box") is None
    assert last_boxed("\\fbox{7}") == "7"


@pytest.mark.parametrize(
    ("truth", "clean"),
    [("<answer>B</answer>", "B"), (" B ", "B"), ("<answer> [1, 2] </answer>", "[1, 2]"), ("B</answer>", "B")],
)
def test_strip_answer_tags_on_ground_truth(truth, clean):
    assert strip_answer_tags(truth) == clean

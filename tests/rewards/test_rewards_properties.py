"""Property tests: scores stay in [0, 1] for any text, IoU is symmetric, a prediction equal to
a well-formed ground truth scores 1."""

from __future__ import annotations

import json
from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from easyvideor1.rewards.boolean import score_boolean
from easyvideor1.rewards.extract import extract_answer
from easyvideor1.rewards.geometry import box_iou, interval_iou
from easyvideor1.rewards.math_answer import score_math
from easyvideor1.rewards.multiple_choice import score_multiple_choice
from easyvideor1.rewards.numbers import parse_number
from easyvideor1.rewards.numerical import score_numerical
from easyvideor1.rewards.ocr import score_ocr
from easyvideor1.rewards.open_ended import score_open_ended
from easyvideor1.rewards.regression import score_regression
from easyvideor1.rewards.spatial_grounding import score_spatial_grounding
from easyvideor1.rewards.spatiotemporal_grounding import score_spatiotemporal_grounding
from easyvideor1.rewards.temporal_grounding import score_temporal_grounding
from easyvideor1.rewards.tracking import score_tracking
from easyvideor1.rewards.types import ScoreRequest

OPTS = {"answer_tag_policy": "last", "timeout_s": 20.0}

# (scorer, ground truth, options) for every type; the ground truths are well-formed.
CASES = [
    (score_multiple_choice, "B", ("A. red", "B. blue")),
    (score_numerical, "3", None),
    (score_regression, "12.5", None),
    (score_boolean, "yes", None),
    (score_temporal_grounding, "[1.5, 3.0]", None),
    (score_spatial_grounding, "[10, 20, 50, 60]", None),
    (score_spatiotemporal_grounding, '{"time": [1, 2], "boxes": {"1.0": [0, 0, 8, 8]}}', None),
    (score_tracking, '{"0.0": [0, 0, 8, 8], "0.5": [4, 0, 12, 8]}', None),
    (score_open_ended, "a red square moves left", None),
    (score_ocr, "HELLO 42", None),
]

# Text that looks like answers: tags, braces, numbers, letters, JSON punctuation.
answerish = st.text(
    alphabet=st.sampled_from(list("<>/answerthinkABCDyesno0123456789.,-:[]{}\"' \n\\boxed%e")), max_size=80,
)
any_text = st.one_of(st.text(max_size=120), answerish)


def in_unit(score) -> bool:
    return 0.0 <= score.accuracy <= 1.0 and score.format in (0.0, 0.5, 1.0)


@settings(max_examples=150, deadline=None)
@given(any_text)
def test_scores_stay_in_unit_interval_for_any_text(response):
    for scorer, truth, options in CASES:
        got = scorer(ScoreRequest(response, truth, "x", options=options), OPTS)
        assert in_unit(got), (scorer.__name__, response, got)


@settings(max_examples=60, deadline=None)
@given(any_text)
def test_scores_stay_in_unit_interval_inside_a_tag(content):
    for scorer, truth, options in CASES:
        got = scorer(ScoreRequest(f"<answer>{content}</answer>", truth, "x", options=options), OPTS)
        assert in_unit(got) and got.format in (0.5, 1.0), (scorer.__name__, content, got)


@settings(max_examples=15, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("x12+-*/^()\\frac{} ")), max_size=30))
def test_math_scores_stay_in_unit_interval(content):
    assert in_unit(score_math(ScoreRequest(f"<answer>{content}</answer>", "\\frac{1}{2}", "math"), OPTS))


@given(st.text(max_size=200), st.sampled_from(["last", "first", "only"]))
def test_extraction_never_raises(response, policy):
    got = extract_answer(response, policy)
    assert got.text is None or isinstance(got.text, str)
    assert got.tag_found == (got.tag_count > 0)


coord = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)


@st.composite
def boxes(draw):
    x1, y1 = draw(coord), draw(coord)
    w = draw(st.floats(min_value=1e-3, max_value=1e6))
    h = draw(st.floats(min_value=1e-3, max_value=1e6))
    return (x1, y1, x1 + w, y1 + h)


@st.composite
def intervals(draw):
    start = draw(st.floats(min_value=0, max_value=1e5))
    return (start, start + draw(st.floats(min_value=0, max_value=1e5)))


@given(boxes(), boxes())
def test_box_iou_symmetric_and_bounded(a, b):
    assert box_iou(a, b) == box_iou(b, a)
    assert 0.0 <= box_iou(a, b) <= 1.0


@given(intervals(), intervals())
def test_interval_iou_symmetric_and_bounded(a, b):
    assert interval_iou(a, b) == interval_iou(b, a)
    assert 0.0 <= interval_iou(a, b) <= 1.0


@given(boxes())
def test_box_iou_with_itself_is_one(a):
    assert box_iou(a, a) == 1.0


def _tagged(scorer, truth: str, options=None):
    return scorer(ScoreRequest(f"<answer>{truth}</answer>", truth, "x", options=options), OPTS)


@given(st.integers(min_value=-10**12, max_value=10**12) | st.fractions(max_denominator=1000))
def test_identical_numbers_score_one(value):
    text = str(value)
    assert parse_number(text).value == Fraction(value)
    for scorer in (score_numerical, score_regression):
        got = _tagged(scorer, text)
        assert (got.accuracy, got.format) == (1.0, 1.0)


@given(st.floats(min_value=-1e9, max_value=1e9, allow_nan=False).filter(lambda v: v != 0))
def test_identical_decimals_score_one(value):
    got = _tagged(score_numerical, repr(value))
    assert (got.accuracy, got.format) == (1.0, 1.0)


@given(intervals())
def test_identical_interval_scores_one(interval):
    got = _tagged(score_temporal_grounding, json.dumps(list(interval)))
    assert (got.accuracy, got.format) == (1.0, 1.0)


@given(boxes())
def test_identical_box_scores_one(box):
    got = _tagged(score_spatial_grounding, json.dumps(list(box)))
    assert (got.accuracy, got.format) == (1.0, 1.0)


track_keys = st.lists(st.integers(min_value=0, max_value=10_000), min_size=1, max_size=8, unique=True)


@given(track_keys, boxes(), intervals())
def test_identical_tracks_score_one(keys, box, interval):
    track = {f"{k / 100:.2f}": list(box) for k in keys}
    got = _tagged(score_tracking, json.dumps(track))
    assert (got.accuracy, got.format) == (1.0, 1.0)
    stg = json.dumps({"time": list(interval), "boxes": track})
    got = _tagged(score_spatiotemporal_grounding, stg)
    assert (got.accuracy, got.format) == (1.0, 1.0)


@given(st.sampled_from("ABCDEFGHIJ"), st.sampled_from(["yes", "no", "true", "false"]))
def test_identical_labels_score_one(letter, polarity):
    assert _tagged(score_multiple_choice, letter).accuracy == 1.0
    assert _tagged(score_boolean, polarity).accuracy == 1.0


@settings(max_examples=40, deadline=None)
@given(st.text(alphabet=st.characters(categories=("L", "N")), min_size=1, max_size=30))
def test_identical_texts_score_one(text):
    for scorer in (score_open_ended, score_ocr):
        got = _tagged(scorer, text)
        assert (got.accuracy, got.format) == (1.0, 1.0), (scorer.__name__, text)

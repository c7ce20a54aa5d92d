"""Temporal, spatial and spatio-temporal grounding, tracking, and the geometry helpers."""

from __future__ import annotations

import json

import pytest

from easyvideor1.rewards.extract import GroundTruthError
from easyvideor1.rewards.geometry import GeometryError, as_box, as_interval, box_iou, interval_iou, time_key
from easyvideor1.rewards.spatial_grounding import parse_box, score_spatial_grounding
from easyvideor1.rewards.spatiotemporal_grounding import score_spatiotemporal_grounding
from easyvideor1.rewards.temporal_grounding import parse_interval, score_temporal_grounding
from easyvideor1.rewards.tracking import score_tracking
from easyvideor1.rewards.types import ScoreRequest

OPTS = {"answer_tag_policy": "last"}


def tagged(value) -> str:
    return f"<answer>{value if isinstance(value, str) else json.dumps(value)}</answer>"


# --- geometry -----------------------------------------------------------------------------

def test_interval_iou_values():
    assert interval_iou((0, 10), (5, 15)) == pytest.approx(5 / 15)
    assert interval_iou((0, 1), (2, 3)) == 0.0
    assert interval_iou((1, 1), (1, 1)) == 1.0
    assert interval_iou((1, 1), (0, 2)) == 0.0


def test_box_iou_values():
    assert box_iou((0, 0, 10, 10), (5, 5, 15, 15)) == pytest.approx(25 / 175)
    assert box_iou((0, 0, 1, 1), (1, 1, 2, 2)) == 0.0
    assert box_iou((0, 0, 1e308, 1e308), (0, 0, 1e308, 1e308)) == 1.0


@pytest.mark.parametrize(
    "value", [[3, 1], [1], [1, 2, 3], ["a", 2], [float("nan"), 1], [-1, 2], None, [True, 2], {"start": 1}],
)
def test_bad_intervals(value):
    with pytest.raises(GeometryError):
        as_interval(value)


@pytest.mark.parametrize(
    "value",
    [[0, 0, 0, 5], [5, 0, 1, 5], [0, 0, 5], [0, 0, 5, float("inf")], {"rect": [0, 0, 1, 1]}, "1,2,3,4",
     [[0, 0, 1, 1], [0, 0, 2, 2]]],
)
def test_bad_boxes(value):
    with pytest.raises(GeometryError):
        as_box(value)


def test_box_forms_and_time_keys():
    assert as_box({"bbox_2d": [1, 2, 3, 4]}) == (1, 2, 3, 4)
    assert as_box([{"bbox": ["1", 2, 3, 4]}]) == (1, 2, 3, 4)
    assert time_key("1.5") == time_key("1.50") == time_key(1.5) == 150
    assert time_key(" 2 ") == 200
    with pytest.raises(GeometryError):
        time_key("soon")


# --- temporal grounding --------------------------------------------------------------------

@pytest.mark.parametrize(
    "text",
    ["[1.5, 3.0]", "1.5 to 3.0 seconds", "from 1.5s to 3s", "1.5 - 3.0", "1.5-3.0", "between 1.5 and 3",
     '{"start": 1.5, "end": 3}', "The event happens from 1.5 seconds to 3.0 seconds.", "[[1.5, 3.0]]",
     "```json\n[1.5, 3.0]\n```", "00:01.5 to 00:03"],
)
def test_interval_phrasings(text):
    assert parse_interval(text) == (1.5, 3.0)


def tg(response, truth="[1.5, 3.0]"):
    return score_temporal_grounding(ScoreRequest(response, truth, "temporal grounding"), OPTS)


def test_temporal_scores():
    got = tg(tagged([1.5, 3.0]))
    assert (got.accuracy, got.format, got.details["tiou"]) == (1.0, 1.0, 1.0)
    got = tg(tagged([0, 3.0]), "[1.5, 3.0]")
    assert got.accuracy == pytest.approx(0.5)
    assert tg("1.5 to 3 seconds").format == 0.0


@pytest.mark.parametrize("answer", ["[3.0, 1.5]", "soon", "[1, 2, 3]", "1 to 2 and 3 to 4", ""])
def test_temporal_malformed_or_reversed(answer):
    got = tg(f"<answer>{answer}</answer>")
    assert (got.accuracy, got.format) == (0.0, 0.5)
    assert got.details["reason"]


@pytest.mark.parametrize("truth", ["[3, 1]", "later", ""])
def test_temporal_bad_ground_truth(truth):
    with pytest.raises(GroundTruthError, match="temporal grounding"):
        tg(tagged([1, 2]), truth)


# --- spatial grounding ---------------------------------------------------------------------

@pytest.mark.parametrize(
    "text",
    ["[10, 20, 50, 60]", '{"bbox_2d": [10, 20, 50, 60]}', '{"bbox": [10, 20, 50, 60]}',
     '[{"bbox_2d": [10, 20, 50, 60], "label": "dog"}]', "(10, 20), (50, 60)", "The box is [10,20,50,60]."],
)
def test_box_phrasings(text):
    assert parse_box(text) == (10, 20, 50, 60)


def sg(response, truth="[10, 20, 50, 60]"):
    return score_spatial_grounding(ScoreRequest(response, truth, "spatial grounding"), OPTS)


def test_spatial_scores():
    assert (sg(tagged([10, 20, 50, 60])).accuracy, sg(tagged([10, 20, 50, 60])).format) == (1.0, 1.0)
    got = sg(tagged([10, 20, 30, 60]))
    assert got.accuracy == pytest.approx(0.5) and got.details["iou"] == pytest.approx(0.5)


@pytest.mark.parametrize(
    "answer", ["[50, 20, 10, 60]", "[10, 20, 10, 60]", "[1, 2, 3]", "left", '[{"bbox_2d": [0,0,1,1]}, [0,0,2,2]]'],
)
def test_spatial_degenerate_or_malformed(answer):
    got = sg(f"<answer>{answer}</answer>")
    assert (got.accuracy, got.format) == (0.0, 0.5)


def test_spatial_bad_ground_truth():
    with pytest.raises(GroundTruthError, match="spatial grounding"):
        sg(tagged([1, 2, 3, 4]), "[5, 5, 1, 1]")


# --- spatio-temporal grounding -------------------------------------------------------------

STG_TRUTH = {"time": [1.0, 3.0], "boxes": {f"{t / 2:.1f}": [0, 0, 8, 8] for t in range(2, 7)}}


def stg(prediction, truth=STG_TRUTH, **opts):
    return score_spatiotemporal_grounding(
        ScoreRequest(tagged(prediction), json.dumps(truth), "spatial-temporal grounding"), {**OPTS, **opts})


def test_stg_perfect():
    got = stg(STG_TRUTH)
    assert (got.accuracy, got.format) == (1.0, 1.0)
    assert got.details["matched"] == 5


def test_stg_one_lucky_box_scores_low():
    got = stg({"time": [0, 10], "boxes": {"2.0": [0, 0, 8, 8]}})
    assert got.details["box_iou"] == pytest.approx(1 / 5)
    assert got.accuracy == pytest.approx(0.5 * 0.2 + 0.5 * 0.2)


def test_stg_keys_match_after_rounding():
    boxes = {f"{t / 2:.2f}": [0, 0, 8, 8] for t in range(2, 7)}
    assert stg({"time": [1, 3], "boxes": boxes}).accuracy == 1.0


def test_stg_components_score_separately():
    got = stg({"time": [3, 1], "boxes": STG_TRUTH["boxes"]})
    assert got.details["tiou"] == 0.0 and got.details["box_iou"] == 1.0
    assert (got.accuracy, got.format) == (0.5, 0.5)
    got = stg({"time": [1, 3], "boxes": {"1.0": [5, 5, 1, 1]}})
    assert got.accuracy == 0.5 and got.format == 0.5


def test_stg_weights_option():
    got = stg({"time": [1, 3], "boxes": {}}, time_weight=1, box_weight=3)
    assert got.accuracy == pytest.approx(0.25) and got.format == 0.5
    with pytest.raises(ValueError, match="weights"):
        stg(STG_TRUTH, time_weight=0, box_weight=0)


def test_stg_malformed_prediction_and_truth():
    got = score_spatiotemporal_grounding(ScoreRequest("<answer>[1, 2]</answer>", json.dumps(STG_TRUTH), "stg"), OPTS)
    assert (got.accuracy, got.format) == (0.0, 0.5)
    with pytest.raises(GroundTruthError, match="spatial-temporal"):
        stg(STG_TRUTH, truth={"time": [1, 2]})
    with pytest.raises(GroundTruthError):
        stg(STG_TRUTH, truth={"time": [1, 2], "boxes": {"1.0": [3, 3, 1, 1]}})


# --- tracking ------------------------------------------------------------------------------

TRACK = {"0.0": [0, 0, 8, 8], "0.5": [4, 0, 12, 8], "1.0": [8, 0, 16, 8], "1.5": [12, 0, 20, 8]}


def trk(prediction, truth=TRACK):
    return score_tracking(ScoreRequest(tagged(prediction), json.dumps(truth), "tracking"), OPTS)


def test_tracking_perfect_and_extra_keys_ignored():
    assert trk(TRACK).accuracy == 1.0
    got = trk({**TRACK, "9.0": [0, 0, 1, 1]})
    assert (got.accuracy, got.format) == (1.0, 1.0)


def test_tracking_missing_keys_count_zero():
    got = trk({"0.0": [0, 0, 8, 8]})
    assert got.accuracy == pytest.approx(0.25) and got.details["matched"] == 1


def test_tracking_list_form():
    items = [{"time": float(k), "bbox_2d": v} for k, v in TRACK.items()]
    assert trk(items).accuracy == 1.0


def test_tracking_malformed():
    got = trk({"0.0": [0, 0, 8, 8], "0.5": "left"})
    assert got.accuracy == pytest.approx(0.25) and got.format == 0.5
    assert (trk("[0, 0, 8, 8]").accuracy, trk("[0, 0, 8, 8]").format) == (0.0, 0.5)
    assert trk({}).format == 0.5
    with pytest.raises(GroundTruthError, match="tracking"):
        trk(TRACK, truth={})
    with pytest.raises(GroundTruthError, match="tracking"):
        score_tracking(ScoreRequest(tagged(TRACK), "not json", "tracking"), OPTS)

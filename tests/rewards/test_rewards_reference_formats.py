"""The reference project's grounding and tracking shapes score, as ground truth and as answers.

Rows below keep the field names and nesting of the public data verbatim:

- STVG and Charades-STA rows: cyuQ1n/EasyVideoR1 ``eval/data/valid_data/stvg.json``
  (problem_id 1 and 19) and ``charades_sta.json`` (problem_id 4), copied as they are;
- spatial grounding and tracking: the row layout of those files (the OneThinker-eval layout:
  ``data_type``, ``problem_type``, ``path``, ``problem``, ``solution`` =
  ``<answer>{"boxes": ...}</answer>``) with the boxes of the reference prompts' own examples
  (``{"boxes": [35, 227, 437, 932]}``; ``{"boxes": {"1": [405, 230, 654, 463], ...}}``);
  the question texts are short stand-ins.

They are read by the project's loader (``solution`` -> answer, ``path`` -> media) and scored
through the dispatcher, as training does.
"""

from __future__ import annotations

import json

import pytest

from easyvideor1.data import load_samples
from easyvideor1.rewards import ScoreRequest, score
from easyvideor1.rewards.extract import GroundTruthError
from easyvideor1.rewards.spatial_grounding import score_spatial_grounding
from easyvideor1.rewards.tracking import score_tracking

STVG_ROWS = [
    {
        "data_type": "video",
        "data_source": "stvg",
        "problem_type": "spatial-temporal grounding",
        "path": "10712559773.mp4",
        "problem": "Who is watching the ball? Please find the corresponding time period in the video. Please "
        "describe the location of the corresponding subject/object in this video.",
        "problem_id": 1,
        "options": [],
        "solution": '<answer>{"time": [17.017017017017018, 18.51851851851852], "boxes": {"18": [440, 135, 493, '
        "246]}}</answer>",
    },
    {
        "data_type": "video",
        "data_source": "stvg",
        "problem_type": "spatial-temporal grounding",
        "path": "7907275512.mp4",
        "problem": "Who leans on the yellow bicycle? Please find the corresponding time period in the video. "
        "Where is the corresponding subject/object located?",
        "problem_id": 19,
        "options": [],
        "solution": '<answer>{"time": [45.11173333333333, 49.9499], "boxes": {"46": [286, 0, 433, 344], '
        '"47": [264, 6, 427, 340], "48": [279, 0, 443, 334], "49": [242, 102, 407, 347]}}</answer>',
    },
]
CHARADES_ROW = {
    "data_type": "video",
    "data_source": "charades_sta",
    "problem_type": "temporal grounding",
    "path": "AMT7R.mp4",
    "problem": "a person is putting a picture onto the wall.",
    "problem_id": 4,
    "options": [],
    # Verbatim, including the file's odd wrapper: no <answer> tag, a placeholder token after it.
    "solution": '<think>{"time": [4.30078125, 12.5], "boxes": {}}</think>'
    "<[PLHD21_never_used_51bce0c785ca2f68081bfa7d91973934]>",
}
SG_BOX = [35, 227, 437, 932]
SG_ROW = {
    "data_type": "image",
    "data_source": "refcoco",
    "problem_type": "spatial grounding",
    "path": "COCO_train2014_000000000009.jpg",
    "problem": "the bowl on the left",
    "problem_id": 7,
    "options": [],
    "solution": '<answer>{"boxes": [35, 227, 437, 932]}</answer>',
}
TRACK_BOXES = {"1": [405, 230, 654, 463], "2": [435, 223, 678, 446], "32": [415, 203, 691, 487]}
TRACK_ROW = {
    "data_type": "video",
    "data_source": "got10k",
    "problem_type": "tracking",
    "path": "./GOT-10k_Val_000001.mp4",
    "problem": "<video>Track the car that is in the box [405, 230, 654, 463] at second 1.",
    "problem_id": 3,
    "options": [],
    "solution": "<answer>" + json.dumps({"boxes": TRACK_BOXES}) + "</answer>",
}


@pytest.fixture
def reference_samples(tmp_path):
    path = tmp_path / "reference.json"
    path.write_text(json.dumps([*STVG_ROWS, CHARADES_ROW, SG_ROW, TRACK_ROW], indent=2))
    samples = load_samples(path)
    return {s.problem_id: s for s in samples}


def scored(sample, response):
    return score(ScoreRequest(response, sample.answer, sample.problem_type, options=sample.options))


def test_spatial_grounding_reference_shape_scores_as_truth_and_answer(reference_samples):
    sample = reference_samples["7"]
    assert sample.answer == '{"boxes": [35, 227, 437, 932]}'
    exact = scored(sample, '<think>the bowl</think><answer>{"boxes": [35, 227, 437, 932]}</answer>')
    assert (exact.error, exact.accuracy, exact.format) == (None, 1.0, 1.0)
    # Half the width: IoU 0.5, whichever shape the answer uses.
    half = [35, 227, 236, 932]
    for answer in (json.dumps({"boxes": half}), json.dumps(half), json.dumps([{"bbox_2d": half}])):
        got = scored(sample, f"<answer>{answer}</answer>")
        assert got.accuracy == pytest.approx(0.5, abs=1e-3) and got.format == 1.0, answer


def test_spatial_grounding_several_boxes_under_boxes_are_one_box_too_many(reference_samples):
    got = scored(reference_samples["7"], '<answer>{"boxes": [[35, 227, 437, 932], [0, 0, 5, 5]]}</answer>')
    assert (got.accuracy, got.format) == (0.0, 0.5)
    assert "2 boxes given" in got.details["reason"]
    with pytest.raises(GroundTruthError, match="2 boxes given"):
        score_spatial_grounding(ScoreRequest("<answer>[0, 0, 1, 1]</answer>",
                                             '{"boxes": [[0, 0, 1, 1], [0, 0, 2, 2]]}', "spatial grounding"), {})


def test_tracking_reference_shape_scores_as_truth_and_answer(reference_samples):
    sample = reference_samples["3"]
    exact = scored(sample, "<answer>" + json.dumps({"boxes": TRACK_BOXES}) + "</answer>")
    assert (exact.error, exact.accuracy, exact.format) == (None, 1.0, 1.0)
    assert exact.details["gt_count"] == 3 and exact.details["matched"] == 3
    # Only second 1 given (as "1.0"): the other two ground-truth seconds count 0.
    one = scored(sample, '<answer>{"boxes": {"1.0": [405, 230, 654, 463]}}</answer>')
    assert one.accuracy == pytest.approx(1 / 3) and one.format == 1.0
    # The project's own unwrapped shape is still read.
    flat = scored(sample, "<answer>" + json.dumps(TRACK_BOXES) + "</answer>")
    assert flat.accuracy == 1.0


def test_tracking_reference_shape_malformed_values_are_reported():
    truth = json.dumps({"boxes": TRACK_BOXES})
    got = score_tracking(ScoreRequest('<answer>{"boxes": {"1": "left", "2": [435, 223, 678, 446]}}</answer>',
                                      truth, "tracking"), {})
    assert got.accuracy == pytest.approx(1 / 3) and got.format == 0.5
    with pytest.raises(GroundTruthError, match="no boxes"):
        score_tracking(ScoreRequest("<answer>{}</answer>", '{"boxes": {}}', "tracking"), {})


def test_stvg_rows_score_with_integer_second_keys(reference_samples):
    sample = reference_samples["19"]
    truth = json.loads(sample.answer)
    exact = scored(sample, "<answer>" + json.dumps(truth) + "</answer>")
    assert (exact.error, exact.accuracy, exact.format) == (None, 1.0, 1.0)
    # Right boxes, half-overlapping time: 0.5 * tIoU + 0.5 * 1.
    shifted = {"time": [47.530816666666666, 52.36898333333333], "boxes": truth["boxes"]}
    got = scored(sample, "<answer>" + json.dumps(shifted) + "</answer>")
    tiou = (49.9499 - 47.530816666666666) / (52.36898333333333 - 45.11173333333333)
    assert got.accuracy == pytest.approx(0.5 * tiou + 0.5)
    single = scored(reference_samples["1"], '<answer>{"time": [17, 18.5], "boxes": {"18.0": [440, 135, 493, '
                                            "246]}}</answer>")
    assert single.details["matched"] == 1 and single.details["box_iou"] == 1.0


def test_charades_row_with_time_object_scores(reference_samples):
    sample = reference_samples["4"]
    got = scored(sample, '<answer>{"time": [4.30078125, 12.5]}</answer>')
    assert (got.error, got.accuracy, got.format) == (None, 1.0, 1.0)

"""Adapters without the engine: loading each fixture, scoring known responses, aggregation."""

from __future__ import annotations

import pytest
from eval_fixtures import WRITERS, load_checked, perfect_response, wrong_response

from easyvideor1.eval import ScoringContext, benchmark_names
from easyvideor1.eval.pipeline import scored_record, zero_values
from easyvideor1.eval.types import failure_record

CTX = ScoringContext()
ALL = sorted(WRITERS)


def test_every_registered_benchmark_has_a_fixture():
    assert benchmark_names() == ALL
    assert len(ALL) == 24


def records(bench, items, responses, ctx=CTX):
    return [scored_record(bench, item, response, ctx) for item, response in zip(items, responses)]


def primary(record):
    values = record["values"]
    for name in ("accuracy", "binary_accuracy", "iou", "viou", "mra", "rouge", "judge_score"):
        if name in values:
            return values[name]
    raise AssertionError(f"no primary metric in {values}")


@pytest.mark.parametrize("name", ALL)
def test_adapter_scores_right_and_wrong_answers(bench_fixtures, name):
    bench, items = load_checked(bench_fixtures, name)
    assert len({item.id for item in items}) == len(items)
    for item in items:
        assert item.benchmark == name and item.source
        assert item.videos or item.images or item.problem_type == "math"  # the JSONL fixture has a text row
    right = records(bench, items, [perfect_response(i) for i in items])
    wrong = records(bench, items, [wrong_response(i) for i in items])
    for record in right:
        assert primary(record) == pytest.approx(1.0), record
        assert set(record["values"]) <= set(record["kinds"])
    for record in wrong:
        assert primary(record) == pytest.approx(0.0), record
    summary = bench.aggregate(right, CTX)
    assert summary["n"] == len(items) and summary["n_failed"] == 0
    for metric in summary["metrics"].values():
        assert metric["value"] == pytest.approx(1.0)


@pytest.mark.parametrize("name", ALL)
def test_failed_items_stay_in_the_denominator(bench_fixtures, name):
    bench, items = load_checked(bench_fixtures, name)
    right = records(bench, items[1:], [perfect_response(i) for i in items[1:]])
    failed = failure_record(
        items[0], "media", "MediaDecodeError: corrupt", **zero_values(bench, items[0], CTX)
    )
    summary = bench.aggregate([failed, *right], CTX)
    assert summary["n"] == len(items) and summary["n_failed"] == 1
    assert summary["failures"] == [
        {"id": items[0].id, "kind": "media", "message": "MediaDecodeError: corrupt"}
    ]
    first_metric = next(iter(zero_values(bench, items[0], CTX)["values"]))
    metric = (
        summary["metrics"].get(first_metric) or summary["metrics"]["mIoU"]
    )  # Charades names mean tIoU mIoU
    assert metric["value"] < 1.0


def test_mc_answers_map_to_letters(bench_fixtures):
    _, items = load_checked(bench_fixtures, "mvbench")
    assert [i.answer for i in items] == ["B", "B", "C"]  # candidate text -> its letter
    assert items[0].options == ("A. Sat down.", "B. Stood up.")
    _, items = load_checked(bench_fixtures, "longvideobench")
    assert items[0].answer == "C" and items[0].categories["duration_group"] == 15
    _, items = load_checked(bench_fixtures, "tempcompass")
    by_task = {i.categories["task_type"]: i for i in items}
    assert (
        by_task["caption_matching"].answer == "A"
        and by_task["caption_matching"].options[0] == "A. a square moves right"
    )
    assert by_task["yes_no"].problem_type == "boolean"
    _, items = load_checked(bench_fixtures, "minerva")
    assert items[0].answer == "B" and len(items[0].options) == 5


def test_mvbench_headline_is_the_mean_over_tasks(bench_fixtures):
    bench, items = load_checked(bench_fixtures, "mvbench")
    # action_sequence: 1/1 right; moving_direction: 1/2 right -> micro 2/3, task mean 3/4.
    summary = bench.aggregate(
        records(
            bench, items, [perfect_response(items[0]), perfect_response(items[1]), wrong_response(items[2])]
        ),
        CTX,
    )
    assert summary["metrics"]["accuracy"]["value"] == pytest.approx(2 / 3)
    assert summary["metrics"]["task_mean_accuracy"]["value"] == pytest.approx(0.75)
    assert summary["notes"] == []  # bounds are sampled as clips: nothing to caveat


def test_lvbench_counts_an_item_in_each_of_its_types(bench_fixtures):
    bench, items = load_checked(bench_fixtures, "lvbench")
    summary = bench.aggregate(
        records(bench, items, [perfect_response(items[0]), wrong_response(items[1])]), CTX
    )
    groups = summary["categories"]["question_type"]
    assert groups["entity recognition"]["accuracy"]["value"] == 1.0
    assert groups["temporal grounding"]["accuracy"]["value"] == 1.0
    assert groups["event understanding"]["accuracy"]["value"] == 0.0
    assert summary["metrics"]["accuracy"]["value"] == 0.5


def test_motionbench_reports_unlabelled_rows(bench_fixtures):
    bench, items = load_checked(bench_fixtures, "motionbench")
    summary = bench.aggregate(records(bench, items, [perfect_response(i) for i in items]), CTX)
    assert any("without a ground-truth answer" in note for note in summary["notes"])


def test_videomme_v2_non_linear_group_score(bench_fixtures):
    bench, items = load_checked(bench_fixtures, "videomme_v2")
    # Group 1 (consistency): 3 of 4 right -> (3/4)^2. Group 2 (coherence): right, wrong, right, right
    # -> truncated after the first -> (1/4)^2.
    pattern = [True, True, True, False, True, False, True, True]
    responses = [perfect_response(i) if ok else wrong_response(i) for i, ok in zip(items, pattern)]
    summary = bench.aggregate(records(bench, items, responses), CTX)
    assert summary["metrics"]["accuracy"]["value"] == pytest.approx(6 / 8)
    assert summary["metrics"]["non_lin_score"]["value"] == pytest.approx(((3 / 4) ** 2 + (1 / 4) ** 2) / 2)
    assert summary["metrics"]["non_lin_score"]["kind"] == "composite"


def test_vsibench_overall_merges_relative_direction(bench_fixtures):
    bench, items = load_checked(bench_fixtures, "vsibench")
    counting, easy, hard = items
    assert counting.problem_type == "regression" and easy.answer == "B" and hard.answer == "A"
    # counting: 4.5 vs 4 -> |err|/gt = 0.125 < 1 - θ for θ in 0.50..0.85 -> MRA 0.8.
    rs = records(bench, items, ["<answer>4.5</answer>", perfect_response(easy), wrong_response(hard)])
    summary = bench.aggregate(rs, CTX)
    assert summary["metrics"]["mra"]["value"] == pytest.approx(0.8)
    assert summary["metrics"]["accuracy"]["value"] == pytest.approx(0.5)
    assert summary["metrics"]["overall"]["value"] == pytest.approx((0.8 + 0.5) / 2)
    assert summary["metrics"]["overall"]["kind"] == "composite"


def test_charades_recall_at_thresholds_and_miou(bench_fixtures):
    bench, items = load_checked(bench_fixtures, "charades_sta")
    # Item 1 truth [0.5, 1.5]: [0.5, 1.0] -> IoU 0.5. Item 2 truth [0, 1]: [0, 0.4] -> IoU 0.4.
    rs = records(bench, items, ["<answer>[0.5, 1.0]</answer>", "<answer>from 0 to 0.4 seconds</answer>"])
    summary = bench.aggregate(rs, CTX)
    metrics = summary["metrics"]
    assert metrics["mIoU"]["value"] == pytest.approx(0.45)
    assert (
        metrics["R@0.3"]["value"] == 1.0
        and metrics["R@0.5"]["value"] == 0.5
        and metrics["R@0.7"]["value"] == 0.0
    )
    assert {m["kind"] for m in metrics.values()} == {"iou"}


def test_stvg_viou_on_the_frames_seen(bench_fixtures):
    bench, items = load_checked(bench_fixtures, "stvg")
    item = items[0]
    truth_boxes = item.answer["boxes"]
    # Right interval, boxes only on the first half of the truth frames: vIoU = 3/5 over the truth frames.
    half = {t: b for t, b in list(truth_boxes.items())[:3]}
    response = '<answer>{"time": [0.5, 1.5], "boxes": ' + __import__("json").dumps(half) + "}</answer>"
    record = scored_record(bench, item, response, CTX)
    assert record["values"]["tiou"] == pytest.approx(1.0)
    assert record["values"]["viou"] == pytest.approx(3 / 5)
    assert record["values"]["vIoU@0.5"] == 1.0


def test_ovobench_groups_and_overall(bench_fixtures):
    bench, items = load_checked(bench_fixtures, "ovobench")
    by_task = [i.categories["task"] for i in items]
    assert by_task == ["EPM", "OCR", "REC", "REC", "CRR"]
    assert items[2].answer == "1" and items[4].answer == "no"
    # EPM right, OCR wrong, REC 1/2, CRR right.
    responses = [
        perfect_response(items[0]),
        wrong_response(items[1]),
        perfect_response(items[2]),
        wrong_response(items[3]),
        perfect_response(items[4]),
    ]
    summary = bench.aggregate(records(bench, items, responses), CTX)
    metrics = summary["metrics"]
    assert metrics["backward_tracing"]["value"] == 1.0
    assert metrics["realtime_perception"]["value"] == 0.0
    assert metrics["forward_responding"]["value"] == pytest.approx((0.5 + 1.0) / 2)
    assert metrics["overall"]["value"] == pytest.approx((1.0 + 0.0 + 0.75) / 3)


def test_videomathqa_mbin_needs_every_pair(bench_fixtures):
    bench, items = load_checked(bench_fixtures, "videomathqa")
    mcq, pair0, pair1 = items
    assert pair0.options == ("A. 16", "B. 4") and pair0.answer == "A"
    assert pair1.options == ("A. 8", "B. 16") and pair1.answer == "B"
    summary = bench.aggregate(
        records(bench, items, [perfect_response(mcq), perfect_response(pair0), wrong_response(pair1)]), CTX
    )
    assert summary["metrics"]["accuracy"]["value"] == 1.0
    assert summary["metrics"]["binary_accuracy"]["value"] == 0.5
    assert summary["metrics"]["mbin_accuracy"]["value"] == 0.0


def test_mlvu_m_avg_and_g_avg_stay_apart(bench_fixtures):
    bench, items = load_checked(bench_fixtures, "mlvu")
    summary = bench.aggregate(
        records(
            bench, items, [perfect_response(items[0]), wrong_response(items[1]), perfect_response(items[2])]
        ),
        CTX,
    )
    metrics = summary["metrics"]
    assert metrics["m_avg"]["value"] == 0.5 and metrics["m_avg"]["kind"] == "accuracy"
    assert metrics["g_avg_rouge"]["value"] == 1.0 and metrics["g_avg_rouge"]["kind"] == "text"
    assert any("no LLM judge" in note for note in summary["notes"])


def test_open_ended_fallback_is_strict(bench_fixtures):
    bench, items = load_checked(bench_fixtures, "videoreasonbench")
    item = items[0]  # answer "1: (a,3)"
    assert scored_record(bench, item, "<answer>1: (A,3).</answer>", CTX)["values"]["accuracy"] == 1.0
    record = scored_record(bench, item, "<answer>one time, at (a,3)</answer>", CTX)
    assert record["values"]["accuracy"] == 0.0 and record["scoring"] == "fallback"


def test_judge_scores_open_answers_over_http(bench_fixtures, judge_server):
    ctx = ScoringContext(judge={"base_url": judge_server.url, "model": "overlap", "retries": 0})
    bench, items = load_checked(bench_fixtures, "mmvu")
    mc, open_item = items
    before = judge_server.app.state.requests
    good = scored_record(bench, open_item, "<answer>a dolly zoom</answer>", ctx)
    bad = scored_record(bench, open_item, "<answer>a purple elephant dancing</answer>", ctx)
    assert good["scoring"] == "judge" and good["values"] == {"accuracy": 1.0}
    assert bad["values"] == {"accuracy": 0.0} and bad["details"]["judge_score"] < 0.5
    assert (
        scored_record(bench, mc, perfect_response(mc), ctx)["scoring"] == "rule"
    )  # MC never goes to the judge
    assert judge_server.app.state.requests == before + 2
    summary = bench.aggregate([good], ctx)
    assert not any("no LLM judge" in note for note in summary["notes"])

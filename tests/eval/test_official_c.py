"""Official metrics of group c's adapters (VSI-Bench, ...): the same responses through the
official rule (written from each benchmark's own scorer) and the project's strict one.

Every expectation names the line of the official code it comes from.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from eval_fixtures import VideoBank, _jsonl

from easyvideor1.eval import ScoringContext, get_benchmark
from easyvideor1.eval.pipeline import scored_record, zero_values
from easyvideor1.eval.types import failure_record

CTX = ScoringContext()


def load(bench_fixtures, name):
    root, _ = bench_fixtures
    bench = get_benchmark(name)
    return bench, bench.load(root / name)


def both(bench, item, response):
    """(strict values, official verdict) of one response."""
    record = scored_record(bench, item, response, CTX)
    return record["values"], record["official"]


def summarize(bench, items, responses):
    return bench.aggregate([scored_record(bench, i, r, CTX) for i, r in zip(items, responses)], CTX)


# ---- VSI-Bench: vision-x-nyu/thinking-in-space lmms_eval/tasks/vsibench/utils.py -------------

# Multiple choice, ground truth "B" (options "A. left", "B. right").
# fuzzy_matching: pred.split(' ')[0].rstrip('.').strip(); exact_match: pred.lower() == target.lower().
VSI_MC = [
    ("B", 1.0, 1.0),
    ("A", 0.0, 0.0),
    ("B. right", 1.0, 1.0),  # first token "B." -> rstrip('.') -> "B"
    ("(B)", 0.0, 1.0),  # "(B)" != "b"
    ("The answer is B", 0.0, 1.0),  # first token "The"
    ("b", 1.0, 1.0),  # .lower() on both sides
    ("The door is to the right, so B", 0.0, 1.0),  # reasoning first: token "The"
    ("", 0.0, 0.0),
    ("<answer>B</answer>", 0.0, 1.0),  # no tag handling: the token is the whole tag string
    ("B.\n", 0.0, 1.0),  # split(' ') keeps the newline, so rstrip('.') sees "\n" last: "B."
]

# Numeric, ground truth "4". to_float(fuzzy_matching(pred)); mean_relative_accuracy:
# abs(pred - gt) / gt <= 1 - np.linspace(.5, .95, 10); a non-number -> TypeError -> 0.
VSI_NUMERIC = [
    ("4", 1.0, 1.0),
    ("4.", 1.0, 1.0),  # rstrip('.')
    ("4.5", 0.8, 0.8),  # 0.125 <= 1 - θ for θ <= 0.85
    ("2", 0.1, 0.0),  # 0.5 <= 1 - 0.5: the "<=" hit the rewards library's "<" misses
    ("6", 0.1, 0.0),
    ("3", 0.6, 0.5),  # 0.25: θ = 0.75 counts under "<=" only
    ("four", 0.0, 1.0),  # float("four") fails
    ("About 4", 0.0, 1.0),  # first token "About"
    ("<answer>4</answer>", 0.0, 1.0),
    ("", 0.0, 0.0),
]


@pytest.mark.parametrize(("response", "official", "strict"), VSI_MC)
def test_vsibench_mc_official_reads_the_first_token(bench_fixtures, response, official, strict):
    bench, items = load(bench_fixtures, "vsibench")
    easy = items[1]
    assert easy.answer == "B" and easy.meta["ground_truth"] == "B"
    values, verdict = both(bench, easy, response)
    assert verdict["values"]["accuracy"] == official
    assert values["accuracy"] == strict


@pytest.mark.parametrize(("response", "official", "strict"), VSI_NUMERIC)
def test_vsibench_numeric_official_mra_counts_equality(bench_fixtures, response, official, strict):
    bench, items = load(bench_fixtures, "vsibench")
    counting = items[0]
    values, verdict = both(bench, counting, response)
    assert verdict["values"]["mra"] == pytest.approx(official)
    assert values["mra"] == pytest.approx(strict)


def _vsi_rows(root: Path, bank: VideoBank, rows):
    bank.put(root / "arkitscenes" / "41069025.mp4")
    _jsonl(
        root / "test.jsonl",
        [
            {
                "id": i,
                "dataset": "arkitscenes",
                "scene_name": "41069025",
                "question_type": qt,
                "question": "q?",
                "ground_truth": gt,
                "options": None if gt[0].isdigit() else ["A. left", "B. right"],
            }
            for i, (qt, gt) in enumerate(rows)
        ],
    )


def test_vsibench_overall_averages_the_direction_levels(tmp_path):
    # _compute... / vsibench_aggregate_results: mean per question_type; the easy, medium and hard
    # direction accuracies summed and divided by 3; overall = mean of the remaining values.
    rows = [
        ("object_rel_direction_easy", "A"),
        ("object_rel_direction_easy", "A"),
        ("object_rel_direction_medium", "A"),
        ("object_rel_direction_hard", "A"),
        ("object_counting", "4"),
        ("route_planning", "B"),
    ]
    _vsi_rows(tmp_path, VideoBank(tmp_path / "_clips"), rows)
    bench = get_benchmark("vsibench")
    items = bench.load(tmp_path)
    responses = ["A", "A", "B", "B", "2", "B"]  # easy 2/2, medium 0, hard 0, counting MRA 0.1, route 1
    summary = summarize(bench, items, responses)
    official = summary["official"]
    assert official["status"] == "ok" and official["metric"] == "overall" and official["n"] == 6
    direction = (1.0 + 0.0 + 0.0) / 3  # pooled, it would be 2/4
    assert official["over"]["object_rel_direction"] == pytest.approx(direction, abs=1e-6)
    assert official["value"] == pytest.approx((direction + 0.1 + 1.0) / 3)
    # The strict composite aggregates the same way over the strict values (counting MRA 0 under "<").
    assert summary["metrics"]["overall"]["value"] == pytest.approx((direction + 0.0 + 1.0) / 3)
    assert summary["strict"]["metric"] == "overall"
    assert summary["strict"]["value"] == pytest.approx(summary["metrics"]["overall"]["value"])
    # The one item on the "<=" boundary: official MRA 0.1, strict 0.0 (the metrics both name are compared).
    assert summary["differences"]["count"] == 1


def test_vsibench_failures_and_zero_ground_truth(tmp_path):
    _vsi_rows(
        tmp_path,
        VideoBank(tmp_path / "_clips"),
        [("object_counting", "0"), ("object_counting", "4"), ("object_rel_direction_easy", "B")],
    )
    bench = get_benchmark("vsibench")
    zero, four, easy = bench.load(tmp_path)
    # abs_dist_norm divides by the ground truth: a 0 is left out rather than crashing the run.
    records = [
        scored_record(bench, zero, "0", CTX),
        scored_record(bench, four, "4", CTX),
        failure_record(easy, "media", "MediaDecodeError: corrupt", **zero_values(bench, easy, CTX)),
    ]
    assert records[2]["official"]["values"] == {"accuracy": 0.0}  # an empty response's verdict
    summary = bench.aggregate(records, CTX)
    official = summary["official"]
    assert official["excluded"] == 1 and official["excluded_why"] == {
        "ground truth 0: relative error undefined": 1
    }
    assert official["n"] == 2 and official["value"] == pytest.approx((1.0 + 0.0) / 2)
    assert summary["differences"]["reasons"] == {
        "excluded by the official script: ground truth 0: relative error undefined": 1
    }
    json.dumps(summary)


# ---- VideoMathQA: EvolvingLMMs-Lab/lmms-eval lmms_eval/tasks/videomathqa/utils.py -------------

# MCQ row, answer "C" (options "(A) 4" ... "(E) 20"). extract_characters_regex: strip, delete the
# answer prefixes, then the first match of r"[ABCDE]"; process_results keeps it, the aggregation
# compares pred_answer == answer.
VIDEOMATHQA_MCQ = [
    ("C", 1.0, 1.0),
    ("B", 0.0, 0.0),
    ("C. 16", 1.0, 1.0),
    ("(C)", 1.0, 1.0),
    ("The answer is C", 1.0, 1.0),  # the prefix "The answer is" is deleted first
    ("c", 0.0, 1.0),  # [ABCDE] is case-sensitive: nothing read
    ("Area = 4 * 4 = 16 cm^2, so C", 0.0, 1.0),  # the first capital A-E is the "A" of "Area"
    ("The best answer is: C", 1.0, 1.0),
    ("", 0.0, 0.0),
    ("<answer>C</answer>", 1.0, 1.0),  # no capital A-E in the tag names
]


@pytest.mark.parametrize(("response", "official", "strict"), VIDEOMATHQA_MCQ)
def test_videomathqa_official_extraction(bench_fixtures, response, official, strict):
    bench, items = load(bench_fixtures, "videomathqa")
    mcq = items[0]
    values, verdict = both(bench, mcq, response)
    assert verdict["values"]["accuracy"] == official
    assert values["accuracy"] == strict


def test_videomathqa_official_mbin_groups_by_question_id(bench_fixtures):
    bench, items = load(bench_fixtures, "videomathqa")
    mcq, pair0, pair1 = items
    # videomathqa_multi_binary_aggregate_results: rows grouped by question_id, a group counts
    # when all(pred_answer == answer); the MCQ task is the micro accuracy over its rows.
    summary = summarize(bench, items, ["C", "A", "B"])
    official = summary["official"]
    assert official["metric"] == "accuracy" and official["value"] == 1.0 and official["n"] == 1
    assert official["also"]["mbin_accuracy"] == {"value": 1.0, "n": 1}
    # A lowercase answer to a binary row reads nothing officially; strict accepts it.
    summary = summarize(bench, items, ["C", "a", "B"])
    assert summary["official"]["also"]["mbin_accuracy"]["value"] == 0.0
    assert summary["metrics"]["mbin_accuracy"]["value"] == 1.0
    # Failed items: the official rule sees an empty response (no letter, wrong).
    failed = failure_record(pair1, "timeout", "late", **zero_values(bench, pair1, CTX))
    assert failed["official"]["values"] == {"binary_accuracy": 0.0}


# ---- Video-MMMU: EvolvingLMMs-Lab/VideoMMMU lmms_eval/tasks/videommmu/utils.py ----------------

# Adaptation MC row, answer "A" (question_type "multiple-choice"): parse_multi_choice_response.
VIDEOMMMU_MC = [
    ("A", 1.0, 1.0),  # step 4: "A " in " A " (the response padded with spaces)
    ("B", 0.0, 0.0),
    ("A. aldose", 1.0, 1.0),  # step 2: "A."
    ("(A)", 1.0, 1.0),  # step 3: "(A)"
    ("The answer is A", 1.0, 1.0),  # step 4: "A " (no other capital A-E followed by a space)
    ("a", 0.0, 1.0),  # letters are upper case only; one word: no content step -> "No Answere Found"
    ("It has an aldehyde group so it is an aldose, A", 1.0, 1.0),
    ("<answer>A</answer>", 0.0, 1.0),  # "A<" matches no form; two words: no content step
    ("This sugar has an aldehyde group, which makes it an aldose sugar", 1.0, 1.0),  # step 5: option text
]

# Perception row, answer "G", no question_type (as the benchmark's data file): process_results
# takes doc.get("question_type", "None") -> parse_open_response + eval_open against "G", whose
# normalize_str gives [" g", "g "] (a single character), found inside a lowercased key response.
VIDEOMMMU_PERCEPTION = [
    ("G", 1.0, 1.0),  # the whole response "g" normalises to " g" / "g ": contains " g"
    ("A", 0.0, 0.0),
    ("G. 4, 6", 0.0, 1.0),  # no key phrase: the response "g. 4, 6" holds neither " g" nor "g "
    ("(G)", 0.0, 1.0),
    ("The answer is G", 1.0, 1.0),  # tail after "is ": "g"
    ("g", 1.0, 1.0),
    ("Both have 4 and 6 carbons, so G", 1.0, 1.0),  # shortest tail: after "so " -> "g"
    ("<answer>G</answer>", 0.0, 1.0),
]

# Adaptation open row, answer "4": eval_open compares numbers (normalize_str rounds to 2 places).
VIDEOMMMU_OPEN = [
    ("4", 1.0, 1.0),
    ("2", 0.0, 0.0),
    ("There are 4 optical isomers", 1.0, 1.0),  # "are " tail "4 optical isomers" -> number 4
    ("The answer is 4.", 1.0, 1.0),
    ("four", 0.0, 1.0),  # no digits to extract; the rewards library reads number words
    ("2^n with n = 2 chiral centers gives 4", 1.0, 0.0),  # last line: the tail after "=" holds 4
    ("<answer>4</answer>", 1.0, 1.0),  # extract_numbers finds the 4 between the tags
    ("4.0", 1.0, 1.0),
]


def _videommmu_item(items, item_id):
    return next(i for i in items if i.id == item_id)


@pytest.mark.parametrize(
    ("item_id", "response", "official", "strict"),
    [("Adaptation/dev_Biology_3", *case) for case in VIDEOMMMU_MC]
    + [("Perception/dev_Biology_3", *case) for case in VIDEOMMMU_PERCEPTION]
    + [("Adaptation/validation_Chemistry_19", *case) for case in VIDEOMMMU_OPEN],
)
def test_videommmu_official_readers(bench_fixtures, item_id, response, official, strict):
    bench, items = load(bench_fixtures, "videommmu")
    values, verdict = both(bench, _videommmu_item(items, item_id), response)
    assert verdict["values"]["accuracy"] == official
    assert values["accuracy"] == strict


def test_videommmu_layout_and_empty_responses_left_out(bench_fixtures):
    bench, items = load(bench_fixtures, "videommmu")
    assert [i.id for i in items] == [
        "Perception/dev_Biology_3",
        "Adaptation/dev_Biology_3",
        "Adaptation/validation_Chemistry_19",
    ]
    assert all("/Science/" in i.videos[0] and Path(i.videos[0]).is_file() for i in items)
    perception, mc, open_item = items
    # videoperception_aggregate_results drops parsed_pred == "API Error" (an empty response)
    # before the instance-level accuracy.
    failed = failure_record(perception, "engine", "boom", **zero_values(bench, perception, CTX))
    records = [failed, scored_record(bench, mc, "A", CTX), scored_record(bench, open_item, "14", CTX)]
    summary = bench.aggregate(records, CTX)
    official = summary["official"]
    assert official["status"] == "ok" and official["value"] == 0.5 and official["n"] == 2
    assert official["over"] == {"Adaptation": 0.5}
    assert official["excluded"] == 1
    assert summary["metrics"]["accuracy"]["value"] == pytest.approx(1 / 3)  # strict: all three
    assert summary["differences"]["count"] == 1
    assert next(iter(summary["differences"]["reasons"])).startswith("excluded by the official script: empty")


# ---- Charades-STA: EvolvingLMMs-Lab/lmms-eval lmms_eval/tasks/charades_sta/utils.py -----------

# Item 1, truth [0.5, 1.5]. extract_time + iou; (official tIoU, strict tIoU).
CHARADES = [
    ("The event happens in 0.5 - 1.0 seconds.", 0.5, 0.5),  # main_pattern "number - number"
    ("[0.5, 1.0]", 0.0, 0.5),  # no dash; time_number takes one number per sentence: no pair
    ("from 0.5 to 1.0 seconds", 0.5, 0.5),  # .replace("to", "-")
    ("It starts at 0.5 and ends at 1.5", 0.0, 0.0),  # one sentence, one first number: no pair
    ("It starts at 0.5\nIt ends at 1.5", 1.0, 0.0),  # split at "\n": first numbers paired
    ("00:00 - 00:01", 1 / 3, 1 / 3),  # time_format_range_pattern, m:ss
    ("The event happens in 1.5 - 0.5 seconds", 1.0, 0.0),  # ends ordered: [end, start]
    ("<answer>[0.5, 1.5]</answer>", 0.0, 1.0),
    ("The person stops at 0.5 and 1.5", 0.0, 1.0),  # "stops" -> "s-ps"; one first number
    ("0.5s-1.5s", 1.0, 1.0),  # fallback_pattern
    ("", 0.0, 0.0),
]


@pytest.mark.parametrize(("response", "official", "strict"), CHARADES)
def test_charades_official_extract_time(bench_fixtures, response, official, strict):
    bench, items = load(bench_fixtures, "charades_sta")
    values, verdict = both(bench, items[0], response)
    assert verdict["values"]["iou"] == pytest.approx(official)
    assert values["iou"] == pytest.approx(strict)
    # _temporal_grounding_compute_metrics: recall counts value >= thr.
    assert verdict["values"]["R@0.3"] == float(official >= 0.3)


def test_charades_official_keeps_the_last_of_repeated_rows(tmp_path):
    bank = VideoBank(tmp_path / "_clips")
    bank.put(tmp_path / "videos" / "3MSZA.mp4")
    (tmp_path / "charades_sta_test.txt").write_text(
        "3MSZA 0.5 1.5##person turn a light on.\n"
        "3MSZA 0.0 1.0##person opens the door.\n"
        "3MSZA 0.5 1.5##person turn a light on.\n"
    )
    bench = get_benchmark("charades_sta")
    items = bench.load(tmp_path)
    # The results dict is keyed video>>>caption>>>timestamp: the third row overwrites the first.
    responses = ["It happens in 0.5 - 1.5", "It happens in 0.0 - 0.5", "It happens in 0.5 - 1.0"]
    summary = summarize(bench, items, responses)
    official = summary["official"]
    assert official["excluded"] == 1 and official["n"] == 2
    assert official["metric"] == "mIoU" and official["value"] == pytest.approx((0.5 + 0.5) / 2)
    assert official["also"]["R@0.5"] == {"value": 1.0, "n": 2}
    assert official["also"]["R@0.7"] == {"value": 0.0, "n": 2}
    assert summary["metrics"]["mIoU"]["value"] == pytest.approx((1.0 + 0.5 + 0.5) / 3)
    assert summary["differences"]["count"] == 1


# ---- OVO-Bench: JoeLeelyf/OVO-Bench utils/OVOBenchScore.py (OVOBenchOfflineScore) ------------

# EPM row 0, gt 2 -> ground_truth chr(65 + 2) = "C"; get_score: int(gt in response).
OVO_MC = [
    ("C", 1.0, 1.0),
    ("A", 0.0, 0.0),
    ("C. a person with blue shirt", 1.0, 1.0),
    ("(C)", 1.0, 1.0),
    ("The answer is C", 1.0, 1.0),
    ("c", 0.0, 1.0),  # case-sensitive substring
    ("Chopping happens near the blue shirt, so A", 1.0, 0.0),  # the "C" of "Chopping" counts
    ("<answer>C</answer>", 1.0, 1.0),
    ("", 0.0, 0.0),
]
# REC probe 0, count 1: re.findall(r'\d+') joined == str(count).
OVO_REC = [
    ("1", 1.0, 1.0),
    ("2", 0.0, 0.0),
    ("They did it 1 time out of 3", 0.0, 0.0),
    ("<answer>1</answer>", 1.0, 1.0),
    ("once", 0.0, 0.0),
    ("", 0.0, 0.0),
]
# CRR probe, type 0: exactly "N", else "No" in response.
OVO_CRR = [
    ("No", 1.0, 1.0),
    ("N", 1.0, 0.0),
    ("no", 0.0, 1.0),
    ("Yes", 0.0, 0.0),
    ("Not yet: No", 1.0, 0.0),
    ("<answer>no</answer>", 0.0, 1.0),
    ("", 0.0, 0.0),
]


@pytest.mark.parametrize(
    ("index", "response", "official", "strict"),
    [(0, *c) for c in OVO_MC] + [(2, *c) for c in OVO_REC] + [(4, *c) for c in OVO_CRR],
)
def test_ovobench_official_substring_rules(bench_fixtures, index, response, official, strict):
    bench, items = load(bench_fixtures, "ovobench")
    values, verdict = both(bench, items[index], response)
    assert verdict["values"]["accuracy"] == official
    assert values["accuracy"] == strict


def test_ovobench_ssr_rows_load_and_official_groups(tmp_path):
    # An SSR row as released (no question or activity; a step per probe), beside one EPM row.
    bank = VideoBank(tmp_path / "_clips")
    for name in ("0", "1516_0", "1516_1"):
        bank.put(tmp_path / "chunked_videos" / f"{name}.mp4")
    (tmp_path / "ovo_bench_new.json").write_text(
        json.dumps(
            [
                {
                    "id": 0,
                    "task": "EPM",
                    "video": "Ego4D/clips/a.mp4",
                    "realtime": 215,
                    "question": "Who?",
                    "answer": "b",
                    "options": ["a", "b", "c", "d"],
                    "gt": 1,
                },
                {
                    "id": 1516,
                    "task": "SSR",
                    "video": "COIN/xZecGPPhbHE.mp4",
                    "tutorial": "PutOnHairExtensions",
                    "all_steps": ["pull up the hair", "put on the hair extensions"],
                    "start_time": [25, 31],
                    "end_time": [30, 49],
                    "test_info": [
                        {"realtime": 27, "step": "pull up the hair", "type": 1},
                        {"realtime": 40, "step": "pull up the hair", "type": 0},
                    ],
                },
            ]
        )
    )
    bench = get_benchmark("ovobench")
    items = bench.load(tmp_path)
    assert [i.id for i in items] == ["0", "1516/0", "1516/1"]
    assert 'step "pull up the hair"' in items[1].question and items[1].answer == "yes"
    # score(): per task mean; backward = mean of its tasks; forward likewise; "Total Avg." = mean
    # of the groups present (the script needs all three; here realtime has no items).
    summary = summarize(bench, items, ["B", "Y", "yes"])
    official = summary["official"]
    assert official["over"] == {"backward_tracing": 1.0, "forward_responding": 0.5}
    assert official["value"] == pytest.approx(0.75) and official["n"] == 3
    # Strict: the boolean reader does not take a bare "Y"; "yes" is wrong for type 0.
    assert summary["metrics"]["overall"]["value"] == pytest.approx((1.0 + 0.0) / 2)


# ---- ODV-Bench: MCG-NJU/StreamForest lmms_eval/tasks/odvbench/utils.py -------------------------

# Row 0: candidates ["yes, sharply", "no", "it is turning", "unknown"], answer "no" -> "B".
# mcq_acc: process(pred) == process(gt letter).
ODV = [
    ("B", 1.0, 1.0),
    ("A", 0.0, 0.0),
    ("B. no", 1.0, 1.0),  # option_regex ^([A-E])\.\s*(.+)$
    ("(B)", 1.0, 1.0),  # "(" and ")" replaced by spaces, then \b([A-E])\b
    ("The answer is B", 1.0, 1.0),
    ("b", 1.0, 1.0),  # re.IGNORECASE, upper-cased
    ("The car keeps a steady speed, so B", 0.0, 1.0),  # the article "a" is the first standalone letter
    ("<answer>B</answer>", 1.0, 1.0),  # "<", ">", "/" become spaces
    ("no", 0.0, 1.0),  # no letter: the cleaned text "no" != "B"
]


@pytest.mark.parametrize(("response", "official", "strict"), ODV)
def test_odvbench_official_mcq_acc(bench_fixtures, response, official, strict):
    bench, items = load(bench_fixtures, "odvbench")
    values, verdict = both(bench, items[0], response)
    assert verdict["values"]["accuracy"] == official
    assert values["accuracy"] == strict


def test_odvbench_official_leaves_out_empty_predictions(bench_fixtures):
    bench, items = load(bench_fixtures, "odvbench")
    # odvbench_aggregate_results counts a result only if pred_answer != "".
    failed = failure_record(items[0], "media", "gone", **zero_values(bench, items[0], CTX))
    summary = bench.aggregate([failed, scored_record(bench, items[1], "A", CTX)], CTX)
    official = summary["official"]
    assert official["value"] == 1.0 and official["n"] == 1 and official["excluded"] == 1
    assert official["over"] == {"Targeting single dynamic objects": 1.0}
    assert summary["metrics"]["accuracy"]["value"] == 0.5


# ---- LiveSports-3K QA: showlab/livecc evaluation/livesports3kqa/distributed_evaluate_livesports3kqa.py

# Event 1, answer "C". evaluate_livesports3kqa_results: question_item['response'][0] == answer, the
# response there being the chosen option string; here the generated response's first character.
LIVESPORTS = [
    ("C", 1.0, 1.0),
    ("B", 0.0, 0.0),
    ("C: player 10", 1.0, 1.0),
    ("(C)", 0.0, 1.0),
    ("The answer is C", 0.0, 1.0),
    ("c", 0.0, 1.0),  # "==" is case-sensitive
    ("Number 10 scores, so C", 0.0, 1.0),
    ("<answer>C</answer>", 0.0, 1.0),
    ("", 0.0, 0.0),
]


@pytest.mark.parametrize(("response", "official", "strict"), LIVESPORTS)
def test_livesports_official_first_character(bench_fixtures, response, official, strict):
    bench, items = load(bench_fixtures, "livesports3k_qa")
    values, verdict = both(bench, items[0], response)
    assert verdict["values"]["accuracy"] == official
    assert values["accuracy"] == strict


def test_livesports_official_counts_all_and_reads_the_scripts_window_names(tmp_path):
    bank = VideoBank(tmp_path / "_clips")
    bank.put(tmp_path / "videos" / "ls2.mp4")
    # The script's own JSONL names the window video_start / video_end.
    _jsonl(
        tmp_path / "LiveSports-3K-QA.jsonl",
        [
            {
                "video_id": "ls2",
                "question_id": "ls2_q1",
                "video_start": 0.0,
                "video_end": 2.0,
                "q_type": "When",
                "OCR": 0,
                "question": "When?",
                "options": ["A. now", "B. later", "C. never", "D. soon"],
                "answer": "A",
            },
            {
                "video_id": "ls2",
                "question_id": "ls2_q2",
                "video_start": 0.0,
                "video_end": 2.0,
                "q_type": "Who",
                "OCR": 1,
                "question": "Who?",
                "options": ["A. p1", "B. p2", "C. p3", "D. p4"],
                "answer": "B",
            },
        ],
    )
    bench = get_benchmark("livesports3k_qa")
    items = bench.load(tmp_path)
    assert [i.clip for i in items] == [(0.0, 2.0), (0.0, 2.0)]
    failed = failure_record(items[1], "timeout", "late", **zero_values(bench, items[1], CTX))
    summary = bench.aggregate([scored_record(bench, items[0], "A", CTX), failed], CTX)
    official = summary["official"]
    # correct / total over every question: a failed one is in the total.
    assert official["value"] == 0.5 and official["n"] == 2 and official["excluded"] == 0
    assert official["over"] == {"When": 1.0, "Who": 0.0} and official["ocr"] == 0.0


# ---- STVG: tzhhhh123/HC-STVG eval_hcvg.py (hcvg_eval), on the sampled frames ----------------


def _stvg_response(interval, boxes):
    return "<answer>" + json.dumps({"time": interval, "boxes": boxes}) + "</answer>"


def test_stvg_official_span_and_strict_thresholds(bench_fixtures):
    bench, items = load(bench_fixtures, "stvg")
    item = items[0]  # truth [0.5, 1.5], 5 boxes at 0.5, 0.75, ..., 1.5
    truth = item.answer["boxes"]
    times = [float(t) for t in truth]
    # Boxes on the first three truth frames, interval [0.5, 1.5]: tIoU (frames with a box / span) 3/5,
    # vIoU 3/5; the strict tIoU is the interval IoU, 1.0.
    values, verdict = both(bench, item, _stvg_response([0.5, 1.5], dict(list(truth.items())[:3])))
    assert verdict["values"]["tiou"] == pytest.approx(3 / 5) and values["tiou"] == pytest.approx(1.0)
    assert verdict["values"]["viou"] == pytest.approx(3 / 5) == values["viou"]
    # A predicted interval reaching past the truth widens the span: max(ed) - min(st) frames.
    values, verdict = both(bench, item, _stvg_response([0.5, 2.0], truth))
    assert verdict["values"]["viou"] == pytest.approx(1.0)  # without metas the frames are the truth's
    assert len(times) == 5
    # (vious > 0.3): exactly 0.5 is not above 0.5; strict counts >= 0.5.
    half = dict(list(truth.items())[:2]) | {list(truth)[2]: [0, 0, 1, 1]}
    values, verdict = both(bench, item, _stvg_response([0.5, 1.5], half))
    assert verdict["values"]["viou"] == pytest.approx(2 / 5)
    assert verdict["values"]["vIoU@0.3"] == 1.0 and verdict["values"]["vIoU@0.5"] == 0.0
    # No interval: the video counts as missing from the predictions (0, 0).
    values, verdict = both(bench, item, "")
    assert verdict["values"] == {"tiou": 0.0, "viou": 0.0, "vIoU@0.3": 0.0, "vIoU@0.5": 0.0}


def test_stvg_official_threshold_is_strictly_greater(tmp_path):
    # A v1 row (test.json of the release: "caption", "st_frame", "img_num", "width", "height").
    bank = VideoBank(tmp_path / "_clips")
    bank.put(tmp_path / "videos" / "55_vfjywN5CN0Y.mp4")
    (tmp_path / "test.json").write_text(
        json.dumps(
            {
                "55_vfjywN5CN0Y.mp4": {
                    "bbox": [[0, 0, 10, 10], [0, 0, 10, 10]],
                    "st_time": 0.0,
                    "ed_time": 1.0,
                    "img_num": 48,
                    "caption": "The man in brown clothes pours the contents of the bag into his hand.",
                    "width": 56,
                    "height": 56,
                    "st_frame": 1,
                }
            }
        )
    )
    bench = get_benchmark("stvg")
    (item,) = bench.load(tmp_path)
    assert item.id == "55_vfjywN5CN0Y.mp4" and "brown clothes" in item.question
    # Two truth frames (0 and 1); a box matching frame 0 only: vIoU = 1/2 exactly.
    values, verdict = both(bench, item, _stvg_response([0.0, 1.0], {"0.0": [0, 0, 10, 10]}))
    assert verdict["values"]["viou"] == pytest.approx(0.5) == values["viou"]
    assert verdict["values"]["vIoU@0.5"] == 0.0 and values["vIoU@0.5"] == 1.0
    summary = bench.aggregate(
        [scored_record(bench, item, _stvg_response([0.0, 1.0], {"0.0": [0, 0, 10, 10]}), CTX)], CTX
    )
    assert summary["official"]["metric"] == "viou" and summary["strict"]["metric"] == "viou"
    assert summary["differences"]["count"] == 1  # the same vIoU; vIoU@0.5 differs (> against >=)


# ---- end to end: real vLLM on CPU over the group's fixtures, both metrics reported ------------

GROUP_C = "videommmu videomathqa vsibench charades_sta stvg ovobench odvbench livesports3k_qa".split()


def test_group_c_end_to_end_reports_official_and_strict(bench_fixtures, tiny_model, eval_engine, tmp_path):
    from eval_fixtures import small_config

    from easyvideor1.eval import run_eval

    root, counts = bench_fixtures
    config = small_config(tiny_model, {name: root / name for name in GROUP_C}, tmp_path / "run")
    summaries = run_eval(config, eval_engine)["summaries"]
    for name in GROUP_C:
        summary = summaries[name]
        assert summary["n"] == counts[name] and summary["n_failed"] == 0, (name, summary["failures"])
        official, strict = summary["official"], summary["strict"]
        assert official["source"] == get_benchmark(name).official_source, name
        # Items the official script leaves out (empty answers of the random model) are counted.
        assert official["status"] in ("ok", "no items"), (name, official)
        assert official["excluded"] <= counts[name], name
        if official["status"] == "ok":
            assert 0.0 <= official["value"] <= 1.0 and official["n"] + official["excluded"] >= 1, name
        assert strict is not None and 0.0 <= strict["value"] <= 1.0, name
        assert summary["differences"]["count"] <= counts[name], name
    report = (tmp_path / "run" / "report.md").read_text()
    assert "## Official and strict" in report and "vision-x-nyu/thinking-in-space" in report

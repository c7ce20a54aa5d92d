"""Official metrics of group a (MVBench, TempCompass, Video-MME, Video-MME-v2, MotionBench,
LVBench, LongVideoBench): each benchmark's own extraction, denominator and aggregation,
fed the same responses as the strict metric. Each expectation names the official code line
it comes from."""

from __future__ import annotations

import json

import pytest
from eval_fixtures import FPS, _frames, load_checked, perfect_response

from easyvideor1.eval import ScoringContext, get_benchmark
from easyvideor1.eval.benchmarks import mvbench as mvb
from easyvideor1.eval.benchmarks import tempcompass as tc
from easyvideor1.eval.pipeline import scored_record, zero_values
from easyvideor1.eval.types import AnnotationError, failure_record
from easyvideor1.video.encode import write_video

CTX = ScoringContext()


def both(bench, item, response, ctx=CTX):
    """(strict, official) accuracy of one response."""
    record = scored_record(bench, item, response, ctx)
    return record["values"]["accuracy"], record["official"].get("values", {}).get("accuracy"), record


# ---- MVBench: Ask-Anything video_chat2/mvbench.ipynb ---------------------------------------------

# check_ans: pred_option = first space-separated word of the first line, lower-cased;
# `pred_option.replace('.', '') in gt_option or gt_option in pred_option`.
MVBENCH_RESPONSES = [
    ("B", 1.0, 1.0),  # "b" in "(b)"
    ("(B) Stood up.", 1.0, 1.0),  # "(b)" in "(b)"
    ("B. Stood up.", 1.0, 1.0),  # "b." -> replace('.', '') -> "b"
    ("b", 1.0, 1.0),  # lower() on both sides
    ("The answer is B", 1.0, 0.0),  # "the" is not in "(b)" and "(b)" not in "the"
    ("A", 0.0, 0.0),
    ("(A)", 0.0, 0.0),
    ("Stood up.", 1.0, 0.0),  # the option text is never compared (gt_content is unused)
    ("Let me think.\nB", 1.0, 0.0),  # infer_mvbench keeps split('\n')[0] only
    ("", 0.0, 1.0),  # "" in "(b)": the empty word matches every label
    ("<answer>B</answer>", 1.0, 0.0),  # the first word is the whole tagged string
    ("Answer: B", 1.0, 0.0),
]


@pytest.mark.parametrize("response, strict, official", MVBENCH_RESPONSES)
def test_mvbench_official_check_ans(bench_fixtures, response, strict, official):
    bench, items = load_checked(bench_fixtures, "mvbench")
    item = items[0]  # answer "Stood up." -> "(B) Stood up."
    assert item.answer == "B"
    assert both(bench, item, response)[:2] == (strict, official)


def test_mvbench_avg_pools_items_and_counts_failures_as_the_rule_reads_them(bench_fixtures):
    bench, items = load_checked(bench_fixtures, "mvbench")
    seq, cube, sphere = items  # action_sequence: 1 item; moving_direction: 2 items
    failed = failure_record(sphere, "media", "MediaDecodeError: corrupt", **zero_values(bench, sphere, CTX))
    records = [
        scored_record(bench, seq, "B", CTX),
        scored_record(bench, cube, "The answer is B", CTX),
        failed,
    ]
    summary = bench.aggregate(records, CTX)
    official = summary["official"]
    # final_res['Avg'] = correct / total over all tasks; the failed item has no answer, which
    # check_ans reads as a match ("" in "(c)").
    assert official["status"] == "ok" and official["metric"] == "Avg"
    assert official["value"] == pytest.approx(2 / 3) and official["n"] == 3
    assert official["over"] == {"action_sequence": 1.0, "moving_direction": 0.5}
    assert summary["strict"]["value"] == pytest.approx(2 / 3)  # B right, "The answer is B" right, failure 0
    reasons = summary["differences"]["reasons"]
    assert summary["differences"]["count"] == 2
    assert reasons["no response (media failure): strict counts it wrong"] == 1
    assert reasons["the official extraction reads the response differently"] == 1


def _video(path, seed):
    path.parent.mkdir(parents=True, exist_ok=True)
    write_video(path, _frames(seed, 8), FPS)
    return path


def test_mvbench_videos_come_from_the_tasks_folder(tmp_path):
    # The release reuses file names across sources: action_count's video_10849.mp4 is in
    # perception/videos, moving_count's in clevrer/video_validation (data_list of the notebook).
    perception = _video(tmp_path / "video" / "perception" / "videos" / "video_10849.mp4", 1)
    clevrer = _video(tmp_path / "video" / "clevrer" / "video_validation" / "video_10849.mp4", 2)
    row = {"video": "video_10849.mp4", "question": "How many times?", "candidates": ["1", "2"], "answer": "2"}
    (tmp_path / "json").mkdir()
    for task in ("action_count", "moving_count", "fine_grained_action"):
        (tmp_path / "json" / f"{task}.json").write_text(json.dumps([row]))
    found = {item.categories["task"]: item.videos[0] for item in get_benchmark("mvbench").load(tmp_path)}
    assert found["action_count"] == str(perception) and found["moving_count"] == str(clevrer)
    # Missing from its own folder: the task's path (a media failure), never another source's file.
    assert found["fine_grained_action"] == str(
        tmp_path / "video" / "Moments_in_Time_Raw" / "videos" / "video_10849.mp4"
    )


def test_mvbench_video_branch_segments_take_no_bound(tmp_path):
    # The `video` branch ships star/Charades_segment: already cut to the bound (lmms-eval DATA_LIST).
    segment = _video(tmp_path / "star" / "Charades_segment" / "ZS9XR.mp4", 3)
    row = {
        "video": "ZS9XR.mp4",
        "question": "What happened after the person took the food?",
        "candidates": [
            "Ate the medicine.",
            "Tidied up the blanket.",
            "Put down the cup/glass/bottle.",
            "Took the box.",
        ],
        "answer": "Ate the medicine.",
        "start": 0.5,
        "end": 1.5,
    }
    (tmp_path / "json").mkdir()
    (tmp_path / "json" / "action_sequence.json").write_text(json.dumps([row]))
    (item,) = get_benchmark("mvbench").load(tmp_path)
    assert item.videos[0] == str(segment) and item.clip is None and item.answer == "A"
    _video(tmp_path / "video" / "star" / "Charades_v1_480" / "ZS9XR.mp4", 3)  # the main layout wins
    (item,) = get_benchmark("mvbench").load(tmp_path)
    assert item.clip == (0.5, 1.5) and "Charades_v1_480" in item.videos[0]


def test_mvbench_unknown_task_file_is_an_error(tmp_path):
    (tmp_path / "json").mkdir()
    (tmp_path / "json" / "my_task.json").write_text("[]")
    with pytest.raises(AnnotationError, match=r"my_task\.json: unknown MVBench task 'my_task'"):
        get_benchmark("mvbench").load(tmp_path)
    assert mvb.check_ans("(c) x", "(B) y") == (False, "(c)")


# ---- TempCompass: llyx97/TempCompass eval_*.py -----------------------------------------------------


def by_id(items):
    return {item.id: item for item in items}


# eval_multi-choice.py: == answer; in ["A".."D"]; startswith "A."..; startswith "A)"..; else judge
# (rated 0 with --disable_llm, i.e. without a judge).
TC_MULTI_CHOICE = [
    ("A. dunking a basketball", 1.0, 1.0),  # pred == answer
    ("A", 1.0, 1.0),  # pred in ["A", "B", "C", "D"], == answer[0]
    ("B", 0.0, 0.0),
    ("A. dunk", 1.0, 1.0),  # startswith "A." -> split('.')[0] == answer[0]
    ("A) dunking", 1.0, 1.0),  # startswith "A)"
    ("(A)", 1.0, 0.0),  # no rule: judge / 0
    ("a", 1.0, 0.0),  # case-sensitive rules
    ("The answer is A", 1.0, 0.0),
    ("Let me think.\nA", 1.0, 0.0),
    ("", 0.0, 0.0),  # a None prediction is rated 0
]


@pytest.mark.parametrize("response, strict, official", TC_MULTI_CHOICE)
def test_tempcompass_multi_choice_rules(bench_fixtures, response, strict, official):
    bench, items = load_checked(bench_fixtures, "tempcompass")
    item = by_id(items)["multi-choice/1034419625/action/0"]
    assert both(bench, item, response)[:2] == (strict, official)


# eval_yes_no.py extract_pred: lower().startswith("yes") / ("no"), else judge.
@pytest.mark.parametrize(
    "response, official",
    [
        ("Yes, he is.", 1.0),
        ("yes", 1.0),
        ("no", 0.0),
        ("Not sure", 0.0),  # "not sure" starts with "no"
        ("The answer is yes", 0.0),
        ("", 0.0),
    ],
)
def test_tempcompass_yes_no_rule(bench_fixtures, response, official):
    bench, items = load_checked(bench_fixtures, "tempcompass")
    item = by_id(items)["yes_no/1034419625/action/0"]  # answer "yes"
    assert both(bench, item, response)[1] == official


# eval_caption_matching.py eval_rule: an option line, its sentence (or after ") "), its label
# ("Option 2", "2", a "." dropped); then == answer / label / sentence / label's last word.
TC_CAPTION_MATCHING = [
    ("Option 2", 1.0, 1.0),
    ("2", 1.0, 1.0),
    ("2.", 1.0, 1.0),  # option_ind == output.replace('.', '')
    ("A man is dunking a basketball.", 1.0, 1.0),  # option_sent == output
    ("(2) A man is dunking a basketball.", 1.0, 1.0),  # output.split(') ')[1]
    ("Option 2: A man is dunking a basketball.", 1.0, 1.0),  # option_str == output
    ("Option 1", 0.0, 0.0),
    ("B", 1.0, 0.0),  # "B" is no label of an Option 1/2 row: judge / 0
    ("", 0.0, 0.0),
]


@pytest.mark.parametrize("response, strict, official", TC_CAPTION_MATCHING)
def test_tempcompass_caption_matching_rule(bench_fixtures, response, strict, official):
    bench, items = load_checked(bench_fixtures, "tempcompass")
    item = by_id(items)["caption_matching/1034419625/action/0"]
    assert item.answer == "B" and item.options == (
        "A. The man is dribbling a basketball.",
        "B. A man is dunking a basketball.",
    )
    assert both(bench, item, response)[:2] == (strict, official)
    sentence = by_id(items)["caption_matching/1034419625/action/1"]  # "Sentence A: ..."
    assert [both(bench, sentence, r)[1] for r in ("A", "Sentence A", "B.", "(A)")] == [1.0, 1.0, 0.0, 0.0]


def test_tempcompass_prompt_is_the_release_question(bench_fixtures):
    bench, items = load_checked(bench_fixtures, "tempcompass")
    item = by_id(items)["caption_matching/1034419625/action/0"]
    prompt = bench.prompt(item, [], "direct")
    assert prompt.endswith("Option 2: A man is dunking a basketball.\nPlease directly give the best option:")
    yes_no = by_id(items)["yes_no/1034419625/action/0"]
    assert bench.prompt(yes_no, [], "direct") == "<video>\nIs the man dunking?\nPlease answer yes or no:"


def test_tempcompass_judge_rating_and_caption_parsing():
    # llm_output_to_rating: startswith Correct / Incorrect; then 'Correct' in and 'Incorrect' not in.
    assert [
        tc.rating_of(r) for r in ("Correct.", "Incorrect", "It is Correct", "the prediction is correct")
    ] == [1.0, 0.0, 1.0, 0.0]  # case-sensitive: "correct" is neither word
    # parse_llm_output: the last line with "Answer"; letter before ". " and exactly one "X.".
    assert tc.caption_rating("Reasoning: r\nAnswer: B. dunking", "B. dunking a basketball") == 1.0
    assert tc.caption_rating("Answer: B. dunking or C. passing", "B. dunking a basketball") == 0.0
    assert tc.caption_rating("", "B. x") == -1.0  # an empty judge reply rates -1


def test_tempcompass_unmatched_answers_and_captions_go_to_the_judge(bench_fixtures, judge_server):
    ctx = ScoringContext(judge={"base_url": judge_server.url, "model": "overlap", "retries": 0})
    bench, items = load_checked(bench_fixtures, "tempcompass")
    ids = by_id(items)
    mc, caption = ids["multi-choice/1034419625/action/0"], ids["captioning/1034419625/action/0"]
    before = judge_server.app.state.requests
    assert both(bench, mc, "A", ctx)[1] == 1.0  # a rule match: no judge call
    assert judge_server.app.state.requests == before
    assert both(bench, mc, "(A) dunking a basketball", ctx)[1] == 1.0  # judged Correct
    assert both(bench, mc, "(B) dribbling", ctx)[1] == 0.0  # judged Incorrect
    # Captioning: the judge answers multi-choice.json[1034419625][action][0] ("A. dunking ...").
    assert caption.meta["mc_answer"] == "A. dunking a basketball"
    right = scored_record(bench, caption, "A man is dunking a basketball.", ctx)
    wrong = scored_record(bench, caption, "A man is dribbling a basketball.", ctx)
    assert right["official"]["values"] == {"accuracy": 1.0} and wrong["official"]["values"] == {
        "accuracy": 0.0
    }
    # Two official MC calls, and per caption one official call plus the strict judge score.
    assert judge_server.app.state.requests == before + 6
    assert right["values"]["judge_score"] > wrong["values"]["judge_score"]


def test_tempcompass_without_a_judge_captioning_needs_one(bench_fixtures):
    bench, items = load_checked(bench_fixtures, "tempcompass")
    records = [scored_record(bench, item, perfect_response(item), CTX) for item in items]
    summary = bench.aggregate(records, CTX)
    assert summary["official"]["status"] == "needs judge"
    rest = [r for r in records if r["categories"]["task_type"] != "captioning"]
    summary = bench.aggregate(rest, CTX)
    # Tagged answers match no rule: rated 0 without a judge (--disable_llm).
    assert summary["official"]["status"] == "ok" and summary["official"]["value"] == 0.0
    assert summary["strict"]["value"] == 1.0 and summary["differences"]["count"] == len(rest)


def test_tempcompass_avg_per_task_type(bench_fixtures):
    bench, items = load_checked(bench_fixtures, "tempcompass")
    ids = by_id(items)
    answers = {
        "multi-choice/1034419625/action/0": "A",
        "multi-choice/1001/direction/0": "B",
        "multi-choice/1002/speed/0": "B",
        "yes_no/1034419625/action/0": "yes",
        "caption_matching/1034419625/action/0": "Option 1",
    }
    summary = bench.aggregate([scored_record(bench, ids[k], r, CTX) for k, r in answers.items()], CTX)
    # print_result: avg = sum(ratings) / count per task file; the headline averages the files.
    assert summary["official"]["over"] == {
        "caption_matching": 0.0,
        "multi-choice": pytest.approx(2 / 3),
        "yes_no": 1.0,
    }
    assert summary["official"]["value"] == pytest.approx((0 + 2 / 3 + 1) / 3)


def test_tempcompass_option_rows_and_captioning_needs_its_question(tmp_path):
    (tmp_path / "questions").mkdir()
    (tmp_path / "questions" / "captioning.json").write_text(
        json.dumps({"42": {"speed": [{"question": "Describe.\nGenerated Caption:", "answer": "A. fast"}]}})
    )
    with pytest.raises(
        AnnotationError, match=r"captioning\.json:key 42 speed\[0\]: field 'question'.*multi-choice"
    ):
        get_benchmark("tempcompass").load(tmp_path)
    (tmp_path / "questions" / "captioning.json").unlink()
    (tmp_path / "questions" / "caption_matching.json").write_text(
        json.dumps(
            {"42": {"speed": [{"question": "Which?\nOption 1: a\nOption 2: b", "answer": "Option 3: c"}]}}
        )
    )
    with pytest.raises(AnnotationError, match=r"field 'answer': 'Option 3: c' names none of the lines"):
        get_benchmark("tempcompass").load(tmp_path)


# ---- Video-MME: thanku-all/parse_answer eval_your_results.py --------------------------------------

# extract_characters_regex: strip, delete the answer phrases, first capital A-D anywhere; ""
# (no letter) is not "answered" and leaves the denominator.
VIDEOMME_RESPONSES = [
    ("C", 1.0, 1.0),
    ("C. Berries.", 1.0, 1.0),
    ("(C)", 1.0, 1.0),  # re.search('[ABCD]') ignores the brackets
    ("The answer is C", 1.0, 1.0),  # "The answer is" is deleted first
    ("Based on the video, C", 1.0, 0.0),  # the B of "Based" comes first
    ("c", 1.0, None),  # lower case: no letter, not answered
    ("A", 0.0, 0.0),
    ("<answer>C</answer>", 1.0, 1.0),
    ("", 0.0, None),
]


@pytest.mark.parametrize("response, strict, official", VIDEOMME_RESPONSES)
def test_videomme_official_extraction(bench_fixtures, response, strict, official):
    bench, items = load_checked(bench_fixtures, "videomme")
    item = items[0]  # 001-1, answer C
    assert item.id == "001-1" and item.answer == "C"
    got_strict, got_official, record = both(bench, item, response)
    assert (got_strict, got_official) == (strict, official)
    assert bool(record["official"].get("excluded")) == (official is None)


def test_videomme_overall_is_correct_over_answered(bench_fixtures):
    bench, items = load_checked(bench_fixtures, "videomme")
    records = [scored_record(bench, i, r, CTX) for i, r in zip(items, ["C", "no idea", "B"])]
    summary = bench.aggregate(records, CTX)
    # "no idea" has no capital A-D: answered = 2, correct = 1.
    assert summary["official"]["value"] == 0.5 and summary["official"]["n"] == 2
    assert summary["official"]["excluded"] == 1 and summary["strict"]["value"] == pytest.approx(1 / 3)


# ---- Video-MME-v2: evaluation/test_video_mme_v2.py ------------------------------------------------


def test_videomme_v2_official_scores_and_group_rating(bench_fixtures):
    bench, items = load_checked(bench_fixtures, "videomme_v2")
    relevance, logic = items[:4], items[4:]
    # extract_characters_regex_v2 drops "Final Answer:" then takes the first capital A-H.
    assert both(bench, relevance[0], f"Final Answer: {relevance[0].answer}")[1] == 1.0
    # Relevance: right, right, no letter (-1), wrong -> sum 1 -> 1/16 (cal_relevance sums the scores).
    rel = [
        f"({relevance[0].answer})",
        relevance[1].answer,
        "i do not know",
        "A" if relevance[3].answer != "A" else "B",
    ]
    # Logic [1, 2, 3, 4]: right, no letter (-1 is true: the chain goes on), right, wrong -> 3 links -> 9/16.
    log = [logic[0].answer, "no idea", logic[2].answer, "A" if logic[3].answer != "A" else "B"]
    records = [scored_record(bench, i, r, CTX) for i, r in zip(items, rel + log)]
    assert [r["official"]["values"]["score"] for r in records] == [1, 1, -1, 0, 1, -1, 1, 0]
    official = bench.aggregate(records, CTX)["official"]
    assert official["value"] == pytest.approx((1 / 16 + 9 / 16) / 2) and official["kind"] == "composite"
    assert official["over"]["relevance_score"] == pytest.approx(1 / 16)
    assert official["over"]["logic_score"] == pytest.approx(9 / 16)
    assert official["over"]["relevance_linear_score"] == pytest.approx(1 / 4)  # correct_count * 25
    assert official["over"]["simple_accuracy"] == pytest.approx(4 / 6)  # valid (score >= 0) only
    assert official["over"]["level_1"] == pytest.approx(1 / 16) and official["over"][
        "level_2"
    ] == pytest.approx(9 / 16)


def test_videomme_v2_logic_structures():
    from easyvideor1.eval.benchmarks.videomme_v2 import official_group_score

    # cal_logic: [1, [2, 3], 4] with q1 right, q2 wrong, q3 right -> 2 links -> 4/12.
    assert official_group_score([1, 0, 1, 0], "logic", (1, (2, 3), 4)) == pytest.approx(4 / 12)
    # [[1, 2], 3, 4] with only q2 of the pair right -> 1 link -> 1/10.
    assert official_group_score([0, 1, 1, 1], "logic", ((1, 2), 3, 4)) == pytest.approx(1 / 10)
    assert official_group_score([-1, -1, 0, 0], "relevance", None) == 0.0  # score_map.get(-2, 0)


# ---- LVBench / MotionBench: THUDM polish_answer --------------------------------------------------

# polish_answer: before the first ")", after a "(", the first word's first character.
THUDM_RESPONSES = [
    ("B", 1.0, 1.0),
    ("(B) a dog", 1.0, 1.0),
    ("B. a dog", 1.0, 1.0),
    ("b", 1.0, 0.0),  # case kept
    ("The answer is B", 1.0, 0.0),  # reads "T"
    ("Let me think.\nB", 1.0, 0.0),
    ("<answer>B</answer>", 1.0, 0.0),  # reads "<"
    ("A", 0.0, 0.0),
    ("", 0.0, 0.0),
]


@pytest.mark.parametrize("response, strict, official", THUDM_RESPONSES)
def test_lvbench_official_polish_answer(bench_fixtures, response, strict, official):
    bench, items = load_checked(bench_fixtures, "lvbench")
    assert items[0].answer == "B"
    assert both(bench, items[0], response)[:2] == (strict, official)


@pytest.mark.parametrize("response, strict, official", THUDM_RESPONSES)
def test_motionbench_official_polish_answer(bench_fixtures, response, strict, official):
    bench, items = load_checked(bench_fixtures, "motionbench")
    item = items[1]  # answer B
    assert item.answer == "B"
    assert both(bench, item, response)[:2] == (strict, official)


def test_lvbench_and_motionbench_pool_answered_items(bench_fixtures):
    bench, items = load_checked(bench_fixtures, "lvbench")
    summary = bench.aggregate(
        [scored_record(bench, items[0], "(B)", CTX), scored_record(bench, items[1], "The answer is D", CTX)],
        CTX,
    )
    assert summary["official"]["value"] == 0.5 and summary["strict"]["value"] == 1.0
    bench, items = load_checked(bench_fixtures, "motionbench")
    summary = bench.aggregate([scored_record(bench, i, "(C)", CTX) for i in items], CTX)
    # compute_accuracy's answered_acc: the NA row is not an item (not answered, not counted).
    assert summary["official"]["metric"] == "answered_acc" and summary["official"]["value"] == 0.5
    assert summary["official"]["n"] == 2


# ---- LongVideoBench: lmms-eval tasks/longvideobench/utils.py -------------------------------------


def test_longvideobench_official_parser(bench_fixtures):
    bench, items = load_checked(bench_fixtures, "longvideobench")
    item = items[1]  # 86CxyhFV9MI_0, the release's row: correct_choice 1 -> B
    assert item.id == "86CxyhFV9MI_0" and item.answer == "B" and item.categories["duration_group"] == 600
    # parse_multi_choice_response: phrases deleted, first capital A-E.
    for response, official in (
        ("B", 1.0),
        ("The best answer is B", 1.0),
        ("(B) run away", 1.0),
        ("Based on it, C", 1.0),
        ("A", 0.0),
        ("<answer>B</answer>", 1.0),
    ):
        assert both(bench, item, response)[1] == official, response
    # No capital letter: a random option (seeded by the item id: the same on every run).
    unread = [scored_record(bench, item, r, CTX)["official"] for r in ("b", "", "i am not sure")]
    assert len({o["extracted"] for o in unread}) == 1 and unread[0]["extracted"] in "ABCD"
    assert all(o["note"].startswith("no capital A-E") for o in unread)


# ---- end to end: real vLLM (tiny model) on the seven fixtures ---------------------------------

GROUP_A = ("videomme", "videomme_v2", "mvbench", "tempcompass", "motionbench", "lvbench", "longvideobench")


def test_group_a_reports_official_beside_strict(
    bench_fixtures, tiny_model, eval_engine, judge_server, tmp_path
):
    from eval_fixtures import small_config

    from easyvideor1.eval import run_eval
    from easyvideor1.eval.results import read_results

    root, counts = bench_fixtures
    judge = {"base_url": judge_server.url, "model": "overlap", "retries": 0}
    config = small_config(tiny_model, {n: root / n for n in GROUP_A}, tmp_path / "run", judge=judge)
    result = run_eval(config, eval_engine)
    records = read_results(tmp_path / "run" / "results.jsonl")
    ctx = ScoringContext(judge=judge)
    for name in GROUP_A:
        bench, summary = get_benchmark(name), result["summaries"][name]
        mine = [r for r in records if r["benchmark"] == name]
        assert summary["n"] == counts[name] == len(mine)
        official, strict = summary["official"], summary["strict"]
        assert official["source"] == bench.official_source
        # The greedy tiny model answers blanks: Video-MME then counts no item ("no items").
        everything_excluded = official["excluded"] == counts[name]
        assert official["status"] == ("no items" if everything_excluded else "ok"), (name, official)
        assert (
            strict["n"] == sum(strict["metric"] in r["values"] for r in mine)
            and 0.0 <= strict["value"] <= 1.0
        )
        items = {i.id: i for i in bench.load(root / name)}
        differ = 0
        for record in mine:
            # The recorded verdict is the official rule applied to the recorded response.
            again = bench.official_item(items[record["id"]], record["response"] or "", ctx).as_record()
            assert record["official"] == again, (name, record["id"])
            value, strict_value = (
                record["official"].get("values", {}).get("accuracy"),
                record["values"].get("accuracy"),
            )
            if record["official"].get("excluded"):
                differ += 1
            elif value is not None and strict_value is not None:  # captioning's strict metric is a text score
                differ += value != strict_value
        assert summary["differences"]["count"] == differ, name
    report = (tmp_path / "run" / "report.md").read_text()
    assert "Ask-Anything video_chat2/mvbench.ipynb" in report

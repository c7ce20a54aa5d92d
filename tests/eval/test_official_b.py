"""Official metrics of group b (MLVU, Video-Holmes, MINERVA, VCR-Bench, VideoReasonBench,
LongVideo-Reason, MMVU): each rule as read from the benchmark's own scorer, on one response set.

Each expectation names the line of the official code that gives it (the commits read are in
the adapters' docstrings' sources). Judge-scored benchmarks go through the project's judge
client to the local judge server (tests/eval/eval_judge_server.py), which answers each
benchmark's own prompt format.
"""

from __future__ import annotations

import dataclasses

import pytest
from eval_fixtures import load_checked, perfect_response, wrong_response
from eval_judge_server import overlap_f1

from easyvideor1.eval import ScoringContext, get_benchmark
from easyvideor1.eval.benchmarks import longvideo_reason, minerva, mlvu, mmvu, vcrbench, video_holmes
from easyvideor1.eval.benchmarks.official import NEEDS_JUDGE
from easyvideor1.eval.benchmarks.videoreasonbench import official_final_answer
from easyvideor1.eval.pipeline import scored_record, zero_values
from easyvideor1.eval.types import failure_record

CTX = ScoringContext()


def judge_ctx(server):
    return ScoringContext(judge={"base_url": server.url, "model": "overlap", "retries": 0})


def official(bench, item, response, ctx=CTX):
    return bench.official_item(item, response, ctx)


def strict(bench, item, response, ctx=CTX):
    return scored_record(bench, item, response, ctx)["values"]["accuracy"]


# ---- Video-Holmes (TencentARC/Video-Holmes evaluate.py) ---------------------------------------


def test_video_holmes_ids_and_official_letters(bench_fixtures):
    bench, items = load_checked(bench_fixtures, "video_holmes")
    assert [i.id for i in items] == ["RSmjqss0XKQ_1", "RSmjqss0XKQ_2"]  # Question ID restarts per video
    item = items[1]  # answer B of A-F
    cases = {
        "<answer>B</answer>": "B",  # l.455/461: the last <answer> span
        "<answer>C</answer>": "C",
        "B. Venting anger at the broken machine": "B",  # l.477ff: 'B' anywhere, no "X " form matched
        "(B)": "B",
        "The answer is B": "B",
        "b": "WRONG",  # l.490: upper case only
        "Looking at A and C first, the answer is B.": "A",  # l.465: "A " is tried before any other letter
        "<think>A or B?</think><answer>B</answer>": "B",
        "": "WRONG",
    }
    for response, letter in cases.items():
        verdict = official(bench, item, response)
        assert verdict.extracted == letter, response
        assert verdict.values == {"accuracy": float(letter == "B")}  # l.492: equal to Answer
    assert strict(bench, item, "<answer>B</answer>") == 1.0 and strict(bench, item, "") == 0.0
    assert video_holmes.official_choice("[C] it is") == "C"  # l.475: "[C"


# ---- MINERVA (lmms-eval tasks/minerva/utils.py) ---------------------------------------------


def test_minerva_official_letters_and_random_guess(bench_fixtures):
    bench, items = load_checked(bench_fixtures, "minerva")
    item = items[0]  # answer B
    assert item.categories["question_type"] == "Counting, Temporal Reasoning"
    cases = {
        "<answer>B</answer>": 1.0,  # l.70-73: the last upper-case A-E
        "<answer>C</answer>": 0.0,
        "B. twice": 1.0,
        "(B)": 1.0,
        "The answer is B": 1.0,  # l.54-57: "answer is B"
        "the answer is a square": 0.0,  # l.54: IGNORECASE reads "a" as A
        "b": 0.2,  # l.111: no letter -> random.choice of five: expected 1/5
        "Option A looks wrong, so B": 1.0,  # no "is"/":" after Option: the last letter, B
        "B is right, not D.": 0.0,  # the last letter wins: D
        "": 0.2,
    }
    for response, value in cases.items():
        assert official(bench, item, response).values == {"accuracy": pytest.approx(value)}, response
    assert minerva.official_letter("I pick B. Answer: C") == "C"
    guess = official(bench, item, "")
    assert guess.extracted is None and "random" in guess.note
    assert strict(bench, item, "") == 0.0  # strict: no answer is wrong


# ---- LongVideo-Reason (NVlabs/Long-RL eval/eval.py accuracy_reward) -------------------------


def test_longvideo_reason_exact_span_and_dropped_failures(bench_fixtures):
    from math_verify import parse

    bench, items = load_checked(bench_fixtures, "longvideo_reason")
    item = items[0]  # answer B
    assert parse("<answer>B</answer>") == []  # l.25: the symbolic check never reads a letter
    cases = {
        "<answer>B</answer>": 1.0,  # l.42/44/47: the first span, stripped, equal
        "<answer>C</answer>": 0.0,
        "<answer>B. To contrast</answer>": 0.0,  # exact comparison
        "(B)": 0.0,  # l.44: no span -> the whole response
        "The answer is B": 0.0,
        "<answer>b</answer>": 0.0,
        "<think>A or B</think>\n<answer>B</answer>": 1.0,
        "B": 1.0,
        "<answer>\nB\n</answer>": 0.0,  # no DOTALL: the span must sit on one line
        "<answer>Therefore the final answer is: B</answer>": 1.0,  # l.39-40
    }
    for response, value in cases.items():
        assert official(bench, item, response).values == {"accuracy": value}, response
    assert strict(bench, item, "(B)") == 1.0  # strict: the rewards reader takes "(B)"
    assert longvideo_reason.official_answer("x <answer> B </answer>") == "B"

    # l.118: a failed generation is not in `outputs`, so not in the mean (l.127).
    failed = failure_record(
        items[0], "media", "MediaDecodeError: corrupt", **zero_values(bench, items[0], CTX)
    )
    right = scored_record(bench, items[1], perfect_response(items[1]), CTX)
    summary = bench.aggregate([failed, right], CTX)
    assert summary["official"]["value"] == 1.0 and summary["official"]["n"] == 1
    assert summary["official"]["excluded"] == 1
    assert summary["strict"]["value"] == 0.5 and summary["strict"]["n"] == 2
    assert summary["differences"]["count"] == 1


# ---- MLVU (JUNJIE99/MLVU choice_bench.py, calculate.py / calculate_sum.py) ------------------


def test_mlvu_check_ans(bench_fixtures):
    bench, items = load_checked(bench_fixtures, "mlvu")
    plot = next(i for i in items if i.categories["task"] == "plotQA")  # answer A (Yellow)
    cases = {
        "A": 1.0,  # l.116: the whole response equals the letter
        "B": 0.0,
        "A) Yellow": 1.0,  # l.113-114: the character before the first ")" (after "Best Option: (")
        "A. Yellow": 0.0,
        "(A)": 1.0,
        "The answer is A": 0.0,
        "a": 0.0,
        "<answer>A</answer>": 0.0,
        "Reasoning (see frames): A": 0.0,  # the first ")" follows "frames"
        "": 0.0,
    }
    for response, value in cases.items():
        assert official(bench, plot, response).values == {"accuracy": value}, response
    assert mlvu.official_choice(")A") == ""  # ")" first: the slice [-1:0] is empty
    assert strict(bench, plot, "<answer>A</answer>") == 1.0


def test_mlvu_m_avg_is_a_mean_over_tasks(bench_fixtures):
    bench, items = load_checked(bench_fixtures, "mlvu")
    plot, count = items[0], items[1]
    extra = dataclasses.replace(plot, id="1_plotQA/extra")
    # plotQA: right, wrong -> 1/2; count (answer B): right -> 1: M-Avg (l.201-205) 3/4, not the pooled 2/3.
    records = [
        scored_record(bench, plot, "A", CTX),
        scored_record(bench, extra, "B", CTX),
        scored_record(bench, count, "B", CTX),
    ]
    headline = bench.official_summary(records, {})
    assert headline["value"] == pytest.approx(0.75) and headline["n"] == 3
    assert headline["over"] == {"count": 1.0, "plotQA": 0.5}


def test_mlvu_generation_scores_need_the_judge(bench_fixtures, judge_server):
    bench, items = load_checked(bench_fixtures, "mlvu")
    sub_scene, summary_item = items[2], items[3]
    assert sub_scene.meta["generation"] == "sub_scene" and summary_item.meta["generation"] == "summary"
    assert official(bench, sub_scene, "a man walks").needs_judge  # no judge: no official score
    ctx = judge_ctx(judge_server)
    before = judge_server.app.state.official_requests
    points = " ".join(sub_scene.meta["scoring_points"])
    good = official(bench, sub_scene, points, ctx)
    assert good.values == {"score_accuracy": 5.0, "score_relevance": 5.0, "total": 10.0}
    bad = official(bench, summary_item, "zebra quantum marmalade", ctx)
    assert bad.values == {"score_completeness": 1.0, "score_reliability": 1.0, "total": 2.0}
    assert judge_server.app.state.official_requests == before + 2
    assert official(bench, summary_item, "", ctx).values["total"] == 0.0  # no response: not sent
    assert judge_server.app.state.official_requests == before + 2

    # calculate.py l.15-24: the first ": " after each key, up to the next comma, in key order.
    keys = mlvu.GENERATION_KEYS["sub_scene"]
    reply = "{'score_accuracy': 3, 'score_relevance': 4, 'total_score': 7}"
    assert mlvu.official_scores(reply, keys) == [3, 4]
    assert mlvu.official_scores("{'score_relevance': 4, 'total_score': 4}", keys) == [4]  # -> accuracy (l.50)
    with pytest.raises(ValueError):
        mlvu.official_scores("score_accuracy: 3", keys)  # no comma: float() fails (l.24)

    mc = [scored_record(bench, items[0], "A", ctx), scored_record(bench, items[1], "A", ctx)]  # count: B
    gen = [scored_record(bench, sub_scene, points, ctx), scored_record(bench, summary_item, "zebra", ctx)]
    summary = bench.aggregate(mc + gen, ctx)
    assert summary["official"]["status"] == "ok" and summary["official"]["value"] == pytest.approx(0.5)
    assert summary["official"]["g_avg"] == pytest.approx((10.0 + 2.0) / 2)
    no_judge = bench.aggregate([scored_record(bench, i, perfect_response(i), CTX) for i in items], CTX)
    assert no_judge["official"]["status"] == NEEDS_JUDGE and no_judge["strict"]["value"] == 1.0


# ---- MMVU (yale-nlp/MMVU utils/eval_utils.py) -------------------------------------------------


def test_mmvu_judges_every_item(bench_fixtures, judge_server):
    bench, items = load_checked(bench_fixtures, "mmvu")
    mc, open_item = items
    system, user = mmvu.judge_prompt(mc, "<answer>A</answer>")
    # l.36-45: options as "A: 10.0" lines, then the ground truth and the response.
    assert system == mmvu.MULTI_CHOICE_INSTRUCTION and "\n\nOptions:\nA: 10.0\nB: 5.0\n" in user
    assert user.endswith("Ground Truth Answer: A\n\nModel Response to the Question: <answer>A</answer>")
    assert mmvu.judge_prompt(open_item, "x")[1].startswith("Question: Which cinematic shooting technique")

    # Without a judge the official score of every item, multiple choice included, is missing.
    assert official(bench, mc, perfect_response(mc)).needs_judge
    summary = bench.aggregate([scored_record(bench, i, perfect_response(i), CTX) for i in items], CTX)
    assert summary["official"]["status"] == NEEDS_JUDGE and summary["strict"]["value"] == 1.0

    ctx = judge_ctx(judge_server)
    before, rubric = judge_server.app.state.official_requests, judge_server.app.state.requests
    assert official(bench, mc, "<answer>A</answer>", ctx).values == {"accuracy": 1.0}
    assert official(bench, mc, wrong_response(mc), ctx).values == {"accuracy": 0.0}
    good = official(bench, open_item, "<answer>a dolly zoom</answer>", ctx)
    assert good.values == {"accuracy": 1.0} and good.extracted == "a dolly zoom"
    assert official(bench, open_item, "", ctx).values == {"accuracy": 0.0}  # no response: not sent
    assert judge_server.app.state.official_requests == before + 3
    assert judge_server.app.state.requests == rubric  # the project's rubric was not asked

    # l.88-93: an unreadable reply is wrong; "correct" must be the JSON boolean.
    assert mmvu.read_reply('Sure. {"extracted_answer": "B", "correct": true}') == ("B", True)
    assert mmvu.read_reply('{"extracted_answer": "B", "correct": "yes"}') == ("B", False)
    assert mmvu.read_reply("Correct.") is None


# ---- VideoReasonBench (llyx97/video_reason_bench utils/eval_utils.py, eval_api.py) ---------


def test_videoreasonbench_final_answer_and_judge(bench_fixtures, judge_server):
    bench, items = load_checked(bench_fixtures, "videoreasonbench")
    item = items[0]  # answer "1: (a,3)"
    # l.177-188: after the first "Final Answer", case-sensitive, the colon kept, to the end.
    assert official_final_answer("So... Final Answer: 1: (a,3)") == ": 1: (a,3)"
    assert official_final_answer("final answer: 1: (a,3)") is None
    assert official_final_answer("Final Answer: a\nFinal Answer: b") == ": a\nFinal Answer: b"
    assert official_final_answer("<answer>1: (a,3)</answer>") is None
    assert official_final_answer("draft \u25c1/think\u25b7 Final Answer: x") == ": x"
    assert official_final_answer("") is None

    no_final = official(bench, item, "<answer>1: (a,3)</answer>")
    assert no_final.values == {"accuracy": 0.0} and not no_final.needs_judge  # eval_api.py l.142: no call
    assert strict(bench, item, "<answer>1: (a,3)</answer>") == 1.0  # strict reads the tag span
    assert official(bench, item, "Final Answer: 1: (a,3)").needs_judge

    ctx = judge_ctx(judge_server)
    before = judge_server.app.state.official_requests
    assert official(bench, item, "Final Answer: 1: (a,3)", ctx).values == {"accuracy": 1.0}  # l.46
    assert official(bench, item, "Final Answer: twice", ctx).values == {"accuracy": 0.0}
    assert official(bench, item, "final answer: 1: (a,3)", ctx).values == {"accuracy": 0.0}
    assert judge_server.app.state.official_requests == before + 2


# ---- VCR-Bench (zhishuifeiqian/VCR-Bench eval_code/eval.py, cau_acc.py) ----------------------


def test_vcrbench_extraction_then_matching(bench_fixtures, judge_server):
    bench, items = load_checked(bench_fixtures, "vcrbench")
    mc, open_item, grounding = items  # answers "D", "Kitchen", "[0, 2]"
    assert mc.meta["raw_question"].endswith("D. An explosion occurred again at the scene.\n")
    assert official(bench, mc, perfect_response(mc)).needs_judge  # l.161: every item is extracted by the LLM

    # l.60-84: intervals are two numbers, boxes four integers written as such.
    assert vcrbench.official_interval("[0, 2]") == [0, 2] and vcrbench.official_interval("Kitchen") is None
    assert (
        vcrbench.official_box("[1, 2, 3, 4]") == [1, 2, 3, 4]
        and vcrbench.official_box("[1.5, 2, 3, 4]") is None
    )
    assert vcrbench.official_time_iou([0, 2], [1, 3]) == pytest.approx(1 / 3)
    with pytest.raises(ZeroDivisionError):
        vcrbench.official_box_iou([1, 1, 1, 1], [1, 1, 1, 1])

    ctx = judge_ctx(judge_server)
    before = judge_server.app.state.official_requests
    assert official(bench, mc, "<answer>D</answer>", ctx).values == {"accuracy": 1.0}  # scoring reply "1"
    assert official(bench, mc, wrong_response(mc), ctx).values == {"accuracy": 0.0}
    assert judge_server.app.state.official_requests == before + 4  # extraction + scoring each
    close = official(bench, grounding, "<answer>[0, 1.8]</answer>", ctx)
    assert close.values == {"accuracy": 1.0} and close.extracted == "[0, 1.8]"  # l.174: tIoU 0.9 > 0.7
    assert official(bench, grounding, "<answer>[0, 1]</answer>", ctx).values == {"accuracy": 0.0}  # 0.5
    assert judge_server.app.state.official_requests == before + 6  # intervals: no scoring call
    assert official(bench, open_item, "<answer>the kitchen</answer>", ctx).values == {"accuracy": 1.0}
    assert overlap_f1("Kitchen", "the kitchen") >= 0.5  # why the local judge says 1
    assert official(bench, open_item, "", ctx).values == {"accuracy": 0.0}

    records = [
        scored_record(bench, mc, "<answer>D</answer>", ctx),
        scored_record(bench, grounding, "<answer>[0, 1]</answer>", ctx),
    ]
    summary = bench.aggregate(records, ctx)  # cau_acc.py l.18: pooled over the items
    assert summary["official"]["value"] == pytest.approx(0.5) and summary["official"]["n"] == 2


# ---- end to end: real vLLM on CPU, both metrics in the report -------------------------------

GROUP_B = ("mlvu", "video_holmes", "minerva", "vcrbench", "videoreasonbench", "longvideo_reason", "mmvu")
# Every response of these goes to the judge officially; VideoReasonBench's only when it has a
# "Final Answer", which the tiny model never writes (so its official score needs no judge here).
JUDGED = ("mlvu", "vcrbench", "mmvu")


def test_group_b_end_to_end_reports_both_metrics(
    bench_fixtures, tiny_model, sampling_engine, judge_server, tmp_path
):
    from eval_fixtures import small_config

    from easyvideor1.eval import run_eval
    from easyvideor1.rollout.base import SamplingConfig

    root, counts = bench_fixtures
    benchmarks = {name: root / name for name in GROUP_B}
    # Seeded sampling: the random tiny model then says something (greedy, it emits only blanks).
    sampling = SamplingConfig(max_tokens=8, temperature=1.0, seed=3)
    judge = {"base_url": judge_server.url, "model": "overlap", "retries": 0}
    before = judge_server.app.state.official_requests
    judged = run_eval(
        small_config(tiny_model, benchmarks, tmp_path / "judged", judge=judge, sampling=sampling),
        sampling_engine,
    )
    assert judge_server.app.state.official_requests > before
    plain = run_eval(
        small_config(tiny_model, benchmarks, tmp_path / "plain", sampling=sampling), sampling_engine
    )
    for name in GROUP_B:
        bench = get_benchmark(name)
        summary = judged["summaries"][name]
        assert summary["n"] == counts[name] and summary["n_failed"] == 0, (name, summary["failures"])
        strict, official = summary["strict"], summary["official"]
        # MLVU's strict accuracy covers its multiple-choice tasks (generation has its own metric).
        assert strict["n"] == (2 if name == "mlvu" else counts[name]) and 0.0 <= strict["value"] <= 1.0, name
        assert official["status"] == "ok" and official["source"] == bench.official_source, (name, official)
        assert official["n"] + official["excluded"] <= counts[name], name
        assert isinstance(summary["differences"]["count"], int)
        without = plain["summaries"][name]["official"]
        assert without["status"] == (NEEDS_JUDGE if name in JUDGED else "ok"), (name, without)
    assert plain["summaries"]["videoreasonbench"]["official"]["value"] == 0.0
    text = (tmp_path / "judged" / "report.md").read_text()
    assert all(get_benchmark(name).official_source in text for name in GROUP_B)
    assert "needs judge" in (tmp_path / "plain" / "report.md").read_text()

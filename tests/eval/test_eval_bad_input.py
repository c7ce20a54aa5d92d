"""Malformed annotations: typed errors naming the file, the line or row, and the field."""

from __future__ import annotations

import json

import pytest

from easyvideor1.eval import AnnotationError, EvalError, get_benchmark, parse_benchmarks


def test_missing_field_names_file_line_and_field(tmp_path):
    path = tmp_path / "videomme" / "test-00000-of-00001.jsonl"
    path.parent.mkdir()
    good = {"videoID": "v", "question_id": "1", "question": "q?", "options": ["A. x", "B. y"], "answer": "A"}
    bad = {k: v for k, v in good.items() if k != "options"} | {"question_id": "2"}
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(AnnotationError) as info:
        get_benchmark("videomme").load(tmp_path)
    assert f"{path}:2" in str(info.value) and "field 'options'" in str(info.value)
    assert info.value.field == "options"


def test_invalid_json_line_is_located(tmp_path):
    path = tmp_path / "video_info.meta.jsonl"
    path.write_text('{"key": "a", "qa": []}\n{"key": "b", "qa": [\n')
    with pytest.raises(AnnotationError, match=r"video_info\.meta\.jsonl:2: invalid JSON"):
        get_benchmark("lvbench").load(tmp_path)


def test_answer_outside_the_options(tmp_path):
    (tmp_path / "json").mkdir()
    (tmp_path / "json" / "action_count.json").write_text(json.dumps([
        {"video": "a.mp4", "question": "How many?", "candidates": ["1", "2"], "answer": "7"}]))
    with pytest.raises(AnnotationError) as info:
        get_benchmark("mvbench").load(tmp_path)
    assert "action_count.json:row 0" in str(info.value) and "field 'answer'" in str(info.value)


def test_wrong_type_is_reported(tmp_path):
    (tmp_path / "lvb_val.json").write_text(
        json.dumps(
            [
                {
                    "id": "x",
                    "video_path": "a.mp4",
                    "question": "q",
                    "candidates": ["a", "b"],
                    "correct_choice": "one",
                }
            ]
        )
    )
    with pytest.raises(
        AnnotationError, match=r"lvb_val\.json:row 0: field 'correct_choice': expected int, got str"
    ):
        get_benchmark("longvideobench").load(tmp_path)


def test_charades_bad_line(tmp_path):
    (tmp_path / "charades_sta_test.txt").write_text("AAA 1.0 2.0##ok\nBBB 3.0##missing end\n")
    with pytest.raises(
        AnnotationError, match=r"charades_sta_test\.txt:2: expected '<video_id> <start> <end>##"
    ):
        get_benchmark("charades_sta").load(tmp_path)


def test_reversed_interval_is_rejected(tmp_path):
    (tmp_path / "charades_sta_test.txt").write_text("AAA 5.0 2.0##backwards\n")
    with pytest.raises(AnnotationError, match=r":1: field 'start/end': need 0 <= start <= end"):
        get_benchmark("charades_sta").load(tmp_path)


def test_stvg_bad_box(tmp_path):
    (tmp_path / "test.json").write_text(
        json.dumps(
            {"v.mp4": {"English": "a man", "st_time": 0, "ed_time": 1, "bbox": [[0, 0, 5, 5], [1, 2, 0, 4]]}}
        )
    )
    with pytest.raises(AnnotationError, match=r"test\.json:key v\.mp4: field 'bbox\[1\]'"):
        get_benchmark("stvg").load(tmp_path)


def test_unknown_ovo_task(tmp_path):
    (tmp_path / "ovo_bench_new.json").write_text(json.dumps([{"id": 1, "task": "XYZ", "video": "v.mp4"}]))
    with pytest.raises(AnnotationError, match=r"row 0: field 'task': unknown task 'XYZ'"):
        get_benchmark("ovobench").load(tmp_path)


def test_training_format_rows_name_the_first_problem_and_the_count(tmp_path):
    """One line (the benchmark is left out with it): the first bad row's file:line: field, and
    how many more there are with the command that lists them all."""
    path = tmp_path / "data.jsonl"
    path.write_text(
        json.dumps({"problem": "q", "answer": "A", "problem_type": "multiple choice"})
        + "\n"
        + json.dumps({"problem": "q2", "problem_type": "numerical"})
        + "\n"
    )
    with pytest.raises(AnnotationError) as info:
        get_benchmark("jsonl").load(path)
    text = str(info.value)
    assert "\n" not in text and text.startswith(f"{path}:1: field 'options'")
    assert text.endswith(f"(and 1 more: evr1 data validate {path})")


def test_missing_annotation_file_says_what_was_looked_for(tmp_path):
    with pytest.raises(AnnotationError, match="no MINERVA annotation"):
        get_benchmark("minerva").load(tmp_path)


def test_unknown_benchmark_and_missing_folder(tmp_path):
    with pytest.raises(EvalError, match="unknown benchmark 'nope'"):
        parse_benchmarks("nope", tmp_path)
    # A missing folder is a load failure like a folder that does not parse (build_plans): the run
    # goes on without it; only when none loads does it stop (before the engine).
    assert parse_benchmarks("videomme", tmp_path) == {"videomme": (tmp_path / "videomme").resolve()}
    (tmp_path / "videomme").mkdir()
    assert parse_benchmarks(f"Video-MME,jsonl={tmp_path}", tmp_path) == {
        "videomme": (tmp_path / "videomme").resolve(),
        "jsonl": tmp_path.resolve(),
    }
    with pytest.raises(EvalError, match="pass --data-root"):
        parse_benchmarks("videomme", None)


def test_a_missing_folder_is_left_out_as_a_folder_that_does_not_parse(tmp_path):
    """One rule (docs/evaluation.md): a benchmark whose folder is missing is left out with its
    one-line reason while the others load; none loading stops the run before the engine."""
    from easyvideor1.eval.runner import EvalConfig, build_plans

    data = tmp_path / "val.jsonl"
    data.write_text(json.dumps({"problem": "1+1?", "problem_type": "numerical", "answer": "2"}) + "\n")
    benchmarks = parse_benchmarks(f"videomme,jsonl={data}", tmp_path)
    plans, _, failures = build_plans(EvalConfig(model="m", benchmarks=benchmarks, out_dir=tmp_path / "o"), 28)
    assert [p.bench.name for p in plans] == ["jsonl"]
    assert failures["videomme"]["error"] == f"{(tmp_path / 'videomme').resolve()} does not exist"
    with pytest.raises(EvalError, match=r"no benchmark could be loaded:\n  videomme .*does not exist"):
        build_plans(EvalConfig(model="m", benchmarks=parse_benchmarks("videomme", tmp_path), out_dir=tmp_path), 28)

"""Sample schema: loading, every validation rule, placeholders, public rows, round-trips."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from easyvideor1.data import (
    Sample,
    ensure_placeholders,
    load_samples,
    load_samples_report,
    validate_file,
    write_samples,
)
from easyvideor1.errors import DataError

GOOD = {"problem": "What happens?", "answer": "yes", "problem_type": "boolean", "videos": ["clip.mp4"]}
MC = {"problem": "<video>Which colour?", "answer": "B", "problem_type": "multiple choice",
      "options": ["A. red", "B. blue", "C. green", "D. white"], "videos": ["clip.mp4"]}


def write_jsonl(path: Path, rows: list) -> Path:
    lines = [r if isinstance(r, str) else json.dumps(r) for r in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def without_source(samples: list[Sample]) -> list[Sample]:
    return [dataclasses.replace(s, source="") for s in samples]


# (row, field named in the problem, text the message must contain)
BAD_ROWS = [
    ([1, 2], None, "expected a JSON object"),
    ({**GOOD, "problem": ""}, "problem", "non-empty string"),
    ({k: v for k, v in GOOD.items() if k != "problem"}, "problem", "non-empty string"),
    ({**GOOD, "answer": None}, "answer", "null"),
    ({k: v for k, v in GOOD.items() if k != "answer"}, "answer", "expected a string"),
    ({**GOOD, "answer": True}, "answer", "'yes' / 'no'"),
    ({**GOOD, "answer": "<answer> </answer>"}, "answer", "non-empty"),
    ({**GOOD, "problem_type": ""}, "problem_type", "non-empty string"),
    ({**GOOD, "problem_type": 3}, "problem_type", "non-empty string"),
    ({**GOOD, "videos": 5}, "videos", "list of file paths"),
    ({**GOOD, "videos": ["a.mp4", ""]}, "videos[1]", "non-empty path"),
    ({**GOOD, "images": [3]}, "images[0]", "non-empty path"),
    ({**GOOD, "data_type": "audio"}, "data_type", "one of video, image, text, image_video"),
    ({**GOOD, "data_type": "image"}, "data_type", "at least one image and no videos"),
    ({**GOOD, "data_type": "text"}, "data_type", "no videos and no images"),
    ({**GOOD, "videos": [], "data_type": "video"}, "data_type", "at least one video"),
    ({**GOOD, "data_type": "image_video"}, "data_type", "at least one image"),
    ({**GOOD, "options": "A. x"}, "options", "list of strings"),
    ({**MC, "options": [1, "B. blue"]}, "options[0]", "non-empty string"),
    ({**MC, "options": []}, "options", "requires a non-empty list"),
    ({**{k: v for k, v in MC.items() if k != "options"}, "problem_type": "multiple_choice"}, "options",
     "requires a non-empty list"),
    ({**MC, "answer": "E"}, "answer", "option letter A-D"),
    ({**MC, "options": [f"{c}. x{c}" for c in "ABCDEFGHIJK"]}, "options", "at most 10"),
    ({**GOOD, "has_offline_trajectory": "yes"}, "has_offline_trajectory", "true or false"),
    ({**GOOD, "has_offline_trajectory": True}, "offline_output", "non-empty offline response"),
    ({**GOOD, "has_offline_trajectory": True, "offline_output": "  "}, "offline_output", "non-empty"),
    ({**GOOD, "offline_output": 5}, "offline_output", "expected a string"),
    ({**GOOD, "problem_id": True}, "problem_id", "string or an integer"),
    ({**GOOD, "problem_id": ""}, "problem_id", "string or an integer"),
    ({**GOOD, "problem": "<video><video> which?"}, "problem", "2 <video> placeholder(s) for 1 video(s)"),
    ({**GOOD, "problem": "<image> which?"}, "problem", "1 <image> placeholder(s) for 0 image(s)"),
    ({k: v for k, v in {**GOOD, "path": "clip.xyz"}.items() if k != "videos"}, "path", "set data_type"),
    ("{not json", None, "invalid JSON at column 2"),
]


@pytest.mark.parametrize("row, field, text", BAD_ROWS, ids=[f"{i}-{b[1]}" for i, b in enumerate(BAD_ROWS)])
def test_each_rule_names_file_line_field(tmp_path, row, field, text):
    path = write_jsonl(tmp_path / "bad.jsonl", [GOOD | {"problem_id": "ok"}, row])
    with pytest.raises(DataError) as info:
        load_samples(path)
    message = str(info.value)
    assert f"{path}:2" in message
    assert text in message
    problem = next(p for p in info.value.problems if p.line == 2 and text in p.message)
    assert problem.field == field
    assert problem.path == str(path)
    if field:
        assert f"field '{field}'" in message


def test_every_bad_row_is_reported_at_once(tmp_path):
    rows = [GOOD]
    for row, _, _ in BAD_ROWS:
        rows += [row, {**GOOD, "problem": "fine"}]
    path = write_jsonl(tmp_path / "many.jsonl", rows)
    samples, problems = load_samples_report(path)
    bad_lines = {p.line for p in problems}
    assert bad_lines == {2 + 2 * i for i in range(len(BAD_ROWS))}
    for i, (_, field, text) in enumerate(BAD_ROWS):
        assert any(p.field == field and text in p.message for p in problems if p.line == 2 + 2 * i), (i, field)
    assert len(samples) == 1 + len(BAD_ROWS)  # the good rows still load when not strict
    with pytest.raises(DataError) as info:
        load_samples(path)
    assert len(info.value.problems) == len(problems)
    assert load_samples(path, strict=False) == samples


def test_row_with_several_problems_reports_each(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [{"problem": "", "answer": None, "problem_type": "", "videos": [1]}])
    _, problems = load_samples_report(path)
    assert {p.field for p in problems} == {"problem", "answer", "problem_type", "videos[0]"}


def test_duplicate_problem_id_names_first_line(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [{**GOOD, "problem_id": 7}, GOOD, {**GOOD, "problem_id": "7"}])
    _, problems = load_samples_report(path)
    assert [(p.line, p.field) for p in problems] == [(3, "problem_id")]
    assert "first used on line 1" in problems[0].message


def test_check_media_reports_missing_files(tmp_path):
    (tmp_path / "clip.mp4").write_bytes(b"x")
    path = write_jsonl(tmp_path / "d.jsonl", [GOOD, {**GOOD, "videos": ["clip.mp4", "gone.mp4"]}])
    assert len(load_samples(path)) == 2  # media are not checked by default
    _, problems = load_samples_report(path, check_media=True)
    assert [(p.line, p.field) for p in problems] == [(2, "videos[1]")]
    assert str(tmp_path / "gone.mp4") in problems[0].message


def test_values_are_normalised(tmp_path):
    rows = [
        {**GOOD, "answer": 3, "problem_type": "numerical", "videos": "clip.mp4", "data_type": "Video"},
        {**GOOD, "answer": 2.5, "problem_type": "regression"},
        {**GOOD, "answer": [1.5, 3.0], "problem_type": "temporal grounding"},
        {**GOOD, "answer": "<answer> no </answer>", "videos": ["/abs/v.mp4", "s3://bucket/v.mp4"]},
        {"problem": "2+2?", "answer": "4", "problem_type": "math", "options": []},
    ]
    samples = load_samples(write_jsonl(tmp_path / "d.jsonl", rows))
    assert [s.answer for s in samples] == ["3", "2.5", "[1.5, 3.0]", "no", "4"]
    assert samples[0].videos == (str(tmp_path / "clip.mp4"),)
    assert samples[0].data_type == "video"
    assert samples[3].videos == ("/abs/v.mp4", "s3://bucket/v.mp4")
    assert samples[4].data_type == "text" and samples[4].options is None and samples[4].problem == "2+2?"
    assert [s.problem_id for s in samples] == [f"d:{i}" for i in range(1, 6)]
    assert samples[1].source == f"{tmp_path / 'd.jsonl'}:2"


def test_media_root_and_data_type_derivation(tmp_path):
    rows = [{**GOOD, "images": ["a.png"]}, {**GOOD, "videos": [], "images": "a.png"},
            {"problem": "q", "answer": "a", "problem_type": "open-ended"}]
    samples = load_samples(write_jsonl(tmp_path / "d.jsonl", rows), media_root=tmp_path / "media")
    assert [s.data_type for s in samples] == ["image_video", "image", "text"]
    assert samples[0].images == (str(tmp_path / "media" / "a.png"),)
    assert samples[0].videos == (str(tmp_path / "media" / "clip.mp4"),)


def test_placeholders_inserted_images_first_then_videos(tmp_path):
    rows = [{**GOOD, "videos": ["a.mp4", "b.mp4"], "images": ["c.png"]},
            {**GOOD, "problem": "Compare <video> and <video>.", "videos": ["a.mp4", "b.mp4"], "images": ["c.png"]},
            {**GOOD, "problem": "<video>\nWhat happens?"}]
    samples = load_samples(write_jsonl(tmp_path / "d.jsonl", rows))
    assert samples[0].problem == "<image>\n<video>\n<video>\nWhat happens?"
    assert samples[1].problem == "<image>\nCompare <video> and <video>."
    assert samples[2].problem == "<video>\nWhat happens?"


def test_ensure_placeholders_direct():
    assert ensure_placeholders("q", 0, 0) == "q"
    assert ensure_placeholders("q", 1, 1) == "<image>\n<video>\nq"
    with pytest.raises(ValueError, match="1 <video> placeholder"):
        ensure_placeholders("<video> q", 0, 2)


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=40), st.integers(0, 3), st.integers(0, 3))
def test_ensure_placeholders_is_idempotent_and_counts_match(text, n_images, n_videos):
    text = text.replace("<image>", "").replace("<video>", "")
    once = ensure_placeholders(text, n_images, n_videos)
    assert once.count("<image>") == n_images and once.count("<video>") == n_videos
    assert ensure_placeholders(once, n_images, n_videos) == once


def test_public_video_r1_rows(tmp_path):
    rows = [
        {"problem_id": 1, "problem": "What is the man doing?", "data_type": "video", "problem_type": "multiple choice",
         "options": ["A. running", "B. cooking", "C. sleeping", "D. reading"], "process": "<think>...</think>",
         "solution": "<answer>B</answer>", "path": "./LLaVA-Video/clip.mp4", "data_source": "LLaVA-Video-178K"},
        {"problem_id": 2, "problem": "How many apples?", "data_type": "image", "problem_type": "numerical",
         "options": [], "process": "", "solution": "<answer>3</answer>", "path": "./images/apples.jpg",
         "data_source": "CLEVR"},
        {"problem_id": 3, "problem": "Is it raining?", "problem_type": "boolean", "solution": "<answer>no</answer>",
         "path": "clips/rain.webm"},
    ]
    samples = load_samples(write_jsonl(tmp_path / "Video-R1-260k.jsonl", rows))
    first, second, third = samples
    assert (first.problem_id, first.answer, first.data_type) == ("1", "B", "video")
    assert first.videos == (str(tmp_path / "LLaVA-Video" / "clip.mp4"),) and first.images == ()
    assert first.problem == "<video>\nWhat is the man doing?"
    assert first.extra == {"process": "<think>...</think>", "data_source": "LLaVA-Video-178K"}
    assert second.images == (str(tmp_path / "images" / "apples.jpg"),) and second.answer == "3"
    assert second.options is None and second.problem.startswith("<image>\n")
    assert third.data_type == "video" and third.videos == (str(tmp_path / "clips" / "rain.webm"),)
    # When both are present, ``answer`` wins and ``solution`` passes through untouched.
    both = load_samples(write_jsonl(tmp_path / "both.jsonl", [{**GOOD, "solution": "<answer>no</answer>"}]))
    assert both[0].answer == "yes" and both[0].extra == {"solution": "<answer>no</answer>"}


def test_round_trip_through_write_samples(tmp_path):
    rows = [
        {**MC, "problem_id": "mc-1", "has_offline_trajectory": True, "offline_output": "<answer>B</answer>",
         "custom": {"nested": [1, 2]}, "path": "kept.mp4"},
        {**GOOD, "images": ["sub/frame.png"], "options": ["yes", "no"]},
        {"problem": "ünïcode ✓ question", "answer": 12, "problem_type": "numerical", "problem_id": 5},
        {**GOOD, "videos": ["/elsewhere/v.mp4"], "offline_output": "draft", "has_offline_trajectory": False},
    ]
    original = load_samples(write_jsonl(tmp_path / "in.jsonl", rows))
    out = write_samples(tmp_path / "out.jsonl", original)
    text = out.read_text(encoding="utf-8")
    assert '"sub/frame.png"' in text and '"/elsewhere/v.mp4"' in text and "ünïcode ✓" in text
    again = load_samples(out)
    assert without_source(again) == without_source(original)
    assert [s.to_row() for s in again] == [s.to_row() for s in original]
    assert original[0].extra == {"custom": {"nested": [1, 2]}, "path": "kept.mp4"}
    # A file written elsewhere keeps absolute paths, so it still points at the same media.
    moved = load_samples(write_samples(tmp_path / "other" / "out.jsonl", original))
    assert without_source(moved) == without_source(original)


def test_json_list_rows_report_row_and_line(tmp_path):
    path = tmp_path / "list.json"
    path.write_text('[\n  {"problem": "a", "answer": "b", "problem_type": "ocr"},\n'
                    '  {"problem": "", "answer": "b", "problem_type": "ocr"}, 7,\n'
                    '  {"problem": "c", "answer": "d",\n   "problem_type": "ocr"}\n]\n', encoding="utf-8")
    samples, problems = load_samples_report(path)
    assert [(p.line, p.field) for p in problems] == [(3, "problem"), (3, None)]
    assert problems[0].message.startswith("row 2: ") and problems[1].message.startswith("row 3: ")
    assert [s.problem_id for s in samples] == ["list:row1", "list:row4"]
    assert samples[1].source == f"{path}:4"


def test_json_list_syntax_error_has_line_and_column(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('[{"problem": "a", "answer": "b", "problem_type": "ocr"},\n {"problem": x}]', encoding="utf-8")
    samples, problems = load_samples_report(path)
    assert len(samples) == 1
    assert [(p.line, p.field) for p in problems] == [(2, None)]
    assert "invalid JSON at column 14" in problems[0].message


def test_bom_blank_lines_crlf_and_bad_utf8(tmp_path):
    path = tmp_path / "d.jsonl"
    body = ("\n".join([json.dumps(GOOD), "", "   ", json.dumps({**GOOD, "problem_id": "x"}) + "\r"])).encode()
    path.write_bytes(b"\xef\xbb\xbf" + body + b"\n" + b'{"problem": "\xff"}\n')
    samples, problems = load_samples_report(path)
    assert [s.problem_id for s in samples] == ["d:1", "x"]
    assert [(p.line, p.message) for p in problems] == [(5, "not valid UTF-8 at byte 14 of the line")]


def test_unreadable_or_empty_files(tmp_path):
    with pytest.raises(DataError, match="data file not found"):
        load_samples(tmp_path / "missing.jsonl")
    (tmp_path / "empty.jsonl").write_text("\n\n")
    with pytest.raises(DataError, match="no rows"):
        load_samples(tmp_path / "empty.jsonl")
    (tmp_path / "obj.json").write_text('{\n "problem": "a"\n}\n')
    with pytest.raises(DataError, match="single JSON object"):
        load_samples(tmp_path / "obj.json")
    (tmp_path / "empty_list.json").write_text("[]")
    with pytest.raises(DataError, match="no rows"):
        load_samples(tmp_path / "empty_list.json")


def test_validate_file_report(tmp_path):
    (tmp_path / "clip.mp4").write_bytes(b"x")
    path = write_jsonl(tmp_path / "d.jsonl", [GOOD, MC, {**GOOD, "videos": ["nope.mp4"]}])
    report = validate_file(path)
    assert not report.ok and len(report.samples) == 2 and report.bad_lines == 1
    assert dict(report.by_problem_type) == {"boolean": 1, "multiple choice": 1}
    text = report.format()
    assert "2 valid row(s), 1 problem(s)" in text and f"{path}:3: field 'videos[0]'" in text
    assert validate_file(path, check_media=False).ok

"""``evr1 data convert`` and ``evr1 data export``: Video-R1 rows in, veRL parquet and TRL datasets out.

Round trips through the real CLI (subprocesses) and pyarrow: evr1 -> veRL -> evr1 gives the
same rows; the exported files have the documented columns; the veRL record scores through the
project's veRL reward function. ``datasets`` is not installed in the project's environment, so
the TRL file is read with pyarrow's JSON reader (Arrow is what ``datasets.load_dataset``
builds its tables with).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow.json as paj
import pyarrow.parquet as pq

from easyvideor1.data import load_samples
from easyvideor1.data.convert import export_verl, read_samples
from easyvideor1.data.synth import generate_synthetic
from easyvideor1.rewards.adapters import compute_score


def evr1(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "easyvideor1.cli.main", "data", *args],
                          capture_output=True, text=True, timeout=180)


# A Video-R1-260k row (verbatim field names and values; the media file is made below).
VIDEO_R1_MC = {
    "problem_id": 2,
    "problem": "What appears on the screen in Russian during the missile's ascent?",
    "data_type": "video",
    "problem_type": "multiple choice",
    "options": ["A. A YouTube subscription notification", "B. A military command", "C. A warning message",
                "D. A weather update"],
    "solution": "<answer>A</answer>",
    "path": "./LLaVA-Video-178K/liwei_youtube_videos/videos/youtube_video_2024/ytb_7nRmsEw7nsE.mp4",
    "data_source": "LLaVA-Video-178K/30_60_s_youtube_v0_1",
}
# An EasyVideoR1 eval row (stvg.json, problem_id 17), verbatim.
STVG = {
    "data_type": "video",
    "data_source": "stvg",
    "problem_type": "spatial-temporal grounding",
    "path": "6885601275.mp4",
    "problem": "What does the baby in white watch in the room? Please find the corresponding time period in the "
    "video. Where is the corresponding subject/object located?",
    "problem_id": 17,
    "options": [],
    "solution": '<answer>{"time": [52.3523, 54.58786666666667], "boxes": {"53": [284, 36, 348, 159], "54": '
    "[376, 68, 440, 191]}}</answer>",
}


def video_r1_file(tmp_path):
    for row in (VIDEO_R1_MC, STVG):
        media = tmp_path / row["path"]
        media.parent.mkdir(parents=True, exist_ok=True)
        media.write_bytes(b"\x00")
    path = tmp_path / "Video-R1-sample.json"
    path.write_text(json.dumps([VIDEO_R1_MC, STVG], indent=4), encoding="utf-8")
    return path


def rows(path):
    return [s.to_row() for s in load_samples(path)]


def test_video_r1_converts_to_evr1_rows(tmp_path):
    path = video_r1_file(tmp_path)
    out = tmp_path / "out" / "train.jsonl"
    result = evr1("convert", "--from", "video-r1", str(path), "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "wrote 2 row(s)" in result.stdout
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    mc, stvg = lines
    assert mc["answer"] == "A" and mc["problem_type"] == "multiple choice" and "solution" not in mc
    assert mc["videos"] == [str(tmp_path / VIDEO_R1_MC["path"][2:])] and "path" not in mc
    assert mc["problem"].startswith("<video>\nWhat appears") and mc["options"] == VIDEO_R1_MC["options"]
    assert mc["data_source"] == VIDEO_R1_MC["data_source"] and mc["problem_id"] == "2"
    assert json.loads(stvg["answer"])["boxes"]["54"] == [376, 68, 440, 191]
    assert rows(out) == rows(path)


def test_evr1_to_verl_and_back_is_the_same_data(tmp_path):
    synth = tmp_path / "synth"
    generate_synthetic(synth, 3, 5, ["multiple_choice", "tracking", "image_spatial_grounding", "text_math",
                                     "spatial_temporal_grounding"], size=32, fps=4.0, seconds=2.0, progress=False)
    source = synth / "train.jsonl"
    parquet = tmp_path / "verl" / "train.parquet"
    result = evr1("export", "--to", "verl", str(source), "--out", str(parquet))
    assert result.returncode == 0, result.stderr

    table = pq.read_table(parquet)
    assert table.column_names == ["data_source", "prompt", "ability", "reward_model", "extra_info", "images",
                                  "videos"]
    records = table.to_pylist()
    original = load_samples(source)
    assert len(records) == len(original) == 10
    for index, (record, sample) in enumerate(zip(records, original)):
        assert record["reward_model"] == {"style": "rule", "ground_truth": sample.answer}
        assert record["prompt"][0]["role"] == "user"
        assert "<answer>" in record["prompt"][0]["content"]  # the rendered template, with its format line
        info = record["extra_info"]
        assert (info["index"], info["problem_type"], info["problem_id"]) == (index, sample.problem_type,
                                                                             sample.problem_id)
        assert info["options"] == (list(sample.options) if sample.options else None)
        assert record["images"] == ([{"image": p} for p in sample.images] or None)
        assert record["videos"] == ([{"video": p} for p in sample.videos] or None)
        assert record["data_source"] == sample.problem_type and record["ability"] == sample.problem_type
        # The project's veRL reward function reads this record as veRL passes it.
        got = compute_score(record["data_source"], f"<answer>{sample.answer}</answer>",
                            record["reward_model"]["ground_truth"], info)
        assert got["accuracy"] == 1.0, (sample.problem_type, got)
    assert any(r["extra_info"]["has_offline_trajectory"] for r in records)

    # Column types are fixed, so files whose rows are all text (or all without options) still
    # concatenate with the others.
    text_only = tmp_path / "text.parquet"
    export_verl([s for s in original if s.data_type == "text"], text_only)
    assert pq.read_schema(text_only) == table.schema

    back = tmp_path / "back.jsonl"
    result = evr1("convert", "--from", "verl", str(parquet), "--out", str(back))
    assert result.returncode == 0, result.stderr
    assert rows(back) == rows(source)


def test_trl_export_has_prompt_and_reward_columns(tmp_path):
    path = video_r1_file(tmp_path)
    out = tmp_path / "trl.jsonl"
    result = evr1("export", "--to", "trl", "--from", "video-r1", str(path), "--out", str(out))
    assert result.returncode == 0, result.stderr
    table = paj.read_json(out)
    assert {"prompt", "answer", "problem_type", "options", "problem", "problem_id", "data_type",
            "videos"} <= set(table.column_names)
    assert "images" not in table.column_names  # no row has images: TRL would take it for a VLM set
    first = table.to_pylist()[0]
    assert first["prompt"][0]["role"] == "user" and "<video>" not in first["prompt"][0]["content"]
    assert first["answer"] == "A" and first["options"] == VIDEO_R1_MC["options"]

    parquet = tmp_path / "trl.parquet"
    assert evr1("export", "--to", "trl", "--from", "video-r1", "--raw-prompt", str(path), "--out",
                str(parquet)).returncode == 0
    raw = pq.read_table(parquet).to_pylist()
    assert raw[1]["prompt"][0]["content"] == STVG["problem"] and raw[1]["problem_type"] == STVG["problem_type"]


def test_foreign_verl_rows_and_bad_rows(tmp_path):
    import pyarrow as pa

    # A veRL row as its own multimodal tests write them (media inline in typed content parts,
    # problem_type and solution as top-level columns; the options only inside the text).
    inline = tmp_path / "inline.parquet"
    pq.write_table(pa.Table.from_pylist([
        {"prompt": [{"role": "user", "content": [
            {"type": "video", "video": "LLaVA-Video-178K/academic_source/activitynet/v_2g9GrshWQrU.mp4"},
            {"type": "text", "text": "How does the crowd's excitement change as the match progresses? A. It "
             "fluctuates; B. It decreases; C. It builds up; D. It remains the same. Put your answer in "
             "<answer></answer>"}]}],
         "problem_type": "multiple choice", "solution": "C",
         "data_source": "LLaVA-Video-178K/2_3_m_academic_v0_1"}]), inline)
    samples, problems = read_samples(inline, "verl")
    assert not samples and [p.describe() for p in problems] == [
        f"{inline}:1: field 'options': row 1: problem_type 'multiple choice' requires a non-empty list of "
        "option strings, got null (or missing)"]
    samples, problems = read_samples(inline, "verl", verl_problem_type="open-ended")  # only for rows without one
    assert len(problems) == 1
    # As open-ended (top-level problem_type replaced in the file), the inline video is found.
    table = pq.read_table(inline).to_pylist()
    table[0]["problem_type"] = "open-ended"
    pq.write_table(pa.Table.from_pylist(table), inline)
    (sample,), problems = read_samples(inline, "verl")
    assert not problems and sample.answer == "C" and sample.data_type == "video"
    assert sample.videos == (str(tmp_path / "LLaVA-Video-178K/academic_source/activitynet/v_2g9GrshWQrU.mp4"),)
    assert sample.problem.startswith("<video>How does the crowd")

    # A plain veRL row whose data_source is not a problem type.
    gsm = tmp_path / "gsm8k.parquet"
    pq.write_table(pa.Table.from_pylist([
        {"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": "What is 3 + 4?"}],
         "ability": "math", "reward_model": {"style": "rule", "ground_truth": "7"},
         "extra_info": {"split": "train", "index": 0}}]), gsm)
    (sample,), problems = read_samples(gsm, "verl")
    assert not problems and sample.problem_type == "openai/gsm8k"
    assert sample.extra == {"data_source": "openai/gsm8k", "ability": "math",
                            "extra_info": {"split": "train", "index": 0}}
    # The CLI refuses the row (it could never score) and names it; --problem-type fixes it.
    out = tmp_path / "gsm.jsonl"
    result = evr1("convert", "--from", "verl", str(gsm), "--out", str(out))
    assert result.returncode == 1 and not out.exists()
    assert f"{gsm}:1: field 'extra_info.problem_type': row 1: unknown problem_type 'openai/gsm8k'" in result.stderr
    result = evr1("convert", "--from", "verl", "--problem-type", "math", str(gsm), "--out", str(out))
    assert result.returncode == 0, result.stderr
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert (row["problem"], row["answer"], row["problem_type"]) == ("What is 3 + 4?", "7", "math")

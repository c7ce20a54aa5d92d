"""``evr1 data synth`` and ``evr1 data validate`` run as real subprocesses."""

from __future__ import annotations

import json
import subprocess
import sys

from easyvideor1.data import load_samples


def evr1(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "easyvideor1.cli.main", "data", *args],
                          capture_output=True, text=True, timeout=120)


def test_synth_then_validate(tmp_path):
    out = tmp_path / "synth"
    result = evr1("synth", "--out", str(out), "--n-per-type", "3", "--seed", "9", "--types", "tracking",
                  "image_ocr", "text_math", "--size", "48", "--fps", "4", "--seconds", "3")
    assert result.returncode == 0, result.stderr
    assert "wrote 6 train + 3 val rows" in result.stdout
    train = load_samples(out / "train.jsonl", check_media=True)
    tracking = next(s for s in train if s.extra["synth"]["task"] == "tracking")
    assert list(json.loads(tracking.answer)) == ["0.0", "0.5", "1.0", "1.5", "2.0", "2.5"]  # 4 fps: every 2nd frame

    result = evr1("validate", str(out / "train.jsonl"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "6 valid row(s), 0 problem(s)" in result.stdout
    assert "problem_type: math=2, ocr=2, tracking=2" in result.stdout


def test_validate_reports_every_problem_and_exits_1(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join([
        json.dumps({"problem": "q", "answer": "a", "problem_type": "ocr"}),
        json.dumps({"problem": "q", "answer": None, "problem_type": "ocr"}),
        "{oops",
        json.dumps({"problem": "q", "answer": "a", "problem_type": "ocr", "videos": ["missing.mp4"]}),
    ]) + "\n", encoding="utf-8")
    result = evr1("validate", str(path))
    assert result.returncode == 1
    assert "1 valid row(s), 3 problem(s) on 3 line(s)" in result.stdout
    assert f"{path}:2: field 'answer'" in result.stdout
    assert f"{path}:3: invalid JSON at column 2" in result.stdout
    assert f"{path}:4: field 'videos[0]': media file not found" in result.stdout

    result = evr1("validate", "--json", "--no-check-media", str(path))
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert report["valid_rows"] == 2 and [(p["line"], p["field"]) for p in report["problems"]] == [(2, "answer"),
                                                                                                (3, None)]


def test_bad_synth_arguments_print_a_clean_error(tmp_path):
    result = evr1("synth", "--out", str(tmp_path), "--n-per-type", "0")
    assert result.returncode == 1
    assert "evr1: error: n_per_type must be a positive integer" in result.stderr
    assert "Traceback" not in result.stderr

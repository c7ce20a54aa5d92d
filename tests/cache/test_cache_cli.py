"""``evr1 cache build|report`` as a user runs them: real subprocesses, local and S3 stores."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

from video_samples import make_image, make_video

EVR1 = [sys.executable, "-m", "easyvideor1.cli.main"]
SMALL = ["--min-pixels", "784", "--max-pixels", "4096", "--image-min-pixels", "784", "--image-max-pixels", "3136"]


def run(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*EVR1, *args], capture_output=True, text=True, timeout=180,
                          env={**os.environ, **(env or {})})


def write_data(tmp_path: Path) -> Path:
    make_video(tmp_path / "a.mp4", count=20)
    make_image(tmp_path / "p.png")
    (tmp_path / "bad.mp4").write_bytes(b"garbage" * 10)
    rows = [
        {"problem": "q", "answer": "1", "problem_type": "numerical", "videos": ["a.mp4"]},
        {"problem": "q", "answer": "2", "problem_type": "numerical", "images": ["p.png"]},
        {"problem": "q", "answer": "3", "problem_type": "numerical", "videos": ["bad.mp4"]},
    ]
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows) + "[oops\n")
    return data


def test_build_report_and_resume_on_a_local_store(tmp_path):
    data = write_data(tmp_path)
    store = tmp_path / "store"
    report = tmp_path / "failures.jsonl"
    first = run(["cache", "build", str(data), "--store", str(store), "--workers", "2", "--family", "qwen2.5-vl",
                 "--report", str(report), "--no-progress", "--json", *SMALL])
    assert first.returncode == 3, first.stderr  # finished, with failures
    summary = json.loads(first.stdout)
    assert (summary["built"], summary["reused"], len(summary["failed"]), len(summary["bad_rows"])) == (2, 0, 1, 1)
    entries = [json.loads(line) for line in report.read_text().splitlines()]
    assert {e["error_kind"] for e in entries} == {"decode", "bad row"}
    assert any(e["path"].endswith("bad.mp4") and e["rows"] == [f"{data}:3"] for e in entries)

    second = run(["cache", "build", str(data), "--store", f"file://{store}", "--no-progress", *SMALL,
                  "--family", "qwen2.5-vl"])
    assert second.returncode == 3 and "built: 0  reused: 2  failed: 1" in second.stdout

    report_out = run(["cache", "report", "--store", str(store), "--json"])
    assert report_out.returncode == 0, report_out.stderr
    described = json.loads(report_out.stdout)
    assert described["count"] == 2
    assert described["by_kind"]["video"]["count"] == 1 and described["by_kind"]["image"]["count"] == 1
    assert described["by_kind"]["video"]["bytes"] + described["by_kind"]["image"]["bytes"] == described["bytes"]


def test_factor_and_family_conflict_is_a_clean_error(tmp_path):
    data = write_data(tmp_path)
    result = run(["cache", "build", str(data), "--store", str(tmp_path / "s"), "--family", "qwen3-vl",
                  "--factor", "28"])
    assert result.returncode == 1
    assert "evr1: error:" in result.stderr and "contradicts" in result.stderr and "Traceback" not in result.stderr


def test_build_into_s3(tmp_path, s3):
    data = write_data(tmp_path)
    url = f"s3://evr1-cli-{uuid.uuid4().hex[:8]}/cache"
    result = run(["cache", "build", str(data), "--store", url, "--workers", "2", "--family", "qwen3-vl",
                  "--no-progress", "--json", "--min-pixels", "1024", "--max-pixels", "4096",
                  "--image-min-pixels", "1024", "--image-max-pixels", "4096"], env=s3.url_env)
    assert result.returncode == 3, result.stderr
    assert json.loads(result.stdout)["built"] == 2
    described = run(["cache", "report", "--store", url, "--json"], env=s3.url_env)
    assert described.returncode == 0, described.stderr
    assert json.loads(described.stdout)["count"] == 2


def test_unreachable_s3_store_is_a_clean_error():
    env = {"EVR1_S3_ENDPOINT": "http://127.0.0.1:9", "AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"}
    result = run(["cache", "report", "--store", "s3://nowhere"], env=env)
    assert result.returncode == 1 and "evr1: error:" in result.stderr and "127.0.0.1:9" in result.stderr

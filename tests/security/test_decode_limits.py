"""Decode limits per frame (issue 16, item 6) and data-file line limits (item 5, the data CLI).

Before: a video whose first frames are small and whose stream then switches to larger
frames passed the header check of ``max_source_pixels`` and was decoded (frames resized;
the probe found a 16000x16000 switch at a 585 MiB peak), and a deeply nested JSON line
killed ``evr1 data validate`` and ``evr1 cache build`` with a RecursionError traceback.
After: the first frame above ``max_source_pixels`` stops the decode with a
``MediaTooLargeError`` naming the video and the frame index (in the full decode, the clip
shortcut and the cache builder's worker processes), and a line too deep or too long is a
bad row naming file:line.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import av
import numpy as np
import pytest

from easyvideor1.cache.builder import build_media
from easyvideor1.errors import MediaTooLargeError
from easyvideor1.video.decode import decode_video, probe_video
from easyvideor1.video.metadata import ImageParams, VideoParams

SMALL, LARGE, FIRST = 64, 256, 80  # 80 frames of 64x64 (8 s), then frames of 256x256
LIMIT = 20_000  # max_source_pixels for the test: above 64*64, below 256*256
PARAMS = dict(fps=2, max_frames=8, min_frames=2, min_pixels=3136, max_pixels=12544, max_source_pixels=LIMIT)


def _segment(size: int, count: int, start: int) -> bytes:
    buf = io.BytesIO()
    with av.open(buf, "w", format="mpegts") as container:
        stream = container.add_stream("libx264", rate=10)
        stream.width = stream.height = size
        stream.pix_fmt = "yuv420p"
        stream.options = {"preset": "ultrafast"}
        for i in range(count):
            frame = av.VideoFrame.from_ndarray(np.full((size, size, 3), (i * 20) % 255, np.uint8), format="rgb24")
            frame.pts = start + i
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return buf.getvalue()


@pytest.fixture(scope="module")
def switching(tmp_path_factory) -> Path:
    """MPEG-TS segments concatenate into one valid stream; the second carries a new SPS (a
    new resolution). The first is longer than FFmpeg's probe (5 s), so the header shows 64x64."""
    path = tmp_path_factory.mktemp("decode-limits") / "switch.ts"
    path.write_bytes(_segment(SMALL, FIRST, 0) + _segment(LARGE, 3, FIRST))
    return path


def test_the_fixture_switches_resolution_after_a_small_header(switching):
    assert probe_video(switching)["height"] == SMALL  # the header check alone lets it through
    with av.open(str(switching)) as container:
        sizes = [(f.width, f.height) for f in container.decode(video=0)]
    assert sizes[0] == (SMALL, SMALL) and sizes[FIRST] == (LARGE, LARGE) and len(sizes) == FIRST + 3
    assert switching.stat().st_size < 100_000


def test_a_frame_above_max_source_pixels_stops_the_decode(switching):
    with pytest.raises(MediaTooLargeError) as err:
        decode_video(switching, VideoParams(**PARAMS))
    message = str(err.value)
    assert str(switching) in message and f"frame {FIRST} is {LARGE}x{LARGE}" in message
    assert f"max_source_pixels={LIMIT}" in message and "changes resolution mid-stream" in message
    frames, meta = decode_video(switching, VideoParams(**{**PARAMS, "max_source_pixels": 1 << 26}))  # control
    assert meta.total_frames == FIRST + 3 and frames.shape[0] >= 2


def test_the_clip_shortcut_checks_every_frame_too(switching):
    for window in ({"start_s": 7.0, "end_s": 8.2}, {"start_s": 1.0, "end_s": 8.2}):
        with pytest.raises(MediaTooLargeError, match=f"frame {FIRST} is"):
            decode_video(switching, VideoParams(**PARAMS, **window))
    # A window that ends before the switch: the clip decode stops early and never meets it,
    # the same frames as a full decode would keep (which refuses, measuring to the end).
    with pytest.raises(MediaTooLargeError):
        decode_video(switching, VideoParams(**PARAMS, start_s=1.0, end_s=2.0), seek=False)


def test_the_cache_builder_lists_it_as_too_large(switching, tmp_path, monkeypatch):
    """The frame-cache service's media builds: decoding in worker processes."""
    monkeypatch.setenv("EVR1_HASH_INDEX_DIR", str(tmp_path / "index"))
    summary = build_media([str(switching)], [], str(tmp_path / "store"), VideoParams(**PARAMS), ImageParams(),
                          workers=1, timeout=120)
    assert summary.built == 0
    [failure] = summary.failed
    assert failure.error_kind == "too large" and f"frame {FIRST} is {LARGE}x{LARGE}" in failure.reason


ROW = {"problem": "What is 1+2?", "answer": "3", "problem_type": "numerical"}


def _evr1(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "easyvideor1.cli.main", *args], capture_output=True, text=True,
                          env=env, timeout=300)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("hostile-data")
    deep = "[" * 100_000 + "]" * 100_000
    jsonl = folder / "deep.jsonl"
    jsonl.write_text("\n".join([json.dumps(ROW), deep, '{"problem": ' + "[" * 100 + "]" * 100 + "}",
                                json.dumps({**ROW, "problem_id": "long", "problem": "x" * (17 << 20)}),
                                json.dumps({**ROW, "problem_id": "last"})]) + "\n")
    listed = folder / "deep.json"
    listed.write_text("[\n" + json.dumps(ROW) + ",\n" + '{"a": ' + "[" * 100 + "]" * 100 + "},\n"
                      + json.dumps({**ROW, "problem_id": "third"}) + ",\n" + deep + "\n]\n")
    return {"jsonl": jsonl, "json": listed}


def test_data_validate_names_the_lines(hostile):
    result = _evr1("data", "validate", str(hostile["jsonl"]))
    out = result.stdout + result.stderr
    assert result.returncode == 1 and "Traceback" not in out and "RecursionError" not in out
    path = hostile["jsonl"]
    assert f"{path}:2: the row is nested more than 64 levels deep" in out
    assert f"{path}:3: the row is nested more than 64 levels deep" in out
    assert f"{path}:4: the line is" in out and "more than the limit of 16777216 bytes per row" in out
    assert "2 valid row(s)" in out  # lines 1 and 5

    result = _evr1("data", "validate", str(hostile["json"]))
    out = result.stdout + result.stderr
    assert result.returncode == 1 and "Traceback" not in out
    assert f"{hostile['json']}:3: the row is nested more than 64 levels deep" in out
    assert f"{hostile['json']}:5: the row is nested more than 64 levels deep" in out and "were not read" in out
    assert "2 valid row(s)" in out


def test_cache_build_reports_them_too(hostile, tmp_path):
    env_index = tmp_path / "index"
    os.environ["EVR1_HASH_INDEX_DIR"] = str(env_index)
    try:
        result = _evr1("cache", "build", str(hostile["jsonl"]), "--store", str(tmp_path / "store"), "--no-progress",
                       "--report", str(tmp_path / "report.jsonl"))
    finally:
        del os.environ["EVR1_HASH_INDEX_DIR"]
    out = result.stdout + result.stderr
    assert "Traceback" not in out and "RecursionError" not in out
    assert "nested more than 64 levels deep" in out or "nested more than 64 levels deep" in \
        (tmp_path / "report.jsonl").read_text()
    report = [json.loads(line) for line in (tmp_path / "report.jsonl").read_text().splitlines()]
    assert any("nested more than 64" in json.dumps(r) and ":2" in json.dumps(r) for r in report), report

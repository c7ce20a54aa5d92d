"""Clip (segment) sampling in evaluation: MVBench bounds reach the frames the model sees.

The end-to-end tests run the real pipeline and engine; the engine is wrapped only to keep
each request it is sent, so the frames and metadata of every item can be checked.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from eval_fixtures import small_config

from easyvideor1.eval import get_benchmark, run_eval
from easyvideor1.eval.results import read_results
from easyvideor1.eval.types import AnnotationError
from easyvideor1.video import VideoParams, decode_video

BOUNDED = "action_sequence/0"  # the fixture's bounded row: start 0.5, end 2.5 of a 4 s, 4 fps video


class RecordingEngine:
    """The shared real engine, keeping every request it is sent (the frames the model got)."""

    def __init__(self, engine):
        self.engine, self.requests = engine, {}

    def __getattr__(self, name):
        return getattr(self.engine, name)

    async def generate(self, request, sampling):
        self.requests[request.request_id] = request
        return await self.engine.generate(request, sampling)


def _bounded_video(root):
    return root / "mvbench" / "video" / "star" / "Charades_v1_480" / "A1.mp4"


def _write_task(root, rows, video):
    (root / "json").mkdir(parents=True, exist_ok=True)
    (root / "video").mkdir(exist_ok=True)
    shutil.copy(video, root / "video" / "A1.mp4")
    (root / "json" / "action_sequence.json").write_text(json.dumps(
        [{"video": "A1.mp4", "question": f"Q{i}?", "candidates": ["a", "b"], "answer": "a", **row}
         for i, row in enumerate(rows)]))


# ---- the adapter -----------------------------------------------------------------------------


def test_mvbench_bounds_become_the_item_clip(bench_fixtures):
    root, _ = bench_fixtures
    bench = get_benchmark("mvbench")
    items = {item.id: item for item in bench.load(root / "mvbench")}
    assert items[BOUNDED].clip == (0.5, 2.5) and items[BOUNDED].meta == {"start": 0.5, "end": 2.5}
    assert [i.clip for k, i in items.items() if k != BOUNDED] == [None, None]
    assert bench.load_notes == []


def test_mvbench_bound_edge_cases(bench_fixtures, tmp_path):
    root, _ = bench_fixtures
    _write_task(tmp_path, [{"start": -1, "end": 2}, {"start": 2.0, "end": 2.0}, {"start": 3, "end": 1},
                           {"start": 1, "end": 2}], _bounded_video(root))
    bench = get_benchmark("mvbench")
    clips = [item.clip for item in bench.load(tmp_path)]
    # A negative start is the video start (the official sampler clamps it); an empty bound is none.
    assert clips == [(0.0, 2.0), None, None, (1.0, 2.0)]
    assert bench.load_notes == ["2 item(s) have start/end bounds with end <= start; their frames were "
                                "sampled over the whole video"]


@pytest.mark.parametrize("row, message", [
    ({"start": 1.0}, r"action_sequence\.json:row 0: field 'start/end': a bound needs both start and end"),
    ({"start": "1.0", "end": 2.0}, r"action_sequence\.json:row 0: field 'start'"),
    ({"start": 1.0, "end": 1e400}, r"field 'start/end': not finite"),
])
def test_malformed_bounds_are_located(bench_fixtures, tmp_path, row, message):
    root, _ = bench_fixtures
    _write_task(tmp_path, [row], _bounded_video(root))
    with pytest.raises(AnnotationError, match=message):
        get_benchmark("mvbench").load(tmp_path)


# ---- end to end ------------------------------------------------------------------------------


def test_bounded_items_see_only_frames_from_their_window(bench_fixtures, tiny_model, eval_engine, tmp_path):
    root, counts = bench_fixtures
    store = f"file://{tmp_path / 'frames'}"
    engine = RecordingEngine(eval_engine)
    cold = run_eval(small_config(tiny_model, {"mvbench": root / "mvbench"}, tmp_path / "cold", store=store,
                                 write_back=True), engine)
    assert cold["summaries"]["mvbench"]["n"] == counts["mvbench"]
    assert cold["summaries"]["mvbench"]["n_failed"] == 0 and cold["summaries"]["mvbench"]["notes"] == []
    request = engine.requests[f"mvbench/{BOUNDED}"]
    (video,) = request.videos
    meta = video.metadata
    # fps 2 over the bound's 2 s (8 source frames): 4 frames, spread from 0.5 s to 2.25 s.
    assert meta.clip == (0.5, 2.5) and meta.frame_indices == (2, 4, 7, 9)
    assert meta.timestamps == pytest.approx((0.5, 1.0, 1.75, 2.25))
    assert meta.total_frames == 16 and meta.duration == pytest.approx(4.0)  # the whole source video
    every, every_meta = decode_video(_bounded_video(root), VideoParams(fps=4.0, max_frames=16, min_pixels=28 * 28,
                                                                       max_pixels=56 * 56))
    assert every_meta.frame_indices == tuple(range(16))
    assert np.array_equal(video.frames, every[list(meta.frame_indices)])  # pixels from the window
    for key, other in engine.requests.items():
        if key != f"mvbench/{BOUNDED}":
            assert other.videos[0].metadata.clip is None and other.videos[0].metadata.frame_indices == (0, 2, 5, 7)

    # The same run served from the store: the clip's own blob, identical frames.
    engine.requests.clear()
    warm = run_eval(small_config(tiny_model, {"mvbench": root / "mvbench"}, tmp_path / "warm", store=store),
                    engine)
    assert warm["run"]["cache"]["mvbench"]["hits"] == counts["mvbench"]
    assert warm["run"]["cache"]["mvbench"]["misses"] == 0
    cached = engine.requests[f"mvbench/{BOUNDED}"].videos[0]
    assert np.array_equal(cached.frames, video.frames) and cached.metadata == meta
    responses = [{r["id"]: r["response"] for r in read_results(tmp_path / run / "results.jsonl")}
                 for run in ("cold", "warm")]
    assert responses[0] == responses[1]


def test_bounds_past_the_end_are_clamped_or_fail_the_item(bench_fixtures, tiny_model, eval_engine, tmp_path):
    root, _ = bench_fixtures
    data = tmp_path / "mvbench"
    _write_task(data, [{"start": 3.0, "end": 90.0}, {"start": 50.0, "end": 60.0}], _bounded_video(root))
    engine = RecordingEngine(eval_engine)
    result = run_eval(small_config(tiny_model, {"mvbench": data}, tmp_path / "run"), engine)
    summary = result["summaries"]["mvbench"]
    assert summary["n"] == 2 and summary["n_failed"] == 1
    clamped = engine.requests["mvbench/action_sequence/0"].videos[0].metadata
    assert clamped.clip == (3.0, pytest.approx(4.0)) and clamped.frame_indices == (12, 15)
    assert all(3.0 <= t < 4.0 for t in clamped.timestamps)
    (failure,) = summary["failures"]
    assert failure["id"] == "action_sequence/1" and failure["kind"] == "media"
    assert "A1.mp4" in failure["message"] and "clip window [50, 60] s starts at or after the end" in failure["message"]

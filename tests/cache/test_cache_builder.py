"""Offline builder end to end: good and bad rows/media, de-duplication, timeouts, resumability."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
from video_samples import make_audio_only, make_image, make_video

from easyvideor1.cache.builder import build_cache
from easyvideor1.cache.loader import FrameLoader
from easyvideor1.cache.stores.local import LocalStore
from easyvideor1.cache.worker import HANG_ENV
from easyvideor1.video import ImageParams, VideoParams, decode_video

VIDEO = VideoParams(min_pixels=28 * 28, max_pixels=64 * 64)
IMAGE = ImageParams(min_pixels=28 * 28, max_pixels=56 * 56)
TIMEOUT = 4.0


def build_workers() -> list[int]:
    """Pids of live build workers (process name ``evr1-cache``) descended from this test process
    (their parent is the pool's forkserver, a child of this process)."""
    parents, names = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/comm") as handle:
                names[int(entry)] = handle.read().strip()
        except OSError:
            continue
        if fields[0] != "Z":
            parents[int(entry)] = int(fields[1])

    def ours(pid: int) -> bool:
        while pid > 1:
            pid = parents.get(pid, 0)
            if pid == os.getpid():
                return True
        return False

    return [pid for pid in parents if names.get(pid) == "evr1-cache" and ours(pid)]


def row(**fields) -> str:
    base = {"problem": "How many squares?", "answer": "1", "problem_type": "numerical"}
    return json.dumps({**base, **fields})


@pytest.fixture()
def dataset(tmp_path):
    media = tmp_path / "media"
    make_video(media / "a.mp4", count=30, seed=1)
    shutil.copy(media / "a.mp4", media / "a_copy.mp4")  # same content, other path
    make_video(media / "b.mp4", count=20, seed=2)
    make_video(media / "hang_here.mp4", count=10, seed=3)
    make_image(media / "pic.png")
    (media / "junk.mp4").write_bytes(b"\x00\x01not a video" * 50)
    make_audio_only(media / "sound.mp4")
    lines = [
        row(videos=["media/a.mp4"]),                      # 1
        row(videos=["media/a.mp4"], problem_id="again"),  # 2: same file, second row
        row(videos=["media/a_copy.mp4"]),                 # 3: same content
        row(videos=["media/b.mp4"], images=["media/pic.png"], problem="<image><video> count"),  # 4
        row(videos=["media/missing.mp4"]),                # 5
        row(videos=["media/junk.mp4"]),                   # 6
        row(videos=["media/sound.mp4"]),                  # 7
        row(videos=["media/hang_here.mp4"]),              # 8
        "{not json",                                      # 9: bad row
        json.dumps({"problem": "no answer", "problem_type": "numerical", "videos": ["media/b.mp4"]}),  # 10
    ]
    data = tmp_path / "data.jsonl"
    data.write_text("\n".join(lines) + "\n")
    return data, media


def test_build_end_to_end_with_failures_timeout_and_resume(dataset, tmp_path, monkeypatch):
    data, media = dataset
    store_dir = tmp_path / "store"
    report = tmp_path / "report.jsonl"
    monkeypatch.setenv(HANG_ENV, "hang_here")
    summary = build_cache(data, str(store_dir), video_params=VIDEO, image_params=IMAGE, workers=2,
                          timeout=TIMEOUT, report_path=report, progress=False)

    assert summary.rows == 8 and len(summary.bad_rows) == 2
    assert {p.line for p in summary.bad_rows} == {9, 10}
    assert summary.media == 8  # a, a_copy, b, pic, missing, junk, sound, hang_here
    # a and a_copy share a key; missing has none: 6 distinct keys.
    assert summary.unique == 6
    assert summary.built == 3 and summary.reused == 0  # a (once), b, pic
    failed = {f.path.rsplit("/", 1)[-1]: f for f in summary.failed}
    assert set(failed) == {"missing.mp4", "junk.mp4", "sound.mp4", "hang_here.mp4"}
    assert failed["missing.mp4"].error_kind == "missing file"
    assert failed["junk.mp4"].error_kind == "decode" and "not a readable media container" in failed["junk.mp4"].reason
    assert failed["sound.mp4"].error_kind == "decode" and "no video stream" in failed["sound.mp4"].reason
    hang = failed["hang_here.mp4"]
    assert hang.error_class == "MediaTimeoutError" and hang.error_kind == "decode timeout"
    assert "killed" in hang.reason and hang.rows == [f"{data}:8"]
    assert build_workers() == []  # the stuck worker was killed and every other one stopped

    store = LocalStore(store_dir)
    assert store.stats().count == 3 and summary.bytes_written == store.stats().bytes

    lines = [json.loads(line) for line in report.read_text().splitlines()]
    by_path = {entry["path"].rsplit("/", 1)[-1]: entry for entry in lines}
    assert by_path["missing.mp4"]["rows"] == [f"{data}:5"]
    assert by_path["junk.mp4"]["error_kind"] == "decode" and by_path["junk.mp4"]["reason"]
    assert sum(entry["error_kind"] == "bad row" for entry in lines) == 2
    assert {tuple(entry) for entry in lines} == {("path", "error_kind", "error_class", "reason", "rows")}

    # What was built loads as cache hits, equal to a fresh decode.
    loader = FrameLoader(store, VIDEO, IMAGE)
    frames, meta = loader.load_video(media / "a_copy.mp4")
    assert loader.stats()["hits"] == 1
    direct, direct_meta = decode_video(media / "a_copy.mp4", VIDEO)
    assert np.array_equal(frames, direct) and meta == direct_meta
    loader.load_image(media / "pic.png")
    assert loader.stats()["hits"] == 2

    # Second run without the hang: everything built before is reused, the timed-out one is built now.
    monkeypatch.delenv(HANG_ENV)
    again = build_cache(data, str(store_dir), video_params=VIDEO, image_params=IMAGE, workers=2,
                        timeout=TIMEOUT, progress=False)
    assert again.reused == 3 and again.built == 1
    assert {f.path.rsplit("/", 1)[-1] for f in again.failed} == {"missing.mp4", "junk.mp4", "sound.mp4"}


def test_a_parameter_change_builds_new_entries(dataset, tmp_path):
    data, media = dataset
    good = tmp_path / "good.jsonl"
    good.write_text(row(videos=[str(media / "a.mp4")]) + "\n" + row(videos=[str(media / "b.mp4")]) + "\n")
    store_dir = str(tmp_path / "store")
    first = build_cache(good, store_dir, video_params=VIDEO, workers=1, progress=False)
    assert (first.built, first.reused, first.failed) == (2, 0, [])
    other = build_cache(good, store_dir, video_params=VideoParams(fps=1.0, min_pixels=28 * 28, max_pixels=64 * 64),
                        workers=1, progress=False)
    assert (other.built, other.reused) == (2, 0)
    same = build_cache(good, store_dir, video_params=VIDEO, workers=1, progress=False)
    assert (same.built, same.reused) == (0, 2) and same.ok

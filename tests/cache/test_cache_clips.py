"""Clip windows in the frame cache: their own keys, never a whole-video blob, one result either path."""

from __future__ import annotations

import numpy as np
import pytest
from video_samples import make_video

from easyvideor1.cache.blob import decode_blob, encode_blob
from easyvideor1.cache.key import HashIndex, cache_key
from easyvideor1.cache.loader import FrameLoader
from easyvideor1.cache.media import build_blob
from easyvideor1.cache.stores.local import LocalStore
from easyvideor1.errors import CacheMismatchError, MediaDecodeError
from easyvideor1.video import VideoParams, decode_video

VIDEO = VideoParams(fps=2.0, min_frames=2, min_pixels=28 * 28, max_pixels=64 * 64)


@pytest.fixture()
def video(tmp_path):
    return make_video(tmp_path / "clip.mp4", count=30, fps=10)  # 3 s


def test_the_window_is_part_of_the_key(tmp_path, video):
    index = HashIndex(tmp_path / "idx")
    whole = cache_key(video, VIDEO, index=index)
    clip = cache_key(video, VIDEO.with_window(1.0, 2.0), index=index)
    keys = {whole.key, clip.key, cache_key(video, VIDEO.with_window(1.0, 2.5), index=index).key,
            cache_key(video, VIDEO.with_window(0.5, 2.0), index=index).key,
            cache_key(video, VIDEO.with_window(1.0, None), index=index).key,
            cache_key(video, VIDEO.with_window(None, 2.0), index=index).key}
    assert len(keys) == 6
    assert clip.params_dict["start_s"] == 1.0 and clip.params_dict["end_s"] == 2.0
    # Whole-video keys carry no window fields: they are the keys of before clips existed.
    assert "start_s" not in whole.params_dict and "end_s" not in whole.params_dict
    assert cache_key(video, VIDEO.with_window(1, 2), index=index).key == clip.key  # 1 and 1.0: one key
    # A worker rebuilds the parameters from the key (cache/worker.py): the window survives.
    assert VideoParams(**clip.params_dict) == VIDEO.with_window(1.0, 2.0)


def test_a_whole_video_blob_is_never_served_for_a_clip(tmp_path, video):
    index = HashIndex(tmp_path / "idx")
    whole = cache_key(video, VIDEO, index=index)
    blob, _, _ = build_blob(str(video), whole, VIDEO, index=index)
    clip = cache_key(video, VIDEO.with_window(1.0, 2.0), index=index)
    with pytest.raises(CacheMismatchError, match=r"params\.start_s: blob has None, requested 1\.0"):
        decode_blob(blob, clip)
    # Even a whole-video blob stored under the clip's key is refused.
    frames, meta = decode_video(video, VIDEO)
    impostor = encode_blob(frames, meta, whole)
    store = LocalStore(tmp_path / "store")
    store.put(clip.key, impostor)
    loader = FrameLoader(store, VIDEO, index=index)
    got, got_meta = loader.load_video(video, clip=(1.0, 2.0))
    assert loader.stats()["corrupt"] == 1 and loader.stats()["hits"] == 0
    assert got_meta.clip == (1.0, 2.0) and all(1.0 - 1e-6 <= t < 2.0 for t in got_meta.timestamps)


def test_loader_returns_the_clip_on_the_decode_and_the_hit_path(tmp_path, video):
    store = LocalStore(tmp_path / "store")
    loader = FrameLoader(store, VIDEO, write_back=True)
    decoded, decoded_meta = loader.load_video(video, clip=(1.0, 2.0))
    assert loader.stats()["misses"] == 1 and loader.stats()["write_backs"] == 1
    hit, hit_meta = loader.load_video(video, clip=(1.0, 2.0))
    assert loader.stats()["hits"] == 1
    direct, direct_meta = decode_video(video, VIDEO.with_window(1.0, 2.0))
    assert np.array_equal(decoded, hit) and np.array_equal(hit, direct)
    assert decoded_meta == hit_meta == direct_meta and hit_meta.clip == (1.0, 2.0)
    assert hit_meta.frame_indices == (10, 19) and hit_meta.timestamps == pytest.approx((1.0, 1.9))
    assert not hit.flags.writeable
    # The whole video is its own entry: loading it is a miss that never sees the clip.
    whole, whole_meta = loader.load_video(video)
    assert loader.stats()["misses"] == 2 and whole_meta.clip is None and whole_meta.num_frames == 6
    assert len(list(store.keys())) == 2
    again, again_meta = loader.load_video(video)
    assert np.array_equal(again, whole) and again_meta == whole_meta and loader.stats()["hits"] == 2


def test_loader_without_a_store_decodes_the_clip(video):
    loader = FrameLoader(None, VIDEO)
    frames, meta = loader.load_video(video, clip=(2.0, 60.0))
    assert meta.clip == (2.0, pytest.approx(3.0)) and meta.frame_indices == (20, 29)
    assert frames.shape[0] == 2


@pytest.mark.parametrize("clip, error, message", [
    ((2.0, 1.0), ValueError, r"clip window \[2, 1\] s is empty"),
    ((-1.0, 1.0), ValueError, r"start_s must be a finite number of seconds >= 0"),
    ((1.0,), ValueError, r"clip must be \(start_s, end_s\) in seconds, got \(1\.0,\)"),
    (1.5, ValueError, r"clip must be \(start_s, end_s\)"),
    ((5.0, 9.0), MediaDecodeError, r"clip\.mp4: clip window \[5, 9\] s starts at or after the end"),
])
def test_bad_clips_are_refused_with_the_reason(video, clip, error, message):
    loader = FrameLoader(None, VIDEO)
    with pytest.raises(error, match=message):
        loader.load_video(video, clip=clip)

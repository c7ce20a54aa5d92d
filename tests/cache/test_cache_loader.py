"""FrameLoader: hits, misses, store failures and corrupt blobs, identical outputs either way."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from video_samples import make_image, make_video

from easyvideor1.cache.loader import FrameLoader
from easyvideor1.cache.stores.base import open_store
from easyvideor1.cache.stores.local import LocalStore
from easyvideor1.errors import MediaMissingError
from easyvideor1.video import ImageParams, VideoParams, decode_video, load_image

VIDEO = VideoParams(min_pixels=28 * 28, max_pixels=64 * 64)
IMAGE = ImageParams(min_pixels=28 * 28, max_pixels=56 * 56)


@pytest.fixture()
def media(tmp_path):
    return make_video(tmp_path / "clip.mp4", count=30), make_image(tmp_path / "pic.png")


def test_miss_then_hit_return_identical_frames_and_metadata(tmp_path, media):
    video, image = media
    loader = FrameLoader(LocalStore(tmp_path / "store"), VIDEO, IMAGE, write_back=True)
    first, first_meta = loader.load_video(video)
    assert loader.stats()["misses"] == 1 and loader.stats()["write_backs"] == 1
    second, second_meta = loader.load_video(video)
    assert loader.stats()["hits"] == 1 and loader.stats()["misses"] == 1
    direct, direct_meta = decode_video(video, VIDEO)
    assert np.array_equal(first, second) and np.array_equal(second, direct)
    assert first_meta == second_meta == direct_meta
    assert second_meta.timestamps == direct_meta.timestamps
    assert not first.flags.writeable and not second.flags.writeable

    img1, img_meta1 = loader.load_image(image)
    img2, img_meta2 = loader.load_image(image)
    direct_img, direct_img_meta = load_image(image, IMAGE)
    assert np.array_equal(img1, img2) and np.array_equal(img2, direct_img)
    assert img_meta1 == img_meta2 == direct_img_meta
    stats = loader.stats()
    assert (stats["hits"], stats["misses"], stats["write_backs"]) == (2, 2, 2)
    assert stats["decode_seconds"] > 0


def test_without_write_back_every_load_decodes(tmp_path, media):
    video, _ = media
    store = LocalStore(tmp_path / "store")
    loader = FrameLoader(store, VIDEO)
    loader.load_video(video)
    loader.load_video(video)
    assert loader.stats()["misses"] == 2 and list(store.keys()) == []


def test_no_store_decodes_on_the_fly(media):
    video, _ = media
    loader = FrameLoader(None, VIDEO)
    frames, meta = loader.load_video(video)
    assert frames.shape[0] == meta.num_frames and loader.stats()["misses"] == 1


def test_a_parameter_change_is_never_served_an_old_blob(tmp_path, media):
    video, _ = media
    store = LocalStore(tmp_path / "store")
    FrameLoader(store, VIDEO, write_back=True).load_video(video)
    other = FrameLoader(store, VideoParams(fps=1.0, min_pixels=28 * 28, max_pixels=64 * 64))
    frames, meta = other.load_video(video)
    assert other.stats()["misses"] == 1 and other.stats()["hits"] == 0
    assert meta.num_frames == decode_video(video, VideoParams(fps=1.0, min_pixels=28 * 28, max_pixels=64 * 64))[1].num_frames


def test_a_modified_file_is_never_served_its_old_frames(tmp_path):
    video = make_video(tmp_path / "clip.mp4", count=30, seed=1)
    store = LocalStore(tmp_path / "store")
    loader = FrameLoader(store, VIDEO, write_back=True)
    old, _ = loader.load_video(video)
    make_video(video, count=30, seed=2)  # rewritten in place, same name
    new, _ = loader.load_video(video)
    assert loader.stats()["misses"] == 2 and not np.array_equal(old, new)
    assert np.array_equal(new, decode_video(video, VIDEO)[0])


def test_unreachable_store_falls_back_to_decoding(tmp_path, media):
    video, _ = media
    store = open_store("s3://nobucket", endpoint="http://127.0.0.1:9", access_key="a", secret_key="b",
                       retries=0, timeout=2)
    loader = FrameLoader(store, VIDEO, write_back=True)
    frames, meta = loader.load_video(video)
    stats = loader.stats()
    assert stats["fallbacks_store_error"] == 1 and stats["misses"] == 1 and stats["hits"] == 0
    direct, direct_meta = decode_video(video, VIDEO)
    assert np.array_equal(frames, direct) and meta == direct_meta


def test_corrupt_blob_is_counted_and_decoded_around(tmp_path, media):
    video, _ = media
    store = LocalStore(tmp_path / "store")
    loader = FrameLoader(store, VIDEO, write_back=True)
    good, _ = loader.load_video(video)
    key = loader.key_for(video, VIDEO).key
    data = bytearray(store.get(key))
    data[-10] ^= 0xFF
    store.put(key, bytes(data))
    frames, _ = loader.load_video(video)
    assert loader.stats()["corrupt"] == 1 and np.array_equal(frames, good)


def test_missing_media_is_a_typed_error(tmp_path):
    loader = FrameLoader(LocalStore(tmp_path / "store"), VIDEO)
    with pytest.raises(MediaMissingError, match="gone.mp4"):
        loader.load_video(tmp_path / "gone.mp4")


def test_threads_loading_one_new_video_decode_it_once(tmp_path, media):
    video, _ = media
    store = LocalStore(tmp_path / "store")
    loader = FrameLoader(store, VIDEO, write_back=True)
    results = []
    barrier = threading.Barrier(4)

    def load() -> None:
        barrier.wait()
        results.append(loader.load_video(video))

    threads = [threading.Thread(target=load) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(results) == 4 and loader.stats()["write_backs"] == 1
    assert all(np.array_equal(results[0][0], r[0]) and results[0][1] == r[1] for r in results)

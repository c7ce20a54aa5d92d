"""``HttpFrameStore`` (``open_store("http://...")``) against a real frame-cache server, and the
``FrameLoader`` over it: hits equal on-the-fly decoding bit for bit; a stopped service means
on-the-fly decoding, counted as a store-error fallback."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from easyvideor1.cache.builder import build_cache
from easyvideor1.cache.key import HashIndex, cache_key
from easyvideor1.cache.loader import FrameLoader
from easyvideor1.cache.stores.base import open_store
from easyvideor1.cache.stores.http import HttpFrameStore
from easyvideor1.errors import StoreError
from easyvideor1.video.decode import decode_video
from easyvideor1.video.metadata import VideoParams
from services.frame_cache.launch import FrameCacheServer, free_port

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "video"))
from video_samples import make_video  # noqa: E402

WRITE, ADMIN = "builder-secret", "admin-secret"  # reads stay open; writes and deletes need these
PARAMS = VideoParams(fps=2, max_frames=6, min_frames=2, min_pixels=3136, max_pixels=12544)
OTHER = VideoParams(fps=3, max_frames=5, min_frames=2, min_pixels=3136, max_pixels=12544)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """Two videos built into a local store with the library builder, served by a real server."""
    root = tmp_path_factory.mktemp("fc-http")
    videos = [make_video(root / f"v{i}.mp4", count=24, seed=10 + i) for i in range(2)]
    data = root / "train.jsonl"
    data.write_text("".join(json.dumps({"problem": "<video>Q?", "answer": "1", "problem_type": "numerical",
                                        "videos": [v.name]}) + "\n" for v in videos))
    store_dir = root / "store"
    summary = build_cache(data, str(store_dir), video_params=PARAMS, workers=1, progress=False)
    assert summary.built == 2 and summary.ok
    env = {**os.environ, "EVR1_HASH_INDEX_DIR": str(root / "server-index"),
           "EVR1_FRAME_CACHE_WRITE_TOKEN": WRITE, "EVR1_FRAME_CACHE_ADMIN_TOKEN": ADMIN}
    env.pop("EVR1_FRAME_CACHE_TOKEN", None)
    server = FrameCacheServer(str(store_dir), ["--build-workers", "0"], env=env).start()
    try:
        yield {"videos": videos, "store_dir": store_dir, "server": server,
               "index": HashIndex(tmp_path_factory.mktemp("fc-http-index"))}
    finally:
        server.close()


def test_loader_hits_equal_on_the_fly_decoding(setup):
    with open_store(setup["server"].url) as store:
        assert isinstance(store, HttpFrameStore)
        loader = FrameLoader(store, PARAMS, index=setup["index"])
        for video in setup["videos"]:
            frames, meta = loader.load_video(video)
            expected, expected_meta = decode_video(video, PARAMS)
            assert frames.dtype == np.uint8 and np.array_equal(frames, expected)
            assert meta == expected_meta
        assert loader.stats()["hits"] == 2 and loader.stats()["misses"] == 0


def test_store_operations_match_the_backing_store(setup):
    local = open_store(str(setup["store_dir"]))
    with open_store(setup["server"].url + "/", admin_token=ADMIN) as store:
        assert sorted(store.keys()) == sorted(local.keys())
        stats = store.stats()
        assert (stats.count, stats.bytes) == (local.stats().count, local.stats().bytes)
        assert stats.url == setup["server"].url
        key = next(iter(local.keys()))
        assert store.get(key) == local.get(key) and store.exists(key)
        absent = "ef" * 32
        assert store.get(absent) is None and not store.exists(absent) and not store.delete(absent)
        with pytest.raises(StoreError, match="invalid cache key"):
            store.get("NOT-A-KEY")


def test_put_is_verified_against_the_key(setup):
    local = open_store(str(setup["store_dir"]))
    key_a = cache_key(setup["videos"][0], PARAMS, index=setup["index"]).key
    key_b = cache_key(setup["videos"][1], PARAMS, index=setup["index"]).key
    blob = local.get(key_a)
    with open_store(setup["server"].url, write_token=WRITE) as store, \
            open_store(setup["server"].url, admin_token=ADMIN) as admin:
        with pytest.raises(StoreError, match="answered 403: stored blobs are immutable: DELETE needs the admin"):
            store.delete(key_a)  # the write credential cannot delete
        assert admin.delete(key_a) and not store.exists(key_a)
        store.put(key_a, blob)
        assert local.get(key_a) == blob
        store.put(key_a, blob)  # already there, byte-identical: accepted, nothing rewritten
        with pytest.raises(StoreError, match=f"PUT /v1/blobs/{key_a} answered 409: .*already stored"):
            store.put(key_a, _white_frames(blob, key_a, setup))  # other (well-formed) bytes: first write won
        with pytest.raises(StoreError, match=f"PUT /v1/blobs/{key_b} answered 400: rejected: .*says it is key"):
            store.put(key_b, blob)
        flipped = bytearray(blob)
        flipped[-1] ^= 0xFF
        with pytest.raises(StoreError, match="answered 400: rejected: .*checksum mismatch"):
            store.put(key_a, bytes(flipped))
        with pytest.raises(StoreError, match="answered 400: rejected: .*too short"):
            store.put(key_a, b"abc")
        for hostile in _hostile_blobs(blob):
            with pytest.raises(StoreError, match="answered 400: rejected: "):
                store.put(key_a, hostile)
        assert local.get(key_a) == blob  # nothing rejected ever replaced the good blob


def _white_frames(blob: bytes, key: str, setup) -> bytes:
    """The genuine blob's identity and metadata over all-white frames, checksum recomputed."""
    from easyvideor1.cache.blob import decode_blob, encode_blob

    identity = cache_key(setup["videos"][0], PARAMS, index=setup["index"])
    assert identity.key == key
    frames, meta = decode_blob(blob, identity)
    return encode_blob(np.full_like(frames, 255), meta, identity)


def _hostile_blobs(blob: bytes) -> list[bytes]:
    """The real blob's identity (so the key matches) over tensor entries that lie."""
    length = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8:8 + length])
    payload = blob[8 + length:]
    out = []
    for entry in ({"dtype": "U8", "shape": ["x"], "data_offsets": [0, 4]},
                  {"dtype": "U8", "shape": [-1, -4], "data_offsets": [0, 4]},
                  {"dtype": "U8", "shape": [2, 2], "data_offsets": [0]},
                  {"dtype": "U8", "shape": [1, 1, 1, 3], "data_offsets": [0, 3]},
                  {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                  "not a dict"):
        raw = json.dumps({**header, "frames": entry}).encode()
        out.append(len(raw).to_bytes(8, "little") + raw + payload)
    return out


def test_write_back_through_the_service(setup):
    """A miss is decoded and PUT to the service; the next load is a hit with the same frames."""
    video = setup["videos"][1]
    with open_store(setup["server"].url, write_token=WRITE) as store:
        writer = FrameLoader(store, OTHER, write_back=True, index=setup["index"])
        frames, meta = writer.load_video(video)
        assert writer.stats()["misses"] == 1 and writer.stats()["write_backs"] == 1
        key = cache_key(video, OTHER, index=setup["index"]).key
        assert open_store(str(setup["store_dir"])).exists(key)
        reader = FrameLoader(store, OTHER, index=setup["index"])
        again, meta_again = reader.load_video(video)
        assert reader.stats()["hits"] == 1 and np.array_equal(again, frames) and meta_again == meta


def test_service_down_falls_back_to_decoding(tmp_path, setup):
    """A server of our own, stopped by its pid: loads decode on the fly and count the fallback."""
    env = {**os.environ, "EVR1_HASH_INDEX_DIR": str(tmp_path / "index")}
    server = FrameCacheServer(str(setup["store_dir"]), ["--build-workers", "0"], env=env).start()
    store = HttpFrameStore(server.url, timeout=5)
    loader = FrameLoader(store, PARAMS, index=setup["index"])
    try:
        loader.load_video(setup["videos"][0])
        assert loader.stats()["hits"] == 1
        assert server.stop() in (0, -15)  # SIGTERM by pid; uvicorn re-raises it after a graceful stop
        assert "frame_cache_service_stopped" in server.log_tail()
        frames, meta = loader.load_video(setup["videos"][0])
        expected, expected_meta = decode_video(setup["videos"][0], PARAMS)
        assert np.array_equal(frames, expected) and meta == expected_meta
        stats = loader.stats()
        assert stats["fallbacks_store_error"] == 1 and stats["misses"] == 1 and stats["hits"] == 1
        with pytest.raises(StoreError, match=f"frame-cache service {server.url}: GET .* failed: ConnectError"):
            store.get("ab" * 32)
    finally:
        store.close()
        server.close()


def test_unreachable_url_fails_fast_with_the_url():
    url = f"http://127.0.0.1:{free_port()}"
    with HttpFrameStore(url, timeout=2) as store:
        for call in (lambda: store.exists("ab" * 32), lambda: list(store.keys()), store.stats):
            with pytest.raises(StoreError, match=f"frame-cache service {url}"):
                call()
    for bad, reason in (("http://", "invalid frame-cache service URL"),
                        ("http://host:1?bogus=1", r"unknown option\(s\) \['bogus'\]"),
                        ("http://host:1?timeout=soon", "bad option value")):
        with pytest.raises(StoreError, match=reason):
            open_store(bad)
    with open_store(f"{url}/?timeout=2&retries=0") as store:  # options in the URL, as configs give them
        assert store.url == url
        with pytest.raises(StoreError, match=f"frame-cache service {url}"):
            store.get("ab" * 32)


def test_token_and_read_only(tmp_path, setup):
    env = {**os.environ, "EVR1_HASH_INDEX_DIR": str(tmp_path / "index"), "FC_TOKEN": "s3cret"}
    for name in ("EVR1_FRAME_CACHE_TOKEN", "EVR1_FRAME_CACHE_WRITE_TOKEN", "EVR1_FRAME_CACHE_ADMIN_TOKEN"):
        env.pop(name, None)
    server = FrameCacheServer(str(setup["store_dir"]), ["--build-workers", "0", "--token-env", "FC_TOKEN",
                                                        "--read-only"], env=env)
    try:
        server.start()
        key = next(iter(open_store(str(setup["store_dir"])).keys()))
        with HttpFrameStore(server.url) as anonymous:
            with pytest.raises(StoreError, match="answered 401: missing or invalid bearer token"):
                anonymous.get(key)
        with HttpFrameStore(server.url, token="wrong") as wrong:
            with pytest.raises(StoreError, match="answered 401"):
                wrong.exists(key)
        with HttpFrameStore(server.url, token="s3cret") as store:
            assert store.exists(key) and store.get(key)
            with pytest.raises(StoreError, match="answered 403: .*read-only"):
                store.delete(key)
            with pytest.raises(StoreError, match="answered 403: .*read-only"):
                store.put(key, b"x" * 10)
        import httpx

        resp = httpx.get(f"{server.url}/readyz")  # probes stay open for the orchestrator
        assert resp.status_code == 200
    finally:
        server.close()

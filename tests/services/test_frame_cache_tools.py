"""The frame-cache service's tool endpoint (POST /v1/tools/window, /v1/tools/crop) on a real
uvicorn server on loopback, over a local directory store and SeaweedFS S3, through
``HttpToolFrameSource``: the same frames as the in-process ``fetch_window``/``fetch_crop``,
store hits for repeated windows, a 4xx naming the field for every bad request, clear timeouts,
metrics."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest
from servers import frame_store_for, metric_sum, serve_in_thread

from easyvideor1.cache import FrameLoader, open_store
from easyvideor1.config.schema import RunConfig
from easyvideor1.models.families import frame_params, get_family
from easyvideor1.rollout.tools.base import ToolVideo
from easyvideor1.rollout.tools.errors import ToolSourceError
from easyvideor1.rollout.tools.remote import HttpToolFrameSource
from easyvideor1.rollout.tools.window import ToolArgumentError, fetch_crop, fetch_window, window_params
from services.frame_cache.app import create_app

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "video"))
from video_samples import make_faststart_video, make_video  # noqa: E402

FAMILY = "qwen2_5_vl"
DATA = {"video_fps": 2.0, "video_min_frames": 2, "video_max_frames": 8, "video_min_pixels": 3136,
        "video_max_pixels": 12544, "image_min_pixels": 3136, "image_max_pixels": 12544}
TOOLS = {"frames_per_call": 8, "max_fps": 8.0, "zoom_max_pixels": 12544}


def run_config(store: str, root: Path, **tools: float) -> RunConfig:
    return RunConfig.model_validate({
        "data": {**DATA, "frame_cache": {"store": store}},
        "worker": {"rollout": {"tools": {**TOOLS, **tools}}},
        "serve": {"frame_cache": {"build_workers": 0, "source_roots": [str(root)]}}})


def serving(cfg: RunConfig):
    """``create_app(cfg)`` served over HTTP on loopback; yields its URL."""
    return serve_in_thread(create_app(cfg))


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    root = tmp_path_factory.mktemp("tools-media")
    video = make_video(root / "clip.mp4", count=40, fps=10, height=96, width=128, seed=3)
    corrupt = root / "corrupt.mp4"
    corrupt.write_bytes(b"\x00\x00\x00\x18ftypmp42" + bytes(range(256)) * 8)
    # Its header (in front) declares 60 frames; half the bytes hold 25: the decode itself fails.
    whole = make_faststart_video(tmp_path_factory.mktemp("whole") / "whole.mp4", count=60, fps=10).read_bytes()
    (root / "truncated.mp4").write_bytes(whole[: len(whole) // 2])
    outside = make_video(tmp_path_factory.mktemp("elsewhere") / "other.mp4", count=10)
    return {"root": root, "video": video, "corrupt": corrupt, "outside": outside}


@pytest.fixture(scope="module", params=["local", "s3"])
def service(request, tmp_path_factory, media):
    store_url, s3_env = frame_store_for(request, tmp_path_factory, "tools")
    with pytest.MonkeyPatch.context() as patch:
        for key, value in s3_env.items():  # the app and the test both reach the same bucket
            patch.setenv(key, value)
        patch.setenv("EVR1_HASH_INDEX_DIR", str(tmp_path_factory.mktemp("tools-index")))
        cfg = run_config(store_url, media["root"])
        # The video's prepared blob (whole video, the run's parameters), as `evr1 data prepare` leaves it.
        video_params, image_params = frame_params(cfg, get_family(FAMILY))
        store = open_store(store_url)
        prepared = FrameLoader(store, video_params, image_params, write_back=True)
        frames, metadata = prepared.load_video(media["video"])
        key = prepared.key_for(media["video"], video_params).key
        with serving(cfg) as url:
            yield {"url": url, "cfg": cfg, "store": store, "key": key, "duration": metadata.duration,
                   "index": prepared.index}
        store.close()


@pytest.fixture(scope="module")
def source(service):
    client = HttpToolFrameSource(service["url"], timeout_s=60)
    yield client
    client.close()


def local_loader(service) -> FrameLoader:
    """The run's loader without a store: every window decoded here, for comparison."""
    video, image = frame_params(service["cfg"], get_family(FAMILY))
    return FrameLoader(None, video, image, index=service["index"])


def videos_of(service, media) -> list[ToolVideo]:
    """The same video by key alone, by key and path, and by path alone."""
    d, key, path = service["duration"], service["key"], str(media["video"])
    return [ToolVideo(None, key, d), ToolVideo(path, key, d), ToolVideo(path, None, d)]


WINDOWS = [(0.0, 4.0, 2.0, 8, None), (1.0, 2.0, 4.0, 8, None), (0.35, 0.4, 8.0, 4, 3136), (2.5, 4.0, 3.0, 6, 6272)]
CROPS = [(0.0, (0, 0, 128, 96), 12544), (1.25, (10, 20, 60, 50), 12544), (3.95, (1.5, 2.5, 9.2, 7.7), 3136)]


def test_window_and_crop_equal_the_local_fetch(service, source, media):
    loader = local_loader(service)
    # By key the family comes from the key's geometry; a video by path alone needs it named.
    named = HttpToolFrameSource(service["url"], timeout_s=60, family=FAMILY)
    for video in videos_of(service, media):
        client = named if video.key is None else source
        for start, end, fps, most, pixels in WINDOWS:
            got = client.window(video, start, end, fps, max_frames=most, max_pixels=pixels)
            want = fetch_window(loader, ToolVideo(str(media["video"]), None, video.duration_s), start, end, fps,
                                max_frames=most, max_pixels=pixels, family=FAMILY)
            assert got.metadata == want.metadata and got.frames.dtype == np.uint8
            assert np.array_equal(got.frames, want.frames), (video, start, end, fps)
        for t, box, pixels in CROPS:
            got = client.crop(video, t, box, max_pixels=pixels)
            want = fetch_crop(loader, ToolVideo(str(media["video"]), None, video.duration_s), t, box,
                              max_pixels=pixels, family=FAMILY)
            assert got.metadata == want.metadata and np.array_equal(got.image, want.image), (video, t, box)
    named.close()


def test_a_repeated_window_is_a_store_hit(service, source, media):
    video = ToolVideo(None, service["key"], service["duration"])
    before = httpx.get(f"{service['url']}/metrics").text
    hits, misses = source.store_hits, source.store_misses
    first = source.window(video, 1.7, 3.3, 5.0, max_frames=8, max_pixels=None)
    assert (source.store_hits, source.store_misses) == (hits, misses + 1)
    # The miss wrote the window back under its own key.
    params = window_params(local_loader(service), 1.7, 3.3, 5.0, max_frames=8, max_pixels=None, family=FAMILY)
    assert service["store"].exists(FrameLoader(None, params, index=service["index"]).key_for(media["video"],
                                                                                            params).key)
    second = source.window(video, 1.7, 3.3, 5.0, max_frames=8, max_pixels=None)
    assert (source.store_hits, source.store_misses) == (hits + 1, misses + 1)
    assert np.array_equal(first.frames, second.frames) and first.metadata == second.metadata
    after = httpx.get(f"{service['url']}/metrics").text
    for outcome in ("hit", "miss"):
        assert metric_sum(after, "evr1_frame_cache_tool_store_total", tool="window", outcome=outcome) == \
            metric_sum(before, "evr1_frame_cache_tool_store_total", tool="window", outcome=outcome) + 1


def window_body(service, **change):
    body = {"video": {"key": service["key"]}, "start_s": 0.5, "end_s": 1.5, "fps": 2.0, "max_frames": 4}
    body.update(change)
    return body


def crop_body(service, **change):
    body = {"video": {"key": service["key"]}, "t_s": 1.0, "box": [0, 0, 32, 32], "max_pixels": 3136}
    body.update(change)
    return body


def bad_requests(service, media):
    """(route, body, status, field) of every kind of bad request."""
    return [
        ("window", window_body(service, video={"key": "ab" * 32}), 404, "video.key"),
        ("window", window_body(service, video={"key": "not-a-key"}), 400, "video.key"),
        ("window", window_body(service, video={}), 422, "video"),
        ("window", window_body(service, video={"path": str(media["outside"])}, family=FAMILY), 403, "video.path"),
        ("window", window_body(service, video={"path": "missing.mp4"}, family=FAMILY), 404, "video.path"),
        ("window", window_body(service, video={"key": service["key"], "path": "a\x00b"}), 422, "video.path"),
        ("window", window_body(service, video={"path": "clip.mp4"}, family="qwen9"), 422, "family"),
        ("window", window_body(service, start_s=5.0, end_s=6.0), 422, "start_s"),
        ("window", window_body(service, start_s=-1.0), 422, "start_s"),
        ("window", window_body(service, end_s=0.5), 422, "end_s"),
        ("window", window_body(service, end_s=9.0), 422, "end_s"),
        ("window", window_body(service, max_frames=9), 422, "max_frames"),
        ("window", window_body(service, max_frames=1), 422, "max_frames"),
        ("window", window_body(service, fps=0), 422, "fps"),
        ("window", window_body(service, fps=30.0), 422, "fps"),
        ("window", window_body(service, max_pixels=10**6), 422, "max_pixels"),
        ("window", {k: v for k, v in window_body(service).items() if k != "fps"}, 422, "fps"),
        ("window", window_body(service, frames=3), 422, "frames"),
        ("crop", crop_body(service, box=[100, 0, 140, 10]), 422, "box"),
        ("crop", crop_body(service, box=[10, 10, 5, 20]), 422, "box"),
        ("crop", crop_body(service, box=[0, 0, 10]), 422, "box"),
        ("crop", crop_body(service, t_s=4.0), 422, "t_s"),
        ("crop", crop_body(service, max_pixels=10**7), 422, "max_pixels"),
        ("crop", crop_body(service, video={"path": "corrupt.mp4"}, family=FAMILY), 422, "video.path"),
        ("window", window_body(service, video={"path": "truncated.mp4"}, family=FAMILY, start_s=4.0, end_s=5.5),
         422, "video"),
    ]


def test_every_bad_request_is_a_4xx_naming_its_field(service, media):
    with httpx.Client(base_url=service["url"], timeout=60) as http:
        for route, body, status, field in bad_requests(service, media):
            resp = http.post(f"/v1/tools/{route}", json=body)
            assert resp.status_code == status, (route, body, resp.text)
            answer = resp.json()
            assert answer["field"] == field and answer["detail"].startswith(f"{field}: "), (body, answer)
            if field == "video":
                assert "truncated or corrupt" in answer["detail"] or "give the video" in answer["detail"]
        resp = http.post("/v1/tools/window", content=b"{not json", headers={"content-type": "application/json"})
        assert resp.status_code == 422 and resp.json()["field"] == "body"
        assert http.get("/healthz").status_code == 200  # nothing above hurt the service


def test_the_client_raises_what_the_local_source_raises(service, source, media):
    video = ToolVideo(None, service["key"], service["duration"])
    with pytest.raises(ToolArgumentError) as remote:
        source.crop(video, 1.0, (100, 0, 140, 10), max_pixels=3136)
    with pytest.raises(ToolArgumentError) as local:
        fetch_crop(local_loader(service), ToolVideo(str(media["video"]), None, service["duration"]), 1.0,
                   (100, 0, 140, 10), max_pixels=3136, family=FAMILY)
    assert remote.value.field == local.value.field == "box"
    assert str(remote.value) == str(local.value)
    with pytest.raises(ToolArgumentError, match="start_s"):
        source.window(video, 9.0, 10.0, 2.0, max_frames=4, max_pixels=None)
    # What the setup got wrong is no argument of the call: the source's error, not the policy's.
    with pytest.raises(ToolSourceError, match=r"HTTP 404: video.key: no blob for key"):
        source.window(ToolVideo(None, "ab" * 32, 4.0), 0.0, 1.0, 2.0, max_frames=4, max_pixels=None)
    with pytest.raises(ToolSourceError, match=r"HTTP 422: family: name the model family"):
        source.window(ToolVideo(str(media["video"]), None, 4.0), 0.0, 1.0, 2.0, max_frames=4, max_pixels=None)


def test_a_service_timeout_is_a_clear_error(service):
    cfg = service["cfg"].model_copy(deep=True)
    cfg.worker.rollout.tools.timeout_s = 1e-6  # no decode answers within a microsecond
    video = ToolVideo(None, service["key"], service["duration"])
    with serving(cfg) as url:
        client = HttpToolFrameSource(url, timeout_s=60)
        try:
            with pytest.raises(ToolSourceError, match=r"HTTP 504: timeout_s: no answer within 1e-06 s "
                                                      r"\(worker.rollout.tools.timeout_s\)"):
                client.window(video, 0.1, 3.9, 7.0, max_frames=8, max_pixels=None)
        finally:
            client.close()
        text = httpx.get(f"{url}/metrics").text
        assert metric_sum(text, "evr1_frame_cache_tool_errors_total", tool="window", reason="timeout") == 1
        assert httpx.get(f"{url}/healthz").status_code == 200


def test_a_client_timeout_is_a_clear_error():
    with socket.socket() as silent:  # accepts connections (the kernel's backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        client = HttpToolFrameSource(f"http://127.0.0.1:{silent.getsockname()[1]}", timeout_s=0.2)
        try:
            with pytest.raises(ToolSourceError, match=r"/v1/tools/crop: no answer within 0.2 s"):
                client.crop(ToolVideo(None, "ab" * 32, 4.0), 1.0, (0, 0, 8, 8), max_pixels=3136)
        finally:
            client.close()


def test_metrics_are_exposed(service, source):
    video = ToolVideo(None, service["key"], service["duration"])
    source.crop(video, 0.5, (0, 0, 64, 48), max_pixels=3136)
    with pytest.raises(ToolArgumentError):
        source.crop(video, 0.5, (0, 0, 640, 48), max_pixels=3136)
    text = httpx.get(f"{service['url']}/metrics").text
    assert metric_sum(text, "evr1_frame_cache_tool_requests_total", tool="crop", status="200") >= 1
    assert metric_sum(text, "evr1_frame_cache_tool_requests_total", tool="crop", status="422") >= 1
    assert metric_sum(text, "evr1_frame_cache_tool_errors_total", tool="crop", reason="bad_request") >= 1
    assert metric_sum(text, "evr1_frame_cache_tool_frames_total", tool="crop") >= 1
    assert metric_sum(text, "evr1_frame_cache_tool_seconds_count", tool="crop") >= 1
    spec = httpx.get(f"{service['url']}/openapi.json").json()
    assert {"/v1/tools/window", "/v1/tools/crop"} <= set(spec["paths"])
    assert {"WindowRequest", "CropRequest"} <= set(spec["components"]["schemas"])

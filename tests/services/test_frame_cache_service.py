"""The frame-cache service over a real uvicorn server, on a local directory and on SeaweedFS S3."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from servers import frame_store_for, metric_sum, wait_build

from easyvideor1.cache.blob import decode_blob
from easyvideor1.cache.key import HashIndex, cache_key
from easyvideor1.cache.stores.base import open_store
from easyvideor1.video.decode import decode_video
from easyvideor1.video.image import load_image
from easyvideor1.video.metadata import ImageParams, VideoParams
from services.frame_cache.launch import FrameCacheServer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "video"))
from video_samples import make_image, make_video  # noqa: E402

PARAMS = {"fps": 2, "max_frames": 6, "min_frames": 2, "min_pixels": 3136, "max_pixels": 12544,
          "image_min_pixels": 3136, "image_max_pixels": 12544}
VIDEO = VideoParams(fps=2, max_frames=6, min_frames=2, min_pixels=3136, max_pixels=12544)
IMAGE = ImageParams(min_pixels=3136, max_pixels=12544)


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    root = tmp_path_factory.mktemp("fc-media")
    videos = [make_video(root / f"clip{i}.mp4", count=20 + 5 * i, seed=i) for i in range(3)]
    corrupt = root / "corrupt.mp4"
    corrupt.write_bytes(b"\x00\x00\x00\x18ftypmp42" + bytes(range(256)) * 8)
    image = make_image(root / "still.png")
    rows = [{"problem": "<video>How many squares?", "answer": "1", "problem_type": "numerical",
             "videos": [videos[0].name]},
            {"problem": "<video>How many squares?", "answer": "1", "problem_type": "numerical",
             "videos": [videos[2].name]}]
    data = root / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {"root": root, "videos": videos, "corrupt": corrupt, "image": image, "data": data,
            "index": HashIndex(tmp_path_factory.mktemp("fc-test-index"))}


@pytest.fixture(scope="module", params=["local", "s3"])
def service(request, tmp_path_factory, media):
    store_url, s3_env = frame_store_for(request, tmp_path_factory, "svc")
    env = {**os.environ, **s3_env, "EVR1_HASH_INDEX_DIR": str(tmp_path_factory.mktemp("fc-server-index"))}
    server = FrameCacheServer(store_url, ["--build-workers", "1", "--build-processes", "1",
                                          "--data-roots", str(media["root"])], env=env)
    server.start()
    with pytest.MonkeyPatch.context() as patch:
        for key, value in s3_env.items():  # so open_store(store_url) in the tests reaches the same bucket
            patch.setenv(key, value)
        try:
            yield server
        finally:
            server.close()


@pytest.fixture(scope="module")
def http(service):
    with httpx.Client(base_url=service.url, timeout=30) as client:
        yield client


def test_build_media_list_then_serve_the_blobs(service, http, media):
    videos = [str(v) for v in media["videos"][:2]]
    resp = http.post("/v1/builds", json={"videos": [*videos, str(media["corrupt"])],
                                         "images": [str(media["image"])], **PARAMS})
    assert resp.status_code == 202, resp.text
    body = resp.json()
    assert body["status"] == "queued" and re.fullmatch(r"[0-9a-f]{32}", body["build_id"])
    assert resp.headers["location"] == f"/v1/builds/{body['build_id']}"
    status = wait_build(http, body["build_id"])
    assert status["status"] == "done", status
    assert status["counts"]["built"] == 3 and status["counts"]["failed"] == 1
    assert status["request"] == {"kind": "media", "videos": 3, "images": 1}
    [failure] = status["failures"]
    assert failure["path"] == str(media["corrupt"]) and failure["error_kind"] == "decode"
    assert failure["reason"]

    store = open_store(service.store)
    try:
        for path, params, decode in [(p, VIDEO, decode_video) for p in videos] + [
                (str(media["image"]), IMAGE, load_image)]:
            key = cache_key(path, params, index=media["index"])
            got = http.get(f"/v1/blobs/{key.key}")
            assert got.status_code == 200 and got.headers["content-type"] == "application/octet-stream"
            assert got.content == store.get(key.key)  # streamed bytes are the store's bytes
            head = http.head(f"/v1/blobs/{key.key}")
            assert head.status_code == 200 and int(head.headers["content-length"]) == len(got.content)
            frames, meta = decode_blob(got.content, key)
            expected, expected_meta = decode(path, params)
            assert np.array_equal(frames, expected) and meta == expected_meta
    finally:
        store.close()

    again = http.post("/v1/builds", json={"videos": videos, **PARAMS}).json()["build_id"]
    counts = wait_build(http, again)["counts"]
    assert (counts["built"], counts["reused"], counts["failed"]) == (0, 2, 0)


def test_build_from_a_data_file(http, media):
    resp = http.post("/v1/builds", json={"data_path": str(media["data"]), **PARAMS})
    assert resp.status_code == 202, resp.text
    status = wait_build(http, resp.json()["build_id"])
    assert status["status"] == "done" and status["request"]["kind"] == "data_path"
    counts = status["counts"]
    assert counts["rows"] == 2 and counts["failed"] == 0 and counts["built"] + counts["reused"] == 2
    key = cache_key(media["videos"][2], VIDEO, index=media["index"]).key
    assert http.head(f"/v1/blobs/{key}").status_code == 200


def test_missing_and_malformed_keys(http):
    absent = "ab" * 32
    resp = http.get(f"/v1/blobs/{absent}")
    assert resp.status_code == 404 and resp.json() == {"detail": f"no blob for key {absent}"}
    assert http.head(f"/v1/blobs/{absent}").status_code == 404
    for bad in ("XYZ", "ab", "AB" * 32, "g" * 64, "a" * 129):
        for method in ("GET", "HEAD", "DELETE"):
            resp = http.request(method, f"/v1/blobs/{bad}")
            assert resp.status_code == 400, (bad, method)
            if method != "HEAD":
                assert "invalid cache key" in resp.json()["detail"]


@pytest.mark.parametrize(("body", "status", "reason"), [
    (b"{not json", 422, "request body is not valid JSON"),
    (b"[1]", 422, "must be a JSON object"),
    (b'{"videos": ["/a.mp4"], "colour": "red"}', 422, "colour: Extra inputs are not permitted"),
    (b'{"videos": ["/a.mp4"], "fps": -1}', 422, "fps: Input should be greater than 0"),
    (b'{"videos": "/a.mp4"}', 422, "videos: Input should be a valid list"),
    (b"{}", 400, "give 'data_path' or a non-empty 'videos'/'images' list"),
    (b'{"videos": ["clip.mp4"]}', 400, "must be an absolute path"),
    (b'{"videos": ["/a\\u0000b.mp4"]}', 400, "NUL character"),
    (b'{"videos": ["http://example.com/a.mp4"]}', 400, "is a URL"),
    (b'{"data_path": "/nonexistent/train.jsonl"}', 400, "is outside the service's data roots"),
    (b'{"data_path": "/tmp", "videos": ["/a.mp4"]}', 400, "not both"),
    (b'{"videos": ["/a.mp4"], "family": "llama"}', 400, "unknown model family"),
    (b'{"videos": ["/a.mp4"], "family": "qwen3-vl", "factor": 28}', 400, "contradicts family"),
    (b'{"videos": ["/a.mp4"], "min_frames": 9, "max_frames": 3}', 400, "min_frames (9) > max_frames (3)"),
])
def test_bad_build_requests(http, body, status, reason):
    resp = http.post("/v1/builds", content=body, headers={"content-type": "application/json"})
    assert resp.status_code == status, resp.text
    assert reason in resp.json()["detail"]


def test_oversized_build_request_is_413(http):
    big = json.dumps({"videos": ["/v/" + "x" * 1000] * 9000})  # > 8 MiB
    resp = http.post("/v1/builds", content=big, headers={"content-type": "application/json"})
    assert resp.status_code == 413 and "exceeds the limit of 8388608 bytes" in resp.json()["detail"]

    def chunks():  # no Content-Length: the limit holds while streaming
        for _ in range(140):
            yield b" " * 65536

    resp = http.post("/v1/builds", content=chunks(), headers={"content-type": "application/json"})
    assert resp.status_code == 413 and "more than 8388608 bytes" in resp.json()["detail"]


def test_build_status_errors(http):
    assert http.get("/v1/builds/" + "0" * 32).status_code == 404
    resp = http.get("/v1/builds/not-an-id")
    assert resp.status_code == 400 and "invalid build id" in resp.json()["detail"]


def test_health_ready_and_metrics(http, media):
    assert http.get("/healthz").json() == {"status": "ok"}
    ready = http.get("/readyz")
    assert ready.status_code == 200 and ready.json()["ready"] is True and ready.json()["build_workers"] == 1
    before = http.get("/metrics").text
    key = cache_key(media["videos"][0], VIDEO, index=media["index"]).key
    size = len(http.get(f"/v1/blobs/{key}").content)
    http.get(f"/v1/blobs/{'cd' * 32}")
    http.head(f"/v1/blobs/{key}")
    text = http.get("/metrics").text
    assert metric_sum(text, "evr1_frame_cache_blob_hits_total", method="GET") == \
        metric_sum(before, "evr1_frame_cache_blob_hits_total", method="GET") + 1
    assert metric_sum(text, "evr1_frame_cache_blob_misses_total", method="GET") >= 1
    assert metric_sum(text, "evr1_frame_cache_blob_hits_total", method="HEAD") >= 1
    assert metric_sum(text, "evr1_frame_cache_bytes_served_total") == \
        metric_sum(before, "evr1_frame_cache_bytes_served_total") + size
    assert metric_sum(text, "evr1_frame_cache_builds_submitted_total") >= 1
    assert metric_sum(text, "evr1_frame_cache_builds_finished_total", status="done") >= 1
    assert metric_sum(text, "evr1_frame_cache_build_media_total", outcome="built") >= 1
    assert metric_sum(text, "evr1_frame_cache_build_failures_total", error_kind="decode") >= 1
    assert metric_sum(text, "evr1_frame_cache_requests_total", route="/v1/blobs/{key}", method="GET",
                      status="404") >= 1
    assert metric_sum(text, "evr1_frame_cache_request_seconds_count", route="/v1/blobs/{key}", method="GET") >= 2
    assert key not in text  # keys never become label values


@pytest.mark.parametrize("service", ["local"], indirect=True)  # one contract for every backend: checked once
def test_openapi_conformance(service):
    """Schemathesis against the live schema, bounded: no 5xx, documented status codes and types."""
    api = schemathesis.openapi.from_url(f"{service.url}/openapi.json")
    operations = [result.ok() for result in api.get_all_operations()]
    assert len(operations) == 13
    checks = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
        for operation in operations:
            if mode == GenerationMode.NEGATIVE and "{" not in operation.path and operation.method.upper() != "POST":
                continue  # nothing to make invalid

            @given(case=operation.as_strategy(generation_mode=mode))
            @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None)
            def check(case):
                case.call_and_validate(base_url=service.url, checks=checks)

            check()

"""Builds read only under the configured data roots (issue 16, item 3): a real frame-cache service
(``evr1 serve frame-cache`` on loopback), the build worker's own check, and ``evr1 data prepare``.

Before: a build naming any file the service could read (an image outside every data root) was
decoded and its frames could be downloaded; for other paths the error said whether the file
existed. After: every path is resolved (symlinks, ``..``) and refused with a 400 naming the rule,
the same answer for files that exist and files that do not.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import httpx
import pytest
from servers import wait_build

from easyvideor1.config.loader import load_config
from services.frame_cache import builds
from services.frame_cache.launch import FrameCacheServer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "video"))
from video_samples import make_image, make_video  # noqa: E402

PARAMS = {"fps": 2, "max_frames": 4, "min_frames": 2, "min_pixels": 3136, "max_pixels": 12544,
          "image_min_pixels": 3136, "image_max_pixels": 12544}
RULE = "is outside the service's data roots"


def row(**media) -> dict:
    return {"problem": "<image>What is shown?" if "images" in media else "<video>What is shown?",
            "answer": "1", "problem_type": "numerical", **media}


@pytest.fixture(scope="module")
def layout(tmp_path_factory):
    base = tmp_path_factory.mktemp("roots")
    root, outside = base / "data", base / "private"
    root.mkdir()
    outside.mkdir()
    secret = make_image(outside / "secret.png")
    clip = make_video(root / "clip.mp4", count=12)
    (root / "link.png").symlink_to(secret)  # inside the root by name, outside once resolved
    good = root / "good.jsonl"
    good.write_text(json.dumps(row(videos=["clip.mp4"])) + "\n")
    sneaky = root / "sneaky.jsonl"
    sneaky.write_text(json.dumps(row(videos=["clip.mp4"])) + "\n"
                      + json.dumps(row(images=["../private/secret.png"])) + "\n")
    outside_data = outside / "train.jsonl"
    outside_data.write_text(json.dumps(row(images=["secret.png"])) + "\n")
    return {"base": base, "root": root, "outside": outside, "secret": secret, "clip": clip, "good": good,
            "sneaky": sneaky, "outside_data": outside_data}


def _server(tmp_path_factory, args: list[str]) -> FrameCacheServer:
    store = tmp_path_factory.mktemp("roots-store")
    env = {**os.environ, "EVR1_HASH_INDEX_DIR": str(tmp_path_factory.mktemp("roots-index"))}
    return FrameCacheServer(str(store), ["--build-workers", "1", "--build-processes", "1", *args], env=env).start()


@pytest.fixture(scope="module")
def http(layout, tmp_path_factory):
    server = _server(tmp_path_factory, ["--data-roots", str(layout["root"])])
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            yield client
    finally:
        server.close()


def refused(http: httpx.Client, body: dict) -> str:
    resp = http.post("/v1/builds", json={**body, **PARAMS})
    assert resp.status_code == 400, resp.text
    return resp.json()["detail"]


def test_media_under_the_root_are_built(http, layout):
    resp = http.post("/v1/builds", json={"videos": [str(layout["clip"])], **PARAMS})
    assert resp.status_code == 202, resp.text
    assert wait_build(http, resp.json()["build_id"])["counts"]["built"] == 1
    resp = http.post("/v1/builds", json={"data_path": str(layout["good"]), **PARAMS})
    assert resp.status_code == 202, resp.text
    assert wait_build(http, resp.json()["build_id"])["status"] == "done"


def test_a_file_outside_the_roots_is_refused_like_a_missing_one(http, layout):
    real = str(layout["secret"])
    missing = str(layout["outside"] / "nothere.png")
    for field in ("images", "videos"):
        shown = refused(http, {field: [real]})
        absent = refused(http, {field: [missing]})
        assert RULE in shown and "serve.frame_cache.data_roots" in shown
        assert shown.replace(real, "P") == absent.replace(missing, "P")  # no existence oracle
    assert refused(http, {"images": ["/etc/passwd"]}).replace("/etc/passwd", "P") == \
        refused(http, {"images": ["/etc/no-such-file"]}).replace("/etc/no-such-file", "P")


def test_dotdot_and_symlinks_are_resolved_before_the_check(http, layout):
    climbing = f"{layout['root']}/../private/secret.png"
    assert RULE in refused(http, {"images": [climbing]})
    assert RULE in refused(http, {"images": [str(layout["root"] / "link.png")]})
    assert RULE in refused(http, {"images": [str(layout["root"]) + "x/clip.mp4"]})  # a sibling sharing the prefix


def test_data_files_and_their_rows_stay_under_the_roots(http, layout):
    assert RULE in refused(http, {"data_path": str(layout["outside_data"])})
    assert RULE in refused(http, {"data_path": str(layout["outside"] / "none.jsonl")})
    assert RULE in refused(http, {"data_path": str(layout["good"]), "media_root": str(layout["outside"])})
    detail = refused(http, {"data_path": str(layout["sneaky"])})
    assert RULE.replace("is ", "") in detail and f"{layout['sneaky']}:2" in detail and "secret.png" in detail
    # Inside the roots, a caller may learn that a file is missing.
    assert "is not a file visible" in refused(http, {"data_path": str(layout["root"] / "none.jsonl")})


def test_no_roots_configured_refuses_builds_by_path(layout, tmp_path_factory):
    server = _server(tmp_path_factory, [])
    try:
        resp = httpx.post(f"{server.url}/v1/builds", json={"videos": [str(layout["clip"])], **PARAMS}, timeout=30)
    finally:
        server.close()
    assert resp.status_code == 400
    detail = resp.json()["detail"]
    assert "no data roots" in detail and "serve.frame_cache.data_roots" in detail and "--data-roots" in detail


def test_the_worker_checks_again_when_it_runs(layout, tmp_path, monkeypatch):
    """A payload accepted earlier (or forged on the queue) whose files now lie outside."""
    monkeypatch.setenv("EVR1_HASH_INDEX_DIR", str(tmp_path / "index"))
    req = builds.BuildRequest(videos=[str(layout["clip"])], **PARAMS)
    payload = builds.payload_of(req, [str(layout["root"])])
    payload["images"] = [str(layout["secret"])]
    fields = builds.execute(payload, str(tmp_path / "store"), workers=1)
    assert fields["status"] == "done" and fields["counts"]["built"] == 1 and fields["counts"]["failed"] == 1
    assert fields["failures"][0]["error_kind"] == "outside data roots"
    data = {**payload, "kind": "data_path", "data_path": str(layout["sneaky"]), "media_root": None}
    fields = builds.execute(data, str(tmp_path / "store"), workers=1)
    assert fields["status"] == "failed" and "outside the service's data roots" in fields["error"]
    fields = builds.execute({**payload, "data_roots": []}, str(tmp_path / "store"), workers=1)
    assert fields["counts"]["failed"] == 2 and "no data roots" in fields["failures"][0]["reason"]


def test_cluster_run_config_sets_the_roots(tmp_path):
    from easyvideor1.cli.cluster import _data_roots

    cfg = load_config(None, [f"data.train_files={tmp_path / 'd' / 'train.jsonl'}",
                             f"data.media_root={tmp_path / 'media'}"])
    assert _data_roots(cfg) == [str(tmp_path / "media"), str(tmp_path / "d")]


def test_prepare_roots_and_buckets(layout):
    from easyvideor1.train.prepare import _Roots

    assert _Roots.of(load_config(None, [])) is None  # default: the command line's data file is trusted
    roots = _Roots.of(load_config(None, [f"data.media_roots={layout['root']}", "data.media_buckets=[raw, "
                                                                               "s3://shared/clips]"]))
    assert roots.local(str(layout["clip"])) == str(layout["clip"])
    assert roots.local(str(layout["root"] / "link.png")) is None
    assert roots.local(f"{layout['root']}/../private/secret.png") is None
    assert roots.allows_url("s3://raw/a/b.mp4") and roots.allows_url("s3://shared/clips/x.mp4")
    assert not roots.allows_url("s3://shared/other/x.mp4") and not roots.allows_url("s3://else/x.mp4")
    assert not roots.allows_url("s3://shared/clips/../other/x.mp4")
    assert "outside data.media_roots" in roots.refusal(str(layout["secret"]))
    assert "not in data.media_buckets" in roots.refusal("s3://else/x.mp4")


def test_prepare_leaves_out_media_outside_the_roots(layout, tmp_path, monkeypatch, tiny_model_factory):
    from easyvideor1.train.prepare import prepare

    monkeypatch.setenv("EVR1_HASH_INDEX_DIR", str(tmp_path / "index"))
    cfg = load_config(None, ["data.video_min_pixels=3136", "data.video_max_pixels=4096",
                             "data.image_min_pixels=3136", "data.image_max_pixels=4096", "data.video_min_frames=2",
                             "data.frame_cache.workers=1", f"data.frame_cache.store={tmp_path / 'store'}",
                             f"data.media_roots={layout['root']}"])
    summary = prepare(layout["sneaky"], cfg, [tiny_model_factory("qwen2_5_vl")], tmp_path / "p.jsonl",
                      progress=False)
    assert summary.written == 1 and summary.left_out == 1
    [failure] = summary.failures
    assert failure.error_kind == "outside data roots" and "outside data.media_roots" in failure.reason
    assert failure.rows == [f"{layout['sneaky']}:2"]

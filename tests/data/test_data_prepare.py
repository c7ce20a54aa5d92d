"""``evr1 data prepare`` against a real SeaweedFS S3 gateway (the session ``s3`` fixture).

Synthetic video, image and text rows are prepared for two model families into an s3://
frame store, with raw media given as local paths and as s3:// URLs; afterwards the raw
media are deleted and every frame loads by key alone, identical to decoding the original.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest
from minio import Minio

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "video"))
from video_samples import make_video  # noqa: E402

from easyvideor1.cache import FrameLoader, cache_key, open_store  # noqa: E402
from easyvideor1.cache.loader import BlobUnavailableError, identity_key  # noqa: E402
from easyvideor1.cli.main import main  # noqa: E402
from easyvideor1.config.loader import load_config  # noqa: E402
from easyvideor1.data import load_samples  # noqa: E402
from easyvideor1.data.prepared import PREPARED_FIELD, load_prepared  # noqa: E402
from easyvideor1.data.synth import generate_synthetic  # noqa: E402
from easyvideor1.errors import CacheMismatchError, ConfigError, DataError  # noqa: E402
from easyvideor1.models.families import (
    frame_params,  # noqa: E402
    get_family,  # noqa: E402
)
from easyvideor1.models.inputs import ImageInput, PromptBuilder, VideoInput  # noqa: E402
from easyvideor1.prompts.renderer import PromptRenderer  # noqa: E402
from easyvideor1.rollout.stage import sample_fields  # noqa: E402
from easyvideor1.train.prepare import prepare  # noqa: E402
from easyvideor1.video import decode_video, load_image  # noqa: E402

FAMILIES = ("qwen2_5_vl", "qwen3_vl")
# Small frames: the synthetic media are 64x64, so the defaults would upscale them ~5x.
BUDGETS = ["data.video_min_pixels=3136", "data.video_max_pixels=4096", "data.image_min_pixels=3136",
           "data.image_max_pixels=4096", "data.video_min_frames=2", "data.frame_cache.workers=1"]


@pytest.fixture(autouse=True)
def environment(s3, tmp_path, monkeypatch):
    """S3 settings as a pod gets them (the builder's workers inherit them); a private hash index."""
    for name, value in s3.url_env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("EVR1_HASH_INDEX_DIR", str(tmp_path / "hash-index"))


@pytest.fixture(scope="module")
def models(tiny_model_factory):
    return {family: tiny_model_factory(family) for family in FAMILIES}


def bucket() -> str:
    return f"prep-{uuid.uuid4().hex[:12]}"


def client(s3) -> Minio:
    return Minio(s3.endpoint, access_key=s3.access_key, secret_key=s3.secret_key, secure=False)


def upload(s3, path: Path, bucket_name: str, key: str) -> str:
    raw = client(s3)
    if not raw.bucket_exists(bucket_name):
        raw.make_bucket(bucket_name)
    raw.fput_object(bucket_name, key, str(path))
    return f"s3://{bucket_name}/{key}"


def config(store: str, *extra: str):
    return load_config(None, [*BUDGETS, f"data.frame_cache.store={store}", *extra])


def synthetic_data(tmp_path: Path, s3, raw_bucket: str) -> tuple[Path, dict[str, Path]]:
    """Video, image and text rows; the first video and the first image are given as s3:// URLs.

    Returns the data file and, per medium as written in it, the original local file.
    """
    report = generate_synthetic(tmp_path / "synth", 2, seed=0, progress=False,
                                types=["multiple_choice", "image_multiple_choice", "text_math"])
    rows = [json.loads(line) for p in (report.train_path, report.val_path) for line in p.read_text().splitlines()]
    originals: dict[str, Path] = {}
    remote_done = set()
    for row in rows:
        for name in ("videos", "images"):
            items = []
            for rel in row.get(name, []):
                local = (report.out_dir / rel).resolve()
                if name not in remote_done:  # one of each kind travels through the bucket
                    remote_done.add(name)
                    rel = upload(s3, local, raw_bucket, f"raw/{rel}")
                items.append(rel)
                originals[rel] = local
            if items:
                row[name] = items
    data = report.out_dir / "data.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return data, originals


def expected_media(cfg, family: str, sample, originals: dict[str, Path]):
    """What decoding the original files gives, with the run config's budgets for ``family``."""
    video_params, image_params = frame_params(cfg, get_family(family))
    videos = [decode_video(originals.get(p, p), video_params) for p in sample.videos]
    images = [load_image(originals.get(p, p), image_params) for p in sample.images]
    return videos, images


def test_prepare_two_families_into_s3_then_load_every_frame_by_key_without_the_raw_media(tmp_path, s3, models):
    raw_bucket, frames = bucket(), f"s3://{bucket()}/frames"
    data, originals = synthetic_data(tmp_path, s3, raw_bucket)
    cfg = config(frames)
    out = tmp_path / "out" / "prepared.jsonl"

    summary = prepare(data, cfg, [models[f] for f in FAMILIES], out, progress=False)
    assert summary.ok and summary.failures == [], summary.format()
    assert (summary.rows, summary.written, summary.media, summary.fetched) == (6, 6, 4, 2)
    for family in FAMILIES:
        assert (summary.families[family].built, summary.families[family].reused) == (4, 0)

    prepared = load_prepared(out)
    plain = load_samples(out)  # an ordinary data file too: `prepared` passes through in extra
    assert [s.problem_id for s in plain] == [p.problem_id for p in prepared]
    assert all(PREPARED_FIELD in s.extra for s in plain)
    assert {p.sample.data_type for p in prepared} == {"video", "image", "text"}
    assert any(v.startswith("s3://") for p in prepared for v in (*p.sample.videos, *p.sample.images))

    # Token counts and metadata equal what the trainer computes from the original files.
    renderer = PromptRenderer(cfg.data.prompt_template_dir)
    expected = {}
    for family in FAMILIES:
        builder = PromptBuilder.from_pretrained(str(models[family]))
        for p in prepared:
            entry = p.family(family)
            videos, images = expected_media(cfg, family, p.sample, originals)
            expected[p.problem_id, family] = (videos, images)
            built = builder.build(renderer.render(sample_fields(p.sample)), [VideoInput(*v) for v in videos],
                                  [ImageInput(*i) for i in images], sample_id=p.problem_id)
            assert entry.prompt_tokens == len(built.prompt_ids)
            assert [m.metadata for m in entry.videos] == [meta for _, meta in videos]
            assert [m.metadata for m in entry.images] == [meta for _, meta in images]
            assert not entry.param_differences(*frame_params(cfg, get_family(family)))
        assert len({p.family(family).videos[0].key for p in prepared if p.sample.videos}) == 2
    keys_28 = {m.key for p in prepared for m in p.family("qwen2_5_vl").videos}
    assert keys_28.isdisjoint(m.key for p in prepared for m in p.family("qwen3_vl").videos)  # factor in the key

    # Incremental: nothing is built again, and unchanged bucket objects are not even fetched.
    first = out.read_text()
    again = prepare(data, cfg, [models[f] for f in FAMILIES], out, progress=False)
    assert again.ok and (again.fetched, again.fetch_skipped) == (0, 2)
    for family in FAMILIES:
        assert (again.families[family].built, again.families[family].reused) == (0, 4)
    assert out.read_text() == first

    # The raw media go away; every sample still loads, from the store alone.
    shutil.rmtree(data.parent / "media")
    raw = client(s3)
    for obj in raw.list_objects(raw_bucket, recursive=True):
        raw.remove_object(raw_bucket, obj.object_name)
    for family in FAMILIES:
        loader = FrameLoader(open_store(frames), *frame_params(cfg, get_family(family)))
        loaded = 0
        for p in prepared:
            videos, images = loader.load_prepared(p, family)
            want_videos, want_images = expected[p.problem_id, family]
            for (frames_got, meta_got), (frames_want, meta_want) in zip(videos, want_videos):
                assert np.array_equal(frames_got, frames_want) and meta_got == meta_want
            for (array_got, meta_got), (array_want, meta_want) in zip(images, want_images):
                assert np.array_equal(array_got, array_want) and meta_got == meta_want
            loaded += len(videos) + len(images)
        stats = loader.stats()
        assert (stats["hits"], stats["by_key"], stats["misses"], stats["on_the_fly"]) == (loaded, loaded, 0, 0)

    # A blob that went missing is an error naming the key and the sample (its raw file is gone too).
    victim = next(p for p in prepared if p.sample.videos)
    key = victim.family("qwen2_5_vl").videos[0].key
    store = open_store(frames)
    assert store.delete(key)
    loader = FrameLoader(store, *frame_params(cfg, get_family("qwen2_5_vl")))
    with pytest.raises(BlobUnavailableError, match=key) as info:
        loader.load_prepared(victim, "qwen2_5_vl")
    assert victim.problem_id in str(info.value) and "cannot be used" in str(info.value)
    with pytest.raises(BlobUnavailableError, match="no raw path"):
        loader.load_video_key(key, sample_id=victim.problem_id)


def test_bad_media_are_listed_and_left_out_and_a_changed_video_gets_a_new_key(tmp_path, s3, models, capsys):
    folder = tmp_path / "data"
    good = make_video(folder / "good.mp4", count=20, seed=1)
    (folder / "corrupt.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42" + bytes(range(256)) * 8)
    make_video(folder / "other.mp4", count=20, seed=3)
    missing_url = f"s3://{bucket()}/nowhere/gone.mp4"
    base = {"answer": "1", "problem_type": "numerical", "problem": "How many squares?"}
    rows = [{**base, "videos": ["good.mp4"]}, {**base, "videos": ["corrupt.mp4"]},
            {**base, "videos": [missing_url]}, {**base, "videos": ["other.mp4"]},
            {"problem": "What is 2 + 3?", "answer": "5", "problem_type": "math"}]
    data = folder / "data.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    frames = f"s3://{bucket()}/frames"
    out = tmp_path / "prepared.jsonl"
    run_yaml = tmp_path / "run.yaml"
    run_yaml.write_text("data:\n  video_min_pixels: 3136\n  video_max_pixels: 4096\n  video_min_frames: 2\n")
    command = ["data", "prepare", str(data), "--config", str(run_yaml), "--store", frames, "--workers", "1",
               "--model", str(models["qwen2_5_vl"]), "--model", str(models["qwen3_vl"]), "--out", str(out),
               "--no-progress"]

    assert main(command) == 3
    console = capsys.readouterr().out
    assert f"{data}:2" in console and "corrupt.mp4" in console and f"{data}:3" in console and missing_url in console
    report = [json.loads(line) for line in (tmp_path / "prepared.report.jsonl").read_text().splitlines()]
    by_row = {line["row"]: line for line in report}
    assert set(by_row) == {f"{data}:2", f"{data}:3"}
    corrupt = by_row[f"{data}:2"]
    assert corrupt["medium"] == str(folder / "corrupt.mp4") and corrupt["stage"] == "media"
    assert corrupt["error_kind"] == "decode" and corrupt["reason"]
    assert by_row[f"{data}:3"]["stage"] == "fetch" and "no such object" in by_row[f"{data}:3"]["reason"]
    prepared = load_prepared(out)
    assert [p.prepared.origin for p in prepared] == [f"{data}:1", f"{data}:4", f"{data}:5"]
    first_keys = {f: prepared[0].family(f).videos[0].key for f in FAMILIES}

    # The same name with other bytes is another key; the unchanged video is reused.
    make_video(good, count=20, seed=2)
    assert main([*command, "--json"]) == 3
    summary = json.loads(capsys.readouterr().out)
    assert {f: (c["built"], c["reused"]) for f, c in summary["families"].items()} == {f: (1, 1) for f in FAMILIES}
    changed = load_prepared(out)[0]
    cfg = config(frames)
    for family in FAMILIES:
        video_params, _ = frame_params(cfg, get_family(family))
        assert changed.family(family).videos[0].key != first_keys[family]
        assert changed.family(family).videos[0].key == cache_key(good, video_params).key


def test_key_loads_decode_on_the_fly_from_a_reachable_raw_file_and_refuse_a_stale_one(tmp_path, s3):
    video = make_video(tmp_path / "clip.mp4", count=20, seed=4)
    cfg = config(str(tmp_path / "store"))
    video_params, image_params = frame_params(cfg, get_family("qwen2_5_vl"))
    key = cache_key(video, video_params)
    assert identity_key(key.identity()) == key.key  # a blob's identity alone gives its key
    want, want_meta = decode_video(video, video_params)

    loader = FrameLoader(open_store(str(tmp_path / "store")), video_params, image_params, write_back=True)
    with pytest.raises(BlobUnavailableError, match=key.key) as info:
        loader.load_video_key(key.key, sample_id="row-7")
    assert "row-7" in str(info.value)
    url = upload(s3, video, bucket(), "raw/clip.mp4")  # a raw path may be a bucket object
    frames, meta = loader.load_video_key(key.key, sample_id="row-7", path=url)
    assert np.array_equal(frames, want) and meta == want_meta
    assert (loader.stats()["on_the_fly"], loader.stats()["misses"], loader.stats()["write_backs"]) == (1, 1, 1)
    frames, meta = loader.load_video_key(key.key, sample_id="row-7")  # written back: now a hit
    assert np.array_equal(frames, want) and loader.stats()["hits"] == 1

    # Other frame budgets than the blob's are refused, never served as if they were the run's.
    other = FrameLoader(loader.store, dataclasses.replace(video_params, fps=1.0))
    with pytest.raises(CacheMismatchError, match="fps"):
        other.load_video_key(key.key, sample_id="row-7")
    # A raw file that no longer has the keyed content is not decoded in its place.
    changed = make_video(tmp_path / "changed.mp4", count=20, seed=5)
    with pytest.raises(CacheMismatchError, match="changed"):
        FrameLoader(None, video_params).load_video_key(key.key, sample_id="row-7", path=changed)


def test_prepare_needs_a_store_and_one_model_per_family(tmp_path, models):
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"problem": "What is 1 + 1?", "answer": "2", "problem_type": "math"}) + "\n")
    with pytest.raises(ConfigError, match="--store"):
        prepare(data, load_config(None, BUDGETS), [models["qwen3_vl"]], tmp_path / "p.jsonl")
    with pytest.raises(ConfigError, match="one model per family"):
        prepare(data, config(str(tmp_path / "s")), [models["qwen3_vl"]] * 2, tmp_path / "p.jsonl")


def test_a_malformed_prepared_row_is_reported_by_file_line_and_field(tmp_path):
    row = {"problem": "What is 1 + 1?", "answer": "2", "problem_type": "math",
           PREPARED_FIELD: {"version": 1, "store": "/s", "sources": {"videos": [], "images": []},
                            "families": {"qwen2_5_vl": {"video_params": {}, "image_params": {}, "videos": [1],
                                                        "images": [], "prompt_tokens": 0}}}}
    path = tmp_path / "prepared.jsonl"
    path.write_text(json.dumps({"problem": "plain", "answer": "1", "problem_type": "math"}) + "\n"
                    + json.dumps(row) + "\n")
    with pytest.raises(DataError) as info:
        load_prepared(path)
    text = str(info.value)
    assert f"{path}:1" in text and "prepared" in text  # a plain row is not a prepared one
    assert f"{path}:2" in text and "prepared.families.qwen2_5_vl.videos" in text and "prompt_tokens" in text

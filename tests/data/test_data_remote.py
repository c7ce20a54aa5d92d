"""Data files as ``s3://`` objects, against a real SeaweedFS S3 gateway (the session ``s3`` fixture).

The cluster path: the data file and its media are bucket objects, `evr1 data prepare --out
s3://...` uploads the manifest and its report, the raw media are deleted, and the manifest
(read back from the bucket) still gives every frame by key. Also: relative media resolve
against the object's key prefix, a jsonl benchmark reads an s3:// prefix, and a missing
object, a missing bucket and bad credentials are errors naming the URL.
"""

from __future__ import annotations

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

from easyvideor1.cache import FrameLoader, open_store  # noqa: E402
from easyvideor1.cli.main import main  # noqa: E402
from easyvideor1.config.loader import load_config  # noqa: E402
from easyvideor1.data import load_samples, load_samples_report  # noqa: E402
from easyvideor1.data.prepared import PREPARED_FIELD, load_prepared  # noqa: E402
from easyvideor1.data.synth import generate_synthetic  # noqa: E402
from easyvideor1.errors import DataError  # noqa: E402
from easyvideor1.eval.benchmarks.jsonl import JSONLBenchmark  # noqa: E402
from easyvideor1.eval.types import AnnotationError  # noqa: E402
from easyvideor1.models.families import (
    frame_params,  # noqa: E402
    get_family,  # noqa: E402
)
from easyvideor1.video import decode_video, load_image  # noqa: E402

FAMILY = "qwen2_5_vl"
RUN_YAML = ("data:\n  video_min_pixels: 3136\n  video_max_pixels: 4096\n  image_min_pixels: 3136\n"
            "  image_max_pixels: 4096\n  video_min_frames: 2\n  frame_cache: {workers: 1}\n")


@pytest.fixture(autouse=True)
def environment(s3, tmp_path, monkeypatch):
    """S3 settings as a pod gets them; a private hash index."""
    for name, value in s3.url_env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("EVR1_HASH_INDEX_DIR", str(tmp_path / "hash-index"))


def bucket() -> str:
    return f"remote-{uuid.uuid4().hex[:12]}"


def client(s3) -> Minio:
    return Minio(s3.endpoint, access_key=s3.access_key, secret_key=s3.secret_key, secure=False)


def put(s3, bucket_name: str, key: str, data: bytes | Path) -> str:
    raw = client(s3)
    if not raw.bucket_exists(bucket_name):
        raw.make_bucket(bucket_name)
    if isinstance(data, Path):
        raw.fput_object(bucket_name, key, str(data))
    else:
        import io

        raw.put_object(bucket_name, key, io.BytesIO(data), len(data))
    return f"s3://{bucket_name}/{key}"


def get(s3, bucket_name: str, key: str) -> bytes:
    response = client(s3).get_object(bucket_name, key)
    try:
        return response.read()
    finally:
        response.close()
        response.release_conn()


def rows_text(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def test_prepare_out_s3_then_train_rows_load_every_frame_by_key_from_the_bucket_alone(tmp_path, s3,
                                                                                      tiny_model_factory, capsys):
    # The data file and its media in a bucket, the media relative to the data file's prefix.
    report = generate_synthetic(tmp_path / "synth", 2, seed=0, progress=False,
                                types=["multiple_choice", "image_multiple_choice", "text_math"])
    raw_bucket = bucket()
    rows = [json.loads(line) for line in report.train_path.read_text().splitlines()]
    originals: dict[str, Path] = {}
    for row in rows:
        for name in ("videos", "images"):
            for rel in row.get(name, []):
                url = put(s3, raw_bucket, f"sets/demo/{rel}", (report.out_dir / rel).resolve())
                originals[url] = (report.out_dir / rel).resolve()
    data_url = put(s3, raw_bucket, "sets/demo/train.jsonl", rows_text(rows))
    assert originals and all(not Path(rel).is_absolute() for row in rows for rel in row.get("videos", []))

    frames, out_bucket = f"s3://{bucket()}/frames", bucket()  # the out bucket does not exist yet
    out_url = f"s3://{out_bucket}/prepared/train.jsonl"
    run_yaml = tmp_path / "run.yaml"
    run_yaml.write_text(RUN_YAML)
    model = tiny_model_factory(FAMILY)
    command = ["data", "prepare", data_url, "--config", str(run_yaml), "--store", frames, "--model", str(model),
               "--out", out_url, "--no-progress", "--json"]
    assert main(command) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["manifest"], summary["report"]) == (out_url, f"s3://{out_bucket}/prepared/train.report.jsonl")
    assert (summary["rows"], summary["written"], summary["fetched"]) == (len(rows), len(rows), len(originals))
    assert get(s3, out_bucket, "prepared/train.report.jsonl") == b""  # a clean run: an empty report

    # A re-run reads the previous manifest from the bucket: unchanged objects are not fetched.
    assert main(command) == 0
    again = json.loads(capsys.readouterr().out)
    assert (again["fetched"], again["fetch_skipped"]) == (0, len(originals))
    assert again["families"][FAMILY]["built"] == 0

    cfg = load_config(str(run_yaml), [f"data.frame_cache.store={frames}"])
    video_params, image_params = frame_params(cfg, get_family(FAMILY))
    expected = {url: (decode_video(path, video_params) if url.endswith(".mp4") else load_image(path, image_params))
                for url, path in originals.items()}

    # The raw media go away, locally and in the bucket: only the store and the manifest remain.
    shutil.rmtree(report.out_dir)
    raw = client(s3)
    for obj in raw.list_objects(raw_bucket, recursive=True):
        raw.remove_object(raw_bucket, obj.object_name)

    # What `data.train_files: s3://...` gives the trainer: plain samples with `prepared` ...
    samples = load_samples(out_url)
    assert [s.problem_id for s in samples] == [s.problem_id for s in load_samples(data_url.replace(
        raw_bucket, out_bucket).replace("sets/demo", "prepared"))]
    assert all(PREPARED_FIELD in s.extra for s in samples)
    assert {v for s in samples for v in (*s.videos, *s.images)} == set(originals)  # URLs, as given
    # ... and every frame by key, from the store alone.
    prepared = load_prepared(out_url, family=FAMILY)
    loader = FrameLoader(open_store(frames), video_params, image_params)
    loaded = 0
    for p in prepared:
        videos, images = loader.load_prepared(p, FAMILY, raw_fallback=False)
        for url, (array, meta) in zip((*p.sample.videos, *p.sample.images), (*videos, *images)):
            want_array, want_meta = expected[url]
            assert np.array_equal(array, want_array) and meta == want_meta
            loaded += 1
    assert loaded == len(originals)
    stats = loader.stats()
    assert (stats["by_key"], stats["misses"], stats["on_the_fly"]) == (loaded, 0, 0)

    # An eval job reads it too: `--benchmarks jsonl=s3://bucket/prepared/` (the report is not data).
    items = JSONLBenchmark().load(f"s3://{out_bucket}/prepared/")
    assert [i.id for i in items] == [s.problem_id for s in samples]
    assert all(PREPARED_FIELD in i.meta and i.categories["file"] == "train.jsonl" for i in items)
    assert [i.id for i in JSONLBenchmark().load(out_url)] == [i.id for i in items]


def test_relative_media_of_an_s3_data_file_resolve_against_its_key_prefix(tmp_path, s3):
    """`clips/a.mp4` in s3://B/sets/v1/train.jsonl is s3://B/sets/v1/clips/a.mp4; absolute paths
    and URLs stay; `..` may climb within the bucket, never out of it."""
    base = {"problem": "How many?", "answer": "1", "problem_type": "numerical"}
    rows = [{**base, "videos": ["clips/a.mp4"]}, {**base, "images": ["../shared/b.png", "./c d#1.png"]},
            {**base, "videos": ["/mnt/raw/c.mp4", "s3://other/x/y.mp4"]}, {**base, "videos": ["../../../up.mp4"]}]
    name = bucket()
    url = put(s3, name, "sets/v1/train.jsonl", rows_text(rows))
    samples, problems = load_samples_report(url)
    assert [s.videos or s.images for s in samples] == [
        (f"s3://{name}/sets/v1/clips/a.mp4",),
        (f"s3://{name}/sets/shared/b.png", f"s3://{name}/sets/v1/c d%231.png"),
        ("/mnt/raw/c.mp4", "s3://other/x/y.mp4")]
    assert [s.source for s in samples] == [f"{url}:1", f"{url}:2", f"{url}:3"]
    (problem,) = problems
    assert (problem.path, problem.line, problem.field) == (url, 4, "videos[0]")
    assert "leaves the bucket" in problem.message and f"s3://{name}/sets/v1/" in problem.message

    # An s3:// media_root does the same for a local data file.
    local = tmp_path / "train.jsonl"
    local.write_bytes(rows_text(rows[:1]))
    (sample,) = load_samples(local, media_root=f"s3://{name}/media/")
    assert sample.videos == (f"s3://{name}/media/clips/a.mp4",)


def test_a_missing_object_bucket_or_credentials_is_an_error_naming_the_url(s3, monkeypatch, tmp_path, capsys,
                                                                           tiny_model_dir):
    name = bucket()
    put(s3, name, "data/train.jsonl", rows_text([{"problem": "2+3?", "answer": "5", "problem_type": "math"}]))
    assert len(load_samples(f"s3://{name}/data/train.jsonl")) == 1

    missing = f"s3://{name}/data/nope.jsonl"
    with pytest.raises(DataError) as info:
        load_samples(missing)
    assert f"{missing}:0" in str(info.value) and "no such object" in str(info.value)
    assert s3.endpoint in str(info.value)

    no_bucket = f"s3://{bucket()}/train.jsonl"
    _, problems = load_samples_report(no_bucket)
    assert [p.path for p in problems] == [no_bucket] and "does not exist" in problems[0].message

    # A missing object behind --out is a first run; an eval of it is an annotation error.
    with pytest.raises(AnnotationError, match="no .jsonl or .json data files"):
        JSONLBenchmark().load(missing)

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    _, problems = load_samples_report(f"s3://{name}/data/train.jsonl")
    assert "refused" in problems[0].message and "AWS_SECRET_ACCESS_KEY" in problems[0].message

    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(DataError, match="no credentials"):
        load_samples(f"s3://{name}/data/train.jsonl")
    # `evr1 data prepare --out s3://...` fails before any work, naming the URL.
    video = make_video(tmp_path / "v.mp4", count=4, seed=0)
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"problem": "n?", "answer": "1", "problem_type": "numerical",
                                "videos": [str(video)]}) + "\n")
    out = f"s3://{name}/prepared/d.jsonl"
    assert main(["data", "prepare", str(data), "--store", str(tmp_path / "frames"), "--model",
                 str(tiny_model_dir), "--out", out, "--no-progress"]) == 1
    error = capsys.readouterr().err
    assert out in error and "no credentials" in error

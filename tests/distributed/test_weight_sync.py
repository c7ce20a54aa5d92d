"""Versioned weight sync over real stores (SeaweedFS S3, a local dir) and a real Redis board."""

from __future__ import annotations

import hashlib
import json
import uuid
from pathlib import Path

import pytest
import torch
from minio import Minio
from safetensors.torch import load

from easyvideor1.queue import VersionError, VersionTimeoutError, open_version_board
from easyvideor1.weight_sync.publish import (
    WeightCorruptError,
    WeightPublisher,
    WeightSubscriber,
    WeightSyncError,
    is_stale,
)


def _state(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    embed = torch.randn(32, 8, generator=g)
    return {
        "embed.weight": embed,
        "lm_head.weight": embed,  # tied: shares storage, must survive as its own tensor
        "proj.weight": torch.randn(8, 8, generator=g).t(),  # non-contiguous view
        "norm.weight": torch.ones(8, dtype=torch.bfloat16),
        "steps": torch.tensor([seed], dtype=torch.int64),
    }


@pytest.fixture()
def board(redis_url):
    b = open_version_board(redis_url, f"ws-{uuid.uuid4().hex[:10]}")
    yield b
    b.close()


@pytest.fixture(params=["local", "s3"])
def store_url(request, tmp_path, monkeypatch):
    if request.param == "local":
        return str(tmp_path / "weights")
    s3 = request.getfixturevalue("s3")
    for key, value in s3.url_env.items():
        monkeypatch.setenv(key, value)
    return f"s3://evr1-weights/run-{uuid.uuid4().hex[:8]}/policy"


def _assert_same(loaded: dict[str, torch.Tensor], state: dict[str, torch.Tensor]) -> None:
    assert set(loaded) == set(state)
    for name, tensor in state.items():
        assert loaded[name].dtype == tensor.dtype, name
        assert torch.equal(loaded[name], tensor), name


def test_publish_fetch_round_trip(store_url, board):
    pub, sub = WeightPublisher(store_url, board), WeightSubscriber(store_url, board)
    assert sub.latest_version() is None
    state = _state(1)
    uri = pub.publish(1, state)
    assert uri.endswith("/v00000001/model.safetensors")
    assert uri.startswith("s3://evr1-weights/" if store_url.startswith("s3") else "file:///")
    record = board.latest()
    assert (record.version, record.uri) == (1, uri)
    data = sub.fetch(1)
    assert record.meta["sha256"] == hashlib.sha256(data).hexdigest() and record.meta["bytes"] == len(data)
    assert record.meta["tensors"] == 5
    _assert_same(load(data), state)
    manifest = sub.manifest(1)
    assert manifest["version"] == 1 and manifest["tensors"] == 5 and manifest["bytes"] == len(data)
    assert set(manifest["dtypes"]) == {"float32", "bfloat16", "int64"}
    assert sub.latest_version() == 1
    assert sub.wait_for(1, timeout=1).version == 1
    with pytest.raises(VersionTimeoutError):
        sub.wait_for(2, timeout=0.3)
    with pytest.raises(WeightSyncError, match="weight version 9 not found"):
        sub.fetch(9)


def test_large_version_goes_up_as_a_multipart_upload(s3, board, monkeypatch):
    for key, value in s3.url_env.items():
        monkeypatch.setenv(key, value)
    url = f"s3://evr1-weights/multipart-{uuid.uuid4().hex[:8]}"
    pub = WeightPublisher(url, board, part_size=5 << 20)
    state = {"big": torch.arange(3_000_000, dtype=torch.float32)}  # 12 MB: three 5 MiB parts
    pub.publish(1, state)
    client = Minio(s3.endpoint, access_key=s3.access_key, secret_key=s3.secret_key, secure=False)
    etag = client.stat_object("evr1-weights", url.split("/", 3)[3] + "/v00000001/model.safetensors").etag
    assert etag.endswith("-3"), etag  # an S3 multipart ETag names its part count
    _assert_same(load(WeightSubscriber(url, board).fetch(1)), state)


def test_versions_must_increase_and_nothing_is_written_for_a_refused_one(tmp_path, board):
    root = tmp_path / "weights"
    pub = WeightPublisher(str(root), board)
    pub.publish(3, _state(3))
    for stale in (3, 2):
        with pytest.raises(VersionError, match="already published"):
            pub.publish(stale, _state(stale))
    assert sorted(p.name for p in root.iterdir()) == ["v00000003"]
    assert board.latest().version == 3
    pub.publish(4, _state(4))
    assert board.latest().version == 4
    with pytest.raises(WeightSyncError, match="non-negative integer"):
        pub.publish(-1, _state(0))


def test_retention_keeps_the_newest_k(store_url, board):
    pub, sub = WeightPublisher(store_url, board, keep=2), WeightSubscriber(store_url, board)
    for version in (1, 2, 3, 5):
        pub.publish(version, _state(version))
    assert pub.objects.versions() == [3, 5]
    _assert_same(load(sub.fetch(5)), _state(5))
    _assert_same(load(sub.fetch(3)), _state(3))
    with pytest.raises(WeightSyncError, match=r"weight version 1 not found.*stored versions: \[3, 5\]"):
        sub.fetch(1)


def _corrupt(store_url: str, s3, name: str, mutate) -> None:
    if store_url.startswith("s3://"):
        bucket, prefix = store_url[5:].split("/", 1)
        client = Minio(s3.endpoint, access_key=s3.access_key, secret_key=s3.secret_key, secure=False)
        response = client.get_object(bucket, f"{prefix}/{name}")
        data = mutate(response.read())
        response.close()
        import io

        client.put_object(bucket, f"{prefix}/{name}", io.BytesIO(data), len(data))
    else:
        path = Path(store_url) / name
        path.write_bytes(mutate(path.read_bytes()))


def test_corrupted_object_is_a_clear_error(request, store_url, board):
    s3 = request.getfixturevalue("s3") if store_url.startswith("s3://") else None
    pub, sub = WeightPublisher(store_url, board), WeightSubscriber(store_url, board)
    pub.publish(1, _state(1))

    def flip(data: bytes) -> bytes:
        return data[:-1] + bytes([data[-1] ^ 0xFF])

    _corrupt(store_url, s3, "v00000001/model.safetensors", flip)
    with pytest.raises(WeightCorruptError, match="corrupt weights: .* the manifest says"):
        sub.fetch(1)
    with pytest.raises(WeightCorruptError), sub.local_file(1):
        pass
    _corrupt(store_url, s3, "v00000001/model.safetensors", lambda d: d[:100])  # truncated
    with pytest.raises(WeightCorruptError, match="100 bytes"):
        sub.fetch(1)
    _corrupt(store_url, s3, "v00000001/manifest.json", lambda d: d[:10])
    with pytest.raises(WeightCorruptError, match="unreadable manifest"):
        sub.fetch(1)


def test_announced_checksum_must_match_the_manifest(tmp_path, board):
    """A version overwritten after its announcement (a second trainer on the same prefix) is refused."""
    root = tmp_path / "weights"
    WeightPublisher(str(root), board).publish(1, _state(1))
    manifest_path = root / "v00000001" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    model = root / "v00000001" / "model.safetensors"
    from safetensors.torch import save_file

    save_file({"x": torch.zeros(3)}, str(model))
    manifest.update(sha256=hashlib.sha256(model.read_bytes()).hexdigest(), bytes=model.stat().st_size)
    manifest_path.write_text(json.dumps(manifest))
    sub = WeightSubscriber(str(root), board)
    assert load(sub.fetch(1)).keys() == {"x"}  # consistent with its manifest...
    with pytest.raises(WeightCorruptError, match="is not the announced"):
        sub.apply_to(_RecordingEngine())  # ...but not with what the board announced


class _RecordingEngine:
    """Only for the refusal test above: the load must never be reached."""

    policy_version = 0

    def update_weights(self, weights, version):
        raise AssertionError("corrupt weights reached the engine")


def test_apply_without_a_published_version(tmp_path, board):
    sub = WeightSubscriber(str(tmp_path), board)
    with pytest.raises(WeightSyncError, match="no weight version published yet"):
        sub.apply_to(_RecordingEngine())
    with pytest.raises(VersionTimeoutError):
        sub.apply_to(_RecordingEngine(), min_version=1, timeout=0.2)


def test_subscriber_on_another_store_is_refused(tmp_path, board):
    WeightPublisher(str(tmp_path / "a"), board).publish(1, _state(1))
    with pytest.raises(WeightSyncError, match="different stores"):
        WeightSubscriber(str(tmp_path / "b"), board).apply_to(_RecordingEngine())


@pytest.mark.parametrize(("result", "current", "bound", "stale"), [
    (5, 5, 0, False), (4, 5, 0, True), (4, 5, 1, False), (3, 5, 1, True), (0, 5, 5, False), (0, 6, 5, True),
])
def test_is_stale(result, current, bound, stale):
    assert is_stale(result, current, bound) is stale


@pytest.mark.parametrize(("args", "message"), [
    ((6, 5, 0), "newer than the trainer"), ((1, 2, -1), "bound must be"), ((1.0, 2, 0), "result_version must"),
    ((True, 2, 0), "result_version must"),
])
def test_is_stale_rejects_impossible_input(args, message):
    with pytest.raises(ValueError, match=message):
        is_stale(*args)

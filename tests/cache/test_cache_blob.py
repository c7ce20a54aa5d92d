"""Blob format: safetensors round trip, zero-copy load, checksum and parameter checks."""

from __future__ import annotations

import dataclasses
import json
import struct

import numpy as np
import pytest
from safetensors import safe_open
from video_samples import make_image, make_video

from easyvideor1.cache.blob import decode_blob, encode_blob, read_header
from easyvideor1.cache.key import HashIndex, cache_key, make_key
from easyvideor1.errors import CacheError, CacheMismatchError
from easyvideor1.video import ImageParams, VideoParams, decode_video, load_image

SMALL = VideoParams(min_pixels=28 * 28, max_pixels=64 * 64)


@pytest.fixture()
def video_blob(tmp_path):
    path = make_video(tmp_path / "clip.mp4", count=20)
    frames, meta = decode_video(path, SMALL)
    key = cache_key(path, SMALL, index=HashIndex(tmp_path / "idx"))
    return frames, meta, key, encode_blob(frames, meta, key)


def test_round_trip_is_exact_and_zero_copy(video_blob):
    frames, meta, key, blob = video_blob
    out, out_meta = decode_blob(blob, key)
    assert np.array_equal(out, frames) and out_meta == meta
    assert out_meta.timestamps == meta.timestamps and out_meta.extra == meta.extra
    assert not out.flags.writeable and not out.flags.owndata  # a view of the blob bytes
    assert np.shares_memory(out, np.frombuffer(blob, dtype=np.uint8))


def test_blob_is_standard_safetensors_with_uint8_frames(video_blob, tmp_path):
    frames, meta, key, blob = video_blob
    path = tmp_path / "blob.safetensors"
    path.write_bytes(blob)
    with safe_open(str(path), framework="numpy") as handle:
        assert handle.get_tensor("frames").dtype == np.uint8
        assert np.array_equal(handle.get_tensor("frames"), frames)
        metadata = handle.metadata()
    assert metadata["evr1.key"] == key.key and metadata["evr1.kind"] == "video"
    assert json.loads(metadata["evr1.params"]) == key.params_dict
    assert json.loads(metadata["evr1.media"])["frame_indices"] == list(meta.frame_indices)
    assert metadata["evr1.checksum"].startswith("blake3:")
    assert b"pickle" not in blob[:200] and len(blob) < frames.nbytes + 4096


def test_image_round_trip(tmp_path):
    path = make_image(tmp_path / "pic.png")
    params = ImageParams(min_pixels=28 * 28, max_pixels=56 * 56)
    array, meta = load_image(path, params)
    key = cache_key(path, params, index=HashIndex(tmp_path / "idx"))
    out, out_meta = decode_blob(encode_blob(array, meta, key), key)
    assert np.array_equal(out, array) and out_meta == meta


def test_flipped_frame_byte_is_detected(video_blob):
    _, _, key, blob = video_blob
    corrupt = bytearray(blob)
    corrupt[-100] ^= 0x01
    with pytest.raises(CacheError, match=f"cache key {key.key}: checksum mismatch"):
        decode_blob(bytes(corrupt), key)


@pytest.mark.parametrize("damage", ["truncate", "header_length", "header_json", "empty"])
def test_structural_damage_is_a_cache_error(video_blob, damage):
    _, _, key, blob = video_blob
    if damage == "truncate":
        data = blob[: len(blob) - 500]
    elif damage == "header_length":
        data = struct.pack("<Q", 1 << 40) + blob[8:]
    elif damage == "header_json":
        data = blob[:8] + b"X" + blob[9:]
    else:
        data = b""
    with pytest.raises(CacheError, match=key.key):
        decode_blob(data, key)


def test_parameter_mismatch_names_the_fields(video_blob, tmp_path):
    _, _, key, blob = video_blob
    other = make_key(key.content_hash, dataclasses.replace(SMALL, fps=1.0, max_frames=32))
    with pytest.raises(CacheMismatchError) as info:
        decode_blob(blob, other)
    text = str(info.value)
    assert other.key in text and "params.fps" in text and "params.max_frames" in text and "key:" in text


def test_content_mismatch_is_refused(video_blob):
    _, _, key, blob = video_blob
    other = make_key("f" * 64, SMALL)
    with pytest.raises(CacheMismatchError, match="content_hash"):
        decode_blob(blob, other)


def test_metadata_must_agree_with_the_frames(video_blob):
    frames, meta, key, _ = video_blob
    wrong = dataclasses.replace(meta, height=meta.height + 28)
    with pytest.raises(CacheError, match="disagrees with metadata"):
        encode_blob(frames, wrong, key)


def test_header_reader_exposes_offsets(video_blob):
    frames, _, _, blob = video_blob
    header, start = read_header(blob)
    assert header["frames"]["shape"] == list(frames.shape)
    assert start % 8 == 0 and len(blob) == start + frames.nbytes


@pytest.mark.parametrize("entry_patch", [{"shape": ["x", 2]}, {"shape": [-4, 2, 2, 3]},
                                         {"data_offsets": ["a", None]}])
def test_hostile_tensor_entries_are_cache_errors(video_blob, entry_patch):
    _, _, key, data = video_blob
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    name = next(k for k in header if k != "__metadata__")
    header[name].update(entry_patch)
    raw = json.dumps(header).encode()
    raw += b" " * ((8 - len(raw) % 8) % 8)
    tampered = struct.pack("<Q", len(raw)) + raw + data[8 + length:]
    with pytest.raises(CacheError):
        decode_blob(tampered, key)

"""Frame blobs: one safetensors file, a uint8 tensor ``frames`` and JSON metadata.

Layout (the standard safetensors format, readable by ``safetensors.safe_open``):
``u64 little-endian header length | JSON header | raw tensor bytes``. The header's
``__metadata__`` (string -> string) holds, under ``evr1.*`` names, the format version, key,
media kind, content hash, decoder build, the parameters (JSON), the Video/ImageMetadata
(JSON) and ``blake3:<hex>`` of the frame bytes. Never pickle.

Decoding parses the header itself so that the frames are a zero-copy, read-only view of
the given buffer (bytes or an mmap of the local file), then checks every identity field
against the request and the checksum against the bytes.
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any

import blake3
import numpy as np
from safetensors.numpy import save

from easyvideor1.cache.key import FORMAT_VERSION, CacheKey
from easyvideor1.errors import CacheError, CacheMismatchError
from easyvideor1.video.metadata import ImageMetadata, VideoMetadata

TENSOR_NAME = "frames"
_MAX_HEADER_BYTES = 100 << 20  # the safetensors limit; anything larger is corruption


def frame_checksum(frames: np.ndarray | memoryview) -> str:
    return "blake3:" + blake3.blake3(frames).hexdigest()


def encode_blob(frames: np.ndarray, metadata: VideoMetadata | ImageMetadata, key: CacheKey) -> bytes:
    """Serialize frames (uint8, (T,H,W,3) for video, (H,W,3) for an image) for ``key``."""
    frames = np.ascontiguousarray(frames)
    expected_ndim = 4 if key.kind == "video" else 3
    if frames.dtype != np.uint8 or frames.ndim != expected_ndim or frames.shape[-1] != 3:
        raise CacheError(f"cache key {key.key}: frames must be uint8 with {expected_ndim} dims ending in 3, "
                         f"got {frames.dtype} {frames.shape}")
    _check_shape(key.key, frames.shape, metadata)
    meta = {
        "evr1.format_version": str(FORMAT_VERSION),
        "evr1.key": key.key,
        "evr1.kind": key.kind,
        "evr1.content_hash": key.content_hash,
        "evr1.decoder": key.decoder,
        "evr1.params": json.dumps(key.params_dict, sort_keys=True),
        "evr1.media": json.dumps(metadata.as_dict(), sort_keys=True),
        "evr1.checksum": frame_checksum(frames),
    }
    return save({TENSOR_NAME: frames}, metadata=meta)


def read_header(data: Any, where: str = "blob") -> tuple[dict[str, Any], int]:
    """``(header dict, offset of the tensor data)``; raises CacheError when malformed."""
    view = memoryview(data)
    if len(view) < 8:
        raise CacheError(f"{where}: too short to be a frame blob ({len(view)} bytes)")
    (length,) = struct.unpack("<Q", view[:8])
    if length > _MAX_HEADER_BYTES or 8 + length > len(view):
        raise CacheError(f"{where}: corrupt header length {length} for a {len(view)}-byte blob")
    header = load_json(bytes(view[8:8 + length]), where, "header")
    if not isinstance(header, dict) or not isinstance(header.get("__metadata__"), dict):
        raise CacheError(f"{where}: header has no __metadata__; not a frame blob")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in header["__metadata__"].items()):
        raise CacheError(f"{where}: header __metadata__ must map strings to strings")
    return header, 8 + length


def load_json(text: str | bytes, where: str, what: str) -> Any:
    """``json.loads`` whose every failure is a CacheError naming ``what``: malformed JSON, bad
    UTF-8, and nesting too deep for the parser (a RecursionError, which is no ValueError)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise CacheError(f"{where}: {what} JSON is nested too deeply to be a frame blob") from None
    except (UnicodeDecodeError, ValueError, TypeError) as exc:
        raise CacheError(f"{where}: corrupt {what} JSON ({exc})") from None


def blob_metadata(data: Any, where: str = "blob") -> dict[str, str]:
    """The ``evr1.*`` metadata strings, without touching the frame bytes."""
    header, _ = read_header(data, where)
    return header["__metadata__"]


def decode_blob(data: Any, expected: CacheKey, *, verify_checksum: bool = True
                ) -> tuple[np.ndarray, VideoMetadata | ImageMetadata]:
    """Frames (a read-only view of ``data``) and metadata, after checking them against ``expected``.

    Raises CacheMismatchError naming the key and every differing field when the blob was
    built for something else, CacheError when it is corrupt.
    """
    where = f"cache key {expected.key}"
    header, data_start = read_header(data, where)
    meta = header["__metadata__"]
    _check_identity(where, meta, expected)
    entry = header.get(TENSOR_NAME)
    if not isinstance(entry, dict) or entry.get("dtype") != "U8":
        raise CacheError(f"{where}: no uint8 '{TENSOR_NAME}' tensor in the blob")
    try:
        shape = tuple(int(d) for d in entry.get("shape", ()))
        begin, end = (int(x) for x in entry.get("data_offsets", (0, -1)))
    except (TypeError, ValueError) as exc:  # hostile header: never let it escape as a crash
        raise CacheError(f"{where}: malformed tensor entry ({exc})") from None
    if any(d < 0 for d in shape):
        raise CacheError(f"{where}: negative dimension in tensor shape {shape}")
    n_bytes = math.prod(shape) if shape else 0
    total = len(memoryview(data))
    if end - begin != n_bytes or begin < 0 or data_start + end > total:
        raise CacheError(f"{where}: tensor bytes [{begin}, {end}) do not fit shape {shape} in a {total}-byte blob "
                         f"(truncated?)")
    frames = np.frombuffer(data, dtype=np.uint8, count=n_bytes, offset=data_start + begin).reshape(shape)
    if frames.flags.writeable:
        frames.setflags(write=False)
    if verify_checksum:
        actual = frame_checksum(frames)
        if actual != meta.get("evr1.checksum"):
            raise CacheError(f"{where}: checksum mismatch (stored {meta.get('evr1.checksum')}, computed {actual}); "
                             f"the blob is corrupt")
    if not isinstance(meta.get("evr1.media"), str):
        raise CacheError(f"{where}: unreadable media metadata (no evr1.media)")
    media = load_json(meta["evr1.media"], where, "evr1.media")
    try:
        metadata = VideoMetadata.from_dict(media) if expected.kind == "video" else ImageMetadata.from_dict(media)
    except (KeyError, TypeError, ValueError, AttributeError, RecursionError) as exc:
        raise CacheError(f"{where}: unreadable media metadata ({exc})") from None
    _check_shape(expected.key, frames.shape, metadata)
    return frames, metadata


def _check_identity(where: str, meta: dict[str, str], expected: CacheKey) -> None:
    try:
        stored_params = load_json(meta.get("evr1.params", "null"), where, "evr1.params")
    except CacheError:
        stored_params = None
    stored = {
        "format_version": meta.get("evr1.format_version"),
        "key": meta.get("evr1.key"),
        "kind": meta.get("evr1.kind"),
        "content_hash": meta.get("evr1.content_hash"),
        "decoder": meta.get("evr1.decoder"),
    }
    wanted = {"format_version": str(expected.format_version), "key": expected.key, "kind": expected.kind,
              "content_hash": expected.content_hash, "decoder": expected.decoder}
    differences = [f"{name}: blob has {stored[name]!r}, requested {wanted[name]!r}"
                   for name in wanted if stored[name] != wanted[name]]
    if not isinstance(stored_params, dict):
        differences.append("params: missing or unreadable in the blob")
    else:
        for name in sorted(set(stored_params) | set(expected.params_dict)):
            have, want = stored_params.get(name), expected.params_dict.get(name)
            if have != want:
                differences.append(f"params.{name}: blob has {have!r}, requested {want!r}")
    if differences:
        raise CacheMismatchError(f"{where}: the blob does not match the request: " + "; ".join(differences))


def _check_shape(key: str, shape: tuple[int, ...], metadata: VideoMetadata | ImageMetadata) -> None:
    if isinstance(metadata, VideoMetadata):
        expected = (metadata.num_frames, metadata.height, metadata.width, 3)
    else:
        expected = (metadata.height, metadata.width, 3)
    if tuple(shape) != expected:
        raise CacheError(f"cache key {key}: frames shape {tuple(shape)} disagrees with metadata {expected}")

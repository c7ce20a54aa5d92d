"""Blob I/O behind the HTTP routes: sizes, chunked reads, and checks on uploaded blobs
(``verify_upload``: well formed and keyed right; ``verify_against_source``: the frames are
what decoding the source gives).

A local store is read straight from its file in chunks (the size comes from ``fstat`` of
the open file, so a concurrent replace cannot make Content-Length lie). Any other store
(S3) is read with ``get_buffer`` and sent in chunks: the ``FrameStore`` interface has no
ranged or streaming read, so such a blob is held in memory while it is sent, and the app
bounds how many are in flight at once.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import blake3
import numpy as np

from easyvideor1.cache.blob import blob_metadata, decode_blob, load_json
from easyvideor1.cache.key import (
    FORMAT_VERSION,
    IMAGE_DECODER_BUILD,
    VIDEO_DECODER_BUILD,
    CacheKey,
    HashIndex,
    content_hash,
)
from easyvideor1.cache.stores.base import FrameStore, check_key
from easyvideor1.cache.stores.local import LocalStore
from easyvideor1.errors import CacheError, MediaError, StoreError
from easyvideor1.video.decode import decode_video
from easyvideor1.video.image import load_image
from easyvideor1.video.metadata import ImageParams, VideoParams

CHUNK = 1 << 20


@dataclass
class OpenBlob:
    size: int
    chunks: Iterator[bytes]  # a generator: closing it releases the file


def _file_chunks(handle: Any, size: int) -> Iterator[bytes]:
    try:
        remaining = size
        while remaining > 0:
            chunk = handle.read(min(CHUNK, remaining))
            if not chunk:  # truncated under us: stop short; the client sees a short body and retries
                return
            remaining -= len(chunk)
            yield chunk
    finally:
        handle.close()


def _buffer_chunks(buffer: Any) -> Iterator[bytes]:
    view = memoryview(buffer)
    try:
        for start in range(0, len(view), CHUNK):
            yield bytes(view[start:start + CHUNK])
    finally:
        view.release()
        if hasattr(buffer, "close"):  # an mmap
            buffer.close()


def open_blob(store: FrameStore, key: str) -> OpenBlob | None:
    """The blob's size and its bytes in chunks, or None when absent. Raises StoreError."""
    if isinstance(store, LocalStore):
        try:
            handle = open(store.path_for(key), "rb")  # noqa: SIM115 - closed by the generator
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreError(f"local store {store.root}: cannot open key {key}: {exc.strerror or exc}") from None
        size = os.fstat(handle.fileno()).st_size
        return OpenBlob(size, _file_chunks(handle, size))
    buffer = store.get_buffer(key)
    if buffer is None:
        return None
    return OpenBlob(len(memoryview(buffer)), _buffer_chunks(buffer))


def blob_size(store: FrameStore, key: str) -> int | None:
    """Size in bytes, or None when absent (a local stat; other stores read the blob)."""
    if isinstance(store, LocalStore):
        try:
            return os.stat(store.path_for(key)).st_size
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreError(f"local store {store.root}: cannot stat key {key}: {exc.strerror or exc}") from None
    if not store.exists(key):  # a cheap answer for the common miss
        return None
    opened = open_blob(store, key)
    if opened is None:
        return None
    opened.chunks.close()
    return opened.size


def verify_upload(key: str, data: Any) -> CacheKey:
    """Accept only a well-formed frame blob that is really the one ``key`` names.

    Checks: a safetensors header with ``evr1.*`` metadata; its ``evr1.key`` equal to ``key``;
    ``key`` equal to the hash of the identity the blob declares (content hash, kind,
    parameters, decoder, format version), computed as ``cache.key.make_key`` does; and
    ``decode_blob`` against that identity (tensor layout, shape against the metadata, and
    the blake3 checksum of the frame bytes). Returns the declared identity; raises
    CacheError with the reason. This proves the blob is well formed and self-consistent, not
    that its frames are those of the source: a forger recomputes the checksum
    (``verify_against_source`` is what ties the frames to the content hash).
    """
    check_key(key)
    where = f"upload for key {key}"
    meta = blob_metadata(data, where)
    if meta.get("evr1.key") != key:
        raise CacheError(f"{where}: the blob says it is key {meta.get('evr1.key')!r}")
    kind = meta.get("evr1.kind")
    if kind not in ("video", "image"):
        raise CacheError(f"{where}: unknown media kind {kind!r} (expected video or image)")
    try:
        params = load_json(meta["evr1.params"], where, "evr1.params")
        version = int(meta["evr1.format_version"])
        declared = CacheKey("", meta["evr1.content_hash"], params, kind, meta["evr1.decoder"], version)
    except (KeyError, TypeError, ValueError) as exc:
        raise CacheError(f"{where}: incomplete identity metadata ({type(exc).__name__}: {exc})") from None
    if version != FORMAT_VERSION:
        raise CacheError(f"{where}: blob format version {version}, this service stores {FORMAT_VERSION}")
    if not isinstance(params, dict):
        raise CacheError(f"{where}: evr1.params is not a JSON object")
    canonical = json.dumps(declared.identity(), sort_keys=True, separators=(",", ":"))
    if blake3.blake3(canonical.encode()).hexdigest() != key:
        raise CacheError(f"{where}: the key is not the hash of the identity the blob declares "
                         "(content hash, kind, parameters, decoder)")
    identity = CacheKey(key, declared.content_hash, params, kind, declared.decoder, version)
    try:
        decode_blob(data, identity)
    except CacheError:
        raise
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError, RecursionError) as exc:  # hostile
        raise CacheError(f"{where}: malformed tensor header ({type(exc).__name__}: {exc})") from None
    return identity


def same_bytes(stored: Any, data: Any) -> bool:
    """Whether two blobs are byte-identical (blake3 of both: no copies of large buffers)."""
    return len(memoryview(stored)) == len(memoryview(data)) and \
        blake3.blake3(stored).digest() == blake3.blake3(data).digest()


class SourceMismatch(CacheError):
    """The source was found and decoded, and the blob's frames or metadata are not its frames."""


def find_source(identity: CacheKey, roots: Sequence[str], hint: str | None, index: HashIndex) -> str | None:
    """A file under ``roots`` whose bytes hash to the blob's content hash, or None.

    ``hint`` (the uploader's ``X-Evr1-Source``: an absolute path or one relative to a root)
    is tried first, then the files the service's hash index already knows with that hash
    (media it built). Every candidate is resolved (symlinks, ``..``) and must lie under a
    root; its content hash is recomputed through the index (which re-hashes a changed file),
    so a path only counts when its current bytes are the ones the key names.
    """
    resolved_roots = [os.path.realpath(r) for r in roots]
    if not resolved_roots:
        return None
    candidates: list[str] = []
    if hint:
        candidates += [hint] if os.path.isabs(hint) else [os.path.join(r, hint) for r in resolved_roots]
    candidates += _indexed_paths(index, identity.content_hash)
    for candidate in candidates:
        real = os.path.realpath(candidate)
        if not any(real == r or real.startswith(r.rstrip(os.sep) + os.sep) for r in resolved_roots):
            continue
        try:
            if os.path.isfile(real) and content_hash(real, index=index) == identity.content_hash:
                return real
        except MediaError:
            continue
    return None


def _indexed_paths(index: HashIndex, digest: str, limit: int = 8) -> list[str]:
    """Paths the hash index recorded with ``digest`` (read-only; none when it cannot be read)."""
    if not index.path.is_file():
        return []
    try:
        db = sqlite3.connect(f"file:{index.path}?mode=ro", uri=True, timeout=5)
        try:
            rows = db.execute("SELECT realpath FROM files WHERE hash = ? LIMIT ?", (digest, limit)).fetchall()
        finally:
            db.close()
    except sqlite3.Error:
        return []
    return [row[0] for row in rows]


def can_decode_here(identity: CacheKey) -> str | None:
    """None when this service decodes the identity's frames exactly as the builder did, else why not."""
    ours = VIDEO_DECODER_BUILD if identity.kind == "video" else IMAGE_DECODER_BUILD
    if identity.decoder != ours:
        return f"built by decoder {identity.decoder!r}, this service decodes with {ours!r}"
    try:
        params_of(identity)
    except (TypeError, ValueError) as exc:
        return f"parameters this service does not know ({exc})"
    return None


def params_of(identity: CacheKey) -> VideoParams | ImageParams:
    cls = VideoParams if identity.kind == "video" else ImageParams
    return cls(**identity.params_dict)


def sample_indices(count: int, wanted: int) -> list[int]:
    """``wanted`` indices of ``count`` frames: the first, the last and evenly between."""
    if count <= wanted:
        return list(range(count))
    if wanted == 1:
        return [0]
    return sorted({round(i * (count - 1) / (wanted - 1)) for i in range(wanted)})


def verify_against_source(data: Any, identity: CacheKey, source: str, frames_to_compare: int) -> dict[str, Any]:
    """Decode ``source`` with the blob's parameters and compare: the metadata (sampled frame
    indices, timestamps, sizes, ...) must be equal and the sampled frames pixel-exact (the
    project's decoding is deterministic for one decoder build). Raises SourceMismatch.
    Returns what was compared."""
    where = f"upload for key {identity.key}"
    frames, metadata = decode_blob(data, identity)
    params = params_of(identity)
    try:
        if identity.kind == "video":
            expected, expected_meta = decode_video(source, params)
        else:
            expected, expected_meta = load_image(source, params)
    except MediaError as exc:
        raise CacheError(f"{where}: its source {source} cannot be decoded to verify it: {exc}") from None
    if metadata != expected_meta:
        raise SourceMismatch(f"{where}: the blob's metadata is not what decoding its source {source} gives")
    if frames.shape != expected.shape:
        raise SourceMismatch(f"{where}: frames shape {frames.shape}, decoding its source gives {expected.shape}")
    if identity.kind == "video":
        picked = sample_indices(frames.shape[0], frames_to_compare)
        differing = [i for i in picked if not np.array_equal(frames[i], expected[i])]
    else:
        picked = [0]
        differing = [] if np.array_equal(frames, expected) else [0]
    if differing:
        raise SourceMismatch(f"{where}: frame(s) {differing} differ from decoding its source {source} "
                             f"(compared frames {picked}, pixel-exact)")
    return {"source": source, "frames_compared": picked}

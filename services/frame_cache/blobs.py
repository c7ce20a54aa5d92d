"""Blob I/O behind the HTTP routes: sizes, chunked reads, and checks on uploaded blobs.

A local store is read straight from its file in chunks (the size comes from ``fstat`` of
the open file, so a concurrent replace cannot make Content-Length lie). Any other store
(S3) is read with ``get_buffer`` and sent in chunks: the ``FrameStore`` interface has no
ranged or streaming read, so such a blob is held in memory while it is sent, and the app
bounds how many are in flight at once.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import blake3

from easyvideor1.cache.blob import blob_metadata, decode_blob
from easyvideor1.cache.key import FORMAT_VERSION, CacheKey
from easyvideor1.cache.stores.base import FrameStore, check_key
from easyvideor1.cache.stores.local import LocalStore
from easyvideor1.errors import CacheError, StoreError

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


def verify_upload(key: str, data: bytes) -> None:
    """Accept only a well-formed frame blob that is really the one ``key`` names.

    Checks: a safetensors header with ``evr1.*`` metadata; its ``evr1.key`` equal to ``key``;
    ``key`` equal to the hash of the identity the blob declares (content hash, kind,
    parameters, decoder, format version), computed as ``cache.key.make_key`` does; and
    ``decode_blob`` against that identity (tensor layout, shape against the metadata, and
    the blake3 checksum of the frame bytes). Raises CacheError with the reason.
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
        params = json.loads(meta["evr1.params"])
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
    try:
        decode_blob(data, CacheKey(key, declared.content_hash, params, kind, declared.decoder, version))
    except CacheError:
        raise
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:  # a hostile tensor entry
        raise CacheError(f"{where}: malformed tensor header ({type(exc).__name__}: {exc})") from None

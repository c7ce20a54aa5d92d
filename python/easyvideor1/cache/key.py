"""Cache keys: the content of the file plus every parameter that shapes the frames.

``content_hash`` is a streaming blake3 of the file's bytes. Re-hashing every video on every
load would cost as much I/O as decoding, so a persistent index remembers hashes, keyed by
``(realpath, dev, inode, size, mtime_ns, ctime_ns)``. An entry is trusted only when the
file's mtime was at least ``RACY_WINDOW_NS`` older than the moment hashing *started* (the
"racy timestamp" rule, as in git's index): a file written in the same clock tick as the
hash could be rewritten with the same size and timestamps, so such entries are re-hashed
until they age. ``ctime`` (which no user call can set) catches an mtime reset by hand.

The key is blake3 over a canonical JSON of: format version, media kind, content hash,
all sampling/resizing parameters, and the decoder build. The path is not in it: the same
video under two paths is built once. A clip window (``VideoParams.start_s``/``end_s``) is
among the parameters when set and absent when not, so whole-video keys are those of
before windows existed and a clip never shares a key with the whole video.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import av
import blake3

from easyvideor1.errors import MediaDecodeError, MediaMissingError
from easyvideor1.logging import event, get_logger
from easyvideor1.video.decode import DECODER_NAME
from easyvideor1.video.files import check_media_file
from easyvideor1.video.image import IMAGE_DECODER_NAME
from easyvideor1.video.metadata import ImageParams, VideoParams

FORMAT_VERSION = 1
RACY_WINDOW_NS = 2_000_000_000
_CHUNK = 4 << 20
_log = get_logger("cache.key")

# The frames depend on the FFmpeg libraries actually loaded (decoder, swscale), not only PyAV.
_LIBAV = av.library_versions
VIDEO_DECODER_BUILD = (f"{DECODER_NAME}+lavc{'.'.join(map(str, _LIBAV['libavcodec']))}"
                       f"+sws{'.'.join(map(str, _LIBAV['libswscale']))}")
IMAGE_DECODER_BUILD = IMAGE_DECODER_NAME  # Pillow wheels pin their codec libraries


@dataclass(frozen=True, eq=True)
class CacheKey:
    """A key and what it was derived from (the blob stores the same fields to check against)."""

    key: str
    content_hash: str
    params_dict: dict[str, Any]
    kind: str  # "video" or "image"
    decoder: str
    format_version: int = FORMAT_VERSION
    path: str = field(default="", compare=False)  # for messages only; not part of the identity

    def __hash__(self) -> int:
        return hash(self.key)

    def identity(self) -> dict[str, Any]:
        return {"format_version": self.format_version, "kind": self.kind, "content_hash": self.content_hash,
                "params": self.params_dict, "decoder": self.decoder}


def media_kind(params: VideoParams | ImageParams) -> str:
    if isinstance(params, VideoParams):
        return "video"
    if isinstance(params, ImageParams):
        return "image"
    raise TypeError(f"params must be VideoParams or ImageParams, got {type(params).__name__}")


def canonical_params(params: VideoParams | ImageParams) -> dict[str, Any]:
    """``as_dict`` with every value coerced to its declared type: fps=2 and fps=2.0 are one key."""
    declared = {f.name: f.type for f in dataclasses.fields(params)}
    out: dict[str, Any] = {}
    for name, value in params.as_dict().items():
        kind = declared.get(name)
        if kind in (float, "float") and not isinstance(value, bool):
            value = float(value)
        elif kind in (int, "int") and not isinstance(value, bool):
            value = int(value)
        out[name] = value
    return out


def make_key(content: str, params: VideoParams | ImageParams, path: str = "") -> CacheKey:
    kind = media_kind(params)
    decoder = VIDEO_DECODER_BUILD if kind == "video" else IMAGE_DECODER_BUILD
    params_dict = canonical_params(params)
    partial = CacheKey("", content, params_dict, kind, decoder, FORMAT_VERSION, path)
    canonical = json.dumps(partial.identity(), sort_keys=True, separators=(",", ":"))
    digest = blake3.blake3(canonical.encode()).hexdigest()
    return CacheKey(digest, content, params_dict, kind, decoder, FORMAT_VERSION, path)


def cache_key(path: str | os.PathLike, params: VideoParams | ImageParams, *,
              index: HashIndex | None = None) -> CacheKey:
    """The key of ``path`` decoded with ``params`` (raises MediaMissingError/MediaDecodeError)."""
    path = os.fspath(path)
    return make_key(content_hash(path, index=index), params, path)


def content_hash(path: str | os.PathLike, *, index: HashIndex | None = None) -> str:
    """blake3 of the file's bytes (hex), served from ``index`` only when provably unchanged."""
    path = os.fspath(path)
    index = index if index is not None else default_hash_index()
    check_media_file(path)
    real = os.path.realpath(path)
    for _attempt in range(3):
        before = _signature(path)
        known = index.lookup(real, before)
        if known is not None:
            return known
        started_ns = time.time_ns()
        digest = _hash_file(path)
        after = _signature(path)
        if after == before:
            index.record(real, before, digest, started_ns)
            return digest
    raise MediaDecodeError(path, "the file kept changing while it was being hashed")


def _signature(path: str) -> tuple[int, int, int, int, int]:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise MediaMissingError(path, "no such file") from None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _hash_file(path: str) -> str:
    hasher = blake3.blake3()
    buffer = bytearray(_CHUNK)
    view = memoryview(buffer)
    try:
        with open(path, "rb", buffering=0) as handle:
            while True:
                n = handle.readinto(buffer)
                if not n:
                    break
                hasher.update(view[:n])
    except FileNotFoundError:
        raise MediaMissingError(path, "no such file") from None
    except OSError as exc:
        raise MediaDecodeError(path, f"cannot read: {exc.strerror or exc}") from None
    return hasher.hexdigest()


class HashIndex:
    """Persistent ``stat signature -> content hash`` map in sqlite, safe across processes.

    An index that cannot be opened or written (read-only disk, locked too long) degrades to
    hashing every time: a slower answer, never a wrong one.
    """

    def __init__(self, directory: str | os.PathLike):
        self.path = Path(directory) / "hash-index.sqlite"
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self._disabled = False

    def _connect(self) -> sqlite3.Connection | None:
        if self._db is None and not self._disabled:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                db = sqlite3.connect(self.path, timeout=30, check_same_thread=False, isolation_level=None)
                db.execute("CREATE TABLE IF NOT EXISTS files (realpath TEXT PRIMARY KEY, dev INTEGER, "
                           "ino INTEGER, size INTEGER, mtime_ns INTEGER, ctime_ns INTEGER, "
                           "hashed_at_ns INTEGER, hash TEXT)")
                self._db = db
            except (OSError, sqlite3.Error) as exc:
                self._disable(exc)
        return self._db

    def _disable(self, exc: Exception) -> None:
        self._disabled = True
        event(_log, "hash_index_disabled", path=str(self.path), reason=str(exc))

    def lookup(self, realpath: str, signature: tuple[int, int, int, int, int]) -> str | None:
        """The recorded hash, or None when absent, different or still within the racy window."""
        with self._lock:
            db = self._connect()
            if db is None:
                return None
            try:
                row = db.execute("SELECT dev, ino, size, mtime_ns, ctime_ns, hashed_at_ns, hash FROM files "
                                 "WHERE realpath = ?", (realpath,)).fetchone()
            except sqlite3.Error as exc:
                self._disable(exc)
                return None
        if row is None or tuple(row[:5]) != tuple(signature):
            return None
        mtime_ns, hashed_at_ns = row[3], row[5]
        if hashed_at_ns - mtime_ns < RACY_WINDOW_NS:
            return None
        return row[6]

    def record(self, realpath: str, signature: tuple[int, int, int, int, int], digest: str,
               hashed_at_ns: int) -> None:
        with self._lock:
            db = self._connect()
            if db is None:
                return
            try:
                db.execute("INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                           (realpath, *signature, hashed_at_ns, digest))
            except sqlite3.Error as exc:
                self._disable(exc)

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None


_default_indexes: dict[str, HashIndex] = {}
_default_lock = threading.Lock()


def default_index_dir() -> Path:
    configured = os.environ.get("EVR1_HASH_INDEX_DIR")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "easyvideor1"


def hash_index_at(directory: str | os.PathLike) -> HashIndex:
    """One shared index object per directory and process."""
    directory = os.path.abspath(directory)
    with _default_lock:
        index = _default_indexes.get(directory)
        if index is None:
            index = _default_indexes[directory] = HashIndex(directory)
        return index


def default_hash_index() -> HashIndex:
    """The index under ``$EVR1_HASH_INDEX_DIR`` (else ``~/.cache/easyvideor1``)."""
    return hash_index_at(default_index_dir())

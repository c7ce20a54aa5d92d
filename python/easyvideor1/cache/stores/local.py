"""A frame store in a local (or network-mounted) directory.

Layout under the root::

    objects/ab/<key>.safetensors      blobs, sharded by the key's first two hex digits
    objects/ab/.tmp-<key>-<pid>-<n>   a write in progress (never read; removed on failure)
    locks/ab/<key>.lock               held with fcntl.flock while a process builds <key>
    index/hash-index.sqlite           the content-hash index used with this store

Writes go to a temporary file in the blob's own directory, are fsynced, then renamed over
the final name (``os.replace`` is atomic), and the directory is fsynced: a reader sees the
whole blob or none, never a torn one, and a crash leaves at worst a stray temporary file.
Reads map the file read-only, so loading is zero-copy; a later replace or delete does not
disturb a mapping already open (it keeps the old inode alive).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import itertools
import mmap
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from easyvideor1.cache.stores.base import BLOB_SUFFIX, FrameStore, StoreStats, check_key, shard_name
from easyvideor1.errors import StoreError

_counter = itertools.count()
_MAP_FLAGS = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)  # prefault: one syscall, no page faults


class LocalStore(FrameStore):
    def __init__(self, root: str | os.PathLike, *, create: bool = True):
        super().__init__()
        self.root = Path(os.path.abspath(os.fspath(root)))
        self.url = f"file://{self.root}"
        self.objects = self.root / "objects"
        self.locks = self.root / "locks"
        self.index_dir = self.root / "index"
        try:
            if create:
                self.objects.mkdir(parents=True, exist_ok=True)
                self.locks.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"local store {self.root}: cannot create directories: {exc.strerror or exc}") from None
        if not self.objects.is_dir():
            raise StoreError(f"local store {self.root}: not a frame store (no objects/ directory)")

    def path_for(self, key: str) -> Path:
        """Where the blob of ``key`` lives (it may not exist)."""
        return self.objects / shard_name(check_key(key))

    def get(self, key: str) -> bytes | None:
        try:
            return self.path_for(key).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreError(f"local store {self.root}: cannot read key {key}: {exc.strerror or exc}") from None

    def get_buffer(self, key: str) -> Any | None:
        """A read-only mmap of the blob (zero-copy), or None when absent."""
        path = self.path_for(key)
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreError(f"local store {self.root}: cannot open key {key}: {exc.strerror or exc}") from None
        try:
            size = os.fstat(fd).st_size
            if size == 0:
                return b""
            return mmap.mmap(fd, size, flags=_MAP_FLAGS, prot=mmap.PROT_READ)
        except OSError as exc:
            raise StoreError(f"local store {self.root}: cannot map key {key}: {exc.strerror or exc}") from None
        finally:
            os.close(fd)

    def read_head(self, key: str, size: int = 1 << 16) -> bytes | None:
        try:
            with open(self.path_for(key), "rb") as handle:
                head = handle.read(size)
                if len(head) >= 8:
                    needed = 8 + int.from_bytes(head[:8], "little")
                    if needed > len(head) and needed < (100 << 20):
                        head += handle.read(needed - len(head))
                return head
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreError(f"local store {self.root}: cannot read key {key}: {exc.strerror or exc}") from None

    def put(self, key: str, data: bytes) -> None:
        final = self.path_for(key)
        temp = self._write_temp(key, final, data)
        try:
            os.replace(temp, final)
            _fsync_dir(final.parent)
        except OSError as exc:
            with contextlib.suppress(OSError):
                temp.unlink()
            raise StoreError(f"local store {self.root}: cannot write key {key}: {exc.strerror or exc}") from None

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Store ``data`` only if no blob of ``key`` exists, atomically: True when stored,
        False when one was already there (nothing written).

        The fsynced temporary file is hard-linked to the final name: ``link`` fails with
        EEXIST when the name exists, so of two concurrent writers (threads, processes or
        hosts sharing the directory) exactly one creates the blob and a reader never sees a
        torn one. A filesystem without hard links falls back to the key's flock and a recheck.
        """
        final = self.path_for(key)
        temp = self._write_temp(key, final, data)
        try:
            try:
                os.link(temp, final)
                created = True
            except FileExistsError:
                created = False
            except OSError as exc:
                if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK, errno.EXDEV):
                    raise
                with self._build_lock(key):
                    created = not final.exists()
                    if created:
                        os.replace(temp, final)
            if created:
                _fsync_dir(final.parent)
            return created
        except OSError as exc:
            raise StoreError(f"local store {self.root}: cannot write key {key}: {exc.strerror or exc}") from None
        finally:
            with contextlib.suppress(OSError):
                temp.unlink()

    def _write_temp(self, key: str, final: Path, data: Any) -> Path:
        temp = final.parent / f".tmp-{key}-{os.getpid()}-{next(_counter)}"
        try:
            final.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                view = memoryview(data)
                while view:
                    written = os.write(fd, view)
                    view = view[written:]
                os.fsync(fd)
            finally:
                os.close(fd)
            return temp
        except OSError as exc:
            with contextlib.suppress(OSError):
                temp.unlink()
            raise StoreError(f"local store {self.root}: cannot write key {key}: {exc.strerror or exc}") from None

    def exists(self, key: str) -> bool:
        return self.path_for(key).is_file()

    def delete(self, key: str) -> bool:
        try:
            self.path_for(key).unlink()
            return True
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise StoreError(f"local store {self.root}: cannot delete key {key}: {exc.strerror or exc}") from None

    def keys(self) -> Iterator[str]:
        for key, _size in self._entries():
            yield key

    def _entries(self) -> Iterator[tuple[str, int]]:
        if not self.objects.is_dir():
            return
        for shard in sorted(os.scandir(self.objects), key=lambda e: e.name):
            if not shard.is_dir():
                continue
            for entry in sorted(os.scandir(shard.path), key=lambda e: e.name):
                if entry.name.endswith(BLOB_SUFFIX) and not entry.name.startswith("."):
                    with contextlib.suppress(FileNotFoundError):
                        yield entry.name[: -len(BLOB_SUFFIX)], entry.stat().st_size

    def stats(self) -> StoreStats:
        count = total = 0
        for _key, size in self._entries():
            count += 1
            total += size
        return StoreStats(count, total, self.url)

    @contextlib.contextmanager
    def _build_lock(self, key: str) -> Iterator[None]:
        """An exclusive flock on ``locks/ab/<key>.lock``; the file is removed when released.

        After locking, the path must still name the locked inode: otherwise the previous
        holder removed it while we waited, and we lock the new file instead.
        """
        path = self.locks / f"{key[:2]}/{key}.lock"
        path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                current = os.stat(path)
            except FileNotFoundError:
                os.close(fd)
                continue
            except BaseException:
                os.close(fd)
                raise
            if current.st_ino == os.fstat(fd).st_ino:
                break
            os.close(fd)
        try:
            yield
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            os.close(fd)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

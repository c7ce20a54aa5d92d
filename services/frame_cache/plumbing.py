"""HTTP plumbing of the frame-cache app: request metrics, bounded (spooled) bodies, upload slots,
per-key upload locks, single-flight probes."""

from __future__ import annotations

import asyncio
import contextlib
import mmap
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from fastapi import HTTPException, Request
from starlette.requests import ClientDisconnect

from easyvideor1.errors import StoreError
from easyvideor1.queue import QueueError
from services.frame_cache.metrics import FrameCacheMetrics


class RequestMetrics:
    """Count every request by route template, method and status; time it to its last byte.

    Pure ASGI (not BaseHTTPMiddleware) so a streamed blob is timed until it was sent.
    """

    def __init__(self, app: Any, metrics: FrameCacheMetrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        began = time.perf_counter()
        status = 500

        async def record_status(message: dict) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, record_status)
        finally:
            # The template, never the raw path: keys and build ids must not become label values.
            route = getattr(scope.get("route"), "path", "unmatched")
            self.metrics.requests.labels(route, scope["method"], str(status)).inc()
            self.metrics.request_seconds.labels(route, scope["method"]).observe(time.perf_counter() - began)


async def single_flight_check(check: Any, timeout: float, what: str, running: dict[str, asyncio.Future]) -> str | None:
    """Run a blocking check in a thread, at most one per ``what``: a probe that hangs (an
    unreachable S3 endpoint retrying) is waited on again, not started again, so repeated
    probes never pile up threads."""
    pending = running.get(what)
    if pending is None or pending.done():
        pending = running[what] = asyncio.ensure_future(asyncio.to_thread(check))
    try:
        await asyncio.wait_for(asyncio.shield(pending), timeout)
    except TimeoutError:
        return f"{what}: no answer within {timeout:g}s"
    except (StoreError, QueueError) as exc:
        return f"{what}: {exc}"
    return None


def _refuse_declared(request: Request, limit: int, option: str) -> int | None:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise HTTPException(413, f"request body of {declared} bytes exceeds the limit of {limit} bytes ({option})")
    return int(declared) if declared is not None and declared.isdigit() else None


def _too_large(limit: int, option: str) -> HTTPException:
    return HTTPException(413, f"request body of more than {limit} bytes exceeds the limit ({option})",
                         headers={"Connection": "close"})


async def read_body(request: Request, limit: int, option: str) -> bytes:
    """The whole body, in memory; 413 as soon as it passes ``limit`` (a declared
    Content-Length above it is refused before a byte is read)."""
    _refuse_declared(request, limit, option)
    body = bytearray()
    try:
        async for chunk in request.stream():
            if len(body) + len(chunk) > limit:
                raise _too_large(limit, option)
            body += chunk
    except ClientDisconnect:
        raise HTTPException(400, "client disconnected while sending the body") from None
    return bytes(body)


SPOOL_AT = 8 << 20  # a blob body above this goes to an unlinked temporary file, not memory
_FLUSH = 4 << 20  # bytes gathered before a write to the spool file (in a thread)


class Body:
    """A received blob: ``data`` is the bytes in memory, or a read-only mmap of the spooled
    (unlinked) temporary file. ``close()`` releases the file."""

    def __init__(self, data: Any, size: int, spool: Any = None):
        self.data, self.size, self._spool = data, size, spool

    @property
    def spooled(self) -> bool:
        return self._spool is not None

    def close(self) -> None:
        if isinstance(self.data, mmap.mmap):
            with contextlib.suppress(BufferError):  # a view still exported: the GC closes it
                self.data.close()
        if self._spool is not None:
            self._spool.close()
            self._spool = None


async def read_blob_body(request: Request, limit: int, option: str, spool_dir: str | None) -> Body:
    """A PUT body of at most ``limit`` bytes, refused (413) the moment it passes the limit.

    Up to ``SPOOL_AT`` bytes are kept in memory; a larger body is written to an unlinked
    temporary file in ``spool_dir`` as it arrives (4 MiB at a time, in a thread, so the
    event loop keeps answering) and mapped read-only once complete. So however large the
    upload, the service holds a few MiB of it in memory, and an oversized one never more.
    """
    _refuse_declared(request, limit, option)
    pending = bytearray()
    spool = None
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise _too_large(limit, option)
            pending += chunk
            if size > SPOOL_AT and len(pending) >= _FLUSH:
                if spool is None:
                    spool = await asyncio.to_thread(tempfile.TemporaryFile, prefix=".evr1-upload-", dir=spool_dir)
                await asyncio.to_thread(spool.write, pending)
                pending = bytearray()
        if spool is None:
            return Body(pending, size)
        if pending:
            await asyncio.to_thread(spool.write, pending)
        await asyncio.to_thread(spool.flush)
        mapped = mmap.mmap(spool.fileno(), size, prot=mmap.PROT_READ) if size else b""
        body, spool = Body(mapped, size, spool), None
        return body
    except ClientDisconnect:
        raise HTTPException(400, "client disconnected while sending the body") from None
    except OSError as exc:
        raise HTTPException(503, f"cannot spool the upload to {spool_dir or tempfile.gettempdir()}: "
                                 f"{exc.strerror or exc}") from None
    finally:
        if spool is not None:
            spool.close()


class UploadSlots:
    """At most ``limit`` uploads received and checked at once (one event loop: a plain count).
    Beyond it a PUT is answered 503 with Retry-After before its body is read."""

    def __init__(self, limit: int, gauge: Any = None):
        self.limit, self.busy, self._gauge = limit, 0, gauge

    @contextlib.contextmanager
    def take(self) -> Iterator[None]:
        if self.busy >= self.limit:
            raise HTTPException(503, f"{self.busy} uploads are in progress, the limit "
                                     f"(serve.frame_cache.max_concurrent_uploads) is {self.limit}; retry later",
                                headers={"Retry-After": "1", "Connection": "close"})
        self.busy += 1
        if self._gauge is not None:
            self._gauge.set(self.busy)
        try:
            yield
        finally:
            self.busy -= 1
            if self._gauge is not None:
                self._gauge.set(self.busy)


class KeyLocks:
    """One asyncio lock per key while anyone holds or waits for it: uploads of one key in this
    process are checked and stored one after the other (the store's create-if-absent makes
    it hold across processes too)."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @contextlib.asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(key, (None, 0))
        if lock is None:
            lock = asyncio.Lock()
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users <= 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)

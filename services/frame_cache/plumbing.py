"""HTTP plumbing of the frame-cache app: request metrics, bounded bodies, single-flight probes."""

from __future__ import annotations

import asyncio
import time
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


async def read_body(request: Request, limit: int, option: str) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise HTTPException(413, f"request body of {declared} bytes exceeds the limit of {limit} bytes ({option})")
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise HTTPException(413, f"request body of more than {limit} bytes exceeds the limit ({option})")
            chunks.append(chunk)
    except ClientDisconnect:
        raise HTTPException(400, "client disconnected while sending the body") from None
    return b"".join(chunks)

"""FastAPI app of the frame-cache service: ``create_app(cfg)`` (the run config's ``serve.frame_cache``).

Blobs: ``GET``/``HEAD``/``PUT``/``DELETE /v1/blobs/{key}``, ``GET /v1/keys`` (one key per
line, streamed), ``GET /v1/stats``. Three credentials: read (every read), write (PUT: first
write of a key wins, later PUTs of other bytes are 409) and admin (DELETE and PUT
``?replace=true``, logged); an upload is verified against its key and, where the service can
reach its source under ``serve.frame_cache.source_roots``, against the decoded source frames.
Builds: ``POST /v1/builds`` (202, queued on the work queue), ``GET /v1/builds/{build_id}``. Video
tools: ``POST /v1/tools/window``, ``POST /v1/tools/crop`` (services/frame_cache/tools.py). Operations: ``/healthz``, ``/readyz`` (store and
queue reachable), ``/metrics``. Store calls block, so they run in threads; errors are
4xx with a reason for bad input and 503 when the store or queue cannot be reached.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import os
import time
import uuid
from collections.abc import Iterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import ValidationError

from easyvideor1 import __version__
from easyvideor1.cache.loader import index_for_store
from easyvideor1.cache.stores.base import FrameStore, check_key, open_store
from easyvideor1.cache.stores.local import LocalStore
from easyvideor1.config.schema import FrameCacheServiceConfig, RunConfig
from easyvideor1.errors import CacheError, ConfigError, StoreError
from easyvideor1.logging import event, get_logger
from easyvideor1.queue import QueueError, ResultTimeoutError, TaskDeadLetteredError
from services.auth import check_distinct, resolve_token
from services.frame_cache import builds, schemas, tools
from services.frame_cache.blobs import (
    SourceMismatch,
    blob_size,
    can_decode_here,
    find_source,
    open_blob,
    same_bytes,
    verify_against_source,
    verify_upload,
)
from services.frame_cache.board import open_build_board
from services.frame_cache.metrics import FrameCacheMetrics
from services.frame_cache.plumbing import (
    Body,
    KeyLocks,
    RequestMetrics,
    UploadSlots,
    read_blob_body,
    read_body,
    single_flight_check,
)
from services.frame_cache.worker import BuildSettings, BuildWorkers, QueueHandle, QueueSettings

_log = get_logger("services.frame_cache")
_PROBE_KEY = "0" * 64  # readiness asks the store about a key that no content hashes to
_KEYS_PER_CHUNK = 1000


READY_TIMEOUT_S = 3.0  # both readiness checks run at once, inside a 5 s probe timeout
WRITE_TOKEN_ENV = "EVR1_FRAME_CACHE_WRITE_TOKEN"
ADMIN_TOKEN_ENV = "EVR1_FRAME_CACHE_ADMIN_TOKEN"
SOURCE_HEADER = "x-evr1-source"
_FROM_CONFIG: Any = object()  # write/admin tokens: resolved from serve.frame_cache unless given


def queue_settings(fc: FrameCacheServiceConfig) -> QueueSettings:
    return QueueSettings(url=fc.queue_url, namespace=fc.namespace, lease_s=fc.build_lease_s,
                         max_attempts=fc.build_attempts)


def create_app(cfg: RunConfig, *, token: str | None = None, write_token: str | None = _FROM_CONFIG,
               admin_token: str | None = _FROM_CONFIG, store_options: dict[str, Any] | None = None) -> FastAPI:
    """The service of ``cfg.serve.frame_cache`` over the store ``cfg.data.frame_cache.store``.

    ``token``: the read credential, needed for everything but /healthz and /readyz (None:
    reads are open). ``write_token`` (PUT) and ``admin_token`` (DELETE, PUT ?replace=true)
    default to ``serve.frame_cache.write_token_env``/``admin_token_env``, else
    ``$EVR1_FRAME_CACHE_WRITE_TOKEN``/``$EVR1_FRAME_CACHE_ADMIN_TOKEN``. With no token at
    all, PUT is open (a development service); with any token, PUT needs the write (or admin)
    credential. Without an admin token there are no admin operations."""
    settings, store_url, store_options = cfg.serve.frame_cache, cfg.data.frame_cache.store, dict(store_options or {})
    if not store_url:
        raise ConfigError("the frame-cache service needs data.frame_cache.store")
    if write_token is _FROM_CONFIG:
        write_token = resolve_token(settings.write_token_env, WRITE_TOKEN_ENV)
    if admin_token is _FROM_CONFIG:
        admin_token = resolve_token(settings.admin_token_env, ADMIN_TOKEN_ENV)
    tokens = {"admin": admin_token, "write": write_token, "read": token}
    check_distinct(tokens)
    secured = any(tokens.values())
    source_roots = list(settings.source_roots or getattr(settings, "data_roots", None) or [])
    for root in source_roots:
        if not os.path.isabs(root) or not os.path.isdir(root):
            raise ConfigError(f"serve.frame_cache.source_roots: {root!r} is not an absolute directory")
    queue_cfg = queue_settings(settings)
    metrics = FrameCacheMetrics()
    store: FrameStore = open_store(store_url, **store_options)
    board = open_build_board(queue_cfg.url, queue_cfg.namespace)
    queue = QueueHandle(queue_cfg)
    workers = BuildWorkers(settings.build_workers, queue_cfg,
                           BuildSettings(store_url, store_options, settings.build_processes,
                                         settings.file_timeout_s), board, metrics)
    reads = asyncio.Semaphore(settings.max_concurrent_reads)
    probes: dict[str, asyncio.Future] = {}
    uploads = UploadSlots(settings.max_concurrent_uploads, metrics.uploads_in_flight)
    key_locks = KeyLocks()
    index = index_for_store(store)
    spool_dir = str(store.root) if isinstance(store, LocalStore) else None  # a disk, not a tmpfs, when we can
    tool_service = tools.ToolService(cfg, store, index, source_roots, metrics)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        workers.start()
        if settings.build_workers == 0 and queue_cfg.url.startswith("memory://"):
            event(_log, "frame_cache_builds_never_run", logging.WARNING,
                  reason="--build-workers 0 with a memory:// queue: no process can take the builds")
        if not secured and not settings.read_only:
            event(_log, "frame_cache_writes_open", logging.WARNING,
                  reason="no read, write or admin token: anyone who reaches the service can upload blobs "
                         "(each still verified, and first write wins)")
        event(_log, "frame_cache_service_ready", store=store.url, queue=queue_cfg.url,
              build_workers=settings.build_workers, auth=token is not None, write_auth=write_token is not None,
              admin=admin_token is not None, source_roots=source_roots)
        try:
            yield
        finally:
            await asyncio.to_thread(workers.stop, settings.shutdown_grace_s)
            tool_service.close()
            queue.close()
            board.close()
            store.close()
            event(_log, "frame_cache_service_stopped")

    app = FastAPI(title="easyvideor1 frame-cache service", version=__version__, lifespan=lifespan,
                  description="Decoded frame blobs by cache key, and offline cache builds on a work queue.")
    app.state.metrics, app.state.store, app.state.workers = metrics, store, workers
    bearer = HTTPBearer(auto_error=False, description="set when the service runs with a token")

    def role_of(creds: HTTPAuthorizationCredentials | None) -> str | None:
        """admin, write or read for a known token (compared in constant time), else None."""
        if creds is None:
            return None
        presented = creds.credentials.encode()
        found = None
        for role, expected in tokens.items():
            if expected and hmac.compare_digest(presented, expected.encode()):
                found = found or role
        return found

    def unauthorized() -> HTTPException:
        return HTTPException(401, "missing or invalid bearer token", headers={"WWW-Authenticate": "Bearer"})

    def require_token(creds: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:
        if role_of(creds) is None:  # any role may read
            raise unauthorized()

    def may_write(creds: HTTPAuthorizationCredentials | None) -> str:
        """The uploader's role (``open`` on a service without tokens); 401/403 otherwise."""
        if not secured:
            return "open"
        role = role_of(creds)
        if role is None:
            raise unauthorized()
        if role == "read":
            needs = ("the write credential" if write_token else
                     "a write credential, and none is configured (serve.frame_cache.write_token_env or "
                     f"${WRITE_TOKEN_ENV})")
            raise HTTPException(403, f"the read credential cannot write blobs: PUT needs {needs}")
        return role

    def may_administer(creds: HTTPAuthorizationCredentials | None, operation: str) -> str:
        if not admin_token:
            raise HTTPException(403, f"stored blobs are immutable: {operation} is an admin operation and no admin "
                                     f"credential is configured (serve.frame_cache.admin_token_env or "
                                     f"${ADMIN_TOKEN_ENV})")
        role = role_of(creds)
        if role is None:
            raise unauthorized()
        if role != "admin":
            raise HTTPException(403, f"stored blobs are immutable: {operation} needs the admin credential "
                                     f"(this is the {role} credential)")
        return role

    protected = [Depends(require_token)] if token else []
    app.add_middleware(RequestMetrics, metrics=metrics)
    auth = (401,) if token else ()
    write_auth = (401,) if secured else ()

    def store_failed(operation: str, exc: StoreError) -> HTTPException:
        metrics.store_errors.labels(operation).inc()
        event(_log, "frame_store_error", operation=operation, error=str(exc))
        return HTTPException(503, f"frame store unavailable: {exc}")

    blob_route = "/v1/blobs/{key}"

    @app.head(blob_route, dependencies=protected, summary="Whether a blob exists, and its size",
              responses={200: {"description": "present; Content-Length is the blob size"},
                         **schemas.head_responses(400, 404, 503, *auth)})
    async def head_blob(key: str) -> Response:
        valid_key(key)
        try:
            size = await asyncio.to_thread(blob_size, store, key)
        except StoreError as exc:
            raise store_failed("head", exc) from None
        (metrics.blob_misses if size is None else metrics.blob_hits).labels("HEAD").inc()
        if size is None:
            return Response(status_code=404, headers={"X-Reason": f"no blob for key {key}"})
        return Response(status_code=200, headers={"Content-Length": str(size),
                                                  "Content-Type": "application/octet-stream"})

    @app.get(blob_route, dependencies=protected, summary="Stream a blob (safetensors bytes)",
             response_class=Response,
             responses={200: {"content": {"application/octet-stream": {"schema": {"type": "string",
                                                                                   "format": "binary"}}}},
                        **schemas.error_responses(400, 404, 503, *auth)})
    async def get_blob(key: str) -> Response:
        valid_key(key)
        try:
            if isinstance(store, LocalStore):
                opened = await asyncio.to_thread(open_blob, store, key)
            else:
                async with reads:
                    opened = await asyncio.to_thread(open_blob, store, key)
        except StoreError as exc:
            raise store_failed("get", exc) from None
        if opened is None:
            metrics.blob_misses.labels("GET").inc()
            return JSONResponse({"detail": f"no blob for key {key}"}, status_code=404)
        metrics.blob_hits.labels("GET").inc()

        def counted() -> Iterator[bytes]:
            try:
                for chunk in opened.chunks:
                    metrics.bytes_served.inc(len(chunk))
                    yield chunk
            finally:
                opened.chunks.close()

        return StreamingResponse(counted(), media_type="application/octet-stream",
                                 headers={"Content-Length": str(opened.size)})

    @app.put(blob_route, dependencies=protected, status_code=201, response_model=schemas.PutResponse,
             summary="Store a frame blob (first write wins), verified against its key and, where reachable, "
                     "its source",
             description="Needs the write credential (any credential when the service has none); "
                         "`?replace=true` replaces a stored blob and needs the admin credential. An "
                         "`X-Evr1-Source` header may name the source file (absolute, or relative to a "
                         "configured source root) so the service can decode it and compare frames.",
             openapi_extra={"requestBody": {"required": True, "content": {"application/octet-stream": {
                 "schema": {"type": "string", "format": "binary"}}}}},
             responses={200: {"model": schemas.PutResponse, "description": "already stored, byte-identical"},
                        **schemas.error_responses(400, 403, 409, 411, 413, 503, *write_auth)})
    async def put_blob(key: str, request: Request, replace: bool = False,
                       creds: HTTPAuthorizationCredentials | None = Depends(bearer)) -> Any:
        valid_key(key)
        if settings.read_only:
            raise HTTPException(403, "this frame-cache service is read-only (--read-only)")
        role = may_administer(creds, "replacing a stored blob") if replace else may_write(creds)
        with uploads.take():
            body = await read_blob_body(request, settings.max_blob_bytes, "serve.frame_cache.max_blob_bytes",
                                        spool_dir)
            try:
                return await store_upload(key, body, role, replace, request)
            finally:
                body.close()

    async def store_upload(key: str, body: Body, role: str, replace: bool, request: Request) -> Response:
        data, client = body.data, request.client.host if request.client else None
        try:
            identity = await asyncio.to_thread(verify_upload, key, data)
        except CacheError as exc:
            metrics.blob_uploads.labels("rejected").inc()
            raise HTTPException(400, f"rejected: {exc}") from None
        async with key_locks.hold(key):
            try:
                if not replace and await asyncio.to_thread(store.exists, key):
                    return await existing(key, data, client)
                verified = await verify_source(identity, data, role, request.headers.get(SOURCE_HEADER), client)
                if replace:
                    await asyncio.to_thread(store.put, key, data)
                    created = True
                else:
                    created = await asyncio.to_thread(_put_if_absent, store, key, data)
                    if not created:  # another replica stored it between our check and our write
                        return await existing(key, data, client)
            except StoreError as exc:
                raise store_failed("put", exc) from None
        metrics.blob_uploads.labels("replaced" if replace else "stored").inc()
        metrics.bytes_received.inc(body.size)
        if replace:
            metrics.admin_operations.labels("replace").inc()
            event(_log, "frame_blob_replaced", logging.WARNING, key=key, client=client, bytes=body.size,
                  verified=verified)
        return JSONResponse({"key": key, "bytes": body.size, "stored": True, "verified": verified}, status_code=201)

    async def existing(key: str, data: Any, client: str | None) -> Response:
        """The key is stored: 200 when the upload is byte-identical, else 409 (nothing written)."""
        stored = await asyncio.to_thread(store.get_buffer, key)
        if stored is None:  # deleted by an admin meanwhile: the uploader may retry
            raise HTTPException(503, f"key {key} changed while this upload was checked; retry",
                                headers={"Retry-After": "1"})
        try:
            identical = await asyncio.to_thread(same_bytes, stored, data)
        finally:
            if hasattr(stored, "close"):
                stored.close()
        size = len(memoryview(data))
        if identical:
            metrics.blob_uploads.labels("identical").inc()
            return JSONResponse({"key": key, "bytes": size, "stored": False, "verified": "identical"},
                                status_code=200)
        metrics.blob_uploads.labels("conflict").inc()
        event(_log, "frame_blob_conflict", logging.WARNING, key=key, client=client, bytes=size)
        raise HTTPException(409, f"key {key} is already stored with other bytes; stored blobs are immutable "
                                 "(first write wins; replacing needs the admin credential and ?replace=true)")

    async def verify_source(identity: Any, data: Any, role: str, hint: str | None, client: str | None) -> str:
        """``source`` when the frames were compared with the decoded source; ``credential`` or
        ``open`` when the source is out of reach and the upload is accepted on who sent it."""
        reason = "no source roots (serve.frame_cache.source_roots, data_roots) are configured"
        if source_roots:
            reason = can_decode_here(identity)
            if reason is None:
                source = await asyncio.to_thread(find_source, identity, source_roots, hint, index)
                if source is None:
                    reason = "no file under serve.frame_cache.source_roots has its content hash"
                else:
                    try:
                        compared = await asyncio.to_thread(verify_against_source, data, identity, source,
                                                           settings.verify_frames)
                    except CacheError as exc:
                        forged = isinstance(exc, SourceMismatch)
                        metrics.blob_uploads.labels("forged" if forged else "rejected").inc()
                        if forged:
                            event(_log, "frame_blob_forged", logging.WARNING, key=identity.key, client=client,
                                  source=source, reason=str(exc))
                        raise HTTPException(400, f"rejected: {exc}") from None
                    metrics.upload_verifications.labels("source").inc()
                    event(_log, "frame_blob_verified", key=identity.key, **compared)
                    return "source"
        if settings.require_source_verification:
            metrics.blob_uploads.labels("unverifiable").inc()
            raise HTTPException(403, f"upload for key {identity.key} cannot be verified against its source "
                                     f"({reason}) and serve.frame_cache.require_source_verification is set")
        how = "open" if role == "open" else "credential"
        metrics.upload_verifications.labels(how).inc()
        return how

    @app.delete(blob_route, dependencies=protected, response_model=schemas.DeleteResponse,
                summary="Remove a blob (admin credential; logged)",
                responses=schemas.error_responses(400, 403, 404, 503, *write_auth))
    async def delete_blob(key: str, request: Request,
                          creds: HTTPAuthorizationCredentials | None = Depends(bearer)) -> Any:
        valid_key(key)
        if settings.read_only:
            raise HTTPException(403, "this frame-cache service is read-only (--read-only)")
        may_administer(creds, "DELETE")
        try:
            async with key_locks.hold(key):
                deleted = await asyncio.to_thread(store.delete, key)
        except StoreError as exc:
            raise store_failed("delete", exc) from None
        metrics.admin_operations.labels("delete").inc()
        event(_log, "frame_blob_deleted", logging.WARNING, key=key, deleted=deleted,
              client=request.client.host if request.client else None)
        if not deleted:
            return JSONResponse({"detail": f"no blob for key {key}"}, status_code=404)
        return {"key": key, "deleted": True}

    @app.get("/v1/keys", dependencies=protected, response_class=PlainTextResponse,
             summary="Every stored key, one per line (streamed)",
             responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}},
                        **schemas.error_responses(*auth)})
    async def list_keys() -> Response:
        def lines() -> Iterator[bytes]:
            batch: list[str] = []
            try:
                for key in store.keys():
                    batch.append(key)
                    if len(batch) >= _KEYS_PER_CHUNK:
                        yield ("\n".join(batch) + "\n").encode()
                        batch = []
            except StoreError as exc:  # mid-stream: the status is sent; end with a marker line
                metrics.store_errors.labels("list").inc()
                yield ("\n".join(batch) + ("\n" if batch else "") + f"#error {exc}\n").encode()
                return
            if batch:
                yield ("\n".join(batch) + "\n").encode()
            yield b"#end\n"

        return StreamingResponse(lines(), media_type="text/plain; charset=utf-8")

    @app.get("/v1/stats", dependencies=protected, response_model=schemas.StatsResponse,
             summary="Blob count and bytes of the backing store", responses=schemas.error_responses(503, *auth))
    async def stats() -> Any:
        try:
            result = await asyncio.to_thread(store.stats)
        except StoreError as exc:
            raise store_failed("stats", exc) from None
        return result.as_dict()

    @app.post("/v1/builds", dependencies=protected, status_code=202, response_model=schemas.BuildAccepted,
              summary="Queue a cache build (a data file, or lists of videos/images)",
              openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
                  "schema": {"$ref": "#/components/schemas/BuildRequest"}}}}},
              responses=schemas.error_responses(400, 413, 422, 503, *auth))
    async def submit_build(request: Request) -> Any:
        body = await read_body(request, settings.max_request_bytes, "serve.frame_cache.max_request_bytes")
        req = _parse_build_request(body)
        try:
            payload = await asyncio.to_thread(builds.payload_of, req)
        except builds.BuildRejected as exc:
            raise HTTPException(400, str(exc)) from None
        build_id = uuid.uuid4().hex
        record = {"build_id": build_id, "status": "queued", "created_at": time.time(),
                  "request": builds.describe(payload)}
        try:
            await asyncio.to_thread(board.set, build_id, record)
            await asyncio.to_thread(queue.call, lambda q: q.put(build_id, payload, timeout_s=5.0))
        except QueueError as exc:
            with contextlib.suppress(QueueError):  # the client got no id; the record only helps operators
                await asyncio.to_thread(board.set, build_id, {**record, "status": "failed",
                                                              "error": f"could not be queued: {exc}"})
            raise HTTPException(503, f"build queue unavailable: {exc}") from None
        metrics.builds_submitted.labels(payload["kind"]).inc()
        event(_log, "build_queued", build_id=build_id, **record["request"])
        return JSONResponse({"build_id": build_id, "status": "queued"}, status_code=202,
                            headers={"Location": f"/v1/builds/{build_id}"})

    @app.get("/v1/builds/{build_id}", dependencies=protected, response_model=schemas.BuildStatus,
             response_model_exclude_none=True, summary="Status, counts and failures of a build",
             responses=schemas.error_responses(400, 404, 503, *auth))
    async def build_status(build_id: str) -> Any:
        if len(build_id) != 32 or any(c not in "0123456789abcdef" for c in build_id):
            raise HTTPException(400, f"invalid build id {build_id[:80]!r}: expected 32 lowercase hex characters")
        try:
            record = await asyncio.to_thread(_status, board, queue, build_id)
        except QueueError as exc:
            raise HTTPException(503, f"build queue unavailable: {exc}") from None
        if record is None:
            raise HTTPException(404, f"unknown build id {build_id} (never submitted, or expired)")
        return record

    @app.get("/healthz", response_model=schemas.HealthResponse, summary="Liveness")
    async def healthz() -> Any:
        return {"status": "ok"}

    @app.get("/readyz", response_model=schemas.ReadyResponse, summary="Readiness: store and queue reachable",
             responses={503: {"model": schemas.ReadyResponse, "description": "not ready"}})
    async def readyz() -> Any:
        checks = await asyncio.gather(
            single_flight_check(lambda: _check_store(store), READY_TIMEOUT_S, "store", probes),
            single_flight_check(lambda: (board.ping(), queue.call(lambda q: q.stats())), READY_TIMEOUT_S, "queue",
                   probes))
        problems = [p for p in checks if p]
        body = {"ready": not problems, "store": store.url, "queue": queue_cfg.url,
                "build_workers": workers.alive, "builds_running": workers.busy,
                "detail": "; ".join(problems) or None}
        return JSONResponse(body, status_code=503 if problems else 200)

    @app.get("/metrics", dependencies=protected, response_class=PlainTextResponse, summary="Prometheus metrics",
             responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}},
                        **schemas.error_responses(*auth)})
    async def metrics_text() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    tools.install(app, tool_service, protected)
    schemas.install_openapi(app)
    return app


def _put_if_absent(store: FrameStore, key: str, data: Any) -> bool:
    """The store's atomic create-if-absent (LocalStore: link; S3Store: If-None-Match: *); a
    store without one gets an exists check, atomic only within this process (the key lock)."""
    put_new = getattr(store, "put_if_absent", None)
    if put_new is not None:
        return put_new(key, data)
    if store.exists(key):
        return False
    store.put(key, data)
    return True


def valid_key(key: str) -> str:
    try:
        return check_key(key)
    except StoreError as exc:
        raise HTTPException(400, str(exc)) from None


def _parse_build_request(body: bytes) -> builds.BuildRequest:
    try:
        raw = json.loads(body)
    except ValueError as exc:  # includes UnicodeDecodeError
        raise HTTPException(422, f"request body is not valid JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise HTTPException(422, f"request body must be a JSON object, got {type(raw).__name__}")
    try:
        return builds.BuildRequest.model_validate(raw)
    except ValidationError as exc:
        reasons = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors())
        raise HTTPException(422, f"invalid build request: {reasons}") from None


def _status(board: Any, queue: QueueHandle, build_id: str) -> dict[str, Any] | None:
    """The board's record, completed by the queue's verdict when the board has none yet."""
    record = board.get(build_id)
    if record is not None and record.get("status") in ("done", "failed"):
        return record
    try:
        result = queue.call(lambda q: q.wait_results([build_id], 0))[build_id]
    except ResultTimeoutError:
        return record
    except TaskDeadLetteredError as exc:
        reason = exc.dead.get(build_id, "dead-lettered")
        return {**(record or {"build_id": build_id}), "status": "failed",
                "error": f"the build was abandoned after repeated worker failures: {reason}"}
    return result


def _check_store(store: FrameStore) -> None:
    if isinstance(store, LocalStore) and not store.objects.is_dir():
        raise StoreError(f"local store {store.root}: the objects directory is gone")
    store.exists(_PROBE_KEY)



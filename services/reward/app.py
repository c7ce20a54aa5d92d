"""FastAPI app of the reward service: ``create_app(cfg)``.

Routes: ``POST /v1/score``, ``POST /v1/score/{problem_type}``, ``GET /v1/problem-types``,
``GET /healthz`` (liveness), ``GET /readyz`` (scorers imported and workers up),
``GET /metrics`` (Prometheus). The body is read and validated here, item by item, so one
bad item never costs the batch; only a body that is not a JSON object with an ``items``
list (or whose ``config`` is refused, or that is nested deeper than ``max_json_depth``)
answers 422, and size limits answer 413 (the request head's limit, 431, is uvicorn's:
services/http_limits.py). Scoring is
the library's :class:`~easyvideor1.rewards.pool.RewardPool`, with the request's ``config``
or else this service's ``worker.reward``.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import math
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.requests import ClientDisconnect

from easyvideor1 import __version__
from easyvideor1.config.schema import RewardConfig, RewardServiceConfig, RunConfig
from easyvideor1.errors import ConfigError
from easyvideor1.logging import event, get_logger
from easyvideor1.rewards.client import json_type_name, jsonable, prepare_item, scoring_config
from easyvideor1.rewards.pool import RewardPool, payload_of
from easyvideor1.rewards.registry import (
    UnknownProblemType,
    canonical_problem_type,
    scorer_modules,
    scorer_specs,
)
from services.reward import schemas
from services.reward.metrics import RewardMetrics

_log = get_logger("services.reward")
DRAIN_CAP = 8 << 20  # bytes of an oversized body read (and dropped) after the refusal, so the client sees the 413
_THREAD_PARSE_BYTES = 1 << 20  # larger bodies are parsed off the event loop
_THREAD_PREPARE_ITEMS = 512
_CONFIG_CACHE = 64  # validated request configs kept (a client sends the same one every time)


class _State:
    def __init__(self) -> None:
        self.ready = asyncio.Event()
        self.error: str | None = None
        self.heavy: dict[str, bool] = {}
        self.modules: frozenset[str] = frozenset()  # scorer modules loaded at start-up
        self.pool: RewardPool | None = None
        self.configs: dict[str, RewardConfig] = {}


def _problem_route(name: str) -> str:
    return "/v1/score/" + re.sub(r"\s+", "-", name)


def create_app(cfg: RunConfig | None = None, *, token: str | None = None, ready_wait_s: float = 30.0,
               shutdown_grace_s: float = 5.0) -> FastAPI:
    """The service of ``cfg.serve.reward``, scoring as ``cfg.worker.reward`` says; ``token``: bearer
    token (None: open); a score request during warm-up waits ``ready_wait_s``, then 503."""
    cfg = cfg or RunConfig()
    service, reward = cfg.serve.reward, cfg.worker.reward
    workers = reward.workers or len(os.sched_getaffinity(0))
    metrics = RewardMetrics()
    state = _State()
    # Scoring calls block on the pool: threads of their own keep the default executor free
    # for parsing and validation (idle threads cost nothing).
    scoring = ThreadPoolExecutor(64, thread_name_prefix="evr1-reward-request")

    def on_pool(what: str) -> None:
        if what == "died":
            metrics.worker_restarts.inc()
        metrics.workers_alive.set(state.pool.live if state.pool is not None else 0)

    async def warm_up() -> None:
        try:
            specs = await asyncio.to_thread(scorer_specs)
            state.heavy = {name: spec.heavy for name, spec in specs.items()}
            state.modules = scorer_modules()
            state.pool = RewardPool(workers, modules=reward.extra_scorer_modules, listener=on_pool)
            await asyncio.to_thread(state.pool.start)
        except Exception as exc:  # stay alive and say why on /readyz instead of crash-looping
            state.error = f"warm-up failed: {type(exc).__name__}: {exc}"
            event(_log, "reward_service_not_ready", logging.ERROR, error=state.error)
            return
        state.ready.set()
        event(_log, "reward_service_ready", workers=state.pool.live, scorers=len(state.heavy),
              item_timeout_s=reward.timeout_s, auth=token is not None)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        task = asyncio.create_task(warm_up())
        try:
            yield
        finally:
            task.cancel()
            if state.pool is not None:
                await asyncio.to_thread(state.pool.close, shutdown_grace_s)
            scoring.shutdown(wait=False, cancel_futures=True)
            event(_log, "reward_service_stopped")

    app = FastAPI(title="easyvideor1 reward service", version=__version__, lifespan=lifespan,
                  description="Verifiable rewards per problem type, scored in a worker pool.")
    app.state.metrics = metrics
    app.state.reward = state

    bearer = HTTPBearer(auto_error=False, description="set when the service runs with a token")

    def require_token(creds: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:
        if creds is None or not hmac.compare_digest(creds.credentials.encode(), token.encode()):
            raise HTTPException(401, "missing or invalid bearer token", headers={"WWW-Authenticate": "Bearer"})

    protected = [Depends(require_token)] if token else []
    auth_codes = (401,) if token else ()
    body_doc = {"requestBody": {"required": True, "content": {"application/json": {
        "schema": {"$ref": "#/components/schemas/ScoreBatchRequest"}}}}}

    async def wait_ready() -> None:
        if not state.ready.is_set() and state.error is None:
            try:
                await asyncio.wait_for(state.ready.wait(), ready_wait_s)
            except TimeoutError:
                pass
        if not state.ready.is_set():
            raise HTTPException(503, state.error or "reward service is warming up; retry shortly")

    async def handle(request: Request, route: str, raw_type: str | None) -> Response:
        began = time.perf_counter()
        metrics.inflight_requests.inc()
        status = 500
        try:
            response = await score_request(request, raw_type)
            status = response.status_code
            return response
        except HTTPException as exc:
            status = exc.status_code
            raise
        finally:
            metrics.inflight_requests.dec()
            metrics.requests.labels(route, str(status)).inc()
            metrics.request_seconds.labels(route).observe(time.perf_counter() - began)

    async def score_request(request: Request, raw_type: str | None) -> Response:
        await wait_ready()
        route_type = None
        if raw_type is not None:
            try:
                route_type = canonical_problem_type(raw_type)
            except UnknownProblemType:
                known = sorted(state.heavy)
                return JSONResponse({"detail": f"unknown problem_type {raw_type!r}; known: {', '.join(known)}",
                                     "known": known}, status_code=404)
        parsed = _parse_body(await _read_body(request, service.max_body_bytes, request.headers), service)
        if isinstance(parsed, bytes):  # large body: parse and check off the loop
            body = parsed
            parsed = await asyncio.to_thread(lambda: _check_body(_loads(body, service.max_json_depth), service))
        items, raw_config = parsed
        config = request_config(raw_config)
        metrics.batch_items.observe(len(items))

        def prepare() -> list:
            return [prepare_item(raw, config, route_type=route_type,
                                 max_item_chars=service.max_item_chars) for raw in items]

        prepared = await asyncio.to_thread(prepare) if len(items) > _THREAD_PREPARE_ITEMS else prepare()
        todo = [k for k, p in enumerate(prepared) if p.request is not None]
        payloads = [payload_of(prepared[k].request) for k in todo]
        heavy = [state.heavy.get(p[2], False) for p in payloads]
        metrics.inflight_items.inc(len(items))
        try:
            loop = asyncio.get_running_loop()
            scored = await loop.run_in_executor(scoring, state.pool.score, payloads, heavy, config)
        finally:
            metrics.inflight_items.dec(len(items))
        results: list[dict[str, Any]] = []
        kinds: list[str | None] = []
        seconds: list[float | None] = []
        for p in prepared:
            results.append({"id": p.id, "overall": 0.0, "accuracy": 0.0, "format": 0.0, "details": {},
                            "error": p.error, "problem_type": p.problem_type})
            kinds.append("invalid" if p.error else None)
            seconds.append(None)
        for k, ((overall, accuracy, fmt, details, error, ptype, secs), kind) in zip(todo, scored):
            results[k].update(overall=overall, accuracy=accuracy, format=fmt, details=details, error=error,
                              problem_type=ptype)
            kinds[k], seconds[k] = kind, secs
        metrics.observe_items([r["problem_type"] for r in results], seconds, kinds)
        return Response(_dump(results), media_type="application/json")

    def request_config(raw: Any) -> RewardConfig:
        if raw is None:
            return reward
        key = json.dumps(raw, sort_keys=True)
        found = state.configs.get(key)
        if found is None:
            try:
                found = scoring_config(raw, reward, state.modules)
            except ConfigError as exc:
                raise HTTPException(422, str(exc)) from None
            if len(state.configs) >= _CONFIG_CACHE:
                state.configs.clear()
            state.configs[key] = found
        return found

    score_doc = dict(response_model=None, openapi_extra=body_doc,
                     responses={200: {"model": schemas.ScoreResponse, "description": "one result per item"},
                                **schemas.error_responses(*auth_codes, 413, 422, 503)})

    @app.post("/v1/score", dependencies=protected, summary="Score a batch of mixed problem types", **score_doc)
    async def score_batch(request: Request) -> Response:
        return await handle(request, "/v1/score", None)

    score_doc["responses"] = {**score_doc["responses"], **schemas.error_responses(404)}

    @app.post("/v1/score/{problem_type}", dependencies=protected, summary="Score a batch of one problem type",
              **score_doc)
    async def score_typed(problem_type: str, request: Request) -> Response:
        return await handle(request, "/v1/score/{problem_type}", problem_type)

    @app.get("/v1/problem-types", dependencies=protected, response_model=schemas.ProblemTypesResponse,
             responses=schemas.error_responses(*auth_codes, 503))
    async def problem_types() -> Any:
        try:
            specs = await asyncio.to_thread(scorer_specs)
        except Exception as exc:
            raise HTTPException(503, f"scorer modules failed to load: {type(exc).__name__}: {exc}") from None
        return {"problem_types": [
            {"name": s.name, "aliases": list(s.aliases), "heavy": s.heavy, "description": s.description,
             "route": _problem_route(s.name)} for s in sorted(specs.values(), key=lambda s: s.name)]}

    @app.get("/healthz", response_model=schemas.HealthResponse, summary="Liveness")
    async def healthz() -> Any:
        return {"status": "ok"}

    @app.get("/readyz", response_model=schemas.ReadyResponse, summary="Readiness: scorers loaded, workers up",
             responses={503: {"model": schemas.ReadyResponse, "description": "not ready"}})
    async def readyz() -> Any:
        pool = state.pool
        live = pool.live if pool is not None else 0
        ready = state.ready.is_set() and live > 0
        body = {"ready": ready, "workers": live, "worker_pids": pool.pids() if pool is not None else [],
                "scorers": len(state.heavy), "detail": None if ready else (state.error or "warming up")}
        return JSONResponse(body, status_code=200 if ready else 503)

    @app.get("/metrics", dependencies=protected, response_class=PlainTextResponse, summary="Prometheus metrics",
             responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}},
                        **schemas.error_responses(*auth_codes)})
    async def metrics_text() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
            request = schemas.ScoreBatchRequest.model_json_schema(ref_template="#/components/schemas/{model}")
            defs = request.pop("$defs", {})
            request["properties"]["items"]["maxItems"] = service.max_batch
            request["properties"]["config"] = {
                "anyOf": [{"$ref": "#/components/schemas/ScoringConfig"}, {"type": "null"}], "default": None,
                "description": request["properties"]["config"]["description"]}
            defs["ScoringConfig"] = schemas.scoring_config_schema()
            item = defs["ScoreItemModel"]["properties"]
            for key in ("response", "ground_truth"):
                item[key]["maxLength"] = service.max_item_chars
            doc.setdefault("components", {}).setdefault("schemas", {}).update(defs, ScoreBatchRequest=request)
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = openapi
    return app


async def _read_body(request: Request, limit: int, headers: Any) -> bytes:
    declared = headers.get("content-length")
    over = declared is not None and declared.isdigit() and int(declared) > limit
    chunks: list[bytes] = []
    size = dropped = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            over = over or size > limit
            if over:  # refused: nothing more is kept, and at most DRAIN_CAP more is read
                chunks.clear()
                dropped += len(chunk)
                if dropped > DRAIN_CAP:
                    break
                continue
            chunks.append(chunk)
    except ClientDisconnect:
        raise HTTPException(400, "client disconnected while sending the body") from None
    if over:
        # Connection: close, or the server would read (and drop) the rest of the body to reuse the connection.
        raise HTTPException(413, f"request body of {declared or f'more than {limit}'} bytes exceeds the "
                                 f"limit of {limit} bytes (--max-body-bytes); send fewer items per request",
                            headers={"Connection": "close"})
    return b"".join(chunks)


def _too_deep(limit: int) -> HTTPException:
    return HTTPException(422, f"request body is nested too deeply: more than {limit} levels "
                              "(serve.reward.max_json_depth)")


def _loads(body: bytes, max_depth: int) -> Any:
    try:
        payload = json.loads(body)
    except ValueError as exc:  # includes UnicodeDecodeError
        raise HTTPException(422, f"request body is not valid JSON: {exc}") from None
    except RecursionError:  # deeper than the interpreter's recursion limit (~1000)
        raise _too_deep(max_depth) from None
    if json_depth(payload, max_depth) > max_depth:
        raise _too_deep(max_depth)
    return payload


def json_depth(value: Any, limit: int) -> int:
    """Nesting depth of a parsed JSON value (a scalar is 0, ``[]`` is 1), counted without
    recursion and only up to ``limit + 1``."""
    deepest = 0
    stack = [(value, 1)] if isinstance(value, dict | list) else []
    while stack:
        node, depth = stack.pop()
        if depth > deepest:
            deepest = depth
            if deepest > limit:
                break
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return deepest


def _parse_body(body: bytes, service: RewardServiceConfig) -> tuple[list, Any] | bytes:
    if len(body) > _THREAD_PARSE_BYTES:
        return body
    return _check_body(_loads(body, service.max_json_depth), service)


def _check_body(payload: Any, service: RewardServiceConfig) -> tuple[list, Any]:
    """``(items, config or None)`` of a request body; 422/413 for a body that cannot be scored."""
    if not isinstance(payload, dict):
        raise HTTPException(422, "request body must be a JSON object with an 'items' list, got "
                                 f"{json_type_name(payload)}")
    items = payload.get("items")
    if not isinstance(items, list):
        raise HTTPException(422, "request body must have an 'items' list"
                                 + ("" if items is None else f", got {json_type_name(items)}"))
    if len(items) > service.max_batch:
        raise HTTPException(413, f"batch of {len(items)} items exceeds the limit of {service.max_batch} items "
                                 "(serve.reward.max_batch); split it into smaller requests")
    return items, payload.get("config")


def _dump(results: list[dict[str, Any]]) -> bytes:
    # ensure_ascii: lone surrogates (valid in JSON input, echoed in details) stay encodable.
    try:
        return json.dumps({"results": results}, allow_nan=False).encode()
    except (ValueError, TypeError):  # a value a scorer should not have produced: make it JSON, keep the batch
        for r in results:
            r["details"] = jsonable(r["details"])
            for key in ("overall", "accuracy", "format"):
                if not isinstance(r[key], int | float) or not math.isfinite(r[key]):
                    r[key] = 0.0
        return json.dumps({"results": results}, allow_nan=False).encode()

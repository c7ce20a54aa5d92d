"""The tool endpoint of the frame-cache service: windows and zoom crops of a video for the
multi-turn rollouts' video tools (``HttpToolFrameSource``, rollout/tools/remote.py).

``POST /v1/tools/window`` (:class:`WindowRequest`) and ``POST /v1/tools/crop``
(:class:`CropRequest`) name the video by cache key (the blob of its prepared frames: the
service finds its raw file under ``serve.frame_cache.source_roots`` by content hash, the
request's ``path`` tried first) or by path alone (under a source root). The frames are
computed by ``fetch_window``/``fetch_crop`` (rollout/tools/window.py) over a loader of this
service's store with the run's frame parameters for the family, writing back what it decodes
(unless ``--read-only``), so a repeated window is a store hit; the answer is the safetensors
body of ``encode_tool_media`` with ``X-Evr1-Store: hit|miss``.

Limits are the run config's ``worker.rollout.tools`` (frames per call, highest fps, pixel
budgets, ``timeout_s`` per request). Errors are JSON ``{"detail", "field"}``: 422 for a
malformed body or arguments the video cannot answer (the field named), 404 for an unknown key
or file, 403 for a path outside the source roots, 422 when the file cannot be decoded (the
decoder's reason), 503 when the store cannot be read, 504 when the work takes longer than
``timeout_s``. Decoding runs in a bounded thread pool, never on the event loop.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from easyvideor1.cache.blob import blob_metadata
from easyvideor1.cache.key import CacheKey, HashIndex
from easyvideor1.cache.loader import FrameLoader
from easyvideor1.cache.stores.base import FrameStore, check_key
from easyvideor1.config.schema import RunConfig
from easyvideor1.errors import CacheError, ConfigError, MediaError, StoreError
from easyvideor1.logging import event, get_logger
from easyvideor1.models.families import FAMILIES, ModelFamily, frame_params, get_family
from easyvideor1.models.inputs import ImageInput, VideoInput
from easyvideor1.rollout.tools.base import ToolVideo
from easyvideor1.rollout.tools.errors import ToolRequestError, ToolSourceError
from easyvideor1.rollout.tools.remote import CROP_ROUTE, STORE_HEADER, WINDOW_ROUTE, encode_tool_media
from easyvideor1.rollout.tools.window import fetch_crop, fetch_window
from easyvideor1.video.decode import probe_video
from services.frame_cache.blobs import find_source
from services.frame_cache.metrics import FrameCacheMetrics
from services.frame_cache.plumbing import read_body

_log = get_logger("services.frame_cache.tools")
TOOL_THREADS = 4  # decodes at once; more requests wait (inside their timeout)
_KNOWN_KEYS = 4096  # key -> (content hash, duration, geometry) remembered: blobs are immutable


class VideoRef(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: str | None = Field(None, description="cache key of the video's prepared frames")
    path: str | None = Field(None, description="its raw file: absolute or relative to a source root (with a "
                             "key: where to look first)")
    duration_s: float | None = Field(None, ge=0, allow_inf_nan=False,
                                     description="its length (a video by path; a keyed video's is its blob's)")


class _ToolRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    video: VideoRef
    family: str | None = Field(None, description="model family the frames are sized for (default: the "
                               "geometry of the video's cache key)")


class WindowRequest(_ToolRequest):
    start_s: float = Field(..., allow_inf_nan=False)
    end_s: float = Field(..., allow_inf_nan=False)
    fps: float = Field(..., gt=0, allow_inf_nan=False)
    max_frames: int = Field(..., ge=1)
    max_pixels: int | None = Field(None, ge=1, description="per frame (null: the run's video max_pixels)")


class CropRequest(_ToolRequest):
    t_s: float = Field(..., allow_inf_nan=False)
    box: list[float] = Field(..., min_length=4, max_length=4, description="x1, y1, x2, y2 in source pixels")
    max_pixels: int = Field(..., ge=1)


class ToolErrorResponse(BaseModel):
    detail: str
    field: str | None = None


REQUEST_MODELS: dict[str, type[BaseModel]] = {"WindowRequest": WindowRequest, "CropRequest": CropRequest}


class Refused(Exception):
    """A request answered with ``status``; ``field`` names what is wrong."""

    def __init__(self, status: int, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.status, self.field = status, field


class ToolService:
    """What the routes need: the store, the run's frame parameters, the limits, the pool."""

    def __init__(self, cfg: RunConfig, store: FrameStore, index: HashIndex, source_roots: list[str],
                 metrics: FrameCacheMetrics):
        self.cfg, self.store, self.index, self.metrics = cfg, store, index, metrics
        self.roots = [os.path.realpath(r) for r in source_roots]
        self.tools = cfg.worker.rollout.tools
        self.write_back = not cfg.serve.frame_cache.read_only
        self.pool = ThreadPoolExecutor(max_workers=TOOL_THREADS, thread_name_prefix="evr1-tools")
        self._known: OrderedDict[str, tuple[str, float, dict[str, Any]]] = OrderedDict()
        self._known_lock = threading.Lock()  # requests resolve keys from several pool threads

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)

    # ---- resolving the video ----------------------------------------------------------------
    def _blob_facts(self, key: str) -> tuple[str, float, dict[str, Any]]:
        """(content hash, duration, parameters) of the video blob stored under ``key``."""
        with self._known_lock:
            known = self._known.get(key)
        if known is not None:
            return known
        try:
            check_key(key)
        except StoreError as exc:
            raise Refused(400, "video.key", str(exc)) from None
        data = self.store.get_buffer(key)
        if data is None:
            raise Refused(404, "video.key", f"no blob for key {key} in the frame store {self.store.url}")
        try:
            meta = blob_metadata(data, f"key {key}")
            if meta.get("evr1.kind") != "video":
                raise Refused(422, "video.key", f"key {key} is a {meta.get('evr1.kind')!r} blob, not a video")
            facts = (meta["evr1.content_hash"], float(json.loads(meta["evr1.media"])["duration"]),
                     dict(json.loads(meta["evr1.params"])))
        except (CacheError, KeyError, TypeError, ValueError) as exc:
            raise Refused(422, "video.key", f"the blob under key {key} is unreadable ({exc})") from None
        finally:
            if hasattr(data, "close"):
                data.close()
        with self._known_lock:
            self._known[key] = facts
            while len(self._known) > _KNOWN_KEYS:
                self._known.popitem(last=False)
        return facts

    def _under_roots(self, path: str) -> str:
        if not self.roots:
            raise Refused(403, "video.path", "this service has no source roots (serve.frame_cache.source_roots, "
                          "data_roots): it decodes no raw files")
        candidates = [path] if os.path.isabs(path) else [os.path.join(r, path) for r in self.roots]
        for candidate in candidates:
            real = os.path.realpath(candidate)
            if any(real == r or real.startswith(r.rstrip(os.sep) + os.sep) for r in self.roots):
                if os.path.isfile(real):
                    return real
                raise Refused(404, "video.path", f"no such file {path!r}")
        raise Refused(403, "video.path", f"{path!r} is not under serve.frame_cache.source_roots")

    def video_of(self, ref: VideoRef, family: str | None) -> tuple[ToolVideo, ModelFamily]:
        if ref.key is None and ref.path is None:
            raise Refused(422, "video", "give the video's key, its path, or both")
        if ref.path is not None and ("\x00" in ref.path or not ref.path):
            raise Refused(422, "video.path", "must be a non-empty path without NUL characters")
        params: dict[str, Any] = {}
        if ref.key is not None:
            content, duration, params = self._blob_facts(ref.key)
            identity = CacheKey(ref.key, content, params, "video", "")
            source = find_source(identity, self.roots, ref.path, self.index) if self.roots else None
            if source is None:
                where = "serve.frame_cache.source_roots" if self.roots else "any source root (none is configured)"
                raise Refused(404, "video.key", f"no raw file under {where} has the content of key {ref.key} "
                              f"(content hash {content}); pass its path")
            video = ToolVideo(source, ref.key, duration)
        else:
            assert ref.path is not None
            source = self._under_roots(ref.path)
            header = ref.duration_s or 0.0
            try:
                header = float(probe_video(source).get("duration") or header)
            except MediaError as exc:
                raise Refused(422, "video.path", f"cannot read {ref.path!r}: {exc.reason}") from None
            video = ToolVideo(source, None, header)
        return video, self._family(family, params)

    @staticmethod
    def _family(name: str | None, params: dict[str, Any]) -> ModelFamily:
        if name is not None:
            try:
                return get_family(name)
            except ConfigError as exc:
                raise Refused(422, "family", str(exc)) from None
        factor, patch = params.get("factor"), params.get("temporal_patch_size")
        for fam in FAMILIES.values():  # families of one geometry size frames alike
            if fam.factor == factor and fam.temporal_patch_size == patch:
                return fam
        raise Refused(422, "family", "name the model family (the video has no cache key of a known geometry)")

    def loader(self, family: ModelFamily) -> FrameLoader:
        """A loader per request: its counters say whether this request was a store hit."""
        video, image = frame_params(self.cfg, family)
        return FrameLoader(self.store, video, image, write_back=self.write_back, index=self.index)

    # ---- the work of one request (in the pool) ------------------------------------------------
    def window(self, req: WindowRequest) -> tuple[VideoInput, bool]:
        tools = self.tools
        pixels = tools.window_max_pixels or self.cfg.data.video_max_pixels
        if req.max_frames > tools.frames_per_call:
            raise Refused(422, "max_frames", f"{req.max_frames} frames is more than one call may fetch "
                          f"(worker.rollout.tools.frames_per_call = {tools.frames_per_call})")
        if req.fps > tools.max_fps:
            raise Refused(422, "fps", f"{req.fps:g} is above worker.rollout.tools.max_fps = {tools.max_fps:g}")
        if req.max_pixels is not None and req.max_pixels > pixels:
            raise Refused(422, "max_pixels", f"{req.max_pixels} is above the window budget of {pixels} pixels")
        video, family = self.video_of(req.video, req.family)
        loader = self.loader(family)
        medium = fetch_window(loader, video, req.start_s, req.end_s, req.fps, max_frames=req.max_frames,
                              max_pixels=req.max_pixels, family=family)
        return medium, loader.counters.hits > 0

    def crop(self, req: CropRequest) -> tuple[ImageInput, bool]:
        if req.max_pixels > self.tools.zoom_max_pixels:
            raise Refused(422, "max_pixels", f"{req.max_pixels} is above worker.rollout.tools.zoom_max_pixels = "
                          f"{self.tools.zoom_max_pixels}")
        video, family = self.video_of(req.video, req.family)
        loader = self.loader(family)
        medium = fetch_crop(loader, video, req.t_s, req.box, max_pixels=req.max_pixels, family=family)
        return medium, loader.counters.hits > 0


def _parse(body: bytes, model: type[BaseModel]) -> Any:
    try:
        raw = json.loads(body)
    except ValueError as exc:
        raise Refused(422, "body", f"not valid JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise Refused(422, "body", f"must be a JSON object, got {type(raw).__name__}")
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(map(str, first["loc"])) or "body"
        reasons = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors())
        raise Refused(422, field, f"invalid {model.__name__}: {reasons}") from None


def _error(status: int, field: str, message: str) -> JSONResponse:
    detail = message if message.startswith(f"{field}: ") else f"{field}: {message}"
    return JSONResponse({"detail": detail, "field": field}, status_code=status)


_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
          "description": "safetensors: uint8 'frames' and evr1.kind/evr1.media/evr1.checksum metadata"},
    **{code: {"model": ToolErrorResponse, "description": text} for code, text in {
        400: "malformed key", 401: "missing or invalid bearer token", 403: "a path outside the source roots",
        404: "unknown key, or no raw file for it", 413: "body too large",
        422: "malformed request, arguments the video cannot answer, or a file that cannot be decoded",
        503: "the frame store cannot be read", 504: "no answer within worker.rollout.tools.timeout_s"}.items()}}


def install(app: FastAPI, tools: ToolService, dependencies: list[Any]) -> None:
    """The two routes on ``app`` (``dependencies``: the service's read-credential check)."""
    metrics, limit = tools.metrics, tools.cfg.serve.frame_cache.max_request_bytes
    timeout = tools.tools.timeout_s

    async def serve(request: Request, name: str, model: type[BaseModel],
                    work: Callable[[Any], tuple[VideoInput | ImageInput, bool]]) -> Response:
        began = time.perf_counter()
        try:
            req = _parse(await read_body(request, limit, "serve.frame_cache.max_request_bytes"), model)
            loop = asyncio.get_running_loop()
            medium, hit = await asyncio.wait_for(loop.run_in_executor(tools.pool, work, req), timeout)
            body = encode_tool_media(medium)
        except Refused as exc:
            return _refused(name, exc.status, exc.field, str(exc), "bad_request")
        except ToolRequestError as exc:
            return _refused(name, 422, getattr(exc, "field", "request"), str(exc), "bad_request")
        except ToolSourceError as exc:
            return _refused(name, 404, "video", str(exc), "bad_request")
        except MediaError as exc:
            return _refused(name, 422, "video", f"cannot decode {exc.path}: {exc.reason}", "decode")
        except StoreError as exc:
            metrics.store_errors.labels("tools").inc()
            return _refused(name, 503, "video", f"frame store unavailable: {exc}", "store")
        except TimeoutError:
            return _refused(name, 504, "timeout_s", f"no answer within {timeout:g} s "
                            "(worker.rollout.tools.timeout_s); the work goes on and stores what it decodes",
                            "timeout")
        except CacheError as exc:
            return _refused(name, 422, "video", str(exc), "cache")
        frames = int(medium.frames.shape[0]) if isinstance(medium, VideoInput) else 1
        metrics.tool_requests.labels(name, "200").inc()
        metrics.tool_store.labels(name, "hit" if hit else "miss").inc()
        metrics.tool_frames.labels(name).inc(frames)
        metrics.tool_seconds.labels(name).observe(time.perf_counter() - began)
        return Response(body, media_type="application/octet-stream", headers={STORE_HEADER: "hit" if hit else "miss"})

    def _refused(name: str, status: int, field: str, message: str, reason: str) -> JSONResponse:
        metrics.tool_requests.labels(name, str(status)).inc()
        metrics.tool_errors.labels(name, reason).inc()
        if status >= 500:
            event(_log, "tool_request_failed", tool=name, status=status, field=field, reason=message[:300])
        return _error(status, field, message)

    def body_of(model: str) -> dict[str, Any]:
        return {"requestBody": {"required": True, "content": {"application/json": {
            "schema": {"$ref": f"#/components/schemas/{model}"}}}}}

    @app.post(WINDOW_ROUTE, dependencies=dependencies, response_class=Response, responses=_RESPONSES,
              summary="Frames of a window of a video at a frame rate (the get_frames tool)",
              openapi_extra=body_of("WindowRequest"))
    async def tool_window(request: Request) -> Response:
        return await serve(request, "window", WindowRequest, tools.window)

    @app.post(CROP_ROUTE, dependencies=dependencies, response_class=Response, responses=_RESPONSES,
              summary="One frame at source resolution, cropped and resized (the zoom tool)",
              openapi_extra=body_of("CropRequest"))
    async def tool_crop(request: Request) -> Response:
        return await serve(request, "crop", CropRequest, tools.crop)


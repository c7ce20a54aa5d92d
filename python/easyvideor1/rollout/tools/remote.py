"""The tool frame source of distributed mode: the frame-cache service's tool endpoint over HTTP.

``POST {url}/v1/tools/window`` and ``POST {url}/v1/tools/crop`` (services/frame_cache/tools.py)
take the video by cache key and/or path and the call's arguments as JSON, and answer the
frames as a safetensors body (:func:`encode_tool_media`): one uint8 tensor ``frames``
((T, H, W, 3) for a window, (H, W, 3) for a crop) and string metadata ``evr1.kind``
(video/image), ``evr1.media`` (the Video/ImageMetadata as JSON) and ``evr1.checksum``
(blake3 of the frame bytes, checked here). The service computes them with the same
functions as the in-process source (rollout/tools/window.py), so both give the same frames.

Errors: every refusal is JSON ``{"detail", "field"}``. A call the video cannot answer (a time
out of range, a box outside the frame, too many frames: a 422 on one of ``CALL_ARGUMENTS``) is
raised here as :class:`~easyvideor1.rollout.tools.window.ToolArgumentError` (a
``ToolRequestError``), what the local source raises, so the tool kit turns either into the same
tool message. Everything else (an unknown key, a file outside the source roots or that cannot
be decoded, no answer within ``timeout_s`` = ``worker.rollout.tools.timeout_s``, an unreachable
service, a refused credential, a 5xx) raises ``ToolSourceError`` (rollout/tools/errors.py)
naming the service, the status and the reason.

Media refs (``ToolOutcome.refs``, ``Trajectory.media_refs``): the JSON layout of
rollout/tools/window.py (``window_ref``/``crop_ref``); ``window.refetch(source, ref)`` fetches a
ref's medium again through this source or the local one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
from safetensors.numpy import load as load_safetensors
from safetensors.numpy import save as save_safetensors

from easyvideor1.cache.blob import TENSOR_NAME, blob_metadata, frame_checksum
from easyvideor1.errors import CacheError
from easyvideor1.models.inputs import ImageInput, VideoInput
from easyvideor1.rollout.tools.base import ToolFrameSource, ToolVideo
from easyvideor1.rollout.tools.errors import ToolSourceError
from easyvideor1.rollout.tools.window import ToolArgumentError
from easyvideor1.video.metadata import ImageMetadata, VideoMetadata

TOKEN_ENV = "EVR1_FRAME_CACHE_TOKEN"  # the service's read credential (as cache/stores/http.py)
WINDOW_ROUTE = "/v1/tools/window"
CROP_ROUTE = "/v1/tools/crop"
STORE_HEADER = "x-evr1-store"  # hit or miss: whether the service found the frames in its store
# Fields whose refusal is the call's fault (a ToolRequestError, shown to the policy); a refused
# video, key, path, family or body is the setup's (a ToolSourceError).
CALL_ARGUMENTS = frozenset({"start_s", "end_s", "fps", "max_frames", "max_pixels", "t_s", "box"})


def encode_tool_media(medium: VideoInput | ImageInput) -> bytes:
    """A window or crop as a safetensors body (module docstring)."""
    if isinstance(medium, VideoInput):
        array, metadata, kind = medium.frames, medium.metadata, "video"
    else:
        array, kind = medium.image, "image"
        metadata = medium.metadata or ImageMetadata(array.shape[0], array.shape[1], array.shape[0],
                                                    array.shape[1], 1)
    array = np.ascontiguousarray(array)
    meta = {"evr1.kind": kind, "evr1.media": json.dumps(metadata.as_dict(), sort_keys=True),
            "evr1.checksum": frame_checksum(array)}
    return save_safetensors({TENSOR_NAME: array}, metadata=meta)


def decode_tool_media(data: bytes, where: str = "tool media") -> VideoInput | ImageInput:
    """The medium of :func:`encode_tool_media`'s bytes; CacheError when malformed or corrupt."""
    meta = blob_metadata(data, where)
    try:
        array = load_safetensors(data)[TENSOR_NAME]
    except Exception as exc:  # safetensors raises its own error types for every malformation
        raise CacheError(f"{where}: unreadable safetensors body ({type(exc).__name__}: {exc})") from None
    if array.dtype != np.uint8 or frame_checksum(np.ascontiguousarray(array)) != meta.get("evr1.checksum"):
        raise CacheError(f"{where}: frames are not uint8 or do not match their checksum")
    array.setflags(write=False)
    kind = meta.get("evr1.kind")
    try:
        media = json.loads(meta["evr1.media"])
        if kind == "video" and array.ndim == 4:
            return VideoInput(array, VideoMetadata.from_dict(media))
        if kind == "image" and array.ndim == 3:
            return ImageInput(array, ImageMetadata.from_dict(media))
    except (KeyError, TypeError, ValueError) as exc:
        raise CacheError(f"{where}: unreadable media metadata ({exc})") from None
    raise CacheError(f"{where}: a {kind!r} body with frames of shape {array.shape}")


class HttpToolFrameSource(ToolFrameSource):
    """Windows and crops from the frame-cache service at ``url`` (module docstring).

    ``token``: the service's read credential (else ``$EVR1_FRAME_CACHE_TOKEN``, else none).
    ``family``: the model family the frames are sized for; the service otherwise takes it
    from the video's cache key (the geometry it was prepared with), and a video given by path
    alone needs it."""

    def __init__(self, url: str, *, timeout_s: float, token: str | None = None, family: str | None = None):
        import httpx  # the serve extra; only distributed mode needs it

        if not url.startswith(("http://", "https://")):
            raise ToolSourceError(f"invalid frame-cache service URL {url!r} (expected http(s)://host:port)")
        if not timeout_s > 0:
            raise ToolSourceError(f"timeout_s must be > 0, got {timeout_s!r}")
        self.url, self.timeout_s, self.family = url.rstrip("/"), float(timeout_s), family
        token = token or os.environ.get(TOKEN_ENV) or None
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._httpx = httpx
        self._client = httpx.Client(base_url=self.url, timeout=httpx.Timeout(self.timeout_s), headers=headers)
        self.store_hits = 0  # answers the service found in its store (its X-Evr1-Store header)
        self.store_misses = 0

    def window(self, video: ToolVideo, start_s: float, end_s: float, fps: float, *, max_frames: int,
               max_pixels: int | None) -> VideoInput:
        body = {"video": _video(video), "start_s": start_s, "end_s": end_s, "fps": fps,
                "max_frames": max_frames, "max_pixels": max_pixels}
        medium = self._post(WINDOW_ROUTE, body)
        if not isinstance(medium, VideoInput):
            raise ToolSourceError(f"frame-cache service {self.url}: {WINDOW_ROUTE} answered an image")
        return medium

    def crop(self, video: ToolVideo, t_s: float, box: tuple[float, float, float, float], *,
             max_pixels: int) -> ImageInput:
        body = {"video": _video(video), "t_s": t_s, "box": _box_list(box), "max_pixels": max_pixels}
        medium = self._post(CROP_ROUTE, body)
        if not isinstance(medium, ImageInput):
            raise ToolSourceError(f"frame-cache service {self.url}: {CROP_ROUTE} answered a video")
        return medium

    def _post(self, route: str, body: dict[str, Any]) -> VideoInput | ImageInput:
        if self.family is not None:
            body["family"] = self.family
        where = f"frame-cache service {self.url}{route}"
        try:
            response = self._client.post(route, json=body)
        except self._httpx.TimeoutException:
            raise ToolSourceError(f"{where}: no answer within {self.timeout_s:g} s "
                                  "(worker.rollout.tools.timeout_s)") from None
        except (self._httpx.TransportError, ValueError) as exc:  # ValueError: NaN/inf arguments in the JSON
            raise ToolSourceError(f"{where}: request failed: {type(exc).__name__}: {exc}") from None
        if response.status_code == 200:
            hit = response.headers.get(STORE_HEADER) == "hit"
            self.store_hits += hit
            self.store_misses += not hit
            try:
                return decode_tool_media(response.content, where)
            except CacheError as exc:
                raise ToolSourceError(str(exc)) from None
        detail, field = _error_of(response)
        if response.status_code == 422 and field in CALL_ARGUMENTS:  # the policy's call: told to it
            raise ToolArgumentError(field, detail)
        shown = f"{field}: {detail}" if field else detail
        raise ToolSourceError(f"{where}: HTTP {response.status_code}: {shown}")

    def close(self) -> None:
        self._client.close()


def _video(video: ToolVideo) -> dict[str, Any]:
    return {"key": video.key, "path": video.path, "duration_s": float(video.duration_s)}


def _box_list(box: Sequence[float]) -> Any:
    return list(box) if isinstance(box, (list, tuple)) else box


def _error_of(response: Any) -> tuple[str, str | None]:
    """``(detail, field)`` of an error answer; the service's field prefix is left off the detail."""
    try:
        data = response.json()
    except ValueError:
        return response.text[:500] or f"HTTP {response.status_code}", None
    if not isinstance(data, dict):
        return str(data)[:500], None
    detail, field = str(data.get("detail", data))[:2000], data.get("field")
    if isinstance(field, str) and detail.startswith(f"{field}: "):
        detail = detail[len(field) + 2:]
    return detail, field if isinstance(field, str) else None

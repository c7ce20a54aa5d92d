"""Build requests: validation into a queue payload, and execution by a build worker.

A payload is plain JSON (it travels through the work queue to any replica)::

    {"kind": "data_path", "data_path": "/abs/train.jsonl", "media_root": null,
     "video_params": {...}, "image_params": {...}}
    {"kind": "media", "videos": ["/abs/a.mp4"], "images": [], "video_params": ..., "image_params": ...}

Execution calls the library: ``build_cache`` for a data file, ``build_media`` for a media list
(cache/builder.py: content keys, stored keys skipped, decoding in worker processes with a
per-file timeout). A file that fails is listed with its reason; it never fails the build. A
build is ``failed`` only when it could not run at all.

Roots: a build reads only files under ``serve.frame_cache.data_roots`` (``configure_roots``,
called by ``evr1 serve frame-cache``). Every path (the data file, its media root, listed media,
and the media rows of the data file) is resolved, symlinks and ``..`` followed, before it is
compared with the roots; one outside them is refused with the same answer whether or not it
exists. The payload carries the roots, and a worker checks them again when it runs the build
(files may change between submission and execution). With no roots configured, builds by path
are refused with a message saying how to configure them.
"""

from __future__ import annotations

import os
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from easyvideor1.cache.builder import BuildFailure, BuildSummary, build_cache, build_media
from easyvideor1.data.loader import load_samples_report
from easyvideor1.data.schema import is_url, resolve_roots, within_roots
from easyvideor1.errors import ConfigError, EasyVideoR1Error
from easyvideor1.models.families import get_family
from easyvideor1.video.metadata import ImageParams, VideoParams

MAX_MEDIA = 100_000
MAX_LISTED_FAILURES = 1000  # a status record stays small; the counts stay exact
MAX_LISTED_OUTSIDE = 5  # rows named in the refusal of a data file whose media lie outside the roots
ROOTS_FIELD = "serve.frame_cache.data_roots"
_roots: tuple[str, ...] = ()


def configure_roots(roots: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """Set the folders this process's builds may read (resolved now); returns them."""
    global _roots
    _roots = resolve_roots(roots)
    return _roots


class BuildRequest(BaseModel):
    """Give ``data_path`` or a non-empty ``videos``/``images`` list, not both."""

    model_config = ConfigDict(extra="forbid", title="BuildRequest")

    data_path: str | None = Field(None, min_length=1, max_length=4096,
                                  description="absolute path of a JSONL/JSON data file visible to the service")
    media_root: str | None = Field(None, min_length=1, max_length=4096,
                                   description="resolve the data file's relative media paths here")
    videos: list[str] = Field(default_factory=list, max_length=MAX_MEDIA, description="absolute video paths")
    images: list[str] = Field(default_factory=list, max_length=MAX_MEDIA, description="absolute image paths")
    fps: float | None = Field(None, gt=0, le=240)
    max_frames: int | None = Field(None, ge=1, le=100_000)
    min_frames: int | None = Field(None, ge=1, le=100_000)
    max_pixels: int | None = Field(None, ge=1, le=1 << 28, description="per video frame")
    min_pixels: int | None = Field(None, ge=1, le=1 << 28, description="per video frame")
    factor: int | None = Field(None, ge=2, le=256, description="resize factor (28: Qwen2/2.5-VL, 32: Qwen3-VL)")
    family: str | None = Field(None, max_length=64, description="qwen2_vl, qwen2_5_vl, qwen3_vl or qwen3_5; "
                                                                "sets factor")
    image_min_pixels: int | None = Field(None, ge=1, le=1 << 30)
    image_max_pixels: int | None = Field(None, ge=1, le=1 << 30)


class BuildRejected(ValueError):
    """The request is well-formed JSON but cannot be built (400, with this reason)."""


def no_roots_message() -> str:
    return (f"this service has no data roots: builds by path are refused. Set {ROOTS_FIELD} in its run "
            f"config (e.g. {ROOTS_FIELD}: [/data]) or start it with --data-roots '[/data]': builds then read "
            "only files under those folders")


def outside_message(what: str, value: str, roots: tuple[str, ...]) -> str:
    return (f"{what} {value!r} is outside the service's data roots ({', '.join(roots)}): builds read only "
            f"files under {ROOTS_FIELD}, after resolving symlinks and '..'")


def _check_path(value: str, what: str, roots: tuple[str, ...], *, must_be: str | None = None) -> str:
    """The resolved path of ``value``, checked against ``roots``; BuildRejected with the rule."""
    if "\x00" in value:
        raise BuildRejected(f"{what} contains a NUL character")
    if "://" in value:
        raise BuildRejected(f"{what} {value!r} is a URL; the service reads local or mounted files only")
    if not os.path.isabs(value):
        raise BuildRejected(f"{what} {value!r} must be an absolute path (the service's working "
                            "directory is not yours)")
    if not roots:
        raise BuildRejected(no_roots_message())
    real = within_roots(value, roots)
    if real is None:  # the same answer whether or not the file exists
        raise BuildRejected(outside_message(what, value, roots))
    if must_be == "file" and not os.path.isfile(real):
        raise BuildRejected(f"{what} {value!r} is not a file visible to the service")
    if must_be == "dir" and not os.path.isdir(real):
        raise BuildRejected(f"{what} {value!r} is not a directory visible to the service")
    return real


def outside_rows(data_path: str, media_root: str | None, roots: tuple[str, ...]) -> list[str]:
    """``"file:line path"`` of every local medium the data file's rows name outside ``roots``
    (URLs are left to the builder, which does not fetch them)."""
    samples, _ = load_samples_report(data_path, media_root=media_root)
    found = []
    for sample in samples:
        for path in (*sample.videos, *sample.images):
            if not is_url(path) and within_roots(path, roots) is None:
                found.append(f"{sample.source} {path}")
    return found


def _outside_rows_message(found: list[str], roots: tuple[str, ...]) -> str:
    shown = "; ".join(found[:MAX_LISTED_OUTSIDE]) + (f"; ... {len(found) - MAX_LISTED_OUTSIDE} more"
                                                     if len(found) > MAX_LISTED_OUTSIDE else "")
    return (f"the data file names {len(found)} medium/media outside the service's data roots "
            f"({', '.join(roots)}): {shown}. Builds read only files under {ROOTS_FIELD}, after resolving "
            "symlinks and '..'")


def params_of(req: BuildRequest) -> tuple[VideoParams, ImageParams]:
    factor = req.factor
    if req.family is not None:
        try:
            family_factor = get_family(req.family).factor
        except ConfigError as exc:
            raise BuildRejected(str(exc)) from None
        if factor is not None and factor != family_factor:
            raise BuildRejected(f"factor {factor} contradicts family {req.family!r} (factor {family_factor})")
        factor = family_factor
    video_fields = {"fps": req.fps, "max_frames": req.max_frames, "min_frames": req.min_frames,
                    "max_pixels": req.max_pixels, "min_pixels": req.min_pixels, "factor": factor}
    image_fields = {"min_pixels": req.image_min_pixels, "max_pixels": req.image_max_pixels, "factor": factor}
    try:
        video = VideoParams(**{k: v for k, v in video_fields.items() if v is not None})
        image = ImageParams(**{k: v for k, v in image_fields.items() if v is not None})
    except ValueError as exc:
        raise BuildRejected(f"invalid frame parameters: {exc}") from None
    return video, image


def payload_of(req: BuildRequest, data_roots: list[str] | tuple[str, ...] | None = None) -> dict[str, Any]:
    """The queue payload of a validated request; raises BuildRejected with the reason.

    ``data_roots``: the folders the build may read (None: those of ``configure_roots``)."""
    roots = _roots if data_roots is None else resolve_roots(data_roots)
    has_media = bool(req.videos or req.images)
    if req.data_path is None and not has_media:
        raise BuildRejected("give 'data_path' or a non-empty 'videos'/'images' list")
    if req.data_path is not None and has_media:
        raise BuildRejected("give either 'data_path' or 'videos'/'images', not both")
    video, image = params_of(req)
    params = {"video_params": video.as_dict(), "image_params": image.as_dict(), "data_roots": list(roots)}
    if req.data_path is not None:
        data_path = _check_path(req.data_path, "data_path", roots, must_be="file")
        root = None if req.media_root is None else _check_path(req.media_root, "media_root", roots, must_be="dir")
        found = outside_rows(data_path, root, roots)
        if found:
            raise BuildRejected(_outside_rows_message(found, roots))
        return {"kind": "data_path", "data_path": data_path, "media_root": root, **params}
    if req.media_root is not None:
        raise BuildRejected("'media_root' applies to 'data_path' only; give absolute media paths")
    videos = [_check_path(p, f"videos[{i}]", roots) for i, p in enumerate(req.videos)]
    images = [_check_path(p, f"images[{i}]", roots) for i, p in enumerate(req.images)]
    return {"kind": "media", "videos": list(dict.fromkeys(videos)), "images": list(dict.fromkeys(images)),
            **params}


def describe(payload: dict[str, Any]) -> dict[str, Any]:
    """What a status record shows of the request (never the full media list)."""
    if payload["kind"] == "data_path":
        return {"kind": "data_path", "data_path": payload["data_path"]}
    return {"kind": "media", "videos": len(payload["videos"]), "images": len(payload["images"])}


def execute(payload: dict[str, Any], store_url: str, *, store_options: dict[str, Any] | None = None,
            workers: int = 2, timeout: float = 600.0) -> dict[str, Any]:
    """Run one build; returns the final status fields (``status``, ``counts``, ``failures``...)."""
    started = time.perf_counter()
    # Checked again here: files may have changed since the request was accepted.
    roots = resolve_roots(payload.get("data_roots") or ())
    outside: list[BuildFailure] = []
    try:
        video = VideoParams(**payload["video_params"])
        image = ImageParams(**payload["image_params"])
        if payload["kind"] == "data_path":
            refusal = None
            try:
                for what in ("data_path", "media_root"):
                    if payload.get(what) is not None:
                        _check_path(payload[what], what, roots)
            except BuildRejected as exc:
                refusal = str(exc)
            found = [] if refusal or not roots else outside_rows(payload["data_path"], payload.get("media_root"),
                                                                 roots)
            if refusal or found:
                return {"status": "failed", "error": refusal or _outside_rows_message(found, roots),
                        "seconds": round(time.perf_counter() - started, 3)}
            summary = build_cache(payload["data_path"], store_url, video_params=video, image_params=image,
                                  workers=workers, timeout=timeout, store_options=store_options,
                                  media_root=payload.get("media_root"), progress=False)
        else:
            lists = {"videos": [], "images": []}
            for name, paths in lists.items():
                for path in payload[name]:
                    try:
                        paths.append(_check_path(path, name[:-1], roots))
                    except BuildRejected as exc:
                        outside.append(BuildFailure(path, "outside data roots", "BuildRejected", str(exc)))
            summary = build_media(lists["videos"], lists["images"], store_url, video, image,
                                  store_options=store_options, workers=workers, timeout=timeout)
            summary.media += len(outside)
            summary.failed[:0] = outside
    except EasyVideoR1Error as exc:  # the store cannot be opened, and the like: the build did not run
        return {"status": "failed", "error": f"{type(exc).__name__}: {exc}",
                "seconds": round(time.perf_counter() - started, 3)}
    return summary_fields(summary)


def summary_fields(summary: BuildSummary) -> dict[str, Any]:
    failures = [f.as_dict() for f in summary.failed[:MAX_LISTED_FAILURES]]
    bad_rows = [p.as_dict() for p in summary.bad_rows[:MAX_LISTED_FAILURES]]
    fields: dict[str, Any] = {
        "status": "done",
        "counts": {"built": summary.built, "reused": summary.reused, "failed": len(summary.failed),
                   "bad_rows": len(summary.bad_rows), "media": summary.media, "unique": summary.unique,
                   "rows": summary.rows},
        "bytes_written": summary.bytes_written, "failures": failures, "bad_rows": bad_rows,
        "seconds": round(summary.seconds, 3), "error": None,
    }
    if summary.rows == 0 and summary.media == 0 and summary.bad_rows:
        # Nothing usable in the data file (missing, unreadable, every row bad): the build did not run.
        fields["status"] = "failed"
        fields["error"] = summary.bad_rows[0].describe()
    return fields

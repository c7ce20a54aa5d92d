"""Frames for tool calls from the frame store in this process, and the factory of frame sources.

:class:`LocalToolFrameSource` serves both tools through the project's :class:`FrameLoader` with
the functions of rollout/tools/window.py (the frame-cache service's tool endpoint uses the same
ones), so a tool's frames are exactly the frames a sample with that clip window would get: the
same decoder, seek path, sampling and resize, and the same content-addressed cache. Each
distinct window has its own key; a miss decodes it and writes it back, and the same window
asked again is a store hit, counted by the loader (``loader.stats()``).

``make_tool_frame_source(cfg, service_url=...)`` makes the frame-cache service's tool endpoint at
``service_url``, else a local source over ``data.frame_cache.store`` (or none: every window is
decoded). The caller says which: ``train/parts.py`` decides by mode (``tool_frames_url``), a
rollout worker uses its pool's frame-cache service.
"""

from __future__ import annotations

import copy
import os

from easyvideor1.cache.loader import FrameLoader
from easyvideor1.cache.stores.base import open_store
from easyvideor1.config.schema import RunConfig
from easyvideor1.models.families import ModelFamily, detect_family, frame_params, get_family
from easyvideor1.models.inputs import ImageInput, VideoInput
from easyvideor1.rollout.tools.base import ToolFrameSource, ToolVideo
from easyvideor1.rollout.tools.window import fetch_crop, fetch_window

HTTP_TOKEN_ENV = "EVR1_FRAME_CACHE_TOKEN"  # the frame-cache service's read token (cache/stores/http.py)


class LocalToolFrameSource(ToolFrameSource):
    """Tool frames of ``family`` through ``loader`` (its store, hash index, video parameters and
    counters).

    ``write_back``: store a decoded window on a miss (with a store), whatever the loader's own
    setting: a trajectory's media are fetched again by the trainer, which should hit.
    """

    def __init__(self, loader: FrameLoader, family: str | ModelFamily, *, write_back: bool = True):
        self.family = get_family(family)
        if loader.write_back != write_back:
            # A shallow copy shares the store, index and counters; only this flag differs.
            loader = copy.copy(loader)
            loader.write_back = write_back
        self.loader = loader

    def window(self, video: ToolVideo, start_s: float, end_s: float, fps: float, *, max_frames: int,
               max_pixels: int | None) -> VideoInput:
        return fetch_window(self.loader, video, start_s, end_s, fps, max_frames=max_frames, max_pixels=max_pixels,
                            family=self.family)

    def crop(self, video: ToolVideo, t_s: float, box: tuple[float, float, float, float], *,
             max_pixels: int) -> ImageInput:
        return fetch_crop(self.loader, video, t_s, box, max_pixels=max_pixels, family=self.family)


def make_tool_frame_source(cfg: RunConfig, family: str | ModelFamily | None = None, *,
                           loader: FrameLoader | None = None, service_url: str | None = None) -> ToolFrameSource:
    """The frame-cache service's tool endpoint at ``service_url``, else a :class:`LocalToolFrameSource`.

    ``family`` defaults to the policy's (``worker.actor.model_path``); ``loader`` is the run's
    frame loader to share (its store, hash index and counters) for the local source.
    """
    fam = get_family(family) if family is not None else detect_family(cfg.worker.actor.model_path)
    if service_url:
        from easyvideor1.rollout.tools.remote import HttpToolFrameSource

        token = os.environ.get(cfg.serve.frame_cache.token_env or HTTP_TOKEN_ENV) or None
        return HttpToolFrameSource(service_url, timeout_s=cfg.worker.rollout.tools.timeout_s, token=token,
                                   family=fam.name)
    if loader is None:
        video, image = frame_params(cfg, fam)
        store = cfg.data.frame_cache.store
        loader = FrameLoader(open_store(store) if store else None, video, image)
    return LocalToolFrameSource(loader, fam)

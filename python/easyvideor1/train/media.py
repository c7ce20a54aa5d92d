"""Frame parameters from the run config and the model family, and the run's frame loader."""

from __future__ import annotations

from easyvideor1.cache import FrameLoader, open_store
from easyvideor1.config.schema import RunConfig
from easyvideor1.logging import event, get_logger
from easyvideor1.models.families import ModelFamily
from easyvideor1.video.metadata import ImageParams, VideoParams

log = get_logger(__name__)


def frame_params(cfg: RunConfig, family: ModelFamily) -> tuple[VideoParams, ImageParams]:
    """The decoupled video/image budgets, sized to the family's resize factor."""
    d = cfg.data
    video = VideoParams(fps=d.video_fps, min_frames=d.video_min_frames, max_frames=d.video_max_frames,
                        min_pixels=d.video_min_pixels, max_pixels=d.video_max_pixels, factor=family.factor,
                        temporal_patch_size=family.temporal_patch_size)
    image = ImageParams(min_pixels=d.image_min_pixels, max_pixels=d.image_max_pixels, factor=family.factor)
    return video, image


def build_frame_loader(cfg: RunConfig, family: ModelFamily) -> FrameLoader:
    """A loader over the configured store; builds missing entries first when asked to.

    Without a store every video is decoded on the fly (counted by the loader).
    """
    video, image = frame_params(cfg, family)
    fc = cfg.data.frame_cache
    if fc.store is None:
        return FrameLoader(None, video, image)
    if fc.build_before_training:
        from easyvideor1.cache.builder import build_cache

        for data_path in (cfg.data.train_files, cfg.data.val_files):
            if data_path:
                summary = build_cache(data_path, fc.store, video_params=video, image_params=image,
                                      workers=fc.workers, timeout=fc.decode_timeout_s,
                                      media_root=cfg.data.media_root, progress=False)
                event(log, "frame_cache_ready", data=str(data_path), built=summary.built, reused=summary.reused,
                      failed=len(summary.failed))
    return FrameLoader(open_store(fc.store), video, image, write_back=fc.write_back)

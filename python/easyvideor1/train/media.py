"""Frame parameters from the run config and the model family, the run's frame loader, and the
pixels of text-only prompts (:class:`PixelSource`)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from easyvideor1.cache import FrameLoader, open_store
from easyvideor1.cache.refs import MediaRef
from easyvideor1.config.schema import RunConfig
from easyvideor1.data.prepared import is_prepared_manifest
from easyvideor1.logging import event, get_logger
from easyvideor1.models.families import ModelFamily
from easyvideor1.models.inputs import ImageInput, PromptBuilder, PromptInputs, VideoInput
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
            # A prepared manifest's media are in the store already (its raw files may be gone).
            if data_path and not is_prepared_manifest(data_path):
                summary = build_cache(data_path, fc.store, video_params=video, image_params=image,
                                      workers=fc.workers, timeout=fc.decode_timeout_s,
                                      media_root=cfg.data.media_root, progress=False)
                event(log, "frame_cache_ready", data=str(data_path), built=summary.built, reused=summary.reused,
                      failed=len(summary.failed))
    return FrameLoader(open_store(fc.store), video, image, write_back=fc.write_back)


def store_loader(cfg: RunConfig, family: ModelFamily) -> FrameLoader:
    """A loader over the run's frame store, without building anything (a rank or a worker reads)."""
    video, image = frame_params(cfg, family)
    store = cfg.data.frame_cache.store or cfg.distributed.frame_cache_url
    return FrameLoader(open_store(store) if store else None, video, image)


class PixelSource:
    """Attaches pixel tensors to text-only prompts (``PromptInputs.pixels_pending``) where a
    forward needs them, loading each medium from the frame store by its :class:`MediaRef`.

    Prompts travel without pixels (a trainer rank gets token ids and refs, not tensors); the
    ``keep`` most recent prompts' tensors stay here, so the log-prob and update passes of a step
    process each prompt's pixels once per process."""

    def __init__(self, builder: PromptBuilder, loader: FrameLoader, keep: int = 256):
        self.builder, self.loader, self.keep = builder, loader, keep
        self._done: OrderedDict[tuple[str, int], PromptInputs] = OrderedDict()
        self.attached = 0

    @classmethod
    def from_config(cls, cfg: RunConfig) -> PixelSource:
        builder = PromptBuilder.from_pretrained(cfg.worker.actor.model_path)
        return cls(builder, store_loader(cfg, builder.family))

    def ready(self, prompt: PromptInputs, media: Sequence[MediaRef]) -> PromptInputs:
        """``prompt`` with its pixels (the same object when it already has them)."""
        if not prompt.pixels_pending:
            return prompt
        key = (prompt.sample_id, len(prompt.prompt_ids))
        done = self._done.get(key)
        if done is not None:
            self._done.move_to_end(key)
            return done
        videos, images = [], []
        for ref in media:
            array, metadata = ref.load(self.loader, sample_id=prompt.sample_id)
            if ref.kind == "video":
                videos.append(VideoInput(array, metadata))
            else:
                images.append(ImageInput(array, metadata))
        done = self.builder.attach_pixels(prompt, videos, images)
        self.attached += 1
        self._done[key] = done
        while len(self._done) > self.keep:
            self._done.popitem(last=False)
        return done

    def stats(self) -> dict[str, Any]:
        return {"pixel_attachments": self.attached, **self.loader.stats()}

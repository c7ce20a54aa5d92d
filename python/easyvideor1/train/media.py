"""Frame parameters from the run config and the model family, the run's frame loader, and the
pixels of text-only prompts and of trajectories whose tool media travelled by ref
(:class:`PixelSource`)."""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from easyvideor1.cache import FrameLoader, open_store
from easyvideor1.cache.refs import MediaRef
from easyvideor1.config.schema import RunConfig
from easyvideor1.data.prepared import is_prepared_manifest
from easyvideor1.logging import event, get_logger
from easyvideor1.models.families import ModelFamily, frame_params
from easyvideor1.models.inputs import ImageInput, PromptBuilder, PromptInputs, VideoInput
from easyvideor1.models.response_rows import trajectory_pixels_pending
from easyvideor1.models.trajectory import Trajectory

log = get_logger(__name__)


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

    def __init__(self, builder: PromptBuilder, loader: FrameLoader, keep: int = 256, *,
                 cfg: RunConfig | None = None):
        self.builder, self.loader, self.keep = builder, loader, keep
        self.cfg = cfg  # for the tool kit that fetches a trajectory's tool media again
        self._done: OrderedDict[tuple[str, int], PromptInputs] = OrderedDict()
        self._tool_media: OrderedDict[tuple[str, str], dict[str, Any]] = OrderedDict()
        self._kit: Any = None
        self.attached = 0

    @classmethod
    def from_config(cls, cfg: RunConfig) -> PixelSource:
        builder = PromptBuilder.from_pretrained(cfg.worker.actor.model_path)
        return cls(builder, store_loader(cfg, builder.family), cfg=cfg)

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

    def ready_trajectory(self, sample_id: str, trajectory: Trajectory) -> Trajectory:
        """``trajectory`` with its tool media's pixels, fetched again by its ``media_refs`` through
        the run's tool kit (the same object when it has them)."""
        if not trajectory_pixels_pending(trajectory):
            return trajectory
        key = (sample_id, repr(trajectory.media_refs))
        done = self._tool_media.get(key)
        if done is None:
            done = self._fetch_tool_media(sample_id, trajectory)
            self._tool_media[key] = done
            while len(self._tool_media) > self.keep:
                self._tool_media.popitem(last=False)
        else:
            self._tool_media.move_to_end(key)
        return dataclasses.replace(trajectory, **done)

    def _fetch_tool_media(self, sample_id: str, trajectory: Trajectory) -> dict[str, Any]:
        wanted = len(trajectory.video_grid_thw) + len(trajectory.image_grid_thw)
        if len(trajectory.media_refs) != wanted:
            raise ValueError(f"sample {sample_id!r}: the trajectory shows {wanted} tool media but carries "
                             f"{len(trajectory.media_refs)} media refs to fetch them by")
        kit = self._tool_kit()
        videos, images = [], []
        for ref in trajectory.media_refs:
            medium = kit.refetch(ref)
            (videos if isinstance(medium, VideoInput) else images).append(medium)
        tensors = self.builder.pixel_tensors(videos, images, sample_id=sample_id)
        grids = {kind: [tuple(int(x) for x in g) for g in tensors[f"{kind}_grid_thw"].tolist()]
                 if f"{kind}_grid_thw" in tensors else [] for kind in ("video", "image")}
        if grids["video"] != [tuple(g) for g in trajectory.video_grid_thw] or \
                grids["image"] != [tuple(g) for g in trajectory.image_grid_thw]:
            raise ValueError(f"sample {sample_id!r}: the tool media fetched again have grids {grids}, the "
                             f"trajectory was made with video {list(trajectory.video_grid_thw)} and image "
                             f"{list(trajectory.image_grid_thw)}")
        return {"tensors": tensors, "videos": tuple(videos), "images": tuple(images)}

    def _tool_kit(self) -> Any:
        if self._kit is None:
            if self.cfg is None:
                raise ValueError("a trajectory came without its tool media's pixels, and this pixel source has no "
                                 "run config to make the tool kit from (build it with PixelSource.from_config)")
            from easyvideor1.rollout.tools.frames import make_tool_frame_source
            from easyvideor1.rollout.tools.kit import make_tool_kit
            from easyvideor1.train.parts import tool_frames_url

            family = self.builder.family
            self._kit = make_tool_kit(self.cfg, family, source=make_tool_frame_source(
                self.cfg, family, service_url=tool_frames_url(self.cfg)))
        return self._kit

    def stats(self) -> dict[str, Any]:
        return {"pixel_attachments": self.attached, **self.loader.stats()}

"""Decode a video into sampled, resized uint8 RGB frames plus exact ``VideoMetadata``.

Strategy (one pass in the common case):

1. Open the container and read the stream header: refuse missing/empty/non-regular files,
   files without a video stream, codecs without a decoder, resolutions above
   ``max_source_pixels`` and durations above ``max_duration_s`` *before* decoding.
2. Frame count: the container's (mp4/mov store it). When a container does not know it
   (some mkv/webm/avi), a demux-only pre-pass counts the video packets (no decoding).
3. Decode every packet in order (inter-frame codecs need them) but convert to RGB, resize
   and rotate only the frames whose index was sampled: that conversion costs more than
   decoding itself.
4. If the decoded count disagrees with the expected one (a header that lies, a truncated
   tail), the sampling is recomputed from the true count and, when the chosen frames
   differ, a second pass decodes again. A file that decodes far fewer frames than it
   declares is reported as truncated.

Timestamps come from each frame's PTS (seconds from the stream start), so they are right
for variable-frame-rate video; indices are positions in the presentation-order sequence.

A clip window (``VideoParams.start_s``/``end_s``) restricts sampling to the frames shown
inside it, clamped to the video's end. Before decoding, frame times are estimated as
``index / fps``; the pass measures every frame's PTS, and when the window's true frames
differ from the estimate (variable frame rate, a lying header) step 4 re-samples and
decodes again. Indices and timestamps stay those of the whole source video.
Rotation (display matrix, else the legacy ``rotate`` tag) is applied to the output frames;
``VideoMetadata.rotation`` is the clockwise angle applied and the source size is the
displayed (rotated) one, which is the frame that bounding-box annotations refer to.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from fractions import Fraction

import av
import numpy as np
from av.video.reformatter import Interpolation

from easyvideor1.errors import MediaDecodeError, MediaTooLargeError
from easyvideor1.video.files import check_media_file
from easyvideor1.video.metadata import VideoMetadata, VideoParams
from easyvideor1.video.sampling import sample_frame_indices, sample_window_indices, smart_resize

DECODER_NAME = f"pyav-{av.__version__}"
# Bit-exact swscale: the same frames on every CPU, so a cache built on one machine equals
# an on-the-fly decode on another.
_INTERPOLATION = Interpolation.BICUBIC | Interpolation.BITEXACT | Interpolation.ACCURATE_RND
# A decode may come up short by a few frames (edit lists, a damaged last packet); more than
# this is a truncated or corrupt file.
_MISSING_FRAMES_TOLERANCE = 0.05


@dataclass
class _Header:
    coded_height: int
    coded_width: int
    total_frames: int  # 0 when the container does not say
    source_fps: float
    duration: float  # seconds, 0 when unknown
    time_base: Fraction
    start_pts: int | None
    codec: str


def decode_video(path: str | os.PathLike, params: VideoParams) -> tuple[np.ndarray, VideoMetadata]:
    """Frames ``(T, H, W, 3)`` uint8 RGB (read-only) and their metadata.

    Raises ``MediaMissingError``, ``MediaDecodeError`` or ``MediaTooLargeError``, each naming
    the file and the reason.
    """
    path = os.fspath(path)
    check_media_file(path)
    header = _read_header(path, params)
    total = header.total_frames or _count_packets(path)
    if total <= 0:
        raise MediaDecodeError(path, "the video stream has no frames")
    fps = _consistent_fps(header.source_fps, total, header.duration, params)
    estimated = [i / fps for i in range(total)] if params.has_window else []
    indices, _ = _sample(path, params, total, fps, estimated, header.duration, measured=False)
    result = _decode_pass(path, params, header, indices)
    decoded = result.decoded
    if decoded < total * (1 - _MISSING_FRAMES_TOLERANCE) and total - decoded > 2:
        detail = f" ({result.error})" if result.error else ""
        raise MediaDecodeError(path, f"truncated or corrupt: the container declares {total} frames but only "
                                     f"{decoded} could be decoded{detail}")
    # The decode is the ground truth: PTS give the duration, the count is what decoded.
    duration = result.end_time if result.end_time > 0 else header.duration
    fps = _consistent_fps(header.source_fps, decoded, duration, params)
    true_indices, clip = _sample(path, params, decoded, fps, result.all_times, duration, measured=True)
    if true_indices != indices or not result.complete:
        indices = true_indices
        result = _decode_pass(path, params, header, indices)
        if not result.complete:
            raise MediaDecodeError(path, f"frames changed between two decodes ({decoded} then {result.decoded})")
    total = decoded
    frames = result.frames
    frames.setflags(write=False)
    metadata = VideoMetadata(
        source_fps=float(fps),
        total_frames=int(total),
        duration=float(duration),
        frame_indices=tuple(indices),
        timestamps=tuple(result.timestamps),
        height=int(frames.shape[1]),
        width=int(frames.shape[2]),
        source_height=result.display_height,
        source_width=result.display_width,
        factor=params.factor,
        decoder=DECODER_NAME,
        rotation=result.rotation,
        clip=clip,
        extra={"codec": header.codec, "padded_frames": len(indices) - len(set(indices))},
    )
    return frames, metadata


def _sample(path: str, params: VideoParams, total: int, fps: float, times: list[float], duration: float, *,
            measured: bool) -> tuple[list[int], tuple[float, float] | None]:
    """Indices to keep and the clip window actually used (None for the whole video).

    ``times`` are every frame's presentation time (only read for a window); ``measured``
    says they and ``duration`` come from a decode, not the header: only then is a window
    past the end refused, since a header may understate the length.
    """
    if not params.has_window:
        return sample_frame_indices(total, fps, params), None
    start = params.start_s or 0.0
    if duration <= 0 and times:  # length unknown: up to the end of the last frame shown
        duration = times[-1] + 1.0 / fps
    if measured and start >= duration:
        raise MediaDecodeError(path, f"clip window [{start:g}, {_seconds(params.end_s)}] s starts at or after the "
                                     f"end of the video ({duration:.3f} s)")
    # A window reaching the end is clamped to it and open-ended, so the last frame counts
    # even where the measured duration stops at that frame's start (no frame durations).
    reaches_end = params.end_s is None or params.end_s >= duration
    select_end = math.inf if reaches_end else params.end_s
    clip = (start, duration if reaches_end else params.end_s)
    return sample_window_indices(times, fps, params, start, select_end), clip


def _seconds(value: float | None) -> str:
    return "end" if value is None else f"{value:g}"


def probe_video(path: str | os.PathLike, params: VideoParams | None = None) -> dict:
    """Header facts (size, frame count, fps, duration, codec) without decoding a frame."""
    path = os.fspath(path)
    check_media_file(path)
    h = _read_header(path, params or VideoParams())
    return {"height": h.coded_height, "width": h.coded_width, "total_frames": h.total_frames,
            "source_fps": h.source_fps, "duration": h.duration, "codec": h.codec}


def _consistent_fps(rate: float, total: int, duration: float, params: VideoParams) -> float:
    """The stream's average rate when it agrees with count / duration, else count / duration.

    A header rate that disagrees by more than a frame and a half (or 2 %) comes from a
    broken or variable-rate header; the measured average is then the honest figure.
    """
    if rate > 0 and (duration <= 0 or abs(total / rate - duration) <= max(1.5 / rate, 0.02 * duration)):
        return rate
    if duration > 0:
        return total / duration
    return params.fps


def _open(path: str) -> av.container.InputContainer:
    try:
        return av.open(path, mode="r")
    except av.error.FFmpegError as exc:
        raise MediaDecodeError(path, f"not a readable media container: {_ffmpeg_reason(exc)}") from None


def _video_stream(path: str, container: av.container.InputContainer) -> av.video.stream.VideoStream:
    if not container.streams.video:
        kinds = sorted({s.type for s in container.streams}) or ["none"]
        raise MediaDecodeError(path, f"no video stream (streams present: {', '.join(kinds)})")
    stream = container.streams.video[0]
    if stream.codec_context is None:
        raise MediaDecodeError(path, "unsupported codec: this FFmpeg build has no decoder for the video stream")
    return stream


def _read_header(path: str, params: VideoParams) -> _Header:
    with _open(path) as container:
        stream = _video_stream(path, container)
        ctx = stream.codec_context
        height, width = int(ctx.height or 0), int(ctx.width or 0)
        if height <= 0 or width <= 0:
            raise MediaDecodeError(path, f"the video stream has no valid frame size ({width}x{height})")
        if height * width > params.max_source_pixels:
            raise MediaTooLargeError(path, f"resolution {width}x{height} ({height * width} pixels) exceeds "
                                           f"max_source_pixels={params.max_source_pixels}")
        time_base = stream.time_base or Fraction(1, 1_000_000)
        duration = 0.0
        if stream.duration:
            duration = float(stream.duration * time_base)
        elif container.duration:
            duration = container.duration / av.time_base
        if duration > params.max_duration_s:
            raise MediaTooLargeError(path, f"duration {duration:.1f}s exceeds max_duration_s={params.max_duration_s}")
        rate = stream.average_rate or stream.guessed_rate
        return _Header(height, width, int(stream.frames or 0), float(rate) if rate else 0.0, duration,
                       time_base, stream.start_time, ctx.name)


def _count_packets(path: str) -> int:
    """Count frames by demuxing only (cheap) for containers that do not store the count."""
    count = 0
    with _open(path) as container:
        stream = _video_stream(path, container)
        try:
            for packet in container.demux(stream):
                if packet.size:  # the demuxer ends with an empty flush packet
                    count += 1
        except av.error.FFmpegError as exc:
            if count == 0:
                raise MediaDecodeError(path, f"cannot read packets: {_ffmpeg_reason(exc)}") from None
    return count


@dataclass
class _PassResult:
    frames: np.ndarray
    timestamps: list[float]
    all_times: list[float]  # presentation time of every decoded frame (for clip windows)
    decoded: int
    end_time: float
    rotation: int
    display_height: int
    display_width: int
    error: str | None
    complete: bool  # every wanted index was decoded


def _decode_pass(path: str, params: VideoParams, header: _Header, indices: list[int]) -> _PassResult:
    wanted = sorted(set(indices))
    slot_of = {index: slot for slot, index in enumerate(wanted)}
    kept: np.ndarray | None = None
    kept_times = [0.0] * len(wanted)
    origin = header.start_pts
    rotation = 0
    display = (header.coded_height, header.coded_width)
    decoded, end_time, error = 0, 0.0, None
    all_times: list[float] = []
    last_wanted = wanted[-1]
    with _open(path) as container:
        stream = _video_stream(path, container)
        stream.thread_type = "AUTO"
        try:
            for frame in container.decode(stream):
                index = decoded
                decoded += 1
                pts = frame.pts if frame.pts is not None else frame.dts
                if origin is None:
                    origin = pts if pts is not None else 0
                seconds = float((pts - origin) * header.time_base) if pts is not None else index / (
                    header.source_fps or params.fps)
                step = float(frame.duration * header.time_base) if frame.duration else 0.0
                end_time = max(end_time, seconds + step)
                all_times.append(seconds)
                if seconds > params.max_duration_s:
                    raise MediaTooLargeError(path, f"duration exceeds max_duration_s={params.max_duration_s} "
                                                   f"(frame {index} at {seconds:.1f}s)")
                if kept is None:
                    rotation = _clockwise_rotation(frame, stream)
                    display = _displayed_size(frame.height, frame.width, rotation)
                    target = _target_size(path, display, params)
                    kept = np.empty((len(wanted), *target, 3), dtype=np.uint8)
                slot = slot_of.get(index)
                if slot is not None:
                    kept[slot] = _to_rgb(frame, kept.shape[1], kept.shape[2], rotation)
                    kept_times[slot] = seconds
        except av.error.FFmpegError as exc:
            error = _ffmpeg_reason(exc)
    if kept is None or decoded == 0:
        detail = f": {error}" if error else ""
        raise MediaDecodeError(path, f"no decodable video frames{detail}")
    if decoded <= last_wanted:
        # Short decode; the caller re-samples from the true count.
        return _PassResult(kept, [], all_times, decoded, end_time, rotation, display[0], display[1], error, False)
    order = [slot_of[i] for i in indices]
    frames = kept if order == list(range(len(wanted))) else kept[order]
    times = [kept_times[s] for s in order]
    return _PassResult(frames, times, all_times, decoded, end_time, rotation, display[0], display[1], error, True)


def _clockwise_rotation(frame: av.VideoFrame, stream: av.video.stream.VideoStream) -> int:
    """Clockwise degrees (0/90/180/270) to turn the coded frame upright for display."""
    counter_clockwise = frame.rotation  # from the display matrix side data, if any
    if counter_clockwise:
        degrees = -int(round(counter_clockwise))
    else:
        tag = stream.metadata.get("rotate", "0")
        try:
            degrees = int(float(tag))
        except ValueError:
            degrees = 0
    degrees %= 360
    # Display matrices may hold any angle; only right angles map to a lossless transpose.
    return int(round(degrees / 90.0)) % 4 * 90


def _displayed_size(height: int, width: int, rotation: int) -> tuple[int, int]:
    return (width, height) if rotation in (90, 270) else (height, width)


def _target_size(path: str, display: tuple[int, int], params: VideoParams) -> tuple[int, int]:
    try:
        return smart_resize(display[0], display[1], params.factor, params.min_pixels, params.max_pixels)
    except ValueError as exc:
        raise MediaDecodeError(path, f"cannot resize: {exc}") from None


def _to_rgb(frame: av.VideoFrame, height: int, width: int, rotation: int) -> np.ndarray:
    """Scale in the coded orientation (one swscale call), then rotate the small result."""
    coded_h, coded_w = (width, height) if rotation in (90, 270) else (height, width)
    rgb = frame.to_ndarray(width=coded_w, height=coded_h, format="rgb24", interpolation=_INTERPOLATION)
    # np.rot90 turns counter-clockwise for positive k.
    return np.rot90(rgb, k=-(rotation // 90)) if rotation else rgb


def _ffmpeg_reason(exc: Exception) -> str:
    text = getattr(exc, "strerror", None) or str(exc)
    return str(text).strip() or type(exc).__name__


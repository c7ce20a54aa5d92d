"""Decode a video into sampled, resized uint8 RGB frames plus exact ``VideoMetadata``.

Strategy (one pass in the common case):

1. Open the container and read the stream header: refuse missing/empty/non-regular files,
   files without a video stream, codecs without a decoder, resolutions above
   ``max_source_pixels`` and durations above ``max_duration_s`` *before* decoding. Every
   decoded frame is checked again (``_check_frame``): a stream may change its resolution
   mid-stream (a new SPS in H.264, segments joined in MPEG-TS), and the first frame above
   ``max_source_pixels`` stops the decode with a ``MediaTooLargeError`` naming the video and
   the frame index, before that frame is converted or anything after it is decoded.
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
The second pass of step 4 stops after the last frame it keeps: the first one measured all.

A clip window (``VideoParams.start_s``/``end_s``) restricts sampling to the frames shown
inside it, clamped to the video's end. Before decoding, frame times are estimated as
``index / fps``; the pass measures every frame's PTS, and when the window's true frames
differ from the estimate (variable frame rate, a lying header) step 4 re-samples and
decodes again. Indices and timestamps stay those of the whole source video.

A clip first tries the exact shortcut of ``seek.py``: a demux-only pass gives every frame's
PTS and duration (so the window, the indices, the count and the duration of the whole video,
without decoding), then the decode seeks to the random-access keyframe at or before the
window's first frame (when that skips at least ``SEEK_MIN_SKIP_S``) and stops after its
last frame. Every frame it decodes is checked against the packet table; when the table
cannot be trusted or a check fails, the full decode above runs instead, so the result is
always the full decode's (frames, indices, timestamps, metadata). ``DECODE_STATS`` counts
frames decoded, seeks and the reasons for falling back. The full decode cannot stop at a
window's end itself: the whole video's count, duration and frame times come from it.

Rotation (display matrix, else the legacy ``rotate`` tag) is applied to the output frames;
``VideoMetadata.rotation`` is the clockwise angle applied and the source size is the
displayed (rotated) one, which is the frame that bounding-box annotations refer to.
"""

from __future__ import annotations

import bisect
import logging
import math
import os
import threading
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction

import av
import numpy as np
from av.video.reformatter import Interpolation

from easyvideor1.errors import MediaDecodeError, MediaTooLargeError
from easyvideor1.logging import event, get_logger
from easyvideor1.video.files import check_media_file
from easyvideor1.video.metadata import VideoMetadata, VideoParams
from easyvideor1.video.sampling import sample_frame_indices, sample_window_indices, smart_resize
from easyvideor1.video.seek import SEEK_MIN_SKIP_S, PacketTable, scan_packets

DECODER_NAME = f"pyav-{av.__version__}"
# Bit-exact swscale: the same frames on every CPU, so a cache built on one machine equals
# an on-the-fly decode on another.
_INTERPOLATION = Interpolation.BICUBIC | Interpolation.BITEXACT | Interpolation.ACCURATE_RND
# A decode may come up short by a few frames (edit lists, a damaged last packet); more than
# this is a truncated or corrupt file.
_MISSING_FRAMES_TOLERANCE = 0.05

_log = get_logger("video.decode")
# Process-wide counts (tests, benchmarks, debugging): "frames_decoded", "full_passes",
# "clip_passes", "seeks", "fallback: <reason>". Read them with decode_stats().
DECODE_STATS: Counter[str] = Counter()
_STATS_LOCK = threading.Lock()


def decode_stats() -> dict[str, int]:
    with _STATS_LOCK:
        return dict(DECODE_STATS)


def reset_decode_stats() -> None:
    with _STATS_LOCK:
        DECODE_STATS.clear()


def _count(key: str, amount: int = 1) -> None:
    with _STATS_LOCK:
        DECODE_STATS[key] += amount


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


def decode_video(path: str | os.PathLike, params: VideoParams, *,
                 seek: bool = True) -> tuple[np.ndarray, VideoMetadata]:
    """Frames ``(T, H, W, 3)`` uint8 RGB (read-only) and their metadata.

    ``seek=False`` never takes the clip shortcut (the reference path: the result is the
    same, only slower). Raises ``MediaMissingError``, ``MediaDecodeError`` or
    ``MediaTooLargeError``, each naming the file and the reason.
    """
    path = os.fspath(path)
    check_media_file(path)
    header = _read_header(path, params)
    if seek and params.has_window:
        clip = _decode_clip(path, params, header)
        if not isinstance(clip, str):
            return clip
        _count(f"fallback: {clip}")
        event(_log, "clip_full_decode", level=logging.DEBUG, path=path, reason=clip)
    total = header.total_frames or _count_packets(path)
    if total <= 0:
        raise MediaDecodeError(path, "the video stream has no frames")
    fps = _consistent_fps(header.source_fps, total, header.duration, params)
    estimated = [i / fps for i in range(total)] if params.has_window else []
    indices, _ = _sample(path, params, total, fps, estimated, header.duration, measured=False)
    result = _decode_pass(path, params, header, indices, measure=True)
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
        result = _decode_pass(path, params, header, indices, measure=False)
        if not result.complete:
            raise MediaDecodeError(path, f"frames changed between two decodes ({decoded} then {result.decoded})")
    return _finish(header, params, fps, decoded, duration, indices, clip, result)


def _finish(header: _Header, params: VideoParams, fps: float, total: int, duration: float, indices: list[int],
            clip: tuple[float, float] | None, result: _PassResult) -> tuple[np.ndarray, VideoMetadata]:
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


def _decode_clip(path: str, params: VideoParams, header: _Header) -> tuple[np.ndarray, VideoMetadata] | str:
    """The full decode's result for a clip from the packet table and a partial decode, or
    the reason the full decode must run instead (every doubt falls back, errors included:
    the full decode raises them with their true detail)."""
    try:
        with _open(path) as container:
            table = scan_packets(container, _video_stream(path, container), header.start_pts)
    except (MediaDecodeError, av.error.FFmpegError):
        return "unreadable packets"
    if isinstance(table, str):
        return table
    total = table.count
    if header.total_frames and header.total_frames != total:
        return "the container's frame count disagrees with its packets"
    # Exactly the full decode's arithmetic, on the same integers.
    times = [_pts_seconds(pts, header.start_pts, header.time_base) for pts in table.pts]
    end_time = 0.0
    for seconds, ticks in zip(times, table.durations):
        end_time = max(end_time, _frame_end(seconds, ticks, header.time_base))
    if times[-1] > params.max_duration_s:
        return "longer than max_duration_s"
    duration = end_time if end_time > 0 else header.duration
    fps = _consistent_fps(header.source_fps, total, duration, params)
    try:
        indices, clip = _sample(path, params, total, fps, times, duration, measured=True)
        result = _clip_pass(path, params, header, table, times, indices)
    except MediaDecodeError:
        return "refused"
    except av.error.FFmpegError:
        return "decode error"
    if isinstance(result, str):
        return result
    result.end_time = end_time
    return _finish(header, params, fps, total, duration, indices, clip, result)


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


def _decode_pass(path: str, params: VideoParams, header: _Header, indices: list[int], *,
                 measure: bool) -> _PassResult:
    """Decode from the start, keeping ``indices``; ``measure``: decode to the end (every
    frame's time, the count, the end time), else stop after the last index kept."""
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
                _check_frame(path, frame, index, params)
                pts = frame.pts if frame.pts is not None else frame.dts
                if origin is None:
                    origin = pts if pts is not None else 0
                seconds = _pts_seconds(pts, origin, header.time_base) if pts is not None else index / (
                    header.source_fps or params.fps)
                end_time = max(end_time, _frame_end(seconds, frame.duration, header.time_base))
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
                if not measure and index >= last_wanted:
                    break
        except av.error.FFmpegError as exc:
            error = _ffmpeg_reason(exc)
        finally:
            _count("full_passes")
            _count("frames_decoded", decoded)
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


def _clip_pass(path: str, params: VideoParams, header: _Header, table: PacketTable, times: list[float],
               indices: list[int]) -> _PassResult | str:
    """Decode only what ``indices`` need: the first frame (rotation and size come from it, as
    in a full decode), then from the keyframe at or before the first index (a seek) or on
    from the start, up to the last index. Every frame at or after the keyframe must be the
    table's next one, with its packet's PTS and duration; else the reason is returned."""
    wanted = sorted(set(indices))
    slot_of = {index: slot for slot, index in enumerate(wanted)}
    kept_times = [0.0] * len(wanted)
    last_wanted = wanted[-1]
    point = table.seek_point(wanted[0], bisect.bisect_left(times, SEEK_MIN_SKIP_S))
    decoded = 0
    with _open(path) as container:
        stream = _video_stream(path, container)
        stream.thread_type = "AUTO"
        try:
            frames = container.decode(stream)
            first = next(frames, None)
            if first is None or first.pts != table.pts[0] or (first.duration or 0) != table.durations[0]:
                return "the first frame is not the first packet's"
            decoded = 1
            _check_frame(path, first, 0, params)
            rotation = _clockwise_rotation(first, stream)
            display = _displayed_size(first.height, first.width, rotation)
            kept = np.empty((len(wanted), *_target_size(path, display, params), 3), dtype=np.uint8)
            if 0 in slot_of:
                kept[slot_of[0]] = _to_rgb(first, kept.shape[1], kept.shape[2], rotation)
            expect, skip_below = 1, None  # the index the next frame must have
            if point is not None:
                frames.close()
                container.seek(point[1], backward=True, any_frame=False, stream=stream)
                _count("seeks")
                frames = container.decode(stream)
                expect, skip_below = point[0], table.pts[point[0]]
            start = expect
            for frame in frames if expect <= last_wanted else ():
                decoded += 1
                _check_frame(path, frame, expect, params)
                pts = frame.pts
                if skip_below is not None and expect == start and pts is not None and pts < skip_below:
                    continue  # before the keyframe (the seek landed earlier) or its leading pictures
                if pts is None or table.rank.get(pts) != expect:
                    return "decoded frames do not follow the packet table"  # a late seek, a lost frame
                if (frame.duration or 0) != table.durations[expect]:
                    return "a frame's duration is not its packet's"
                slot = slot_of.get(expect)
                if slot is not None:
                    kept[slot] = _to_rgb(frame, kept.shape[1], kept.shape[2], rotation)
                    kept_times[slot] = times[expect]
                expect += 1
                if expect > last_wanted:
                    break
            if expect <= last_wanted:
                return "the decode ended before the window's last frame"
        finally:
            _count("clip_passes")
            _count("frames_decoded", decoded)
    order = [slot_of[i] for i in indices]
    frames_out = kept if order == list(range(len(wanted))) else kept[order]
    return _PassResult(frames_out, [kept_times[s] for s in order], times, table.count, 0.0, rotation, display[0],
                       display[1], None, True)


def _check_frame(path: str, frame: av.VideoFrame, index: int, params: VideoParams) -> None:
    """Refuse a decoded frame above ``max_source_pixels`` (the header only describes the start)."""
    pixels = frame.width * frame.height
    if pixels > params.max_source_pixels:
        raise MediaTooLargeError(path, f"frame {index} is {frame.width}x{frame.height} ({pixels} pixels), above "
                                       f"max_source_pixels={params.max_source_pixels}"
                                       + (" (the stream changes resolution mid-stream)" if index else ""))


def _pts_seconds(pts: int, origin: int, time_base: Fraction) -> float:
    # Integer true division rounds correctly, as float(Fraction) does (it divides the same
    # rational), without building a Fraction per frame.
    return (pts - origin) * time_base.numerator / time_base.denominator


def _frame_end(seconds: float, duration: int | None, time_base: Fraction) -> float:
    """When a frame stops being shown (its start when the stream gives no duration)."""
    return seconds + (duration * time_base.numerator / time_base.denominator if duration else 0.0)


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


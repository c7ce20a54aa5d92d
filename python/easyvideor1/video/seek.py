"""What a clip decode may skip: the packet table and the keyframe to seek to.

A full decode measures three things besides the frames it keeps: every frame's PTS (which
places the clip window and numbers the frames), the frame count and the end of the last
frame (``total_frames`` and ``duration`` of the whole video). A clip decode that skips most
of the video must know them without decoding, exactly. They come from a demux-only pass
(no decoding, a small fraction of a decode's cost) that reads every packet's PTS, duration
and flags: each packet is one frame carrying its packet's PTS and duration (verified on
every frame the clip decode does decode), so the sorted packet PTS are the frames' PTS in
presentation order and a frame's source index is the rank of its PTS.

``scan_packets`` returns that table, or the reason it cannot be trusted, in which case the
caller decodes the whole video as before. It refuses (conservatively) anything outside the
cases verified to hold: a container other than MP4/MOV or Matroska/WebM, a decoder other
than FFmpeg's h264, hevc, vp8 or vp9, a packet without PTS or flagged corrupt or discarded,
duplicate PTS, a variable frame rate (frame intervals differing by more than one time-base
tick of rounding), a first PTS other than the stream's start time, and in-band H.264/HEVC
parameter sets that would leave the decoder in another state after a seek than after
decoding everything before the keyframe.

Seek points are the keyframes that are true random-access points, checked in the
bitstream: an H.264 IDR, an HEVC IRAP (IDR, CRA, BLA), a VP8/VP9 key frame. Decoding from
one gives the frames presented at or after it bit for bit as a decode from the start does.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import av

# Decoders (FFmpeg's own) and containers (indexed, seekable) the seek path is verified on.
SEEK_DECODERS = frozenset({"h264", "hevc", "vp8", "vp9"})
SEEK_CONTAINERS = frozenset({"mov", "mp4", "matroska", "webm"})
# Seek only when it skips at least this much video: nearer the start, decoding from the
# first frame costs about as much as the seek and is the simpler path.
SEEK_MIN_SKIP_S = 2.0

_H264_PARAMETER_SETS = frozenset({7, 8, 13, 15})  # SPS, PPS, SPS extension, subset SPS
_HEVC_PARAMETER_SETS = frozenset({32, 33, 34})  # VPS, SPS, PPS


@dataclass
class PacketTable:
    """Every frame of the stream, in presentation order, as the demuxer describes it."""

    pts: list[int]  # sorted, unique
    durations: list[int]  # packet duration of each frame, in the stream's time base
    rank: dict[int, int] = field(repr=False)  # PTS -> source frame index
    # (source index, seek timestamp) of the random-access keyframes other than the first
    # packet, ascending.
    seek_points: list[tuple[int, int]] = field(repr=False)

    @property
    def count(self) -> int:
        return len(self.pts)

    def seek_point(self, first_index: int, min_skip: int) -> tuple[int, int] | None:
        """The last random-access keyframe presented at or before frame ``first_index``.

        None when there is none at least ``min_skip`` frames into the video: decode from
        the start then.
        """
        at = bisect.bisect_right(self.seek_points, (first_index, float("inf"))) - 1
        if at < 0 or self.seek_points[at][0] < max(min_skip, 1):
            return None
        return self.seek_points[at]


def scan_packets(container: av.container.InputContainer, stream: av.video.stream.VideoStream,
                 start_pts: int | None) -> PacketTable | str:
    """The packet table of ``stream``, or why it cannot stand in for a full decode.

    Reasons are short fixed phrases (they key ``DECODE_STATS`` counts).
    """
    formats = set(container.format.name.split(","))
    if not formats & SEEK_CONTAINERS:
        return "container not verified for seeking"
    decoder = stream.codec_context.codec.name
    if decoder not in SEEK_DECODERS:
        return "decoder not verified for seeking"
    bitstream = _Bitstream.for_stream(decoder, stream.codec_context.extradata)
    if isinstance(bitstream, str):
        return bitstream
    entries: list[tuple[int, int]] = []  # (pts, duration) in decode order
    keyframes: list[tuple[int, int]] = []  # (pts, seek timestamp) of random-access keyframes
    for packet in container.demux(stream):
        if not packet.size:
            if packet.pts is None:
                continue  # the demuxer's final flush packet
            return "an empty packet with a timestamp"
        if packet.pts is None:
            return "a packet without PTS"
        if packet.is_corrupt or packet.is_discard:
            return "a packet flagged corrupt or to be discarded"
        reason = bitstream.check(packet, first=not entries)
        if reason:
            return reason
        if entries and packet.is_keyframe and bitstream.random_access(packet):
            # FFmpeg's MP4 and Matroska demuxers seek by PTS: a backward seek to the keyframe's
            # own PTS lands on it (measured; one that lands later is caught by the decode).
            keyframes.append((packet.pts, packet.pts))
        entries.append((packet.pts, packet.duration or 0))
    if not entries:
        return "no packets"
    entries.sort()
    pts = [p for p, _ in entries]
    if start_pts is None or pts[0] != start_pts:
        return "first PTS is not the stream start time"
    intervals = [b - a for a, b in zip(pts, pts[1:])]
    if intervals and min(intervals) <= 0:
        return "two packets share a PTS"
    if intervals and max(intervals) - min(intervals) > 1:
        return "variable frame rate"
    rank = {p: i for i, p in enumerate(pts)}
    seek_points = sorted((rank[p], ts) for p, ts in keyframes)
    return PacketTable(pts, [d for _, d in entries], rank, seek_points)


@dataclass
class _Bitstream:
    """Just enough of the codec's bitstream to tell random-access points and parameter sets."""

    decoder: str
    length_size: int = 0  # NAL length prefix (H.264/HEVC in MP4/Matroska)
    extradata: bytes = b""
    first_sets: set[bytes] = field(default_factory=set)  # parameter sets in the first packet
    # The decoder's parameter sets at any packet are the same whether it decoded every packet
    # before or only the first one and then sought there, when either every in-band set is
    # one of the header's (extradata) or every later in-band set repeats one of the first
    # packet's (which replaced the header's of the same id in both decodes).
    all_in_extradata: bool = True
    later_in_first: bool = True

    @classmethod
    def for_stream(cls, decoder: str, extradata: bytes | None) -> _Bitstream | str:
        extradata = bytes(extradata or b"")
        if decoder == "h264":
            if len(extradata) < 7 or extradata[0] != 1:
                return "H.264 without an avcC header (Annex B)"
            return cls(decoder, (extradata[4] & 3) + 1, extradata)
        if decoder == "hevc":
            if len(extradata) < 23 or extradata[0] != 1:
                return "HEVC without an hvcC header (Annex B)"
            return cls(decoder, (extradata[21] & 3) + 1, extradata)
        return cls(decoder)

    def _nal_units(self, data: bytes) -> list[tuple[int, int, int]] | None:
        """``(type, start, end)`` of each NAL unit of a length-prefixed packet; None if malformed."""
        units, at, size = [], 0, self.length_size
        while at < len(data):
            length = int.from_bytes(data[at:at + size], "big")
            start, at = at + size, at + size + length
            if length <= 0 or at > len(data):
                return None
            kind = data[start] & 0x1F if self.decoder == "h264" else (data[start] >> 1) & 0x3F
            units.append((kind, start, at))
        return units

    def check(self, packet: av.Packet, *, first: bool) -> str | None:
        """Why this packet rules the seek path out (parameter sets that change), else None."""
        if not self.length_size:
            return None
        data = bytes(packet)
        sets = _H264_PARAMETER_SETS if self.decoder == "h264" else _HEVC_PARAMETER_SETS
        h264, size, at, end = self.decoder == "h264", self.length_size, 0, len(data)
        while at < end:  # the NAL units (inline: this runs for every packet)
            length = int.from_bytes(data[at:at + size], "big")
            start, at = at + size, at + size + length
            if length <= 0 or at > end:
                return "a malformed NAL unit"
            kind = data[start] & 0x1F if h264 else (data[start] >> 1) & 0x3F
            if kind not in sets:
                continue
            nal = data[start:at]
            self.all_in_extradata = self.all_in_extradata and nal in self.extradata
            if first:
                self.first_sets.add(nal)
            else:
                self.later_in_first = self.later_in_first and nal in self.first_sets
            if not (self.all_in_extradata or self.later_in_first):
                # A decode after a seek would not have the sets a full decode has there.
                return "in-band parameter sets change in the middle of the stream"
        return None

    def random_access(self, packet: av.Packet) -> bool:
        """Whether decoding may start at this packet (and give exact frames from it on)."""
        data = bytes(packet)
        if self.decoder == "vp8":
            return len(data) >= 6 and not data[0] & 1 and data[3:6] == b"\x9d\x01\x2a"
        if self.decoder == "vp9":
            return _vp9_key_frame(data)
        units = self._nal_units(data)
        if not units:
            return False
        if self.decoder == "h264":
            slices = {kind for kind, _, _ in units if 1 <= kind <= 5}
            return slices == {5}  # IDR slices only
        slices = {kind for kind, _, _ in units if kind < 32}
        return bool(slices) and all(16 <= kind <= 21 for kind in slices)  # IRAP slices only


def _vp9_key_frame(data: bytes) -> bool:
    """The first frame of the packet is a shown VP9 key frame (uncompressed header)."""
    if not data:
        return False
    bits = data[0]
    if bits >> 6 != 2:  # frame_marker
        return False
    profile = ((bits >> 5) & 1) | (((bits >> 4) & 1) << 1)
    shift = 2 if profile == 3 else 3  # profile 3 has a reserved bit first
    show_existing_frame = (bits >> shift) & 1
    frame_type = (bits >> (shift - 1)) & 1
    return not show_existing_frame and frame_type == 0

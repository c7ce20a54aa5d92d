"""``evr1 cache build|report``: build the frame cache offline, describe a store."""

from __future__ import annotations

import argparse
import json
from collections import Counter

from easyvideor1.errors import CacheError, ConfigError
from easyvideor1.video.metadata import FACTOR_QWEN2, FACTOR_QWEN3, ImageParams, VideoParams

FAMILY_FACTORS = {
    "qwen2-vl": FACTOR_QWEN2,
    "qwen2.5-vl": FACTOR_QWEN2,
    "qwen3-vl": FACTOR_QWEN3,
    "qwen3.5": FACTOR_QWEN3,
}
# Exit status when the run finished but some rows or media failed (1 is "could not run").
EXIT_PARTIAL = 3


def register(subparsers) -> None:
    parser = subparsers.add_parser("cache", help="build or inspect the frame cache")
    sub = parser.add_subparsers(dest="cache_command", metavar="ACTION")

    video, image = VideoParams(), ImageParams()
    build = sub.add_parser("build", help="decode every video/image of a data file into a frame store",
                           description="Decode each distinct video/image once into the store. Exit status: "
                                       f"0 all good, {EXIT_PARTIAL} some rows or media failed (see --report), "
                                       "1 the build could not run.")
    build.add_argument("data", help="JSONL (or JSON list) data file")
    build.add_argument("--store", required=True, help="store URL: /abs/dir, file:///abs/dir or s3://bucket/prefix")
    build.add_argument("--fps", type=float, default=video.fps, help=f"sampling rate (default {video.fps})")
    build.add_argument("--max-frames", type=int, default=video.max_frames)
    build.add_argument("--min-frames", type=int, default=video.min_frames)
    build.add_argument("--max-pixels", type=int, default=video.max_pixels, help="per video frame")
    build.add_argument("--min-pixels", type=int, default=video.min_pixels, help="per video frame")
    build.add_argument("--image-max-pixels", type=int, default=image.max_pixels)
    build.add_argument("--image-min-pixels", type=int, default=image.min_pixels)
    build.add_argument("--factor", type=int, help="resize factor (28: Qwen2/2.5-VL, 32: Qwen3-VL)")
    build.add_argument("--family", choices=sorted(FAMILY_FACTORS), help="sets --factor from the model family")
    build.add_argument("--workers", type=int, default=2, help="decoding processes (default 2)")
    build.add_argument("--timeout", type=float, default=600.0,
                       help="seconds per file before its decoding process is killed (default 600)")
    build.add_argument("--report", help="write failures and bad rows here (JSONL)")
    build.add_argument("--media-root", help="resolve relative media paths here instead of the data file's folder")
    build.add_argument("--no-check-ground-truth", action="store_true",
                       help="do not check each row's problem type and ground truth with its scorer (as "
                            "`evr1 data validate` does; a row that fails is a bad row, not built)")
    build.add_argument("--json", action="store_true", help="print the summary as JSON")
    build.add_argument("--no-progress", action="store_true", help="no progress bars")
    build.set_defaults(func=_build)

    report = sub.add_parser("report", help="count the blobs of a store, their bytes, by media kind")
    report.add_argument("--store", required=True, help="store URL")
    report.add_argument("--json", action="store_true", help="print JSON")
    report.set_defaults(func=_report)
    parser.set_defaults(func=lambda a: parser.print_help() or 2)


def params_from_args(args: argparse.Namespace) -> tuple[VideoParams, ImageParams]:
    factor = args.factor
    if args.family:
        family_factor = FAMILY_FACTORS[args.family]
        if factor is not None and factor != family_factor:
            raise ConfigError(f"--factor {factor} contradicts --family {args.family} (factor {family_factor})")
        factor = family_factor
    factor = factor or FACTOR_QWEN2
    if args.workers < 1:
        raise ConfigError("--workers must be >= 1")
    if args.timeout <= 0:
        raise ConfigError("--timeout must be > 0")
    try:
        video = VideoParams(fps=args.fps, min_frames=args.min_frames, max_frames=args.max_frames,
                            min_pixels=args.min_pixels, max_pixels=args.max_pixels, factor=factor)
        image = ImageParams(min_pixels=args.image_min_pixels, max_pixels=args.image_max_pixels, factor=factor)
    except ValueError as exc:
        raise ConfigError(f"invalid cache parameters: {exc}") from None
    return video, image


def _build(args: argparse.Namespace) -> int:
    from easyvideor1.cache.builder import build_cache

    video, image = params_from_args(args)
    check = None
    if not args.no_check_ground_truth:
        from easyvideor1.rewards.gt_check import sample_check as check
    summary = build_cache(args.data, args.store, video_params=video, image_params=image, workers=args.workers,
                          timeout=args.timeout, report_path=args.report, media_root=args.media_root,
                          progress=not args.no_progress, check_ground_truth=check)
    if args.json:
        print(json.dumps(summary.as_dict(), indent=2))
    else:
        print(summary.format())
        if args.report:
            print(f"report: {args.report}")
    return 0 if summary.ok else EXIT_PARTIAL


def _report(args: argparse.Namespace) -> int:
    from easyvideor1.cache.blob import blob_metadata
    from easyvideor1.cache.stores.base import open_store
    from easyvideor1.console import Progress

    count_by_kind: Counter[str] = Counter()
    bytes_by_kind: Counter[str] = Counter()
    with open_store(args.store, create=False) as store:
        keys = list(store.keys())
        stats = store.stats()
        for key in Progress("read headers", total=len(keys), unit="blob", enabled=len(keys) >= 200).each(keys):
            head = store.read_head(key)
            if head is None:  # deleted since the listing
                continue
            try:
                kind = blob_metadata(head, f"cache key {key}").get("evr1.kind", "unknown")
            except CacheError:
                kind = "corrupt"
            count_by_kind[kind] += 1
            bytes_by_kind[kind] += _blob_size(head)
    result = {"store": stats.url, "count": stats.count, "bytes": stats.bytes,
              "by_kind": {k: {"count": count_by_kind[k], "bytes": bytes_by_kind[k]} for k in sorted(count_by_kind)}}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"store: {result['store']}")
        print(f"blobs: {stats.count}  bytes: {stats.bytes} ({stats.bytes / 2**20:.1f} MiB)")
        for kind, entry in result["by_kind"].items():
            print(f"  {kind}: {entry['count']} blobs, {entry['bytes']} bytes")
    return 0


def _blob_size(head: bytes) -> int:
    """Header length + tensor bytes, from the header alone (no download of the frames)."""
    from easyvideor1.cache.blob import read_header

    try:
        header, data_start = read_header(head)
    except CacheError:
        return len(head)
    entry = header.get("frames", {})
    offsets = entry.get("data_offsets", [0, 0]) if isinstance(entry, dict) else [0, 0]
    return data_start + int(offsets[1])

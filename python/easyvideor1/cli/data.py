"""``evr1 data``: validate data files, generate synthetic tasks and benchmark videos."""

from __future__ import annotations

import argparse
import json

from easyvideor1.data.loader import validate_file
from easyvideor1.data.synth import DEFAULT_OFFLINE_TYPE, SYNTH_TYPES, generate_synthetic
from easyvideor1.data.synth_render import make_long_video


def register(subparsers: argparse._SubParsersAction) -> None:
    data = subparsers.add_parser("data", help="validate data files, generate synthetic data")
    sub = data.add_subparsers(dest="data_command", metavar="SUBCOMMAND", required=True)

    validate = sub.add_parser("validate", help="check every row of a JSON/JSONL data file; exit 1 on problems")
    validate.add_argument("file", help="data file (JSONL, or a JSON list of rows)")
    validate.add_argument("--media-root", default=None,
                          help="folder relative media paths resolve against (default: the file's folder)")
    validate.add_argument("--no-check-media", action="store_true", help="do not check that media files exist")
    validate.add_argument("--json", action="store_true", help="print the report as JSON")
    validate.set_defaults(func=_validate)

    synth = sub.add_parser("synth", help="generate synthetic video/image/text tasks with exact ground truth")
    synth.add_argument("--out", required=True, help="output folder (media/, train.jsonl, val.jsonl)")
    synth.add_argument("--n-per-type", type=int, default=8, help="samples per type, train + val (default 8)")
    synth.add_argument("--seed", type=int, default=0)
    synth.add_argument("--types", nargs="+", choices=SYNTH_TYPES, default=None, metavar="TYPE",
                       help=f"subset of types (default: all): {', '.join(SYNTH_TYPES)}")
    synth.add_argument("--size", type=int, default=64, help="frame width and height in pixels (default 64)")
    synth.add_argument("--fps", type=float, default=8.0, help="video frame rate (default 8)")
    synth.add_argument("--seconds", type=float, default=2.0, help="video duration (default 2.0)")
    synth.add_argument("--val-fraction", type=float, default=0.2, help="held-out share of each type (default 0.2)")
    synth.add_argument("--offline-type", default=DEFAULT_OFFLINE_TYPE, choices=[*SYNTH_TYPES, "none"],
                       help=f"type whose train rows carry offline trajectories (default {DEFAULT_OFFLINE_TYPE})")
    synth.add_argument("--offline-fraction", type=float, default=0.5,
                       help="share of that type's train rows with an offline trajectory (default 0.5)")
    synth.set_defaults(func=_synth)

    from easyvideor1.cli._pass_rate import add_parser as add_pass_rate_parser

    add_pass_rate_parser(sub)
    long_video = sub.add_parser("long-video", help="write an H.264 benchmark video with moving content")
    long_video.add_argument("path")
    long_video.add_argument("--seconds", type=float, default=60.0)
    long_video.add_argument("--fps", type=float, default=30.0)
    long_video.add_argument("--width", type=int, default=640)
    long_video.add_argument("--height", type=int, default=360)
    long_video.add_argument("--seed", type=int, default=0)
    long_video.set_defaults(func=_long_video)


def _validate(args: argparse.Namespace) -> int:
    report = validate_file(args.file, media_root=args.media_root, check_media=not args.no_check_media)
    if args.json:
        print(json.dumps({
            "path": report.path, "ok": report.ok, "valid_rows": len(report.samples),
            "by_problem_type": dict(report.by_problem_type), "by_data_type": dict(report.by_data_type),
            "problems": [p.as_dict() for p in report.problems],
        }, indent=2))
    else:
        print(report.format())
    return 0 if report.ok else 1


def _synth(args: argparse.Namespace) -> int:
    report = generate_synthetic(
        args.out, args.n_per_type, args.seed, args.types, size=args.size, fps=args.fps, seconds=args.seconds,
        val_fraction=args.val_fraction, offline_type=None if args.offline_type == "none" else args.offline_type,
        offline_fraction=args.offline_fraction,
    )
    print(report.summary())
    return 0


def _long_video(args: argparse.Namespace) -> int:
    path = make_long_video(args.path, seconds=args.seconds, fps=args.fps, width=args.width, height=args.height,
                           seed=args.seed)
    print(f"wrote {path}")
    return 0

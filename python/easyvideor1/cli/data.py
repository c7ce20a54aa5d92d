"""``evr1 data``: validate, convert, export and prepare data files, generate synthetic tasks and benchmark videos."""

from __future__ import annotations

import argparse
import json
import sys

from easyvideor1.config.cli import add_config_arguments, config_from_args
from easyvideor1.data.convert import (
    EXPORT_FORMATS,
    FROM_FORMATS,
    bare_prompt,
    export_trl,
    export_verl,
    read_samples,
)
from easyvideor1.data.loader import validate_file, write_samples
from easyvideor1.data.synth import DEFAULT_OFFLINE_TYPE, SYNTH_TYPES, generate_synthetic
from easyvideor1.data.synth_render import make_long_video

# Flags of `evr1 data prepare` that are run-config fields (named after them: --store is
# data.frame_cache.store); the frame budgets are data.* fields too, set in RUN.yaml or KEY=VALUE.
PREPARE_FLAGS = ("data.frame_cache.store", "data.frame_cache.workers", "data.frame_cache.decode_timeout_s",
                 "data.media_root", "data.prompt_template_dir")
# Exit status when the manifest was written but some rows were left out (1: could not run).
EXIT_PARTIAL = 3


def register(subparsers: argparse._SubParsersAction) -> None:
    data = subparsers.add_parser("data", help="validate data files, generate synthetic data")
    sub = data.add_subparsers(dest="data_command", metavar="SUBCOMMAND", required=True)

    validate = sub.add_parser("validate", help="check every row of a JSON/JSONL data file; exit 1 on problems")
    validate.add_argument("file", help="data file (JSONL, or a JSON list of rows)")
    validate.add_argument("--media-root", default=None,
                          help="folder relative media paths resolve against (default: the file's folder)")
    validate.add_argument("--no-check-media", action="store_true",
                          help="do not check that media files exist (nor, for a prepared manifest's rows, that "
                               "their keys are in the frame store)")
    validate.add_argument("--store", default=None, metavar="URL",
                          help="prepared rows: the frame store whose keys are checked, as the pods that read the "
                               "manifest see it (default: the store each row records)")
    validate.add_argument("--no-check-ground-truth", action="store_true",
                          help="do not parse each ground truth with its problem type's scorer")
    validate.add_argument("--json", action="store_true", help="print the report as JSON")
    validate.set_defaults(func=_validate)

    convert = sub.add_parser(
        "convert", help="convert a data file (evr1, Video-R1, veRL parquet) to the project's JSONL",
        description="Read IN in the --from format, check every row (schema, and that its ground truth parses "
                    "for its problem type) and write the project's JSONL (docs/data-format.md). Rows with "
                    "problems are listed; nothing is written unless --skip-bad. Exit 1 when nothing was "
                    "written.")
    convert.add_argument("--from", dest="fmt", required=True, choices=FROM_FORMATS, help="the input's format")
    _add_input_output(convert, "OUT.jsonl")
    convert.set_defaults(func=_convert)

    export = sub.add_parser(
        "export", help="export a data file for veRL (parquet) or TRL (JSONL/parquet)",
        description="Write IN (any --from format) as a veRL parquet file (data_source, prompt, ability, "
                    "reward_model, extra_info, images, videos) or a TRL dataset (prompt, answer, problem_type, "
                    "options, ...; parquet when OUT ends in .parquet, else JSONL). Prompts are rendered with the "
                    "project's templates unless --raw-prompt. Columns: docs/data-format.md.")
    export.add_argument("--to", dest="target", required=True, choices=EXPORT_FORMATS)
    export.add_argument("--from", dest="fmt", default="evr1", choices=FROM_FORMATS,
                        help="the input's format (default evr1)")
    export.add_argument("--raw-prompt", action="store_true",
                        help="the question as written instead of the rendered prompt template")
    export.add_argument("--template-dir", default=None, help="prompt templates that replace the shipped ones")
    export.add_argument("--no-reasoning", action="store_true",
                        help="prompts ask for the answer only (no <think> step)")
    _add_input_output(export, "OUT")
    export.set_defaults(func=_export)

    prepare = sub.add_parser(
        "prepare", help="decode every medium once into the frame store; write a prepared manifest",
        description="Build the frame cache of every video/image of DATA for each --model's family (frame "
                    "budgets from the run config's data.* fields), then write PREPARED.jsonl: the rows with "
                    "each medium's cache key and metadata and each prompt's token count per family, so "
                    "nothing downstream needs the raw media. Media may be paths or s3://bucket/key URLs. "
                    "Re-running reuses what is stored. Rows whose media fail are left out and listed in "
                    f"<out stem>.report.jsonl. Exit status: 0 all good, {EXIT_PARTIAL} some rows left out, "
                    "1 could not run. See docs/frame-cache.md.")
    prepare.add_argument("data", help="data file (JSONL, or a JSON list of rows; a prepared manifest works too); "
                                      "a path or an s3://bucket/key URL")
    add_config_arguments(prepare, PREPARE_FLAGS)
    prepare.add_argument("--model", action="append", required=True, metavar="DIR",
                         help="model directory; repeat for more families (one model per family)")
    prepare.add_argument("--out", required=True, metavar="PREPARED.jsonl",
                         help="the manifest to write: a path, or an s3://bucket/key URL (written locally, then "
                              "uploaded with its report; a re-run reads the previous manifest from there)")
    prepare.add_argument("--media-per-batch", type=int, default=256,
                         help="media fetched and built at a time: bounds the temporary copies of s3:// media "
                              "(default 256)")
    prepare.add_argument("--refetch-remote", action="store_true",
                         help="fetch every s3:// medium again, even when its ETag and size are those the "
                              "previous manifest recorded")
    prepare.add_argument("--json", action="store_true", help="print the summary as JSON")
    prepare.add_argument("--no-progress", action="store_true", help="no progress bars")
    prepare.set_defaults(func=_prepare)

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


def _add_input_output(parser: argparse.ArgumentParser, out_metavar: str) -> None:
    """IN, --out and the flags of reading IN, shared by ``convert`` and ``export``."""
    parser.add_argument("file", metavar="IN", help="the input file")
    parser.add_argument("--out", required=True, metavar=out_metavar)
    parser.add_argument("--media-root", default=None,
                        help="folder relative media paths resolve against (default: the input's folder)")
    parser.add_argument("--problem-type", default=None,
                        help="with --from verl: the problem type of rows without extra_info.problem_type "
                             "(default: their data_source)")
    parser.add_argument("--skip-bad", action="store_true", help="write the good rows even when some have problems")
    parser.add_argument("--no-check-ground-truth", action="store_true",
                        help="do not parse each ground truth with its problem type's scorer")


def _validate(args: argparse.Namespace) -> int:
    checks = []
    if not args.no_check_ground_truth:
        from easyvideor1.rewards.gt_check import sample_check

        checks.append(sample_check)
    stores = _KeyLookup(args.store)
    if not args.no_check_media:
        from easyvideor1.data.prepared import prepared_row_check

        checks.append(prepared_row_check(stores.exists))
    try:
        report = validate_file(args.file, media_root=args.media_root, check_media=not args.no_check_media,
                               check_ground_truth=lambda sample: next(filter(None, (c(sample) for c in checks)), None))
    finally:
        stores.close()
    if args.json:
        print(json.dumps({
            "path": report.path, "ok": report.ok, "valid_rows": len(report.samples),
            "by_problem_type": dict(report.by_problem_type), "by_data_type": dict(report.by_data_type),
            "problems": [p.as_dict() for p in report.problems],
        }, indent=2))
    else:
        print(report.format())
    return 0 if report.ok else 1


class _KeyLookup:
    """Whether a key is in a frame store: ``--store`` when given, else the URL the row records;
    each store opened once (never created)."""

    def __init__(self, store: str | None):
        self.store, self.open = store, {}

    def exists(self, recorded: str, key: str) -> bool:
        from easyvideor1.cache.stores.base import open_store

        url = self.store or recorded
        if url not in self.open:
            self.open[url] = open_store(url, create=False)
        return self.open[url].exists(key)

    def close(self) -> None:
        for store in self.open.values():
            store.close()


def _read_checked(args: argparse.Namespace) -> list | None:
    """The input's samples, or None (after printing every problem) when they must not be written."""
    check = None
    if not args.no_check_ground_truth:
        from easyvideor1.rewards.gt_check import sample_check as check
    samples, problems = read_samples(args.file, args.fmt, media_root=args.media_root, check_ground_truth=check,
                                     verl_problem_type=args.problem_type)
    for problem in problems[:200]:
        print(problem.describe(), file=sys.stderr)
    if len(problems) > 200:
        print(f"... and {len(problems) - 200} more", file=sys.stderr)
    if problems and not args.skip_bad:
        print(f"{args.file}: {len(problems)} problem(s); nothing written (--skip-bad writes the "
              f"{len(samples)} good row(s))", file=sys.stderr)
        return None
    if not samples:
        print(f"{args.file}: no rows to write", file=sys.stderr)
        return None
    return samples


def _convert(args: argparse.Namespace) -> int:
    samples = _read_checked(args)
    if samples is None:
        return 1
    path = write_samples(args.out, samples)
    print(f"wrote {len(samples)} row(s) to {path}")
    return 0


def _export(args: argparse.Namespace) -> int:
    samples = _read_checked(args)
    if samples is None:
        return 1
    render = bare_prompt
    if not args.raw_prompt:
        from easyvideor1.prompts import PromptRenderer
        from easyvideor1.prompts.fields import sample_fields

        renderer = PromptRenderer(args.template_dir, reasoning=not args.no_reasoning)

        def render(sample):
            return renderer.render(sample_fields(sample))

    writer = export_verl if args.target == "verl" else export_trl
    path = writer(samples, args.out, render=render)
    print(f"wrote {len(samples)} row(s) for {args.target} to {path}")
    return 0


def _prepare(args: argparse.Namespace) -> int:
    from easyvideor1.train.prepare import prepare

    summary = prepare(args.data, config_from_args(args), args.model, args.out, progress=not args.no_progress,
                      media_per_batch=args.media_per_batch, trust_etag=not args.refetch_remote)
    print(json.dumps(summary.as_dict(), indent=2) if args.json else summary.format())
    return 0 if summary.ok else EXIT_PARTIAL


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

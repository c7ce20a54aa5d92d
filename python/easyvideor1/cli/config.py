"""``evr1 config show|docs|check``: the resolved config, the field reference, or a config's check
and GPU memory estimate (config/memory.py)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from easyvideor1.config import config_reference, dump_config, load_config
from easyvideor1.errors import ConfigError

# A recipe's statement of the GPU memory it needs (examples/configs/), checked against the estimate.
STATED_MEMORY = re.compile(r"^#\s*gpu-memory-gib:\s*(\S+)\s*$")


def stated_memory(path: str | Path) -> tuple[int, int] | None:
    """``(line number, GiB)`` of the file's ``# gpu-memory-gib: N`` line, if it has one."""
    for number, line in enumerate(Path(path).read_text().splitlines(), start=1):
        match = STATED_MEMORY.match(line.strip())
        if match:
            try:
                return number, int(match.group(1))
            except ValueError:
                raise ConfigError(f"{path}:{number}: gpu-memory-gib must be a whole number of GiB, "
                                  f"got {match.group(1)!r}") from None
    return None


def _frame_counts(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ConfigError(f"--frames: expected comma-separated frame counts, got {text!r}") from None
    if not counts or min(counts) < 1:
        raise ConfigError(f"--frames: expected frame counts >= 1, got {text!r}")
    return counts


def _check(args) -> int:
    from easyvideor1.config.memory import estimate_memory, report_lines

    cfg = load_config(args.config, args.overrides)
    print(f"{args.config}: valid run config")
    if not cfg.worker.actor.model_path:
        print("memory estimate: worker.actor.model_path is empty")
        return 0
    print("\n".join(report_lines(cfg, _frame_counts(args.frames))))
    stated = stated_memory(args.config) if not args.overrides else None
    estimate = estimate_memory(cfg).gpu_gib
    if stated is not None and stated[1] != estimate:
        print(f"{args.config}:{stated[0]}: states gpu-memory-gib {stated[1]}, the estimate is {estimate}",
              file=sys.stderr)
        return 1
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser("config", help="show the resolved run config or its reference")
    sub = parser.add_subparsers(dest="config_command", metavar="ACTION")
    show = sub.add_parser("show", help="print the config after defaults and overrides")
    show.add_argument("config", nargs="?", help="YAML file (defaults only when omitted)")
    show.add_argument("overrides", nargs="*", help="dotted KEY=VALUE overrides")
    show.set_defaults(func=lambda a: print(dump_config(load_config(a.config, a.overrides)), end="") or 0)
    docs = sub.add_parser("docs", help="print the markdown reference of every field")
    docs.set_defaults(func=lambda a: print(config_reference(), end="") or 0)
    check = sub.add_parser(
        "check", help="validate a run config and print its GPU memory estimate",
        description="Validate the config (errors name the file, line and field), then estimate the GPU memory "
                    "per GPU: training state under FSDP, bf16 weights, activations of the largest micro-batch, "
                    "vLLM's share (docs/recipes.md). A file with a '# gpu-memory-gib: N' line must state the "
                    "estimate (exit 1 otherwise).")
    check.add_argument("config", help="run config YAML")
    check.add_argument("overrides", nargs="*", help="dotted KEY=VALUE overrides")
    check.add_argument("--frames", metavar="N,N,...", help="frame counts of the per-frame table "
                       "(default: 16,32,64,128,256 and data.video_max_frames)")
    check.set_defaults(func=_check)
    parser.set_defaults(func=lambda a: parser.print_help() or 2)

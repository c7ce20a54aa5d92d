"""Entry point of ``evr1``.

Command groups are discovered, not listed: every module in this package that defines
``register(subparsers)`` adds its commands, and so does every ``easyvideor1.cli`` entry
point (that is how ``services/`` adds ``evr1 serve`` without the library importing it).
Each command sets ``func(args) -> int`` on its parser.

The long-running commands (:data:`CONSOLE_COMMANDS`) run in console mode (easyvideor1/logging.py):
a progress line per job, each warning once, third-party INFO off the console and everything in
the run's log file; ``evr1 --verbose COMMAND`` (or ``EVR1_VERBOSE=1``) puts everything on the console.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
from importlib.metadata import entry_points
from pathlib import Path

from easyvideor1 import __version__
from easyvideor1.errors import EasyVideoR1Error


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="evr1", description="easyvideor1: RLVR for video VLMs")
    parser.add_argument("--version", action="version", version=f"easyvideor1 {__version__}")
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=os.environ.get("EVR1_VERBOSE") == "1",
        help="every log line on the console, third-party INFO and repeated warnings included "
        "(default: a progress line per job, each warning once; all lines go to the run's log)",
    )
    parser.add_argument(
        "--log-file",
        metavar="PATH",
        help="the log file of a long-running command (default: evr1.log in its run directory; "
        "`data prepare`: next to its manifest)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    import easyvideor1.cli as package

    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if info.name == "main" or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"easyvideor1.cli.{info.name}")
        if hasattr(module, "register"):
            module.register(sub)
    for ep in entry_points(group="easyvideor1.cli"):
        ep.load()(sub)
    return parser


# Commands (with their sub-command) that run in console mode; services keep plain logging, which
# goes to their own log files whole.
CONSOLE_COMMANDS = {("demo",), ("train",), ("eval",), ("up",), ("cache", "build"), ("data", "prepare"),
                    ("data", "filter-by-pass-rate")}


def console_mode(args: argparse.Namespace) -> bool:
    command = getattr(args, "command", None)
    sub = getattr(args, f"{command}_command", None)
    return (command,) in CONSOLE_COMMANDS or (command, sub) in CONSOLE_COMMANDS


def _default_log_file(args: argparse.Namespace) -> Path | None:
    """For a command without a run directory of its own (the others attach theirs)."""
    out = getattr(args, "out", None)
    if (
        (args.command, getattr(args, "data_command", None)) == ("data", "prepare")
        and out
        and "://" not in out
    ):
        return Path(out).with_suffix(".log")
    return None


def main(argv: list[str] | None = None) -> int:
    from easyvideor1.logging import attach_log_file, finish_console, setup_console

    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    quiet = console_mode(args)
    if quiet:
        setup_console(verbose=args.verbose)
        log_file = args.log_file or _default_log_file(args)
        if log_file:
            attach_log_file(log_file, pinned=bool(args.log_file))
    try:
        return int(func(args) or 0)
    except EasyVideoR1Error as exc:
        print(f"evr1: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("evr1: interrupted", file=sys.stderr)
        return 130
    finally:
        if quiet:
            finish_console()


if __name__ == "__main__":
    sys.exit(main())

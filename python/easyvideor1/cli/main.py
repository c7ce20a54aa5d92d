"""Entry point of ``evr1``.

Command groups are discovered, not listed: every module in this package that defines
``register(subparsers)`` adds its commands, and so does every ``easyvideor1.cli`` entry
point (that is how ``services/`` adds ``evr1 serve`` without the library importing it).
Each command sets ``func(args) -> int`` on its parser.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from importlib.metadata import entry_points

from easyvideor1 import __version__
from easyvideor1.errors import EasyVideoR1Error


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="evr1", description="easyvideor1: RLVR for video VLMs")
    parser.add_argument("--version", action="version", version=f"easyvideor1 {__version__}")
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


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        return int(func(args) or 0)
    except EasyVideoR1Error as exc:
        print(f"evr1: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("evr1: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

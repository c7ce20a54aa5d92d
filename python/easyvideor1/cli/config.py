"""``evr1 config show|docs``: print the resolved config or the field reference."""

from __future__ import annotations

from easyvideor1.config import config_reference, dump_config, load_config


def register(subparsers) -> None:
    parser = subparsers.add_parser("config", help="show the resolved run config or its reference")
    sub = parser.add_subparsers(dest="config_command", metavar="ACTION")
    show = sub.add_parser("show", help="print the config after defaults and overrides")
    show.add_argument("config", nargs="?", help="YAML file (defaults only when omitted)")
    show.add_argument("overrides", nargs="*", help="dotted KEY=VALUE overrides")
    show.set_defaults(func=lambda a: print(dump_config(load_config(a.config, a.overrides)), end="") or 0)
    docs = sub.add_parser("docs", help="print the markdown reference of every field")
    docs.set_defaults(func=lambda a: print(config_reference(), end="") or 0)
    parser.set_defaults(func=lambda a: parser.print_help() or 2)

"""Command lines that read the run config: ``--config RUN.yaml``, dotted overrides, and flags.

Every service and worker command takes the same run-config file. The flags a command keeps
are overrides of config fields and carry the field's own name (``--max-batch`` is
``serve.reward.max_batch``). A flag made by :func:`add_config_arguments` has no default and no
type of its own: its help is the field's description and default, read from the schema, and its
value reaches the field as ``KEY=VALUE`` and is validated there, so it means exactly what the
field means. ``KEY=VALUE`` arguments override any field.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from easyvideor1.config.loader import load_config
from easyvideor1.config.schema import RunConfig
from easyvideor1.errors import ConfigError

_DEST_PREFIX = "config_field__"


def field_info(dotted: str) -> tuple[Any, Any]:
    """The pydantic FieldInfo of ``a.b.c`` in :class:`RunConfig` and its default value."""
    model: type[BaseModel] = RunConfig
    default: Any = None
    parts = dotted.split(".")
    for i, part in enumerate(parts):
        info = model.model_fields.get(part)
        if info is None:
            raise KeyError(f"no config field {dotted!r}")
        if i == len(parts) - 1:
            default = info.get_default(call_default_factory=True)
            return info, default
        model = info.annotation  # a section
    raise KeyError(dotted)


def flag_name(dotted: str) -> str:
    return "--" + dotted.rsplit(".", 1)[-1].replace("_", "-")


def field_help(dotted: str) -> str:
    """A flag's help: the field's description, its dotted name and its default."""
    info, default = field_info(dotted)
    return f"{(info.description or '').rstrip('.')} [config {dotted}, default {default!r}]"


def add_config_arguments(parser: argparse.ArgumentParser, fields: Sequence[str], *,
                         overrides: bool = True) -> None:
    """``--config``, optional positional ``KEY=VALUE`` overrides, and one flag per dotted field."""
    parser.add_argument("--config", metavar="RUN.yaml", default=None,
                        help="the run config (docs/config.md); flags and KEY=VALUE override its fields")
    if overrides:
        parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted run-config overrides")
    for dotted in fields:
        info, _ = field_info(dotted)
        dest, help_text = _DEST_PREFIX + dotted.replace(".", "__"), field_help(dotted)
        if info.annotation is bool:  # a switch: the flag alone sets the field true
            parser.add_argument(flag_name(dotted), dest=dest, default=None, action="store_const", const="true",
                                help=help_text)
        else:
            parser.add_argument(flag_name(dotted), dest=dest, default=None, metavar="VALUE", help=help_text)


def config_overrides(args: argparse.Namespace) -> list[str]:
    """The dotted overrides given on the command line: positional ones, then the flags."""
    out = list(getattr(args, "overrides", None) or [])
    for dest, value in vars(args).items():
        if dest.startswith(_DEST_PREFIX) and value is not None:
            out.append(f"{dest[len(_DEST_PREFIX):].replace('__', '.')}={value}")
    return out


def config_from_args(args: argparse.Namespace, extra: Sequence[str] = ()) -> RunConfig:
    """The run config of ``--config`` with the command line's overrides (and ``extra`` last)."""
    overrides = [*config_overrides(args), *extra]
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"argument {item!r}: expected KEY=VALUE with a dotted run-config key")
    return load_config(args.config, overrides)

"""Multi-document YAML output that ``kubectl apply -f -`` reads back unchanged."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml


class _BlockDumper(yaml.SafeDumper):
    """Multi-line strings (the run config, runtimeEnvYAML) as ``|`` blocks, so they stay readable."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if "\n" in value:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


_BlockDumper.add_representer(str, _str)


def dump_manifests(objects: Iterable[dict[str, Any]]) -> str:
    return yaml.dump_all(list(objects), Dumper=_BlockDumper, sort_keys=False, explicit_start=True,
                         default_flow_style=False)

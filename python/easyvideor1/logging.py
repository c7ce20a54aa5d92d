"""Structured logging: one line per event, ``key=value`` pairs after the event name."""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import Any

_CONFIGURED = False


def get_logger(name: str) -> logging.Logger:
    global _CONFIGURED
    if not _CONFIGURED:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
        root = logging.getLogger("easyvideor1")
        root.addHandler(handler)
        root.setLevel(os.environ.get("EVR1_LOG_LEVEL", "INFO").upper())
        root.propagate = False
        _CONFIGURED = True
    return logging.getLogger(name if name.startswith("easyvideor1") else f"easyvideor1.{name}")


def event(logger: logging.Logger, name: str, level: int = logging.INFO, **fields: Any) -> None:
    """Log ``name key=value ...`` with values JSON-encoded when they are not plain words."""
    parts = [name]
    for key, value in fields.items():
        text = value if isinstance(value, str) and value and " " not in value and "=" not in value else None
        parts.append(f"{key}={text if text is not None else json.dumps(value, default=str)}")
    logger.log(level, " ".join(parts))

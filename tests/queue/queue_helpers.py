"""Helpers shared by the queue tests (a plain module: ``conftest`` names clash across test dirs)."""

from __future__ import annotations

import uuid


def fresh_namespace() -> str:
    """A namespace no other test uses, so tests can share one Redis server."""
    return f"t{uuid.uuid4().hex[:12]}"

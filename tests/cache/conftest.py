"""Cache tests share the media makers of tests/video and never touch the user's hash index."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "video"))


@pytest.fixture(autouse=True)
def private_hash_index(tmp_path_factory, monkeypatch):
    directory = tmp_path_factory.mktemp("hash-index")
    monkeypatch.setenv("EVR1_HASH_INDEX_DIR", str(directory))
    return directory

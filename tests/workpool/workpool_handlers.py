"""Worker functions for tests/workpool: module level, so the pool's workers import them by name."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path


class State:
    def __init__(self, tag: str):
        self.tag = tag
        self.pid = os.getpid()


def init(tag: str = "t") -> State:
    return State(tag)


def init_fails(message: str) -> State:
    print("about to fail: " + message, file=sys.stderr, flush=True)
    raise RuntimeError(message)


def init_exits(code: int) -> State:
    print("exiting during start-up", file=sys.stderr, flush=True)
    os._exit(code)


def handle(state: State, item: dict, context: dict | None) -> dict:
    """``item["do"]``: ``echo`` (default), ``sleep`` (``s`` seconds), ``crash``, ``raise``, ``env``,
    ``spawn`` (start a ``sleep`` child in the worker's group, write its pid to ``pidfile``, hang)."""
    do = item.get("do", "echo")
    if do == "sleep":
        time.sleep(item["s"])
    elif do == "spawn":
        child = subprocess.Popen(["sleep", "600"])
        Path(item["pidfile"]).write_text(str(child.pid))
        time.sleep(600)
    elif do == "crash":
        print("dying on purpose", file=sys.stderr, flush=True)
        os._exit(3)
    elif do == "raise":
        raise ValueError("bad item")
    elif do == "env":
        return {"value": os.environ.get(item["name"]), "pid": state.pid}
    return {"echo": item.get("x"), "pid": state.pid, "tag": state.tag, "context": context}

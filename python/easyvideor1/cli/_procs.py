"""Processes that ``evr1 up`` starts and ``evr1 down`` stops, identified by pid *and* start time.

Every service runs in its own session (``start_new_session``), so its process group id and
session id are the leader's pid. Stopping a service: take a snapshot of its session and of
every descendant (Ray starts job drivers in sessions of their own), SIGTERM the group and the
snapshot, wait, SIGKILL whatever is left. A pid whose start time differs from the recorded
one is a different process (pid reuse) and is never signalled.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

Proc = tuple[int, int]  # (pid, start time in clock ticks since boot)


def _stat(pid: int) -> list[str] | None:
    """Fields after the command name: state, ppid, pgrp, session, ..., starttime at index 19."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return raw[raw.rindex(")") + 2:].split()


def start_time(pid: int) -> int | None:
    fields = _stat(pid)
    return None if fields is None else int(fields[19])


def alive(pid: int, started: int | None) -> bool:
    fields = _stat(pid)
    return fields is not None and fields[0] not in ("Z", "X") and (started is None or int(fields[19]) == started)


def _table() -> dict[int, list[str]]:
    out = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields is not None:
                out[int(entry.name)] = fields
    return out


def session_tree(leader: int) -> list[Proc]:
    """Members of the session ``leader`` started, and all their descendants."""
    table = _table()
    found = {pid for pid, f in table.items() if int(f[3]) == leader}
    children: dict[int, list[int]] = {}
    for pid, f in table.items():
        children.setdefault(int(f[1]), []).append(pid)
    stack = list(found)
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return [(pid, int(table[pid][19])) for pid in sorted(found) if table[pid][0] not in ("Z", "X")]


def spawn(argv: list[str], *, log_path: Path, env: dict[str, str], cwd: Path | None = None) -> dict:
    """Start ``argv`` as the leader of a new session; returns its record for cluster.json."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                cwd=cwd, start_new_session=True)
    return {"pid": proc.pid, "start": start_time(proc.pid), "log": str(log_path), "argv": argv}


def _signal(procs: Iterable[Proc], sig: int) -> None:
    for pid, started in procs:
        if alive(pid, started):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)


def stop_session(record: dict, grace: float) -> list[Proc]:
    """Stop a service and everything it started; returns the processes still alive (should be none)."""
    leader, started = int(record["pid"]), record.get("start")
    procs = session_tree(leader) if alive(leader, started) or session_tree(leader) else []
    if not procs:
        return []
    if alive(leader, started):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(leader, signal.SIGTERM)
    _signal(procs, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(alive(*p) for p in procs):
        time.sleep(0.2)
    _signal(procs, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(alive(*p) for p in procs):
        time.sleep(0.1)
    return [p for p in procs if alive(*p)]


def free_port(pair_offset: int | None = None) -> int:
    """A free loopback port; with ``pair_offset`` one (below 30000) whose ``port + offset`` is free too."""
    for _ in range(500):
        if pair_offset is None:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                return s.getsockname()[1]
        port = random.randrange(20000, 30000)
        if port_free(port) and port_free(port + pair_offset):
            return port
    raise OSError("no free port pair found")


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
        return True
    return False

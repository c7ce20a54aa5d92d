"""Processes that ``evr1 up`` starts and ``evr1 down`` stops, identified by pid *and* start time,
and the root cause of one that failed, read from its log.

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
import re
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
        offset = log.tell()  # logs are appended to across runs: this run's part starts here
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                cwd=cwd, start_new_session=True)
    return {"pid": proc.pid, "start": start_time(proc.pid), "log": str(log_path), "log_offset": offset,
            "argv": argv}


def log_text(record: dict) -> str:
    """What the process of ``record`` wrote to its log (this run only)."""
    try:
        with open(record["log"], "rb") as log:
            log.seek(int(record.get("log_offset", 0)))
            return log.read().decode(errors="replace")
    except OSError:
        return ""


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


# The last line of a Python traceback (``ValueError: ...``, ``ray.exceptions.ActorDiedError: ...``),
# also behind a log prefix such as vLLM's ``(Worker pid=7) ERROR ... [file.py:12] ``.
_EXCEPTION = re.compile(r"(?:^|[\s\]\)>|])((?:[a-z_][\w]*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt)): \S.*")
_BIND = re.compile(r"address already in use|EADDRINUSE", re.IGNORECASE)
_CLI_ERROR = re.compile(r"^(evr1: error: |Error: ).*")  # what a command itself reports before exiting
_NOISE = re.compile(r"^\s*(raise |File \"|During handling|The above exception)")


def root_cause_lines(text: str, limit: int = 8) -> list[str]:
    """The lines of a log that say why a process failed: exception lines and bind failures,
    without the whole log. A line repeated with other numbers (each retry's free memory, a pid)
    is shown once, its last time; the last ``limit`` distinct ones are returned in order."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        if _NOISE.match(line):
            continue
        match = _CLI_ERROR.match(line) or _EXCEPTION.search(line)
        hit = match.group(0).lstrip(" ])>|") if match else line.strip() if _BIND.search(line) else None
        if hit and not hit.endswith("Traceback (most recent call last):"):
            key = re.sub(r"\d+", "#", hit)
            found.pop(key, None)  # re-inserted: ordered by last appearance
            found[key] = hit[:800]
    return list(found.values())[-limit:]


def cli_error(text: str, limit: int = 25) -> list[str]:
    """The last ``evr1: error: ...`` message of a log with the lines after it (a command's own
    report of why it exits, e.g. the rollout pool's replica error), or []."""
    lines = text.rstrip().splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("evr1: error: ")]
    return [line[:800] for line in lines[starts[-1]:][:limit]] if starts else []


def mentions_port_in_use(text: str) -> bool:
    return bool(_BIND.search(text))


def port_holder(port: int) -> str | None:
    """``pid N (command)`` of a process listening on TCP ``port`` (best effort, from /proc)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for row in Path(table).read_text().splitlines()[1:]:
                cols = row.split()
                if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                    inodes.add(f"socket:[{cols[9]}]")
    if not inodes:
        return None
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in os.scandir(f"/proc/{entry.name}/fd"):
                if os.readlink(fd.path) in inodes:
                    cmd = Path(f"/proc/{entry.name}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
                    return f"pid {entry.name} ({cmd[:120]})"
    return "a process this user cannot see"

"""Process supervision primitives: the one copy used by the worker pool and the code sandbox.

A supervised process leads its own process group, so one SIGKILL of the group takes every
descendant that stayed in it (a sandbox, a browser, a decoder's helpers). SIGKILL because
code stuck in C (a decoder, a regex, sympy) ignores gentler signals. Reads from a child are
bounded twice: by a deadline (a hung child cannot hang the parent) and by a byte cap (a
chatty one cannot fill the parent's memory).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from typing import IO, Any

_PR_SET_NAME = 15
_CHUNK = 1 << 16


def own_group(name: str | None = None) -> None:
    """Called first thing in a new worker: lead a process group of its own (so a group kill
    takes it and what it started, nothing else), named ``name`` (at most 15 bytes, for ps)."""
    os.setpgrp()
    if name:
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_NAME, ctypes.c_char_p(name.encode()[:15]))
        except (OSError, AttributeError):  # not glibc: only the name is lost
            pass


def die_with(fd: int) -> None:
    """Kill this process's group once ``fd`` reads EOF, i.e. once the parent holding the other
    end of that pipe is gone, even while the main thread is stuck in C code. (A death signal
    would be tied to the forkserver, which a busy worker keeps alive.) The watching thread is
    blocked in a read: no CPU."""
    def watch() -> None:
        with contextlib.suppress(OSError):
            while os.read(fd, 1):
                pass
        os.killpg(0, signal.SIGKILL)

    threading.Thread(target=watch, name="die-with-parent", daemon=True).start()


def spawn_in_group(argv: Sequence[str], **popen_kwargs: Any) -> subprocess.Popen:
    """``subprocess.Popen`` whose child leads a new process group (its pid is the group id)."""
    return subprocess.Popen(list(argv), process_group=0, **popen_kwargs)


def kill_group(pid: int, *, leader_alive: bool = True) -> None:
    """SIGKILL the process group led by ``pid``, or ``pid`` alone when it leads none (yet).

    With ``leader_alive=False`` (the leader already exited) only what is left of its group is
    killed: a group id stays reserved while members live, a bare pid may have been reused."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        if leader_alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def exit_description(code: int | None) -> str:
    """``exit code 3``, ``killed by signal 9 (SIGKILL)`` or ``still running``."""
    if code is None:
        return "still running"
    if code >= 0:
        return f"exit code {code}"
    try:
        return f"killed by signal {-code} ({signal.Signals(-code).name})"
    except ValueError:
        return f"killed by signal {-code}"


def remaining(deadline: float) -> float:
    """Seconds left until ``deadline`` (a ``time.monotonic()`` value), never negative."""
    return max(0.0, deadline - time.monotonic())


class CappedBuffer:
    """Bytes read from a child, ``cap`` kept at most: the first ones (a program's output) or,
    with ``tail``, the last ones (what a worker printed before it died)."""

    def __init__(self, cap: int, *, tail: bool = False):
        self.cap, self.tail = cap, tail
        self.data = bytearray()
        self.truncated = False

    def add(self, chunk: bytes) -> None:
        if self.tail:
            self.data += chunk
            if len(self.data) > self.cap:
                del self.data[:len(self.data) - self.cap]
                self.truncated = True
            return
        room = self.cap - len(self.data)
        if len(chunk) > room:
            self.truncated = True
        self.data += chunk[:max(room, 0)]

    def text(self) -> str:
        return self.data.decode(errors="replace").strip()


def read_until(outputs: dict[int, CappedBuffer], deadline: float,
               stdin: tuple[IO[bytes], bytes] | None = None) -> bool:
    """Feed ``stdin`` (a pipe and its bytes; closed when written or refused) and read every fd
    of ``outputs`` until each reached EOF; returns True when ``deadline`` came first."""
    pending = memoryview(stdin[1]) if stdin else memoryview(b"")
    sel = selectors.DefaultSelector()
    try:
        for fd in outputs:
            sel.register(fd, selectors.EVENT_READ)
        if stdin is not None:
            if pending:
                os.set_blocking(stdin[0].fileno(), False)
                sel.register(stdin[0].fileno(), selectors.EVENT_WRITE)
            else:
                stdin[0].close()
        while sel.get_map():
            left = remaining(deadline)
            if left <= 0:
                return True
            for key, _ in sel.select(left):
                if key.fd not in outputs:  # the stdin pipe is writable
                    try:
                        pending = pending[os.write(key.fd, pending[:_CHUNK]):]
                    except BlockingIOError:
                        continue
                    except BrokenPipeError:  # the program does not read its input: fine
                        pending = pending[:0]
                    if not pending:
                        sel.unregister(key.fd)
                        stdin[0].close()
                    continue
                chunk = os.read(key.fd, _CHUNK)
                if chunk:
                    outputs[key.fd].add(chunk)
                else:
                    sel.unregister(key.fd)
        return False
    finally:
        sel.close()


def drain(fd: int, tail: CappedBuffer, forward_fd: int | None = None) -> None:
    """Read ``fd`` until EOF (a thread's loop, blocked in ``read`` while the child is quiet),
    keeping the last bytes in ``tail`` and copying everything to ``forward_fd``."""
    try:
        while chunk := os.read(fd, _CHUNK):
            tail.add(chunk)
            if forward_fd is not None:
                with contextlib.suppress(OSError):
                    os.write(forward_fd, chunk)
    except OSError:  # closed under us at shutdown
        pass
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)

"""The loop of one pool worker process (forked from the forkserver; the parent side is pool.py).

Protocol over the duplex pipe: the worker first answers ``("ready", pid)`` once ``spec.init``
returned, or ``("failed", traceback)``. Then it takes jobs ``(items, context)``, calls
``spec.handle(state, item, context)`` for each in order and sends results as
``("partial", chunk)`` at most every ``FLUSH_S`` and ``("done", chunk)`` at the end; a chunk
is a list of ``(value, seconds, error)``. ``None`` asks it to exit. Before each item it
writes ``(index, start time)`` to the shared ``progress`` array: the parent reads it to
enforce the per-item deadline without a message per item.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
import traceback
from typing import Any

from easyvideor1.workpool.proc import die_with, own_group

FLUSH_S = 0.05


def worker_main(conn: Any, progress: Any, output: Any, spec: Any, env: dict[str, str]) -> None:
    own_group(spec.name)  # first: die_with kills "our group", which must no longer be the parent's
    die_with(multiprocessing.parent_process().sentinel)  # EOF once the pool's process is gone
    fd = output.detach()
    os.dup2(fd, 1)  # print() and C libraries alike reach the parent's tail (and maybe its stderr)
    os.dup2(fd, 2)
    os.close(fd)
    # The forkserver's environment is that of when it started; the pool's is the one of now.
    os.environ.clear()
    os.environ.update(env)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    try:
        state = spec.init(*spec.init_args)
    except BaseException:  # noqa: B036 - whatever stops start-up is the report
        conn.send(("failed", traceback.format_exc(limit=8)))
        return
    conn.send(("ready", os.getpid()))
    handle = spec.handle
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            break  # the parent is gone
        if job is None:
            break
        items, context = job
        out: list[tuple[Any, float | None, str | None]] = []
        last_flush = time.monotonic()
        for index, item in enumerate(items):
            progress[1] = time.monotonic()  # time first: the parent reads index, then time
            progress[0] = index
            began = time.perf_counter()
            try:
                out.append((handle(state, item, context), time.perf_counter() - began, None))
            except BaseException as exc:  # noqa: B036 - SystemExit from a handler costs one item
                out.append((None, None, f"{type(exc).__name__}: {exc}"))
            if time.monotonic() - last_flush >= FLUSH_S and index + 1 < len(items):
                conn.send(("partial", out))
                out, last_flush = [], time.monotonic()
        progress[1] = 0.0
        conn.send(("done", out))
    close = getattr(state, "close", None)
    if callable(close):
        close()

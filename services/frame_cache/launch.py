"""Start ``evr1 serve frame-cache`` as a child process on loopback (tests, benchmarks, local use).

The child is stopped by its own pid (SIGTERM, then SIGKILL); nothing else is touched.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FrameCacheServer:
    """One ``evr1 serve frame-cache --store STORE ARGS`` child on 127.0.0.1:``port``."""

    def __init__(self, store: str, args: Sequence[str] = (), port: int | None = None,
                 env: dict[str, str] | None = None):
        self.store = store
        self.port = port or free_port()
        self.args = list(args)
        self.env = dict(os.environ if env is None else env)
        self.proc: subprocess.Popen | None = None
        self.log_path = Path(tempfile.mkstemp(prefix="evr1-frame-cache-", suffix=".log")[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def start(self, ready_timeout: float = 60.0, *, require_ready: bool = True) -> FrameCacheServer:
        """Start and wait for ``/readyz`` 200 (or, with ``require_ready=False``, any answer)."""
        argv = [sys.executable, "-m", "easyvideor1.cli.main", "serve", "frame-cache", "--host", "127.0.0.1",
                "--port", str(self.port), "--store", self.store, *self.args]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=self.env)
        self.wait_ready(ready_timeout, require_ready)
        return self

    def wait_ready(self, timeout: float, require_ready: bool = True) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"frame-cache server exited with code {self.proc.returncode}:\n"
                                   f"{self.log_tail()}")
            with contextlib.suppress(httpx.TransportError):
                status = httpx.get(f"{self.url}/readyz", timeout=10).status_code
                if status == 200 or not require_ready:
                    return
            time.sleep(0.1)
        raise TimeoutError(f"frame-cache server on {self.url} not ready after {timeout}s:\n{self.log_tail()}")

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]

    def stop(self, grace: float = 15.0) -> int | None:
        """SIGTERM (graceful), SIGKILL after ``grace``; returns the exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(timeout=grace)

    def close(self) -> None:
        self.stop()
        self.log_path.unlink(missing_ok=True)


@contextlib.contextmanager
def frame_cache_server(store: str, args: Sequence[str] = (), env: dict[str, str] | None = None,
                       ready_timeout: float = 60.0) -> Iterator[FrameCacheServer]:
    server = FrameCacheServer(store, args, env=env)
    try:
        server.start(ready_timeout)
        yield server
    finally:
        server.close()

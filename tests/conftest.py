"""Shared fixtures: real servers (Redis, SeaweedFS S3) started once per session, on loopback."""

from __future__ import annotations

import os
import socket
import sys
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# Loopback only: a Ray started in this session is a one-node cluster on 127.0.0.1 (Ray would
# otherwise advertise and bind the host's interface address), and vLLM's rendezvous is local.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("VLLM_HOST_IP", "127.0.0.1")

import leaks  # noqa: E402
from servers import redis_server, s3_server  # noqa: E402

# Every process this session starts inherits the marker: leaks.py finds the ones whose parent exited.
os.environ[leaks.MARKER] = leaks.TOKEN.decode().split("=", 1)[1]


def pytest_configure(config):
    # A plugin, not hooks of this file: a conftest's hooks are not called for the session's
    # own fixtures (their node is the session, above this folder), and those must be seen.
    config.pluginmanager.register(leaks.LeakCheck(), "evr1-leak-check")
    config.addinivalue_line("markers", "restarts_fixture_services: the test restarts services of a module "
                            "fixture; what it starts is the fixture's (tests/leaks.py)")


@pytest.fixture(scope="session")
def redis_url():
    with redis_server() as server:
        yield server.url


@pytest.fixture()
def redis_instance():
    """A private Redis server (for tests that stop or restart it)."""
    with redis_server() as server:
        yield server


@pytest.fixture(scope="session")
def s3():
    with s3_server() as server:
        yield server


@pytest.fixture(scope="session")
def chromium_path() -> str:
    path = "/usr/bin/chromium"
    if not Path(path).exists():
        raise RuntimeError("Debian chromium missing: `make test` installs it (apt-get install chromium)")
    return path


@pytest.fixture(scope="session")
def tiny_model_factory(tmp_path_factory):
    """Build (once per session and family) a tiny random-weight model of a real architecture."""
    built: dict[str, Path] = {}

    def get(family: str = "qwen2_5_vl") -> Path:
        if family not in built:
            from easyvideor1.models.tiny import build_tiny_model

            built[family] = build_tiny_model(family, tmp_path_factory.mktemp(f"tiny-{family}"), seed=0)
        return built[family]

    return get


@pytest.fixture(scope="session")
def tiny_model_dir(tiny_model_factory) -> Path:
    return tiny_model_factory("qwen2_5_vl")


@pytest.fixture()
def tcp_listener():
    """A TCP server on the host's 127.0.0.1 that records every connection it accepts."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    server.settimeout(0.2)
    accepted: list[object] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, peer = server.accept()
            except OSError:
                continue
            accepted.append(peer)
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], accepted
    stop.set()
    thread.join()
    server.close()

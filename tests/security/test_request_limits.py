"""Request limits of both services (issue 16, item 5), against real ``evr1 serve`` processes.

Before: a 64 MiB request header was read in full by both services (httptools has no limit;
300 MiB took 119 s and 575 MiB of memory, other clients' /healthz stalled 2-3 s), a body over
``max_body_bytes`` was read up to 64 MiB past the limit before the 413, and JSON nesting was
limited only by the interpreter's recursion limit. After: a request head over
``max_header_bytes`` is refused with 431 after about the limit, an oversized body with 413
after at most 8 MiB more, a body nested deeper than ``max_json_depth`` with 422; /healthz
answers at once meanwhile.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time

import httpx
import pytest

from services.frame_cache.launch import FrameCacheServer
from services.reward.launch import RewardServer


@pytest.fixture(scope="module")
def reward():
    server = RewardServer(["--workers", "1", "--max-body-bytes", str(1 << 20)]).start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def frame_cache(tmp_path_factory):
    env = {**os.environ, "EVR1_HASH_INDEX_DIR": str(tmp_path_factory.mktemp("limits-index"))}
    server = FrameCacheServer(str(tmp_path_factory.mktemp("limits-store")), ["--build-workers", "0"], env=env)
    server.start()
    try:
        yield server
    finally:
        server.close()


SERVICES = {"reward": ("reward", "/v1/problem-types", "serve.reward.max_header_bytes"),
            "frame_cache": ("frame_cache", "/v1/stats", "serve.frame_cache.max_header_bytes")}


def rss_kib(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def raw_request(port: int, head: bytes, body_chunks=(), *, total: int | None = None,
                timeout: float = 30) -> tuple[bytes, int]:
    """Send ``head`` (then the body) on a raw socket while reading; ``(response, bytes sent)``."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    sent, answer = 0, bytearray()
    done = threading.Event()

    def reader() -> None:
        try:
            while chunk := sock.recv(65536):
                answer.extend(chunk)
        except OSError:
            pass
        done.set()

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    try:
        for part in (head, *body_chunks):
            view = memoryview(part)
            while view and not done.is_set():
                n = sock.send(view[:1 << 20])
                sent += n
                view = view[n:]
            if done.is_set() or (total is not None and sent >= total):
                break
    except OSError:  # the server closed while we were still sending: expected for the huge ones
        pass
    done.wait(timeout)
    sock.close()
    return bytes(answer), sent


def status_of(answer: bytes) -> int:
    assert answer.startswith(b"HTTP/1.1 "), answer[:200]
    return int(answer[9:12])


def healthz_latency(url: str) -> float:
    started = time.perf_counter()
    assert httpx.get(f"{url}/healthz", timeout=10).status_code == 200
    return time.perf_counter() - started


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_header_over_the_limit_is_431_naming_the_field(request, name):
    server = request.getfixturevalue(SERVICES[name][0])
    route, field = SERVICES[name][1], SERVICES[name][2]
    head = (f"GET {route} HTTP/1.1\r\nHost: x\r\nX-Big: {'a' * (200 << 10)}\r\n\r\n").encode()
    answer, _ = raw_request(server.port, head)
    assert status_of(answer) == 431
    detail = json.loads(answer.split(b"\r\n\r\n", 1)[1])["detail"]
    assert field in detail and "65536 bytes" in detail
    # The largest legitimate heads (a long token, many headers) still pass.
    ok = httpx.get(f"{server.url}{route}", headers={"Authorization": "Bearer " + "t" * 8000,
                                                    **{f"x-h{i}": "v" * 200 for i in range(100)}}, timeout=30)
    assert ok.status_code == 200


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_a_64_mib_header_is_refused_early_and_healthz_stays_fast(request, name):
    server = request.getfixturevalue(SERVICES[name][0])
    before = rss_kib(server.proc.pid)
    head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: "
    filler = [b"a" * (1 << 20)] * 64
    latencies: list[float] = []
    stop = threading.Event()

    def probe() -> None:
        while not stop.is_set():
            latencies.append(healthz_latency(server.url))
            time.sleep(0.05)

    thread = threading.Thread(target=probe)
    thread.start()
    try:
        started = time.perf_counter()
        answer, sent = raw_request(server.port, head, filler)
        seconds = time.perf_counter() - started
    finally:
        stop.set()
        thread.join()
    assert sent < 16 << 20, f"the service read {sent} bytes of a 64 MiB header"
    assert seconds < 10
    if answer:  # the 431 arrives unless the client's own sending was cut first
        assert status_of(answer) == 431
    assert latencies and max(latencies) < 1.0, latencies
    assert rss_kib(server.proc.pid) - before < 64 << 10  # < 64 MiB grown


def test_reward_body_over_the_limit_is_413_while_streaming(reward):
    for declared in (True, False):
        length = f"Content-Length: {1 << 30}\r\n" if declared else "Transfer-Encoding: chunked\r\n"
        head = f"POST /v1/score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{length}\r\n".encode()
        piece = b"a" * (1 << 20)
        chunk = piece if declared else b"%x\r\n" % len(piece) + piece + b"\r\n"
        answer, sent = raw_request(reward.port, head, [chunk] * 1024)
        assert status_of(answer) == 413, answer[:300]
        assert b"exceeds the limit of 1048576 bytes" in answer
        assert sent < 48 << 20, f"{sent} bytes sent before the 413 (declared={declared})"
        assert healthz_latency(reward.url) < 1.0


def test_reward_json_nesting_is_limited(reward):
    item = {"id": 1, "problem_type": "numerical", "response": "<answer>3</answer>", "ground_truth": "3"}
    for depth in (80, 5000, 200_000):
        body = '{"items": [' + json.dumps(item) + '], "extra": ' + "[" * depth + "]" * depth + "}"
        resp = httpx.post(f"{reward.url}/v1/score", content=body, headers={"content-type": "application/json"},
                          timeout=60)
        assert resp.status_code == 422, (depth, resp.text[:300])
        assert "nested too deeply: more than 64 levels (serve.reward.max_json_depth)" in resp.json()["detail"]
    nested = {"k": {"k": {"k": {"k": 1}}}}
    resp = httpx.post(f"{reward.url}/v1/score", json={"items": [{**item, "extra": nested}]}, timeout=60)
    assert resp.status_code == 200 and resp.json()["results"][0]["overall"] == 1.0
    assert healthz_latency(reward.url) < 1.0


def test_header_limit_is_configurable(tmp_path):
    server = RewardServer(["--workers", "1", "serve.reward.max_header_bytes=4096"]).start()
    try:
        answer, _ = raw_request(server.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 5000 + b"\r\n\r\n")
        assert status_of(answer) == 431 and b"4096 bytes" in answer
        assert httpx.get(f"{server.url}/healthz", headers={"x": "a" * 3000}).status_code == 200
    finally:
        server.close()

"""Builds queued on a real Redis: an enqueue-only service and a separate ``--worker-only``
process; readiness follows Redis going down and coming back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest
import redis
from servers import stop_process, wait_build

from services.frame_cache.launch import FrameCacheServer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "video"))
from video_samples import make_video  # noqa: E402

PARAMS = {"fps": 2, "max_frames": 4, "min_frames": 2, "min_pixels": 3136, "max_pixels": 12544}


def _wait_ready(http: httpx.Client, ready: bool, timeout: float = 20) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        resp = http.get("/readyz")
        if resp.json()["ready"] is ready:
            assert resp.status_code == (200 if ready else 503)
            return resp.json()
        time.sleep(0.2)
    raise AssertionError(f"/readyz never became ready={ready}: {resp.json()}")


def test_builds_on_redis_with_a_separate_worker(tmp_path, redis_instance):
    namespace = f"fc-{uuid.uuid4().hex[:8]}"
    store = str(tmp_path / "store")
    env = {**os.environ, "EVR1_HASH_INDEX_DIR": str(tmp_path / "index")}
    common = ["--queue-url", redis_instance.url, "--namespace", namespace, "--data-roots", str(tmp_path)]
    videos = [str(make_video(tmp_path / f"r{i}.mp4", count=16, seed=20 + i)) for i in range(2)]
    log = open(tmp_path / "worker.log", "wb")
    worker = subprocess.Popen(
        [sys.executable, "-m", "easyvideor1.cli.main", "serve", "frame-cache", "--worker-only", "--store", store,
         "--build-processes", "1", "--shutdown-grace-s", "2", *common], stdout=log, stderr=subprocess.STDOUT, env=env)
    server = FrameCacheServer(store, ["--build-workers", "0", *common], env=env)
    try:
        server.start()
        with httpx.Client(base_url=server.url, timeout=30) as http:
            assert _wait_ready(http, True)["build_workers"] == 0  # this replica only enqueues
            build_id = http.post("/v1/builds", json={"videos": videos[:1], **PARAMS}).json()["build_id"]
            status = wait_build(http, build_id)
            assert status["status"] == "done" and status["counts"]["built"] == 1
            assert status["worker"].endswith("-0") and str(worker.pid) in status["worker"]
            r = redis.Redis.from_url(redis_instance.url, decode_responses=True)
            result = json.loads(r.hget(f"evr1:{{{namespace}}}:frame-builds:results", build_id))
            assert result["counts"] == status["counts"]  # the queue's result is the authority
            r.close()
            key = next((Path(store) / "objects").glob("*/*.safetensors")).stem
            assert http.head(f"/v1/blobs/{key}").status_code == 200

            redis_instance.stop()
            detail = _wait_ready(http, False)["detail"]
            assert detail.startswith("queue: ") and "unavailable" in detail
            resp = http.post("/v1/builds", json={"videos": videos, **PARAMS})
            assert resp.status_code == 503 and "build queue unavailable" in resp.json()["detail"]
            assert http.get(f"/v1/builds/{build_id}").status_code == 503
            assert http.get(f"/v1/blobs/{key}").status_code == 200  # serving needs only the store
            assert worker.poll() is None  # the worker waits for Redis; it does not crash

            redis_instance.restart()
            _wait_ready(http, True)
            second = http.post("/v1/builds", json={"videos": videos, **PARAMS})
            assert second.status_code == 202
            counts = wait_build(http, second.json()["build_id"])["counts"]
            assert (counts["built"], counts["reused"]) == (1, 1)
        stop_process(worker)
        assert worker.returncode == 0
        assert "frame_cache_workers_stopped" in (tmp_path / "worker.log").read_text()
    finally:
        stop_process(worker)
        log.close()
        server.close()


def _worker(tmp_path: Path, name: str, store: str, common: list[str], env: dict, *extra: str) -> subprocess.Popen:
    log = open(tmp_path / f"{name}.log", "wb")  # noqa: SIM115 - the child holds it; closed with the test dir
    return subprocess.Popen([sys.executable, "-m", "easyvideor1.cli.main", "serve", "frame-cache", "--worker-only",
                             "--store", store, "--build-processes", "1", "--shutdown-grace-s", "1", *common, *extra],
                            stdout=log, stderr=subprocess.STDOUT, env=env)


def _children(pid: int) -> list[int]:
    """Pids whose parent is ``pid`` (the decoding subprocesses a worker started)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _kill_worker(worker: subprocess.Popen) -> None:
    """SIGKILL a worker and the decoder it started (both by pid), as a node failure would."""
    children = _children(worker.pid)
    worker.kill()
    worker.wait(10)
    for pid in children:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass


def _wait_running(http: httpx.Client, build_id: str, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        body = http.get(f"/v1/builds/{build_id}").json()
        if body["status"] == "running":
            return body
        time.sleep(0.1)
    raise AssertionError(f"build {build_id} never ran: {body}")


def test_a_build_outlives_its_worker(tmp_path, redis_instance):
    """A worker killed mid-build: after the lease the build is delivered to another worker and
    finishes; with no attempts left it is reported failed, never left 'running' forever."""
    namespace = f"fc-{uuid.uuid4().hex[:8]}"
    store = str(tmp_path / "store")
    env = {**os.environ, "EVR1_HASH_INDEX_DIR": str(tmp_path / "index")}
    hang_env = {**env, "EVR1_TEST_HANG_DECODE": "stuck"}  # the cache worker's test hook: decode hangs
    common = ["--queue-url", redis_instance.url, "--namespace", namespace, "--build-lease-s", "2",
              "--data-roots", str(tmp_path)]
    videos = [str(make_video(tmp_path / f"stuck{i}.mp4", count=16, seed=30 + i)) for i in range(2)]
    server = FrameCacheServer(store, ["--build-workers", "0", *common], env=env)
    workers: list[subprocess.Popen] = []
    try:
        server.start()
        with httpx.Client(base_url=server.url, timeout=30) as http:
            workers.append(_worker(tmp_path, "a", store, common, hang_env))
            first = http.post("/v1/builds", json={"videos": videos[:1], **PARAMS}).json()["build_id"]
            assert _wait_running(http, first)["attempt"] == 1
            _kill_worker(workers[-1])
            workers.append(_worker(tmp_path, "b", store, common, env))
            status = wait_build(http, first)
            assert status["status"] == "done" and status["attempt"] == 2 and status["counts"]["built"] == 1
            assert str(workers[-1].pid) in status["worker"]
            stop_process(workers[-1])

            workers.append(_worker(tmp_path, "c", store, common, hang_env))
            second = http.post("/v1/builds", json={"videos": videos[1:], **PARAMS}).json()["build_id"]
            _wait_running(http, second)
            _kill_worker(workers[-1])
            workers.append(_worker(tmp_path, "d", store, common, env, "--build-attempts", "1"))
            status = wait_build(http, second)
            assert status["status"] == "failed"
            assert "abandoned after repeated worker failures: visibility timeout expired" in status["error"]
    finally:
        for worker in workers:
            stop_process(worker)
        server.close()


def test_worker_only_needs_a_shared_queue(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "easyvideor1.cli.main", "serve", "frame-cache", "--worker-only", "--store",
         str(tmp_path), "--queue-url", "memory://x"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "worker_only needs a shared queue (redis://...)" in done.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["--queue-url", "kafka://x"], "unsupported queue URL"),
    (["--store", "ftp://host/x"], "unsupported store URL scheme 'ftp'"),
])
def test_bad_urls_fail_at_start(tmp_path, args, message):
    argv = [sys.executable, "-m", "easyvideor1.cli.main", "serve", "frame-cache", "--store", str(tmp_path),
            "--port", "1", *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and message in done.stderr


def test_ready_reports_an_unreachable_store(tmp_path):
    """An S3 endpoint nobody listens on: the service starts, serves /healthz, is not ready, and
    blob reads are 503 with the reason (never 500)."""
    from servers import free_port

    env = {**os.environ, "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s",
           "EVR1_HASH_INDEX_DIR": str(tmp_path / "index")}
    store = f"s3://nowhere/x?endpoint=http://127.0.0.1:{free_port()}&retries=0&timeout=2"
    server = FrameCacheServer(store, ["--build-workers", "0"], env=env)
    try:
        server.start(require_ready=False)
        with httpx.Client(base_url=server.url, timeout=30) as http:
            assert http.get("/healthz").status_code == 200
            body = _wait_ready(http, False)
            assert body["detail"].startswith("store: ") and "127.0.0.1" in body["detail"]
            resp = http.get(f"/v1/blobs/{'ab' * 32}")
            assert resp.status_code == 503 and resp.json()["detail"].startswith("frame store unavailable: ")
            assert http.head(f"/v1/blobs/{'ab' * 32}").status_code == 503
    finally:
        server.close()

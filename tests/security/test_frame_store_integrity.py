"""Frame-store integrity against the real frame-cache service (uvicorn subprocess), on a local
directory and on SeaweedFS S3: the stored frames stay tied to their keys whoever calls.

Before: a DELETE then a PUT of all-white frames under a genuine key, with the genuine metadata
and a recomputed checksum, was accepted and served from then on; a streamed oversized upload
was refused only after the whole limit was held in memory; a 10,000-deep blob header was a 500.
"""

from __future__ import annotations

import json
import os
import select
import socket
import sys
import threading
import time
import uuid
from pathlib import Path

import httpx
import numpy as np
import pytest
from servers import frame_store_for

from easyvideor1.cache.blob import encode_blob
from easyvideor1.cache.key import HashIndex, cache_key, make_key
from easyvideor1.cache.stores.base import open_store
from easyvideor1.cache.stores.local import LocalStore
from easyvideor1.video.decode import decode_video
from easyvideor1.video.metadata import VideoMetadata, VideoParams
from services.frame_cache.launch import FrameCacheServer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "video"))
from video_samples import make_video  # noqa: E402

READ, WRITE, ADMIN = "reader-token", "builder-token", "admin-token"
PARAMS = VideoParams(fps=2, max_frames=6, min_frames=2, min_pixels=3136, max_pixels=12544)
TOKEN_VARS = ("EVR1_FRAME_CACHE_TOKEN", "EVR1_FRAME_CACHE_WRITE_TOKEN", "EVR1_FRAME_CACHE_ADMIN_TOKEN")


def bearer(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    """Source videos under a data root, and each one's genuine blob (as a builder makes it)."""
    root = tmp_path_factory.mktemp("fs-data")
    index = HashIndex(tmp_path_factory.mktemp("fs-index"))
    items = []
    for i in range(3):
        path = make_video(root / f"clip{i}.mp4", count=20 + 4 * i, seed=40 + i)
        key = cache_key(path, PARAMS, index=index)
        frames, meta = decode_video(path, PARAMS)
        genuine = encode_blob(frames, meta, key)
        forged = encode_blob(np.full_like(frames, 255), meta, key)  # white frames, genuine metadata, new checksum
        items.append({"path": path, "key": key.key, "genuine": genuine, "forged": forged})
    return {"root": root, "items": items}


def start_server(store_url: str, env: dict[str, str], *extra: str) -> FrameCacheServer:
    return FrameCacheServer(store_url, ["--build-workers", "0", *extra], env=env).start()


@pytest.fixture(scope="module", params=["local", "s3"])
def service(request, tmp_path_factory, media):
    store_url, s3_env = frame_store_for(request, tmp_path_factory, "integrity")
    env = {k: v for k, v in os.environ.items() if k not in TOKEN_VARS}
    env.update(s3_env, EVR1_HASH_INDEX_DIR=str(tmp_path_factory.mktemp("fs-server-index")),
               EVR1_FRAME_CACHE_TOKEN=READ, EVR1_FRAME_CACHE_WRITE_TOKEN=WRITE, EVR1_FRAME_CACHE_ADMIN_TOKEN=ADMIN)
    server = start_server(store_url, env, f'serve.frame_cache.source_roots=["{media["root"]}"]',
                          "serve.frame_cache.max_concurrent_uploads=32")
    server.s3_env = s3_env
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def http(service):
    with httpx.Client(base_url=service.url, timeout=60) as client:
        yield client


def put(http: httpx.Client, key: str, data: bytes, token: str | None = WRITE, source: str | None = None,
        replace: bool = False) -> httpx.Response:
    headers = {**bearer(token), "Content-Type": "application/octet-stream"}
    if source:
        headers["X-Evr1-Source"] = source
    return http.put(f"/v1/blobs/{key}", content=data, headers=headers,
                    params={"replace": "true"} if replace else None)


def stored(http: httpx.Client, key: str) -> bytes | None:
    resp = http.get(f"/v1/blobs/{key}", headers=bearer(READ))
    return None if resp.status_code == 404 else resp.content


def test_the_forge_is_refused(service, http, media):
    """The reported attack (DELETE, then PUT white frames under the genuine key), by a reader and
    by a builder; after an admin delete, even the builder's forged upload fails verification."""
    item = media["items"][0]
    key, genuine, forged = item["key"], item["genuine"], item["forged"]
    first = put(http, key, genuine, source=item["path"].name)  # relative to the source root
    assert first.status_code == 201 and first.json()["verified"] == "source", first.text

    for token, delete_status, put_status in ((READ, 403, 403), (WRITE, 403, 409), (None, 401, 401),
                                             ("guess", 401, 401)):
        assert http.delete(f"/v1/blobs/{key}", headers=bearer(token)).status_code == delete_status, token
        assert put(http, key, forged, token=token).status_code == put_status, token
        assert put(http, key, forged, token=token, replace=True).status_code in (401, 403)
    assert stored(http, key) == genuine

    # An admin removes it; the builder's forged upload (no source named: the service found it
    # through the hash index it filled when verifying the genuine one) is decoded and refused.
    assert http.delete(f"/v1/blobs/{key}", headers=bearer(ADMIN)).status_code == 200
    resp = put(http, key, forged)
    assert resp.status_code == 400 and "differ from decoding its source" in resp.json()["detail"], resp.text
    assert stored(http, key) is None
    resp = put(http, key, forged, token=ADMIN, replace=True)  # not even the admin can store forged frames
    assert resp.status_code == 400
    assert put(http, key, genuine).json()["verified"] == "source"
    assert stored(http, key) == genuine
    again = put(http, key, genuine)  # idempotent
    assert again.status_code == 200 and again.json() == {"key": key, "bytes": len(genuine), "stored": False,
                                                         "verified": "identical"}
    assert "frame_blob_forged" in service.log_tail(200_000)


def test_concurrent_genuine_and_forged_uploads_never_leave_the_forged_one(http, media):
    item = media["items"][1]
    key, genuine, forged = item["key"], item["genuine"], item["forged"]
    # The builder names the source once; from then on the service's hash index knows the file
    # of this content hash, so even forged uploads that name no source are decoded and compared.
    assert put(http, key, genuine, source=str(item["path"])).json()["verified"] == "source"
    for _round in range(4):
        http.delete(f"/v1/blobs/{key}", headers=bearer(ADMIN))
        assert stored(http, key) is None
        barrier = threading.Barrier(8)
        results: list[tuple[str, int]] = []

        def upload(which: str, data: bytes, source: str | None, barrier: threading.Barrier,
                   results: list[tuple[str, int]]) -> None:
            with httpx.Client(base_url=http.base_url, timeout=120) as client:
                barrier.wait()
                results.append((which, put(client, key, data, source=source).status_code))

        threads = [threading.Thread(target=upload, args=(which, data, str(item["path"]) if i % 2 else None,
                                                         barrier, results))
                   for which, data in (("genuine", genuine), ("forged", forged)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert stored(http, key) == genuine
        genuine_codes = sorted(code for which, code in results if which == "genuine")
        forged_codes = {code for which, code in results if which == "forged"}
        assert genuine_codes == [200, 200, 200, 201], results  # one created it, the others found it identical
        assert forged_codes <= {400, 409}, results


def test_writes_need_the_write_credential(http, media):
    item = media["items"][2]
    key = item["key"]
    for token, status in ((None, 401), ("wrong", 401), (READ, 403)):
        resp = put(http, key, item["genuine"], token=token)
        assert resp.status_code == status, (token, resp.text)
    assert "read credential cannot write" in put(http, key, item["genuine"], token=READ).json()["detail"]
    assert stored(http, key) is None
    assert put(http, key, item["genuine"], token=WRITE).status_code == 201
    for token in (READ, WRITE, ADMIN):  # every role reads
        resp = http.get(f"/v1/blobs/{key}", headers=bearer(token))
        assert resp.status_code == 200 and resp.content == item["genuine"]
    assert http.get(f"/v1/blobs/{key}").status_code == 401


def test_admin_delete_and_replace_work_and_are_logged(service, http, media):
    item = media["items"][2]
    key = item["key"]
    put(http, key, item["genuine"])
    resp = put(http, key, item["genuine"], token=ADMIN, replace=True, source=item["path"].name)
    assert resp.status_code == 201 and resp.json()["verified"] == "source"
    assert http.delete(f"/v1/blobs/{key}", headers=bearer(WRITE)).status_code == 403
    resp = http.delete(f"/v1/blobs/{key}", headers=bearer(ADMIN))
    assert resp.status_code == 200 and resp.json() == {"key": key, "deleted": True}
    assert http.delete(f"/v1/blobs/{key}", headers=bearer(ADMIN)).status_code == 404
    assert stored(http, key) is None
    wanted = (f"frame_blob_replaced key={key} client=127.0.0.1", f"frame_blob_deleted key={key} deleted=true")
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not all(w in service.log_tail(200_000) for w in wanted):
        time.sleep(0.1)
    assert all(w in service.log_tail(200_000) for w in wanted), service.log_tail(3000)
    assert put(http, key, item["genuine"]).status_code == 201


def _nested_blob(genuine: bytes, where: str) -> bytes:
    length = int.from_bytes(genuine[:8], "little")
    header = json.loads(genuine[8:8 + length])
    deep = "[" * 10_000 + "]" * 10_000
    if where == "header":
        raw = json.dumps(header)[:-1].encode() + b', "deep": ' + deep.encode() + b"}"
    else:
        header["__metadata__"]["evr1.params"] = deep
        raw = json.dumps(header).encode()
    return len(raw).to_bytes(8, "little") + raw + genuine[8 + length:]


@pytest.mark.parametrize("where", ["header", "metadata"])
def test_a_header_nested_10000_deep_is_a_4xx(http, media, where):
    item = media["items"][0]
    resp = put(http, item["key"], _nested_blob(item["genuine"], where))
    assert resp.status_code == 400, resp.text
    assert "nested too deeply" in resp.json()["detail"]
    assert http.get("/healthz").status_code == 200
    assert stored(http, item["key"]) in (None, item["genuine"])
    assert http.get("/readyz").status_code == 200


def test_store_create_if_absent_is_atomic(service):
    """The primitive the service relies on across replicas: of concurrent creates of one key
    with different bytes, exactly one wins and its bytes are what is stored."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in service.s3_env.items():
            patch.setenv(name, value)
        store = open_store(service.store)
    try:
        key = uuid.uuid4().hex * 2
        payloads = [bytes([i]) * 4096 for i in range(8)]
        barrier = threading.Barrier(len(payloads))
        won: list[int] = []

        def create(i: int) -> None:
            barrier.wait()
            if store.put_if_absent(key, payloads[i]):
                won.append(i)

        threads = [threading.Thread(target=create, args=(i,)) for i in range(len(payloads))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(won) == 1 and store.get(key) == payloads[won[0]]
        if isinstance(store, LocalStore):
            assert not [p for p in store.path_for(key).parent.iterdir() if p.name.startswith(".tmp-")]
        store.delete(key)
    finally:
        store.close()


# ---------------------------------------------------------------- upload limits (local store)

def _rss_kib(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            out[name] = int(value.split()[0])
    return out


@pytest.fixture(scope="module")
def small_limits(tmp_path_factory):
    env = {k: v for k, v in os.environ.items() if k not in TOKEN_VARS}
    env.update(EVR1_HASH_INDEX_DIR=str(tmp_path_factory.mktemp("fs-limit-index")), EVR1_FRAME_CACHE_WRITE_TOKEN=WRITE)
    server = start_server(str(tmp_path_factory.mktemp("fs-limit-store")), env,
                          f"serve.frame_cache.max_blob_bytes={32 << 20}", "serve.frame_cache.max_concurrent_uploads=2")
    try:
        yield server
    finally:
        server.close()


def _raw_put(port: int, key: str, *, chunked: bool = True, length: int | None = None) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    head = [f"PUT /v1/blobs/{key} HTTP/1.1", f"Host: 127.0.0.1:{port}", f"Authorization: Bearer {WRITE}",
            "Content-Type: application/octet-stream"]
    head.append("Transfer-Encoding: chunked" if chunked else f"Content-Length: {length}")
    sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
    return sock


def _status_of(sock: socket.socket) -> int:
    sock.settimeout(30)
    data = b""
    while b"\r\n" not in data:
        more = sock.recv(4096)
        if not more:
            break
        data += more
    return int(data.split(b" ", 2)[1])


def test_oversized_streamed_upload_is_refused_early(small_limits):
    """1 GiB streamed (chunked, no Content-Length) against a 32 MiB limit: the 413 comes once
    the limit is crossed, the service's RSS grows far less than the limit (spooled to disk)
    and far less than the upload, and /healthz stays fast meanwhile."""
    server, limit, upload = small_limits, 32 << 20, 1 << 30
    before = _rss_kib(server.pid)
    latencies: list[float] = []
    stop = threading.Event()

    def probe() -> None:
        with httpx.Client(base_url=server.url, timeout=10) as client:
            while not stop.is_set():
                began = time.perf_counter()
                assert client.get("/healthz").status_code == 200
                latencies.append(time.perf_counter() - began)
                time.sleep(0.02)

    prober = threading.Thread(target=probe)
    prober.start()
    sock = _raw_put(server.port, "ab" * 32)
    chunk = b"%x\r\n" % (1 << 20) + os.urandom(1 << 20) + b"\r\n"
    sent, status = 0, None
    try:
        while sent < upload and not select.select([sock], [], [], 0)[0]:  # until the service answers
            try:
                sock.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += 1 << 20
        status = _status_of(sock)
    finally:
        sock.close()
        stop.set()
        prober.join()
    after = _rss_kib(server.pid)
    assert status == 413
    assert sent < limit + (64 << 20), f"sent {sent >> 20} MiB before the refusal"
    growth = (after["VmHWM"] - before["VmHWM"]) << 10
    print(f"sent {sent >> 20} MiB before the 413; peak RSS +{growth >> 20} MiB; /healthz max "
          f"{max(latencies) * 1000:.1f} ms over {len(latencies)} probes")
    assert growth < 24 << 20, f"peak RSS grew {growth >> 20} MiB for a {upload >> 20} MiB upload"
    assert latencies and max(latencies) < 1.0, f"/healthz took up to {max(latencies):.2f}s"
    with httpx.Client(base_url=server.url, timeout=10) as client:
        declared = client.put(f"/v1/blobs/{'cd' * 32}", content=b"x" * (limit + 1), headers=bearer(WRITE))
        assert declared.status_code == 413 and "exceeds the limit" in declared.json()["detail"]
        assert client.get("/healthz").status_code == 200


def _big_blob(frames_mib: int) -> tuple[str, bytes]:
    """A well-formed blob of a content hash no file has (so only the credential vouches)."""
    frames = np.random.default_rng(0).integers(0, 255, size=(frames_mib, 512, 682, 3), dtype=np.uint8)
    meta = VideoMetadata(source_fps=2.0, total_frames=frames_mib, duration=frames_mib / 2,
                         frame_indices=tuple(range(frames_mib)), timestamps=tuple(i / 2 for i in range(frames_mib)),
                         height=512, width=682, source_height=512, source_width=682, factor=28, decoder="test")
    key = make_key(uuid.uuid4().hex * 2, PARAMS)
    return key.key, encode_blob(frames, meta, key)


def test_a_large_upload_is_spooled_and_stored_intact(small_limits):
    key, blob = _big_blob(20)  # ~20 MiB: above the in-memory part (spooled to disk), under the limit
    with httpx.Client(base_url=small_limits.url, timeout=60) as client:
        resp = client.put(f"/v1/blobs/{key}", content=blob, headers=bearer(WRITE))
        assert resp.status_code == 201 and resp.json()["verified"] == "credential", resp.text
        assert client.get(f"/v1/blobs/{key}").content == blob
    assert LocalStore(small_limits.store).get(key) == blob


def test_concurrent_uploads_are_bounded(small_limits):
    stalled = [_raw_put(small_limits.port, "ef" * 32, chunked=False, length=1 << 20) for _ in range(2)]
    try:
        for sock in stalled:
            sock.sendall(b"x" * 1000)  # bodies begun, never finished: both slots held
        time.sleep(0.5)
        with httpx.Client(base_url=small_limits.url, timeout=10) as client:
            resp = client.put(f"/v1/blobs/{'ef' * 32}", content=b"y" * 100, headers=bearer(WRITE))
            assert resp.status_code == 503 and resp.headers["retry-after"] == "1", resp.text
            assert "max_concurrent_uploads" in resp.json()["detail"]
            assert client.get("/healthz").status_code == 200
    finally:
        for sock in stalled:
            sock.close()
    time.sleep(0.5)
    with httpx.Client(base_url=small_limits.url, timeout=10) as client:
        resp = client.put(f"/v1/blobs/{'ef' * 32}", content=b"y" * 100, headers=bearer(WRITE))
        assert resp.status_code == 400  # a slot again: the body is read and rejected as no blob

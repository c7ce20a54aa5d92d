"""Local directory store: layout, atomic writes, concurrent processes, in-flight de-duplication."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time

import pytest

from easyvideor1.cache.stores.base import open_store
from easyvideor1.cache.stores.local import LocalStore
from easyvideor1.errors import StoreError

KEY = "ab" + "0" * 62


def test_put_get_exists_delete_keys_stats(tmp_path):
    store = open_store(str(tmp_path / "s"))
    assert isinstance(store, LocalStore)
    assert store.get(KEY) is None and not store.exists(KEY) and store.get_buffer(KEY) is None
    store.put(KEY, b"hello")
    assert store.get(KEY) == b"hello" and store.exists(KEY)
    assert bytes(store.get_buffer(KEY)) == b"hello"
    assert store.path_for(KEY) == tmp_path / "s" / "objects" / "ab" / f"{KEY}.safetensors"
    other = "cd" + "1" * 62
    store.put(other, b"x" * 10)
    assert sorted(store.keys()) == [KEY, other]
    assert store.stats().count == 2 and store.stats().bytes == 15
    assert store.delete(KEY) and not store.delete(KEY) and list(store.keys()) == [other]
    assert list(os.scandir(tmp_path / "s" / "objects" / "ab")) == []  # no temp files left


def test_file_url_and_bad_urls(tmp_path):
    assert open_store(f"file://{tmp_path}/t").root == tmp_path / "t"
    with pytest.raises(StoreError, match="unsupported store URL scheme"):
        open_store("ftp://host/x")
    with pytest.raises(StoreError, match="invalid cache key"):
        open_store(str(tmp_path / "t")).get("../../etc/passwd")
    with pytest.raises(StoreError, match="not a frame store"):
        open_store(str(tmp_path / "typo"), create=False)
    assert not (tmp_path / "typo").exists()
    with pytest.raises(StoreError, match=r"unknown option\(s\) \['colour'\]"):
        open_store("s3://bucket/prefix?colour=blue", access_key="a", secret_key="b")


def test_unwritable_root_is_a_store_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_bytes(b"")
    with pytest.raises(StoreError, match="cannot create"):
        LocalStore(blocker / "store")


def test_mapping_survives_replace_and_delete(tmp_path):
    store = LocalStore(tmp_path / "s")
    store.put(KEY, b"A" * 4096)
    mapped = store.get_buffer(KEY)
    store.put(KEY, b"B" * 4096)
    assert bytes(mapped[:4]) == b"AAAA"  # the old inode stays alive for the mapping
    store.delete(KEY)
    assert bytes(mapped[-4:]) == b"AAAA"


def _writer(root: str, key: str, marker: int, rounds: int) -> None:
    store = LocalStore(root)
    for _ in range(rounds):
        store.put(key, bytes([marker]) * (1 << 20))


def _reader(root: str, key: str, rounds: int, bad: multiprocessing.Value) -> None:
    store = LocalStore(root)
    for _ in range(rounds):
        data = store.get(key)
        if data is not None and (len(data) != 1 << 20 or data.count(data[:1]) != len(data)):
            with bad.get_lock():
                bad.value += 1


def test_concurrent_writers_and_readers_never_see_a_torn_blob(tmp_path):
    root = str(tmp_path / "s")
    LocalStore(root)
    ctx = multiprocessing.get_context("spawn")
    bad = ctx.Value("i", 0)
    procs = [ctx.Process(target=_writer, args=(root, KEY, marker, 10)) for marker in (1, 2, 3)]
    procs += [ctx.Process(target=_reader, args=(root, KEY, 40, bad)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert bad.value == 0
    final = LocalStore(root).get(KEY)
    assert len(final) == 1 << 20 and final[0] in (1, 2, 3) and final.count(final[:1]) == len(final)
    assert [n for n in os.listdir(os.path.join(root, "objects", "ab")) if n.startswith(".tmp")] == []


def test_threads_building_the_same_key_share_one_build(tmp_path):
    store = LocalStore(tmp_path / "s")
    calls = []
    started = threading.Event()

    def build() -> bytes:
        calls.append(threading.get_ident())
        started.set()
        time.sleep(0.3)  # hold the build open while the other threads arrive
        return b"built once"

    results = []

    def ask() -> None:
        results.append(store.get_or_build(KEY, build))

    threads = [threading.Thread(target=ask) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(calls) == 1
    assert sorted(bytes(data) for data, _ in results) == [b"built once"] * 5
    assert sum(built for _, built in results) == 1
    assert store.get_or_build(KEY, build)[1] is False and len(calls) == 1


def test_a_failed_build_reaches_every_waiter_and_stores_nothing(tmp_path):
    store = LocalStore(tmp_path / "s")
    gate = threading.Event()

    def build() -> bytes:
        gate.wait(5)
        raise RuntimeError("decoder exploded")

    errors = []

    def ask() -> None:
        try:
            store.get_or_build(KEY, build)
        except RuntimeError as exc:
            errors.append(str(exc))

    threads = [threading.Thread(target=ask) for _ in range(3)]
    for t in threads:
        t.start()
    time.sleep(0.2)
    gate.set()
    for t in threads:
        t.join(10)
    assert errors == ["decoder exploded"] * 3 and not store.exists(KEY)


def _build_in_process(root: str, key: str, log: str) -> None:
    store = LocalStore(root)

    def build() -> bytes:
        with open(log, "a") as handle:
            handle.write(f"{os.getpid()}\n")
        time.sleep(0.5)
        return b"payload"

    store.ensure(key, build)


def test_processes_building_the_same_key_build_it_once(tmp_path):
    root, log = str(tmp_path / "s"), str(tmp_path / "builds.log")
    LocalStore(root)
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_build_in_process, args=(root, KEY, log)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert len(open(log).read().split()) == 1
    assert LocalStore(root).get(KEY) == b"payload"
    assert not os.path.exists(os.path.join(root, "locks", "ab", f"{KEY}.lock"))

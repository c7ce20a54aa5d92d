"""Cache keys: content identity with a racy-safe fast path, and every parameter counts."""

from __future__ import annotations

import os
import shutil
import time

import blake3
import pytest

from easyvideor1.cache.key import (
    RACY_WINDOW_NS,
    HashIndex,
    cache_key,
    content_hash,
)
from easyvideor1.errors import MediaMissingError
from easyvideor1.video import FACTOR_QWEN3, ImageParams, VideoParams


def write(path, data: bytes):
    path.write_bytes(data)
    return path


def age(path, seconds: float = 60.0) -> None:
    """Move the file's mtime into the past, as for any file not written just now."""
    past = time.time_ns() - int(seconds * 1e9)
    os.utime(path, ns=(past, past))


def test_content_hash_is_blake3_of_the_bytes(tmp_path):
    data = os.urandom(3 * (4 << 20) + 123)  # spans several read chunks
    path = write(tmp_path / "v.mp4", data)
    assert content_hash(path, index=HashIndex(tmp_path / "idx")) == blake3.blake3(data).hexdigest()


def test_same_content_under_two_paths_gives_one_key(tmp_path):
    (tmp_path / "a").mkdir()
    a = write(tmp_path / "a" / "clip.mp4", b"video bytes" * 100)
    b = tmp_path / "b.mp4"
    shutil.copy(a, b)
    index = HashIndex(tmp_path / "idx")
    assert cache_key(a, VideoParams(), index=index).key == cache_key(b, VideoParams(), index=index).key
    link = tmp_path / "link.mp4"
    link.symlink_to(a)
    assert cache_key(link, VideoParams(), index=index).key == cache_key(a, VideoParams(), index=index).key


def test_modified_file_gives_a_new_key(tmp_path):
    path = write(tmp_path / "v.mp4", b"A" * 1000)
    age(path)
    index = HashIndex(tmp_path / "idx")
    first = cache_key(path, VideoParams(), index=index)
    write(path, b"B" * 1000)  # same size, new content
    assert cache_key(path, VideoParams(), index=index).key != first.key


def test_same_size_rewrite_with_restored_mtime_is_caught(tmp_path):
    """Content changed, size and mtime restored by hand (or a coarse-clock filesystem)."""
    path = write(tmp_path / "v.mp4", b"A" * 1000)
    age(path)
    stamp = os.stat(path).st_mtime_ns
    index = HashIndex(tmp_path / "idx")
    first = content_hash(path, index=index)
    write(path, b"B" * 1000)
    os.utime(path, ns=(stamp, stamp))
    assert content_hash(path, index=index) == blake3.blake3(b"B" * 1000).hexdigest() != first


def test_racy_entry_is_never_trusted(tmp_path):
    """An index entry recorded within 2 s of the file's mtime is re-hashed, whatever it says.

    Simulates the case ctime cannot catch (a filesystem with coarse timestamps): the stat
    signature matches exactly but the content is different from when it was hashed.
    """
    path = write(tmp_path / "v.mp4", b"new content!")
    index = HashIndex(tmp_path / "idx")
    st = os.stat(path)
    signature = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    real = os.path.realpath(path)
    stale = "0" * 64
    index.record(real, signature, stale, hashed_at_ns=st.st_mtime_ns + RACY_WINDOW_NS - 1)
    assert content_hash(path, index=index) == blake3.blake3(b"new content!").hexdigest()
    # The same signature recorded well after the mtime is trusted: that is the fast path.
    index.record(real, signature, stale, hashed_at_ns=st.st_mtime_ns + RACY_WINDOW_NS + 1)
    assert content_hash(path, index=index) == stale


def test_fresh_file_is_rehashed_until_it_ages(tmp_path):
    path = write(tmp_path / "v.mp4", b"A" * 64)
    index = HashIndex(tmp_path / "idx")
    content_hash(path, index=index)
    st = os.stat(path)
    sig = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    assert index.lookup(os.path.realpath(path), sig) is None  # hashed within the racy window
    age(path)
    content_hash(path, index=index)
    st = os.stat(path)
    sig = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    assert index.lookup(os.path.realpath(path), sig) == blake3.blake3(b"A" * 64).hexdigest()


def test_index_persists_across_instances_and_survives_an_unwritable_dir(tmp_path):
    path = write(tmp_path / "v.mp4", b"C" * 64)
    age(path)
    content_hash(path, index=HashIndex(tmp_path / "idx"))
    st = os.stat(path)
    sig = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    assert HashIndex(tmp_path / "idx").lookup(os.path.realpath(path), sig) is not None
    blocker = write(tmp_path / "file-not-dir", b"x")
    broken = HashIndex(blocker / "sub")  # cannot be created: hashing still works
    assert content_hash(path, index=broken) == blake3.blake3(b"C" * 64).hexdigest()


@pytest.mark.parametrize("change", [
    {"fps": 1.0}, {"max_frames": 64}, {"min_frames": 2}, {"max_pixels": 100352 * 2}, {"min_pixels": 3136},
    {"factor": FACTOR_QWEN3}, {"temporal_patch_size": 4}, {"max_source_pixels": 1000}, {"max_duration_s": 10.0},
])
def test_every_parameter_changes_the_key(tmp_path, change):
    path = write(tmp_path / "v.mp4", b"D" * 64)
    index = HashIndex(tmp_path / "idx")
    assert cache_key(path, VideoParams(**change), index=index).key != cache_key(path, VideoParams(), index=index).key


def test_kind_and_image_params_change_the_key_and_numeric_types_do_not(tmp_path):
    path = write(tmp_path / "v.png", b"E" * 64)
    index = HashIndex(tmp_path / "idx")
    image = cache_key(path, ImageParams(), index=index)
    assert image.kind == "image" and image.key != cache_key(path, VideoParams(), index=index).key
    assert cache_key(path, ImageParams(max_pixels=500_000), index=index).key != image.key
    assert cache_key(path, VideoParams(fps=2), index=index).key == cache_key(path, VideoParams(fps=2.0), index=index).key


def test_key_fields(tmp_path):
    path = write(tmp_path / "v.mp4", b"F" * 64)
    key = cache_key(path, VideoParams(), index=HashIndex(tmp_path / "idx"))
    assert len(key.key) == 64 and int(key.key, 16) >= 0
    assert key.content_hash == blake3.blake3(b"F" * 64).hexdigest()
    assert key.params_dict == VideoParams().as_dict()
    assert key.decoder.startswith("pyav-") and key.path == str(path)


def test_missing_file_raises(tmp_path):
    with pytest.raises(MediaMissingError, match="nope.mp4"):
        cache_key(tmp_path / "nope.mp4", VideoParams())

"""S3 store against a real SeaweedFS S3 gateway (the session ``s3`` fixture)."""

from __future__ import annotations

import os
import uuid

import pytest

from easyvideor1.cache.stores.base import open_store
from easyvideor1.cache.stores.s3 import S3Store
from easyvideor1.errors import StoreError

KEY_A = "ab" + "0" * 62
KEY_B = "cd" + "1" * 62


def bucket_name() -> str:
    return f"evr1-{uuid.uuid4().hex[:12]}"


def store_for(s3, bucket: str, prefix: str = "frames", **options) -> S3Store:
    return open_store(f"s3://{bucket}/{prefix}", endpoint=f"http://{s3.endpoint}", access_key=s3.access_key,
                      secret_key=s3.secret_key, **options)


def test_put_get_exists_delete_keys_and_bucket_creation(s3):
    bucket = bucket_name()
    store = store_for(s3, bucket)
    assert isinstance(store, S3Store)
    assert store.get(KEY_A) is None and not store.exists(KEY_A) and list(store.keys()) == []
    store.put(KEY_A, b"alpha")  # creates the bucket
    store.put(KEY_B, b"bravo!")
    assert store.get(KEY_A) == b"alpha" and store.exists(KEY_A)
    assert sorted(store.keys()) == [KEY_A, KEY_B]
    stats = store.stats()
    assert (stats.count, stats.bytes, stats.url) == (2, 11, f"s3://{bucket}/frames")
    assert store.object_name(KEY_A) == f"frames/ab/{KEY_A}.safetensors"
    assert store.read_head(KEY_B) == b"bravo!"
    assert store.delete(KEY_A) and not store.delete(KEY_A)
    assert list(store.keys()) == [KEY_B]
    # Another prefix of the same bucket is another store.
    assert list(store_for(s3, bucket, prefix="other").keys()) == []


def test_multipart_upload_of_a_blob_larger_than_a_part(s3):
    store = store_for(s3, bucket_name(), part_size=5 << 20)
    data = os.urandom((5 << 20) * 2 + 12345)
    store.put(KEY_A, data)
    assert store.get(KEY_A) == data
    etag = store.etag(KEY_A)
    assert etag is not None and etag.strip('"').endswith("-3")  # S3 marks multipart ETags with the part count


def test_environment_configuration(s3, monkeypatch):
    for name, value in s3.url_env.items():
        monkeypatch.setenv(name, value)
    bucket = bucket_name()
    store = open_store(f"s3://{bucket}")
    store.put(KEY_A, b"from env")
    assert store.get(KEY_A) == b"from env" and store.object_name(KEY_A) == f"ab/{KEY_A}.safetensors"


def test_endpoint_in_the_url_query(s3, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3.secret_key)
    monkeypatch.delenv("EVR1_S3_ENDPOINT", raising=False)
    store = open_store(f"s3://{bucket_name()}/p?endpoint={s3.endpoint}&secure=false")
    assert store.secure is False
    store.put(KEY_A, b"query")
    assert store.get(KEY_A) == b"query"


def test_wrong_credentials_are_a_store_error_naming_the_target(s3):
    bucket = bucket_name()
    store = open_store(f"s3://{bucket}/x", endpoint=f"http://{s3.endpoint}", access_key="nobody",
                       secret_key="wrong")
    with pytest.raises(StoreError) as info:
        store.put(KEY_A, b"data")
    text = str(info.value)
    assert bucket in text and s3.endpoint in text and "InvalidAccessKeyId" in text
    with pytest.raises(StoreError, match=bucket):
        store.get(KEY_A)


def test_unreachable_endpoint_fails_fast_with_a_store_error(s3):
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    store = open_store(f"s3://{bucket_name()}", endpoint=f"http://127.0.0.1:{port}", access_key="a",
                       secret_key="b", retries=0, timeout=2)
    with pytest.raises(StoreError, match=f"127.0.0.1:{port}"):
        store.get(KEY_A)


def test_missing_credentials_and_bucket_creation_disabled(s3, monkeypatch):
    monkeypatch.delenv("AWS_ACCESS_KEY_ID", raising=False)
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY", raising=False)
    with pytest.raises(StoreError, match="no credentials"):
        open_store("s3://b", endpoint=f"http://{s3.endpoint}")
    store = store_for(s3, bucket_name(), create_bucket="false")
    with pytest.raises(StoreError, match="does not exist"):
        store.put(KEY_A, b"x")

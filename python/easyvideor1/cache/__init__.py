"""The content-addressed frame cache: keys, blobs, stores, the offline builder and the loader."""

from easyvideor1.cache.blob import decode_blob, encode_blob
from easyvideor1.cache.key import FORMAT_VERSION, CacheKey, HashIndex, cache_key, content_hash
from easyvideor1.cache.loader import FrameLoader
from easyvideor1.cache.stores.base import FrameStore, StoreStats, open_store

__all__ = [
    "FORMAT_VERSION",
    "CacheKey",
    "FrameLoader",
    "FrameStore",
    "HashIndex",
    "StoreStats",
    "cache_key",
    "content_hash",
    "decode_blob",
    "encode_blob",
    "open_store",
]

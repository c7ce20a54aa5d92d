"""Frame stores behind one interface: a local directory and S3 (MinIO, SeaweedFS, AWS)."""

from easyvideor1.cache.stores.base import FrameStore, StoreStats, open_store

__all__ = ["FrameStore", "StoreStats", "open_store"]

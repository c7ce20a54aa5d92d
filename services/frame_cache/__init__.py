"""The frame-cache service: decoded frame blobs over HTTP, and cache builds on a work queue.

Transport only: keys, blobs, stores, decoding and the builder come from
:mod:`easyvideor1.cache`; the queue from :mod:`easyvideor1.queue`. Clients read it through
``open_store("http://host:port")`` (:mod:`easyvideor1.cache.stores.http`).
"""

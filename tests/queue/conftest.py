"""Fixtures of the queue tests: one factory yielding either backend, each test in a fresh namespace."""

from __future__ import annotations

import pytest
from queue_helpers import fresh_namespace

from easyvideor1.queue import WorkQueue, open_queue

BACKENDS = ["memory", "redis"]


@pytest.fixture(params=BACKENDS)
def backend_url(request, redis_url) -> str:
    return "memory://contract" if request.param == "memory" else redis_url


@pytest.fixture()
def queue_factory(backend_url):
    """``make(namespace=None, **options)`` opens a handle; all are purged and closed afterwards.

    Handles made without a namespace share the test's own namespace (like two processes of one
    run); the visibility timeout defaults to 0.3 s so redelivery tests stay fast.
    """
    default_ns = fresh_namespace()
    handles: list[WorkQueue] = []

    def make(namespace: str | None = None, **options) -> WorkQueue:
        options.setdefault("visibility_timeout_s", 0.3)
        handle = open_queue(backend_url, namespace or default_ns, **options)
        handles.append(handle)
        return handle

    yield make
    for namespace in {h.namespace for h in handles}:
        with open_queue(backend_url, namespace) as cleaner:
            cleaner.purge()
    for handle in handles:
        handle.close()

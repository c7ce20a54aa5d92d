"""A frame store read (and written) through the frame-cache service over HTTP.

``open_store("http://host:port")`` gives an ``HttpFrameStore``: ``get`` is ``GET
/v1/blobs/{key}`` (None on 404), ``exists`` is ``HEAD``, ``put`` is ``PUT`` (the service
verifies the blob against its key before storing it; a service started with
``--read-only`` answers 403, raised here as StoreError), ``delete`` is ``DELETE``,
``keys`` streams ``GET /v1/keys`` and ``stats`` is ``GET /v1/stats``.

Every failure is a StoreError naming the service URL: a refused connection, a timeout, a
5xx, a body shorter than announced. ``FrameLoader`` treats a StoreError as "store
unavailable" and decodes on the fly, so a service outage slows training, never stops it.
Requests time out (``timeout`` seconds to connect and between bytes) and a failed connect
is retried ``retries`` times, so a dead service costs milliseconds, not minutes. A bearer
token comes from ``token=`` or ``$EVR1_FRAME_CACHE_TOKEN``. No cross-process build lock
here: the service's store serializes writes of one key, and blobs are content-addressed.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from easyvideor1.cache.stores.base import FrameStore, StoreStats, check_key
from easyvideor1.errors import StoreError

TOKEN_ENV = "EVR1_FRAME_CACHE_TOKEN"
_TRUE = {"1", "true", "yes", "on"}


class HttpFrameStore(FrameStore):
    def __init__(self, url: str, *, timeout: float | str = 30.0, connect_timeout: float | str = 3.0,
                 retries: int | str = 1, token: str | None = None, verify_tls: bool | str = True):
        super().__init__()
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise StoreError(f"invalid frame-cache service URL {url!r} (expected http(s)://host:port)")
        if parts.query or parts.fragment:
            raise StoreError(f"frame-cache service URL {url!r}: give options as keyword arguments, not a query")
        self.url = urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))
        token = token or os.environ.get(TOKEN_ENV) or None
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        verify = verify_tls if isinstance(verify_tls, bool) else str(verify_tls).lower() in _TRUE
        self._client = httpx.Client(
            base_url=self.url, headers=headers, verify=verify, follow_redirects=False,
            timeout=httpx.Timeout(float(timeout), connect=float(connect_timeout)),
            transport=httpx.HTTPTransport(retries=int(retries), verify=verify),
        )
        self._closed = threading.Event()

    # ------------------------------------------------------------------ helpers
    def _request(self, method: str, path: str, action: str, **kwargs: Any) -> httpx.Response:
        if self._closed.is_set():
            raise StoreError(f"frame-cache service {self.url}: the store was closed")
        try:
            return self._client.request(method, path, **kwargs)
        except httpx.TimeoutException as exc:
            raise StoreError(f"frame-cache service {self.url}: {action} timed out ({type(exc).__name__})") from None
        except httpx.HTTPError as exc:  # refused, reset, DNS, protocol errors, short bodies
            raise StoreError(f"frame-cache service {self.url}: {action} failed: {type(exc).__name__}: {exc}") from None

    def _fail(self, response: httpx.Response, action: str) -> StoreError:
        reason = response.headers.get("x-reason") or ""
        try:
            detail = response.json().get("detail")
            reason = detail if isinstance(detail, str) else reason or str(detail)
        except ValueError:
            reason = reason or response.text[:300]
        return StoreError(f"frame-cache service {self.url}: {action} answered {response.status_code}"
                          + (f": {reason}" if reason else ""))

    # ------------------------------------------------------------------ FrameStore
    def get(self, key: str) -> bytes | None:
        path = f"/v1/blobs/{check_key(key)}"
        response = self._request("GET", path, f"GET {path}")
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise self._fail(response, f"GET {path}")
        declared = response.headers.get("content-length")
        if declared is not None and int(declared) != len(response.content):  # a proxy may drop the check
            raise StoreError(f"frame-cache service {self.url}: GET {path} returned {len(response.content)} of "
                             f"{declared} bytes")
        return response.content

    def exists(self, key: str) -> bool:
        path = f"/v1/blobs/{check_key(key)}"
        response = self._request("HEAD", path, f"HEAD {path}")
        if response.status_code == 404:
            return False
        if response.status_code != 200:
            raise self._fail(response, f"HEAD {path}")
        return True

    def put(self, key: str, data: bytes) -> None:
        path = f"/v1/blobs/{check_key(key)}"
        response = self._request("PUT", path, f"PUT {path}", content=bytes(data),
                                 headers={"Content-Type": "application/octet-stream"})
        if response.status_code not in (200, 201):
            raise self._fail(response, f"PUT {path}")

    def delete(self, key: str) -> bool:
        path = f"/v1/blobs/{check_key(key)}"
        response = self._request("DELETE", path, f"DELETE {path}")
        if response.status_code == 404:
            return False
        if response.status_code != 200:
            raise self._fail(response, f"DELETE {path}")
        return True

    def keys(self) -> Iterator[str]:
        """Every key, streamed; a listing cut short raises StoreError (never a silent partial list)."""
        if self._closed.is_set():
            raise StoreError(f"frame-cache service {self.url}: the store was closed")
        try:
            with self._client.stream("GET", "/v1/keys") as response:
                if response.status_code != 200:
                    response.read()
                    raise self._fail(response, "GET /v1/keys")
                for line in response.iter_lines():
                    if line == "#end":
                        return
                    if line.startswith("#error "):
                        raise StoreError(f"frame-cache service {self.url}: listing failed: {line[7:]}")
                    if line:
                        yield line
        except httpx.HTTPError as exc:
            raise StoreError(f"frame-cache service {self.url}: GET /v1/keys failed: {type(exc).__name__}: {exc}"
                             ) from None
        raise StoreError(f"frame-cache service {self.url}: the key listing ended without its end marker")

    def stats(self) -> StoreStats:
        response = self._request("GET", "/v1/stats", "GET /v1/stats")
        if response.status_code != 200:
            raise self._fail(response, "GET /v1/stats")
        body = response.json()
        return StoreStats(int(body["count"]), int(body["bytes"]), self.url)

    def close(self) -> None:
        if not self._closed.is_set():
            self._closed.set()
            self._client.close()

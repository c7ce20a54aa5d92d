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
is retried ``retries`` times, so a dead service costs milliseconds, not minutes.

Credentials, one per role (the service refuses a token shared by two): the read token
(``token=`` or ``$EVR1_FRAME_CACHE_TOKEN``) goes with reads; the write token
(``write_token=`` or ``$EVR1_FRAME_CACHE_WRITE_TOKEN``, builders only) with ``put``; the
admin token (``admin_token=`` or ``$EVR1_FRAME_CACHE_ADMIN_TOKEN``) with ``delete`` and
``replace``. A missing one falls back to the next lower (so a service without tokens needs
none). Blobs are immutable at the service: ``put`` of a stored key succeeds when the bytes
are identical and raises StoreError (409) otherwise. No cross-process build lock here: the
service's store creates a key atomically (first write wins), and blobs are content-addressed.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

from easyvideor1.cache.stores.base import FrameStore, StoreStats, check_key
from easyvideor1.errors import StoreError

try:
    import httpx
except ModuleNotFoundError:  # not a core dependency: it comes with the serve and rewards extras
    httpx = None

TOKEN_ENV = "EVR1_FRAME_CACHE_TOKEN"
WRITE_TOKEN_ENV = "EVR1_FRAME_CACHE_WRITE_TOKEN"
ADMIN_TOKEN_ENV = "EVR1_FRAME_CACHE_ADMIN_TOKEN"
_SECRET_OPTIONS = {"token", "write_token", "admin_token"}
_CHUNK = 1 << 20
_MAX_BLOB_BYTES = 1 << 36  # a larger announced size is not preallocated on trust
_TRUE = {"1", "true", "yes", "on"}
_QUERY_OPTIONS = {"timeout", "connect_timeout", "retries", "verify_tls"}


class HttpFrameStore(FrameStore):
    def __init__(self, url: str, **options: Any):
        """Options (keyword arguments, else the URL query: ``http://fc:8001?timeout=10``):
        ``timeout`` (30 s), ``connect_timeout`` (3 s), ``retries`` (1, connection failures
        only), ``verify_tls`` (true); ``token``, ``write_token``, ``admin_token`` (keywords
        or their environment variables only: a secret never belongs in a URL)."""
        super().__init__()
        if httpx is None:
            raise StoreError(f"frame-cache service {url}: the http:// store needs httpx "
                             "(pip install 'easyvideor1[serve]' or httpx)")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.fragment:
            raise StoreError(f"invalid frame-cache service URL {url!r} (expected http(s)://host:port)")
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        unknown = sorted(set(query) - _QUERY_OPTIONS) + sorted(set(options) - _QUERY_OPTIONS - _SECRET_OPTIONS)
        if unknown:
            raise StoreError(f"frame-cache service URL {url!r}: unknown option(s) {unknown}; "
                             f"known: {sorted(_QUERY_OPTIONS | _SECRET_OPTIONS)}")
        merged = {**query, **options}
        self.url = urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))
        token = options.get("token") or os.environ.get(TOKEN_ENV) or None
        write_token = options.get("write_token") or os.environ.get(WRITE_TOKEN_ENV) or token
        admin_token = options.get("admin_token") or os.environ.get(ADMIN_TOKEN_ENV) or write_token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._write_headers = {"Authorization": f"Bearer {write_token}"} if write_token else {}
        self._admin_headers = {"Authorization": f"Bearer {admin_token}"} if admin_token else {}
        verify = merged.get("verify_tls", True)
        verify = verify if isinstance(verify, bool) else str(verify).lower() in _TRUE
        try:
            timeout = httpx.Timeout(float(merged.get("timeout", 30.0)),
                                    connect=float(merged.get("connect_timeout", 3.0)))
            retries = int(merged.get("retries", 1))
        except (TypeError, ValueError) as exc:
            raise StoreError(f"frame-cache service URL {url!r}: bad option value ({exc})") from None
        self._client = httpx.Client(base_url=self.url, headers=headers, verify=verify, follow_redirects=False,
                                    timeout=timeout, transport=httpx.HTTPTransport(retries=retries, verify=verify))
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
        data = self.get_buffer(key)
        return None if data is None else bytes(data)

    def get_buffer(self, key: str) -> bytearray | None:
        """The blob streamed into one preallocated buffer (no list of chunks to join)."""
        path = f"/v1/blobs/{check_key(key)}"
        if self._closed.is_set():
            raise StoreError(f"frame-cache service {self.url}: the store was closed")
        try:
            with self._client.stream("GET", path) as response:
                if response.status_code == 404:
                    return None
                if response.status_code != 200:
                    response.read()
                    raise self._fail(response, f"GET {path}")
                declared = response.headers.get("content-length")
                encoded = "content-encoding" in response.headers  # a proxy compressed it: size unknown
                if declared is None or encoded or not declared.isdigit() or int(declared) > _MAX_BLOB_BYTES:
                    buffer = bytearray()
                    for chunk in response.iter_bytes(_CHUNK):
                        buffer += chunk
                    return buffer
                buffer, filled = bytearray(int(declared)), 0
                for chunk in response.iter_bytes(_CHUNK):
                    if filled + len(chunk) > len(buffer):
                        raise StoreError(f"frame-cache service {self.url}: GET {path} sent more than the "
                                         f"{declared} bytes it announced")
                    buffer[filled:filled + len(chunk)] = chunk
                    filled += len(chunk)
        except httpx.TimeoutException as exc:
            raise StoreError(f"frame-cache service {self.url}: GET {path} timed out ({type(exc).__name__})") from None
        except httpx.HTTPError as exc:  # refused, reset, a body shorter than its Content-Length
            raise StoreError(f"frame-cache service {self.url}: GET {path} failed: {type(exc).__name__}: {exc}"
                             ) from None
        if filled != len(buffer):
            raise StoreError(f"frame-cache service {self.url}: GET {path} returned {filled} of {declared} bytes")
        return buffer

    def exists(self, key: str) -> bool:
        path = f"/v1/blobs/{check_key(key)}"
        response = self._request("HEAD", path, f"HEAD {path}")
        if response.status_code == 404:
            return False
        if response.status_code != 200:
            raise self._fail(response, f"HEAD {path}")
        return True

    def put(self, key: str, data: bytes, *, source: str | None = None) -> None:
        """PUT with the write credential. ``source``: the media file it was decoded from, as
        the service sees it (absolute, or relative to one of its source roots), so the service
        can verify the frames against it. A stored key with other bytes raises (409)."""
        self._put(key, data, source, replace=False)

    def replace(self, key: str, data: bytes, *, source: str | None = None) -> None:
        """Admin operation: replace the stored blob of ``key`` (``PUT ?replace=true``)."""
        self._put(key, data, source, replace=True)

    def _put(self, key: str, data: bytes, source: str | None, replace: bool) -> None:
        path = f"/v1/blobs/{check_key(key)}"
        headers = {**(self._admin_headers if replace else self._write_headers),
                   "Content-Type": "application/octet-stream"}
        if source:
            headers["X-Evr1-Source"] = source
        response = self._request("PUT", path, f"PUT {path}", content=bytes(data), headers=headers,
                                 params={"replace": "true"} if replace else None)
        if response.status_code not in (200, 201, 204):
            raise self._fail(response, f"PUT {path}")

    def delete(self, key: str) -> bool:
        """Admin operation (the service refuses it to the read and write credentials)."""
        path = f"/v1/blobs/{check_key(key)}"
        response = self._request("DELETE", path, f"DELETE {path}", headers=self._admin_headers)
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

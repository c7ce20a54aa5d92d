"""HTTP/1.1 request-head limit shared by the services: ``uvicorn_http_options(max_header_bytes)``.

uvicorn's default parser (httptools, when installed) reads a request line and headers of any
size into memory before the application sees the request: a 300 MiB header held a service
for two minutes and grew it by 575 MiB. The services therefore run uvicorn's h11 protocol
with ``h11_max_incomplete_event_size`` set to the limit: h11 refuses a request head that is
still incomplete after that many bytes, so at most about the limit (plus one socket read) is
ever held for one connection; a head that arrives whole in one socket read is measured
before h11 parses it (h11 limits only incomplete ones). This subclass answers that refusal with **431** and a JSON
body naming the limit and its config field (uvicorn itself answers a plain 400 "Invalid
HTTP request received."), then closes the connection (after dropping at most 4 MiB more of
what the client is still sending, for at most 2 s, so that it can read the answer). Other
connections are not delayed: the refusal costs one buffer of at most the limit.
"""

from __future__ import annotations

import json
import re
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

DRAIN_BYTES = 4 << 20  # read and dropped after a 431 so the client sees it; then the connection is closed
DRAIN_SECONDS = 2.0
_HEAD_END = re.compile(rb"\n\r?\n")


class _Connection(h11.Connection):
    """An h11 connection that remembers why it refused the peer's data."""

    refused: h11.RemoteProtocolError | None = None

    def next_event(self) -> Any:
        try:
            return super().next_event()
        except h11.RemoteProtocolError as exc:
            self.refused = exc
            raise


def protocol_class(max_header_bytes: int, field: str) -> type[H11Protocol]:
    """An ``H11Protocol`` whose request heads are limited to ``max_header_bytes`` (431 above)."""

    class HeadLimitedH11Protocol(H11Protocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.conn = _Connection(h11.SERVER, max_header_bytes)

        def send_400_response(self, msg: str) -> None:
            refused = getattr(self.conn, "refused", None)
            if refused is None or refused.error_status_hint != 431:
                super().send_400_response(msg)
                return
            self._refuse_head()

        def _refuse_head(self) -> None:
            self.logger.warning("request head over %d bytes refused (431)", max_header_bytes)
            detail = (f"request line and headers exceed the limit of {max_header_bytes} bytes ({field}); "
                      "send large data in the body")
            body = json.dumps({"detail": detail}).encode()
            headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                       (b"connection", b"close")]
            # The connection is refused by hand (h11 may be in its ERROR state): answer and close.
            head = b"HTTP/1.1 431 Request Header Fields Too Large\r\n" + b"".join(
                k + b": " + v + b"\r\n" for k, v in headers) + b"\r\n"
            self.transport.write(head + body)
            # A lingering close: send the answer and a FIN, then read and drop what the client is
            # still sending (up to DRAIN_BYTES, for at most DRAIN_SECONDS) so that closing with
            # unread data (a TCP reset) does not destroy the 431 before the client reads it.
            self._evr1_drain_left = DRAIN_BYTES
            if self.transport.can_write_eof():
                self.transport.write_eof()
            self.loop.call_later(DRAIN_SECONDS, self.transport.close)

        def data_received(self, data: bytes) -> None:
            left = getattr(self, "_evr1_drain_left", None)
            if left is not None:
                self._evr1_drain_left = left - len(data)
                if self._evr1_drain_left <= 0:
                    self.transport.close()
                return
            if self.conn.their_state is h11.IDLE:
                # h11 limits only a head still incomplete after the limit; one that arrives whole
                # in a single read is measured here (the buffer holds at most the limit).
                pending = self.conn.trailing_data[0] + data
                end = _HEAD_END.search(pending)
                if (end.end() if end else len(pending)) > max_header_bytes:
                    self._refuse_head()
                    return
            super().data_received(data)

    return HeadLimitedH11Protocol


def uvicorn_http_options(max_header_bytes: int, field: str) -> dict[str, Any]:
    """Keyword arguments for ``uvicorn.Config``: the h11 protocol with the head limit."""
    return {"http": protocol_class(max_header_bytes, field), "h11_max_incomplete_event_size": max_header_bytes}

"""Redis :class:`VersionBoard`.

Layout (``P`` = ``evr1:{namespace}:``): hash ``P<board>:latest`` (``v`` version, ``r`` record
JSON), updated atomically with stream ``P<board>:log`` (one entry per publish, capped) that
``wait_for`` blocks on with XREAD.
"""

from __future__ import annotations

import json
from typing import Any

from easyvideor1.queue._redis import make_client, translated
from easyvideor1.queue.base import key_prefix, redact_url
from easyvideor1.queue.versions import VersionBoard, WeightVersion

_LOG_LENGTH = 1000

# KEYS: latest hash, log stream. ARGV: version, record JSON, log length. Returns -1 or the
# current (newer or equal) version that made the publish invalid.
_PUBLISH = """
local current = tonumber(redis.call('HGET', KEYS[1], 'v') or '-1')
if tonumber(ARGV[1]) <= current then return current end
redis.call('HSET', KEYS[1], 'v', ARGV[1], 'r', ARGV[2])
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', 'v', ARGV[1])
return -1
"""


class RedisVersionBoard(VersionBoard):
    def __init__(self, url: str, namespace: str, board: str = "weights", *, op_timeout_s: float = 5.0,
                 connect_timeout_s: float = 2.0):
        super().__init__(namespace, board)
        self.url = redact_url(url)
        base = key_prefix(namespace) + self.board
        self.keys = [f"{base}:latest", f"{base}:log"]
        self._poll_s = op_timeout_s / 2  # a blocked XREAD must end before the socket timeout
        self._r = make_client(url, op_timeout_s, connect_timeout_s)
        self._script = self._r.register_script(_PUBLISH)
        with translated(self.url, "PING"):
            self._r.ping()

    def _publish(self, record: WeightVersion, data: str) -> int | None:
        with translated(self.url, f"publish on {self.keys[0]}"):
            current = int(self._script(keys=self.keys, args=[record.version, data, _LOG_LENGTH]))
        return None if current < 0 else current

    def _latest(self) -> tuple[WeightVersion | None, Any]:
        pipe = self._r.pipeline(transaction=True)
        pipe.hget(self.keys[0], "r")
        pipe.xrevrange(self.keys[1], count=1)
        with translated(self.url, f"read {self.keys[0]}"):
            raw, last = pipe.execute()
        record = None if raw is None else WeightVersion(**json.loads(raw))
        return record, (last[0][0] if last else "0-0")

    def _wait_change(self, token: Any, timeout_s: float) -> None:
        block_ms = max(1, int(min(timeout_s, self._poll_s) * 1000))
        with translated(self.url, f"XREAD {self.keys[1]}"):
            self._r.xread({self.keys[1]: token}, count=1, block=block_ms)

    def close(self) -> None:
        if not self._closed:
            self._r.close()
        super().close()

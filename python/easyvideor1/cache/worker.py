"""A cache-build worker process: ``python -m easyvideor1.cache.worker``.

The builder starts a few of these and talks to each over its stdin/stdout, one JSON
object per line:

* builder -> worker, first line: ``{"store_url", "store_options", "index_dir"}``;
  the worker answers ``{"ready": true}`` once its imports are done and the store is open
  (so the per-video timeout never counts the start-up).
* builder -> worker, then: ``{"id", "path", "key": {...CacheKey fields}}``;
  the worker decodes, encodes and stores the blob, and answers ``{"id", "ok": true,
  "built", "bytes", "frames", "seconds"}`` or ``{"id", "ok": false, "error_class",
  "error_kind", "reason"}``.

A decode that hangs is the builder's problem: it kills this process by its pid and starts
another. Test hook: when ``EVR1_TEST_HANG_DECODE`` is set and is a substring of a task's
path, the worker sleeps for an hour before decoding it, simulating a decoder stuck on a
hostile file (tests/cache/test_cache_builder.py uses it to exercise the kill path).
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from typing import Any

HANG_ENV = "EVR1_TEST_HANG_DECODE"


def _protocol_channel() -> Any:
    """Keep the real stdout for the protocol and send anything else printed to stderr."""
    protocol = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return protocol


def _handle(task: dict[str, Any], store: Any, index: Any) -> dict[str, Any]:
    from easyvideor1.cache.key import CacheKey
    from easyvideor1.cache.media import build_blob
    from easyvideor1.errors import EasyVideoR1Error, MediaError
    from easyvideor1.video.metadata import ImageParams, VideoParams

    reply: dict[str, Any] = {"id": task["id"]}
    try:
        hang_on = os.environ.get(HANG_ENV)
        if hang_on and hang_on in task["path"]:
            time.sleep(3600)
        key = CacheKey(**task["key"])
        params = VideoParams(**key.params_dict) if key.kind == "video" else ImageParams(**key.params_dict)
        shape: list[int] = []

        def build() -> bytes:
            blob, frames, _metadata = build_blob(task["path"], key, params, index=index)
            shape.extend(frames.shape)
            return blob

        built, written = store.ensure(key.key, build)
        reply.update(ok=True, built=built, bytes=written, shape=shape)
    except MediaError as exc:
        reply.update(ok=False, error_class=type(exc).__name__, error_kind=exc.kind, reason=exc.reason)
    except EasyVideoR1Error as exc:
        reply.update(ok=False, error_class=type(exc).__name__, error_kind="store", reason=str(exc))
    except Exception as exc:  # a bug or an unexpected library error: report it, keep serving
        reply.update(ok=False, error_class=type(exc).__name__, error_kind="internal",
                     reason=f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=5)}")
    return reply


def main() -> int:
    out = _protocol_channel()
    from easyvideor1.cache.key import hash_index_at
    from easyvideor1.cache.stores.base import open_store

    config = json.loads(sys.stdin.readline() or "{}")
    store = open_store(config["store_url"], **config.get("store_options", {}))
    index = hash_index_at(config["index_dir"])
    import easyvideor1.cache.media  # noqa: F401 - import the decoders before reporting ready
    out.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        task = json.loads(line)
        started = time.perf_counter()
        reply = _handle(task, store, index)
        reply["seconds"] = round(time.perf_counter() - started, 4)
        out.write(json.dumps(reply) + "\n")
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

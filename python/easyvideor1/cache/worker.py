"""What a cache-build worker runs (a :mod:`easyvideor1.workpool` worker; the builder drives them).

* :func:`open_build_state` ``({"store_url", "store_options", "index_dir"})``, once at worker
  start-up, before the worker counts as ready (so the per-video timeout never counts it):
  opens the store and the hash index.
* :func:`build_one` ``(state, {"path", "key": {...CacheKey fields}}, None)`` decodes, encodes
  and stores one file's blob and returns ``{"ok": true, "built", "bytes", "shape"}`` or
  ``{"ok": false, "error_class", "error_kind", "reason"}``.

A decode that hangs is the pool's to stop: past the per-file timeout the worker is killed
with its process group and replaced. Test hook: when ``EVR1_TEST_HANG_DECODE`` is set and is
a substring of a task's path, the worker sleeps for an hour before decoding it, simulating a
decoder stuck on a hostile file (tests/cache/test_cache_builder.py uses it for the kill path).
"""

from __future__ import annotations

import os
import time
import traceback
from typing import Any

HANG_ENV = "EVR1_TEST_HANG_DECODE"


class BuildState:
    def __init__(self, config: dict[str, Any]):
        from easyvideor1.cache.key import hash_index_at
        from easyvideor1.cache.stores.base import open_store

        self.store = open_store(config["store_url"], **config.get("store_options", {}))
        self.index = hash_index_at(config["index_dir"])

    def close(self) -> None:
        self.store.close()


def open_build_state(config: dict[str, Any]) -> BuildState:
    import easyvideor1.cache.media  # noqa: F401 - the decoders are imported before the worker is ready

    return BuildState(config)


def build_one(state: BuildState, task: dict[str, Any], _context: Any) -> dict[str, Any]:
    from easyvideor1.cache.key import CacheKey
    from easyvideor1.cache.media import build_blob
    from easyvideor1.errors import EasyVideoR1Error, MediaError
    from easyvideor1.video.metadata import ImageParams, VideoParams

    try:
        hang_on = os.environ.get(HANG_ENV)
        if hang_on and hang_on in task["path"]:
            time.sleep(3600)
        key = CacheKey(**task["key"])
        params = VideoParams(**key.params_dict) if key.kind == "video" else ImageParams(**key.params_dict)
        shape: list[int] = []

        def build() -> bytes:
            blob, frames, _metadata = build_blob(task["path"], key, params, index=state.index)
            shape.extend(frames.shape)
            return blob

        built, written = state.store.ensure(key.key, build)
        return {"ok": True, "built": built, "bytes": written, "shape": shape}
    except MediaError as exc:
        return {"ok": False, "error_class": type(exc).__name__, "error_kind": exc.kind, "reason": exc.reason}
    except EasyVideoR1Error as exc:
        return {"ok": False, "error_class": type(exc).__name__, "error_kind": "store", "reason": str(exc)}
    except Exception as exc:  # a bug or an unexpected library error: report it, keep serving
        return {"ok": False, "error_class": type(exc).__name__, "error_kind": "internal",
                "reason": f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=5)}"}

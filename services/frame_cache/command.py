"""``evr1 serve frame-cache``: the frame-cache service under uvicorn, or its build workers alone.

SIGTERM stops gracefully: no new requests or builds; running builds get
``serve.frame_cache.shutdown_grace_s`` seconds, after which their leases expire and another worker takes them over.
"""

from __future__ import annotations

import argparse
import signal

from easyvideor1.config.cli import add_config_arguments, config_from_args
from easyvideor1.errors import ConfigError
from easyvideor1.logging import event, get_logger
from easyvideor1.queue.base import split_url
from services.auth import resolve_token
from services.http_limits import uvicorn_http_options

TOKEN_ENV = "EVR1_FRAME_CACHE_TOKEN"
_log = get_logger("services.frame_cache")


FLAGS = ("data.frame_cache.store", "serve.frame_cache.host", "serve.frame_cache.port", "serve.frame_cache.queue_url",
         "serve.frame_cache.namespace", "serve.frame_cache.build_workers", "serve.frame_cache.build_processes",
         "serve.frame_cache.file_timeout_s", "serve.frame_cache.build_lease_s", "serve.frame_cache.build_attempts",
         "serve.frame_cache.worker_only", "serve.frame_cache.read_only", "serve.frame_cache.max_blob_bytes",
         "serve.frame_cache.max_header_bytes", "serve.frame_cache.data_roots",
         "serve.frame_cache.token_env", "serve.frame_cache.shutdown_grace_s", "serve.frame_cache.log_level")


def add_parser(serve_subparsers) -> None:
    p = serve_subparsers.add_parser(
        "frame-cache", help="frame-cache service (GET /v1/blobs/{key}, POST /v1/builds)",
        description="Serve decoded frame blobs from a store and run cache builds from a work queue. "
                    "Settings: serve.frame_cache and data.frame_cache.store of the run config. "
                    "See docs/frame-cache-service.md.")
    add_config_arguments(p, FLAGS)
    p.set_defaults(func=serve)


def serve(args: argparse.Namespace) -> int:
    from services.frame_cache.app import queue_settings

    cfg = config_from_args(args)
    fc, store = cfg.serve.frame_cache, cfg.data.frame_cache.store
    if not store:
        raise ConfigError("the frame-cache service needs data.frame_cache.store (--store): /abs/dir, "
                          "file:///abs/dir or s3://bucket/prefix (S3 settings from EVR1_S3_ENDPOINT, "
                          "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)")
    split_url(fc.queue_url)  # a bad queue URL is a ConfigError now, not a 503 later
    queue = queue_settings(fc)
    if fc.worker_only:
        return _worker_only(fc, store, queue)
    import uvicorn

    from services.frame_cache import builds
    from services.frame_cache.app import create_app

    builds.configure_roots(fc.data_roots)  # POST /v1/builds reads media under these folders only
    app = create_app(cfg, token=resolve_token(fc.token_env, TOKEN_ENV))
    event(_log, "frame_cache_service_starting", host=fc.host, port=fc.port, store=store,
          queue=fc.queue_url, build_workers=fc.build_workers,
          data_roots=fc.data_roots, max_header_bytes=fc.max_header_bytes)
    server = uvicorn.Server(uvicorn.Config(app, host=fc.host, port=fc.port,
                                           log_level=fc.log_level, access_log=False,
                                           timeout_graceful_shutdown=int(fc.shutdown_grace_s) + 5,
                                           **uvicorn_http_options(fc.max_header_bytes,
                                                                  "serve.frame_cache.max_header_bytes")))
    server.run()
    return 0 if server.started else 1


def _worker_only(fc, store: str, queue) -> int:
    from easyvideor1.cache.stores.base import open_store
    from services.frame_cache.board import open_build_board
    from services.frame_cache.metrics import FrameCacheMetrics
    from services.frame_cache.worker import BuildSettings, BuildWorkers

    if split_url(fc.queue_url)[0] == "memory":
        raise ConfigError("serve.frame_cache.worker_only needs a shared queue (redis://...): a memory:// queue "
                          "lives in one process")
    open_store(store).close()  # a bad store URL fails now, with its reason
    workers = BuildWorkers(max(1, fc.build_workers), queue,
                           BuildSettings(store, {}, fc.build_processes, fc.file_timeout_s),
                           open_build_board(fc.queue_url, fc.namespace), FrameCacheMetrics())

    def stop(signum, _frame) -> None:
        event(_log, "frame_cache_workers_stopping", signal=signal.Signals(signum).name)
        workers.stop(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    workers.start()
    event(_log, "frame_cache_workers_started", count=workers.count, queue=fc.queue_url, store=store)
    workers.wait()
    workers.stop(fc.shutdown_grace_s)
    event(_log, "frame_cache_workers_stopped")
    return 0

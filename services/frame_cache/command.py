"""``evr1 serve frame-cache``: the frame-cache service under uvicorn, or its build workers alone.

SIGTERM stops gracefully: no new requests or builds; running builds get ``--shutdown-grace``
seconds, after which their leases expire and another worker takes them over.
"""

from __future__ import annotations

import argparse
import signal

from easyvideor1.errors import ConfigError
from easyvideor1.logging import event, get_logger
from easyvideor1.queue.base import split_url
from services.auth import add_token_argument, resolve_token

TOKEN_ENV = "EVR1_FRAME_CACHE_TOKEN"
_log = get_logger("services.frame_cache")


def _positive(kind: type):
    def parse(text: str):
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value

    parse.__name__ = kind.__name__
    return parse


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def add_parser(serve_subparsers) -> None:
    p = serve_subparsers.add_parser(
        "frame-cache", help="frame-cache service (GET /v1/blobs/{key}, POST /v1/builds)",
        description="Serve decoded frame blobs from a store and run cache builds from a work queue. "
                    "See docs/frame-cache-service.md.")
    p.add_argument("--host", default="127.0.0.1", help="bind address (0.0.0.0 in a container)")
    p.add_argument("--port", type=int, default=8001)
    p.add_argument("--store", required=True, metavar="URL",
                   help="backing store: /abs/dir, file:///abs/dir or s3://bucket/prefix (S3 settings from "
                        "EVR1_S3_ENDPOINT, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)")
    p.add_argument("--queue", default="memory://frame-cache", metavar="URL",
                   help="build queue: redis://host:port/db (shared by replicas) or memory://NAME (this process)")
    p.add_argument("--namespace", default="frame-cache", help="queue namespace (one per deployment)")
    p.add_argument("--build-workers", type=_count, default=1, metavar="N",
                   help="threads running builds in this process (0: this replica only serves and enqueues)")
    p.add_argument("--build-processes", type=_positive(int), default=2, metavar="N",
                   help="decoding subprocesses per running build")
    p.add_argument("--file-timeout", type=_positive(float), default=600.0, metavar="S",
                   help="seconds per media file before its decoding process is killed")
    p.add_argument("--build-lease", type=_positive(float), default=3600.0, metavar="S",
                   help="a build unfinished after this long is handed to another worker")
    p.add_argument("--build-attempts", type=_positive(int), default=3, metavar="N",
                   help="deliveries of a build before it is reported failed")
    p.add_argument("--worker-only", action="store_true",
                   help="run build workers only (no HTTP server); needs a redis:// queue")
    p.add_argument("--read-only", action="store_true", help="refuse PUT and DELETE of blobs")
    p.add_argument("--max-blob-bytes", type=_positive(int), default=1 << 30, help="largest PUT body")
    add_token_argument(p, TOKEN_ENV)
    p.add_argument("--shutdown-grace", type=_positive(float), default=10.0, metavar="S")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.set_defaults(func=serve)


def serve(args: argparse.Namespace) -> int:
    from services.frame_cache.worker import QueueSettings

    split_url(args.queue)  # a bad queue URL is a ConfigError now, not a 503 later
    queue = QueueSettings(url=args.queue, namespace=args.namespace, lease_s=args.build_lease,
                          max_attempts=args.build_attempts)
    if args.worker_only:
        return _worker_only(args, queue)
    import uvicorn

    from services.frame_cache.app import FrameCacheSettings, create_app

    settings = FrameCacheSettings(store_url=args.store, queue=queue, build_workers=args.build_workers,
                                  build_processes=args.build_processes, file_timeout_s=args.file_timeout,
                                  token=resolve_token(args.token_env, TOKEN_ENV), read_only=args.read_only, max_blob_bytes=args.max_blob_bytes,
                                  shutdown_grace_s=args.shutdown_grace)
    event(_log, "frame_cache_service_starting", host=args.host, port=args.port, store=args.store,
          queue=args.queue, build_workers=args.build_workers)
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host=args.host, port=args.port,
                                           log_level=args.log_level, access_log=False,
                                           timeout_graceful_shutdown=int(args.shutdown_grace) + 5))
    server.run()
    return 0 if server.started else 1


def _worker_only(args: argparse.Namespace, queue) -> int:
    from easyvideor1.cache.stores.base import open_store
    from services.frame_cache.board import open_build_board
    from services.frame_cache.metrics import FrameCacheMetrics
    from services.frame_cache.worker import BuildSettings, BuildWorkers

    if split_url(args.queue)[0] == "memory":
        raise ConfigError("--worker-only needs a shared queue (redis://...): a memory:// queue lives in one process")
    open_store(args.store).close()  # a bad store URL fails now, with its reason
    workers = BuildWorkers(max(1, args.build_workers), queue,
                           BuildSettings(args.store, {}, args.build_processes, args.file_timeout),
                           open_build_board(args.queue, args.namespace), FrameCacheMetrics())

    def stop(signum, _frame) -> None:
        event(_log, "frame_cache_workers_stopping", signal=signal.Signals(signum).name)
        workers.stop(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    workers.start()
    event(_log, "frame_cache_workers_started", count=workers.count, queue=args.queue, store=args.store)
    workers.wait()
    workers.stop(args.shutdown_grace)
    event(_log, "frame_cache_workers_stopped")
    return 0

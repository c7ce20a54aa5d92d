"""``evr1 serve rollout``: deploy the rollout pool on a Ray cluster and hold it until SIGTERM.

Reads the run config (``--config RUN.yaml``; flags override its fields): connects to
``distributed.ray_address``, starts Serve's HTTP proxy on ``serve.rollout.http_host:http_port``,
deploys ``build_app`` as application ``serve.rollout.app_name`` and waits until every replica's
worker reports ready. Then it prints one JSON line (``{"url": ..., "replicas": ...}``) and blocks;
SIGTERM or SIGINT deletes the application (replicas finish the batch in hand) and exits.
``--detach`` exits right after the deploy and leaves the application running.
"""

from __future__ import annotations

import argparse
import json
import signal
import threading
import time

from easyvideor1.config.cli import add_config_arguments, config_from_args
from easyvideor1.errors import EasyVideoR1Error
from easyvideor1.logging import event, get_logger

log = get_logger("services.rollout")


FLAGS = ("distributed.ray_address", "worker.actor.model_path", "worker.rollout.engine", "distributed.queue_url",
         "distributed.namespace", "distributed.weights_store", "distributed.frame_cache_url",
         "serve.rollout.replicas", "serve.rollout.min_replicas", "serve.rollout.max_replicas",
         "serve.rollout.tasks_per_replica", "serve.rollout.batch_size", "serve.rollout.visibility_timeout_s",
         "serve.rollout.lease_s", "serve.rollout.max_attempts", "serve.rollout.num_cpus", "serve.rollout.num_gpus",
         "serve.rollout.http_host", "serve.rollout.http_port", "serve.rollout.app_name", "serve.rollout.route_prefix",
         "serve.rollout.ready_timeout_s")


def add_parser(serve_subparsers) -> None:
    p = serve_subparsers.add_parser(
        "rollout", help="rollout pool: vLLM engines as Ray Serve replicas pulling tasks from the work queue",
        description="Deploy the rollout pool on a Ray cluster. See docs/distributed.md.")
    add_config_arguments(p, FLAGS)
    p.add_argument("--detach", action="store_true", help="exit after the deploy; the application keeps running")
    p.set_defaults(func=serve_pool)


def _wait_ready(url: str, replicas: int, timeout: float) -> dict:
    """Until ``replicas`` distinct workers answered ``/status`` ready (requests spread over replicas)."""
    import httpx

    seen: dict[str, dict] = {}
    deadline = time.monotonic() + timeout
    last = "no answer yet"
    while time.monotonic() < deadline:
        try:
            response = httpx.get(f"{url}/status", timeout=10)
            if response.status_code == 200:
                status = response.json()
                if status.get("healthy"):
                    seen[status["consumer"]] = status
                    if len(seen) >= replicas:
                        return seen
                last = f"{len(seen)} of {replicas} replica(s) ready"
            else:
                last = f"HTTP {response.status_code}"
        except httpx.HTTPError as exc:
            last = f"{type(exc).__name__}: {exc}"
        time.sleep(0.5)
    raise EasyVideoR1Error(f"rollout pool at {url} not ready after {timeout:g}s: {last}")


def _local_ray(address: str | None) -> bool:
    """Whether the Ray cluster runs on this machine (its replicas read the model folder here)."""
    if not address or address == "auto":
        return True
    host = address.split("://", 1)[-1].rsplit(":", 1)[0].strip("[]")
    return host in ("127.0.0.1", "localhost", "::1")


def serve_pool(args: argparse.Namespace) -> int:
    import ray
    from ray import serve

    from services.rollout.deployment import build_app

    cfg = config_from_args(args)
    if _local_ray(cfg.distributed.ray_address):  # a remote cluster's replicas have their own file system
        from easyvideor1.models.paths import check_model_dir

        check_model_dir(cfg.worker.actor.model_path, "worker.actor.model_path")
    pool = cfg.serve.rollout
    app = build_app({"run_config": cfg.model_dump(mode="json")})  # config errors surface before Ray is touched
    ray.init(address=cfg.distributed.ray_address or "auto", log_to_driver=False)
    serve.start(http_options={"host": pool.http_host, "port": pool.http_port})
    try:
        serve.run(app, name=pool.app_name, route_prefix=pool.route_prefix)
    except RuntimeError as exc:  # it names no cause: the replicas' own error is in serve.status()
        from services.rollout.diagnose import deploy_failure_reason

        raise EasyVideoR1Error(f"{exc}\n{deploy_failure_reason(pool.app_name)}") from exc
    url = f"http://{pool.http_host}:{pool.http_port}{pool.route_prefix.rstrip('/')}"
    replicas = pool.replicas or pool.min_replicas
    ready = _wait_ready(url, replicas, pool.ready_timeout_s)
    print(json.dumps({"url": url, "app": pool.app_name, "replicas": sorted(ready)}), flush=True)
    event(log, "rollout_pool_ready", url=url, replicas=len(ready), namespace=cfg.distributed.namespace)
    if args.detach:
        return 0
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    event(log, "rollout_pool_stopping", app=pool.app_name)
    serve.delete(pool.app_name)
    ray.shutdown()
    return 0

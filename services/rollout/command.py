"""``evr1 serve rollout``: deploy the rollout pool on a Ray cluster and hold it until SIGTERM.

Connects to ``--ray-address``, starts Serve's HTTP proxy on ``--http-host:--http-port``,
deploys ``build_app`` as application ``--app-name`` and waits until every replica's worker
reports ready. Then it prints one JSON line (``{"url": ..., "replicas": ...}``) and blocks;
SIGTERM or SIGINT deletes the application (replicas finish the batch in hand) and exits.
``--detach`` exits right after the deploy and leaves the application running.
"""

from __future__ import annotations

import argparse
import json
import signal
import threading
import time

from easyvideor1.errors import EasyVideoR1Error
from easyvideor1.logging import event, get_logger

log = get_logger("services.rollout")


def add_parser(serve_subparsers) -> None:
    p = serve_subparsers.add_parser(
        "rollout", help="rollout pool: vLLM engines as Ray Serve replicas pulling tasks from the work queue",
        description="Deploy the rollout pool on a Ray cluster. See docs/distributed.md.")
    p.add_argument("--ray-address", default="auto", help="Ray cluster (GCS) address, e.g. 127.0.0.1:6379")
    p.add_argument("--model", required=True, help="model directory of the engines (the runs' base model)")
    p.add_argument("--queue", required=True, help="work queue URL (redis://host:port/db)")
    p.add_argument("--namespace", default="default", help="queue namespace (distributed.namespace)")
    p.add_argument("--reward-url", default="inprocess", help="reward service URL, or 'inprocess'")
    p.add_argument("--frame-store", default=None, help="frame-cache service URL (or s3://, or a directory)")
    p.add_argument("--weights-store", default=None, help="root of the weights store (s3://bucket/prefix or a dir)")
    p.add_argument("--replicas", type=int, default=None, help="fixed replica count (default: autoscale)")
    p.add_argument("--min-replicas", type=int, default=1)
    p.add_argument("--max-replicas", type=int, default=1)
    p.add_argument("--tasks-per-replica", type=int, default=16, help="autoscaling target backlog per replica")
    p.add_argument("--engine", choices=["vllm", "hf"], default="vllm")
    p.add_argument("--max-model-len", type=int, default=4096)
    p.add_argument("--batch-size", type=int, default=8, help="tasks per engine call")
    p.add_argument("--visibility-timeout", type=float, default=300.0, help="seconds before a lease expires")
    p.add_argument("--max-attempts", type=int, default=3, help="deliveries before a task is dead-lettered")
    p.add_argument("--num-cpus", type=float, default=1.0, help="CPUs per replica")
    p.add_argument("--num-gpus", type=float, default=0.0, help="GPUs per replica")
    p.add_argument("--http-host", default="127.0.0.1")
    p.add_argument("--http-port", type=int, default=8000)
    p.add_argument("--app-name", default="rollout")
    p.add_argument("--route-prefix", default="/")
    p.add_argument("--ready-timeout", type=float, default=600.0, help="seconds to wait for every replica")
    p.add_argument("--detach", action="store_true", help="exit after the deploy; the application keeps running")
    p.set_defaults(func=serve_pool)


def pool_args(args: argparse.Namespace) -> dict:
    return {"model_path": args.model, "queue_url": args.queue, "namespace": args.namespace,
            "reward_url": args.reward_url, "frame_cache_url": args.frame_store, "weights_store": args.weights_store,
            "engine": args.engine, "max_model_len": args.max_model_len, "batch_size": args.batch_size,
            "visibility_timeout_s": args.visibility_timeout, "max_attempts": args.max_attempts,
            "num_replicas": args.replicas, "min_replicas": args.min_replicas,
            "max_replicas": max(args.max_replicas, args.min_replicas), "tasks_per_replica": args.tasks_per_replica,
            "num_cpus": args.num_cpus, "num_gpus": args.num_gpus}


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


def serve_pool(args: argparse.Namespace) -> int:
    import ray
    from ray import serve

    from services.rollout.deployment import build_app

    app = build_app(pool_args(args))  # argument errors surface before Ray is touched
    ray.init(address=args.ray_address, log_to_driver=False)
    serve.start(http_options={"host": args.http_host, "port": args.http_port})
    serve.run(app, name=args.app_name, route_prefix=args.route_prefix)
    url = f"http://{args.http_host}:{args.http_port}{args.route_prefix.rstrip('/')}"
    replicas = args.replicas or args.min_replicas
    ready = _wait_ready(url, replicas, args.ready_timeout)
    print(json.dumps({"url": url, "app": args.app_name, "replicas": sorted(ready)}), flush=True)
    event(log, "rollout_pool_ready", url=url, replicas=len(ready), namespace=args.namespace)
    if args.detach:
        return 0
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    event(log, "rollout_pool_stopping", app=args.app_name)
    serve.delete(args.app_name)
    ray.shutdown()
    return 0

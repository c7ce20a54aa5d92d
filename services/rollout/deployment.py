"""``build_app(args)``: the rollout pool as a Ray Serve application (RayService import path
``services.rollout.deployment:build_app``).

Each replica owns one engine and runs one :class:`~easyvideor1.rollout.worker.RolloutWorker`
loop in a background thread; replicas pull tasks from the work queue, so a replica that dies
only delays its leased tasks (they are delivered again after the visibility timeout).
HTTP: ``GET /status`` (the worker's state and counters), ``GET /healthz`` (200 or 503). Serve's
health check fails when the loop has died, and Serve replaces the replica.

Scaling: a fixed ``num_replicas``, or autoscaling between ``min_replicas`` and ``max_replicas``
on the queue backlog (:class:`BacklogPolicy`: every replica reports queued + leased tasks; the
pool aims at ``tasks_per_replica`` each). Request-based autoscaling would see no traffic:
replicas pull work, they are not sent it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from ray import serve
from ray.serve.config import AutoscalingContext, AutoscalingPolicy
from starlette.requests import Request
from starlette.responses import JSONResponse

from easyvideor1.errors import ConfigError
from easyvideor1.logging import event, get_logger

log = get_logger("services.rollout")
DEPLOYMENT_NAME = "RolloutEngine"  # the Helm chart's rollout.deploymentName


@dataclass
class PoolArgs:
    """Arguments of :func:`build_app` (the RayService ``args`` map); unknown keys are errors."""

    model_path: str
    queue_url: str
    namespace: str = "default"
    reward_url: str = "inprocess"
    frame_cache_url: str | None = None  # frame store: the frame-cache service, s3:// or a directory
    weights_store: str | None = None
    engine: str = "vllm"
    max_model_len: int = 4096
    seed: int = 0
    batch_size: int = 8
    visibility_timeout_s: float = 300.0
    max_attempts: int = 3
    num_replicas: int | None = None  # fixed size; None: autoscale between min and max
    min_replicas: int = 1
    max_replicas: int = 1
    tasks_per_replica: int = 16
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    deployment_name: str = DEPLOYMENT_NAME

    @classmethod
    def from_args(cls, args: dict[str, Any]) -> PoolArgs:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(args) - known)
        if unknown:
            raise ConfigError(f"rollout pool: unknown argument(s) {unknown}; known: {sorted(known)}")
        missing = [name for name in ("model_path", "queue_url") if not args.get(name)]
        if missing:
            raise ConfigError(f"rollout pool: missing argument(s) {missing}")
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):  # `serve run ... key=value` passes strings
            value = args.get(f.name)
            if value is None:
                continue
            kind = str(f.type).split(" ")[0]
            try:
                values[f.name] = int(value) if kind == "int" else float(value) if kind == "float" else value
            except (TypeError, ValueError):
                raise ConfigError(f"rollout pool: {f.name} must be {kind}, got {value!r}") from None
        pool = cls(**values)
        if pool.engine not in ("vllm", "hf"):
            raise ConfigError(f"rollout pool: engine must be 'vllm' or 'hf', got {pool.engine!r}")
        if not 1 <= pool.min_replicas <= pool.max_replicas:
            raise ConfigError(f"rollout pool: need 1 <= min_replicas ({pool.min_replicas}) <= max_replicas "
                              f"({pool.max_replicas})")
        return pool


class BacklogPolicy:
    """Serve autoscaling policy: ``ceil(backlog / tasks_per_replica)`` replicas (Serve clamps to
    [min, max] and applies the up/down delays). The backlog is the queue's, seen alike by every
    replica, so the largest report (the most recent view) is used."""

    def __init__(self, tasks_per_replica: int = 16):
        if tasks_per_replica < 1:
            raise ConfigError(f"tasks_per_replica must be >= 1, got {tasks_per_replica}")
        self.tasks_per_replica = tasks_per_replica

    def __call__(self, ctx: AutoscalingContext) -> tuple[int, dict[str, Any]]:
        reports = (ctx.aggregated_metrics or {}).get("backlog") or {}
        if not reports:  # no replica reported yet: keep the current size
            return ctx.target_num_replicas, ctx.policy_state
        backlog = max(reports.values())
        return math.ceil(backlog / self.tasks_per_replica), ctx.policy_state


class RolloutReplica:
    def __init__(self, args: dict[str, Any]):
        from easyvideor1.cache import open_store
        from easyvideor1.queue import open_queue
        from easyvideor1.rewards.client import open_reward_client
        from easyvideor1.rollout.weight_follow import EngineWeights
        from easyvideor1.rollout.worker import RolloutWorker, WorkerSettings
        from easyvideor1.rollout.worker_cli import open_engine

        pool = self.pool = PoolArgs.from_args(args)
        self.engine = open_engine(pool.engine, pool.model_path, max_model_len=pool.max_model_len, seed=pool.seed)
        self.queue = open_queue(pool.queue_url, pool.namespace, visibility_timeout_s=pool.visibility_timeout_s,
                                max_attempts=pool.max_attempts)
        self.store = open_store(pool.frame_cache_url) if pool.frame_cache_url else None
        self.weights = EngineWeights(self.engine, pool.model_path, board_url=pool.queue_url,
                                     namespace=pool.namespace, weights_root=pool.weights_store)
        self.worker = RolloutWorker(self.engine, self.queue, open_reward_client(pool.reward_url),
                                    frame_store=self.store, weights=self.weights,
                                    settings=WorkerSettings(batch_size=pool.batch_size,
                                                            max_model_len=pool.max_model_len))
        self.worker.start()
        event(log, "rollout_replica_started", consumer=self.worker.settings.consumer, namespace=pool.namespace)

    async def __call__(self, request: Request) -> JSONResponse:
        route = request.url.path.rstrip("/").rsplit("/", 1)[-1]
        if route in ("", "status"):
            return JSONResponse(self.worker.status())
        if route == "healthz":
            healthy = self.worker.healthy()
            return JSONResponse({"healthy": healthy, "state": self.worker.state}, status_code=200 if healthy else 503)
        return JSONResponse({"detail": f"no route {request.url.path} (use /status or /healthz)"}, status_code=404)

    def check_health(self) -> None:
        if not self.worker.healthy():
            raise RuntimeError(f"rollout worker loop is {self.worker.state}: {self.worker.last_error}")

    def record_autoscaling_stats(self) -> dict[str, float]:
        stats = self.queue.stats()
        return {"backlog": float(stats.pending + stats.in_flight)}

    def __del__(self) -> None:
        worker = getattr(self, "worker", None)
        if worker is None:
            return
        worker.stop(timeout=60)  # the batch in hand finishes; nothing leased is lost either way
        self.queue.close()
        worker.rewards.close()
        self.weights.close()
        if self.store is not None:
            self.store.close()
        self.engine.close()


def build_app(args: dict[str, Any]) -> Any:
    """The Serve application of the pool (``serve run services.rollout.deployment:build_app k=v``)."""
    pool = PoolArgs.from_args(dict(args))
    options: dict[str, Any] = {
        "name": pool.deployment_name,
        "ray_actor_options": {"num_cpus": pool.num_cpus, "num_gpus": pool.num_gpus},
        # A vLLM engine can take minutes to load on a GPU; its health is the loop's.
        "health_check_period_s": 10.0, "health_check_timeout_s": 60.0, "graceful_shutdown_timeout_s": 90.0,
        "max_ongoing_requests": 64,
    }
    if pool.num_replicas is not None:
        options["num_replicas"] = pool.num_replicas
    else:
        options["autoscaling_config"] = {
            "min_replicas": pool.min_replicas, "max_replicas": pool.max_replicas, "upscale_delay_s": 10.0,
            "downscale_delay_s": 300.0,
            "policy": AutoscalingPolicy(policy_function=BacklogPolicy,
                                        policy_kwargs={"tasks_per_replica": pool.tasks_per_replica}),
        }
    return serve.deployment(RolloutReplica).options(**options).bind(dataclasses.asdict(pool))

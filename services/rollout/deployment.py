"""``build_app(args)``: the rollout pool as a Ray Serve application (RayService import path
``services.rollout.deployment:build_app``, args ``{config: /etc/easyvideor1/run.yaml}``).

Every setting comes from the run config: ``args`` is ``{"config": PATH}`` (the file, as mounted
from the chart's ConfigMap in every pod), ``{"run_config": {...}}`` (the validated mapping, as
``evr1 serve rollout`` sends it), and optionally ``"overrides": ["key=value", ...]``. The pool's
own settings are ``serve.rollout``; the engines, model, queue and stores are the sections that
rollout/worker_cli.py's ``build_worker`` reads.

Each replica owns one engine and runs one :class:`~easyvideor1.rollout.worker.RolloutWorker`
loop in a background thread; replicas pull tasks from the work queue, so a replica that dies
only delays its leased tasks (they are delivered again after the visibility timeout).
HTTP: ``GET /status`` (the worker's state and counters), ``GET /healthz`` (200 or 503). Serve's
health check fails when the loop has died, and Serve replaces the replica.

Scaling: a fixed ``serve.rollout.replicas``, or autoscaling between ``min_replicas`` and ``max_replicas``
on the queue backlog (:class:`BacklogPolicy`: every replica reports queued + leased tasks; the
pool aims at ``tasks_per_replica`` each). Request-based autoscaling would see no traffic:
replicas pull work, they are not sent it.
"""

from __future__ import annotations

import json
import math
from typing import Any

from ray import serve
from ray.serve.config import AutoscalingContext, AutoscalingPolicy
from starlette.requests import Request
from starlette.responses import JSONResponse

from easyvideor1.config.loader import apply_override, load_config, validate_config
from easyvideor1.config.schema import RunConfig
from easyvideor1.errors import ConfigError
from easyvideor1.logging import event, get_logger

log = get_logger("services.rollout")
DEPLOYMENT_NAME = "RolloutEngine"  # the Serve deployment: its replicas and their logs carry this name


ARG_KEYS = ("config", "run_config", "overrides")


def pool_config(args: dict[str, Any]) -> RunConfig:
    """The run config of the application's ``args`` (unknown keys are errors)."""
    unknown = sorted(set(args) - set(ARG_KEYS))
    if unknown:
        raise ConfigError(f"rollout pool: unknown argument(s) {unknown}; known: {list(ARG_KEYS)}")
    overrides = args.get("overrides") or []
    if isinstance(overrides, str):
        overrides = [overrides]
    if args.get("run_config") is not None:
        if args.get("config"):
            raise ConfigError("rollout pool: give 'config' (a file) or 'run_config' (a mapping), not both")
        raw = args["run_config"]
        if not isinstance(raw, dict):
            raise ConfigError(f"rollout pool: run_config must be a mapping, got {type(raw).__name__}")
        raw = json.loads(json.dumps(raw))
        for item in overrides:
            apply_override(raw, item)
        return validate_config(raw, "rollout pool run_config")
    if not args.get("config"):
        raise ConfigError("rollout pool: missing argument 'config' (the run config file) or 'run_config'")
    return load_config(args["config"], list(overrides))


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
    def __init__(self, cfg_json: str):
        from easyvideor1.rollout.worker_cli import build_worker

        cfg = RunConfig.model_validate_json(cfg_json)
        self.built = build_worker(cfg)
        self.worker, self.queue = self.built.worker, self.built.worker.queue
        self.worker.start()
        event(log, "rollout_replica_started", consumer=self.worker.consumer,
              namespace=cfg.distributed.namespace)

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
        self.built.close()


def build_app(args: dict[str, Any]) -> Any:
    """The Serve application of the pool (``serve run services.rollout.deployment:build_app k=v``)."""
    cfg = pool_config(dict(args))
    pool = cfg.serve.rollout
    options: dict[str, Any] = {
        "name": DEPLOYMENT_NAME,
        "ray_actor_options": {"num_cpus": pool.num_cpus, "num_gpus": pool.num_gpus},
        # A vLLM engine can take minutes to load on a GPU; its health is the loop's.
        "health_check_period_s": 10.0, "health_check_timeout_s": 60.0, "graceful_shutdown_timeout_s": 90.0,
        "max_ongoing_requests": 64,
    }
    if pool.replicas is not None:
        options["num_replicas"] = pool.replicas
    else:
        options["autoscaling_config"] = {
            "min_replicas": pool.min_replicas, "max_replicas": pool.max_replicas, "upscale_delay_s": 10.0,
            "downscale_delay_s": 300.0,
            "policy": AutoscalingPolicy(policy_function=BacklogPolicy,
                                        policy_kwargs={"tasks_per_replica": pool.tasks_per_replica}),
        }
    return serve.deployment(RolloutReplica).options(**options).bind(cfg.model_dump_json())

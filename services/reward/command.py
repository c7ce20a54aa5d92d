"""``evr1 serve reward``: run the reward service under uvicorn (SIGTERM = graceful stop).

Settings come from the run config (``--config RUN.yaml``): the server's from ``serve.reward``,
how it scores (weights, scorer options and modules, the per-item time limit, workers) from
``worker.reward``, the same section the trainer and the rollout pool score with.
"""

from __future__ import annotations

import argparse

from easyvideor1.config.cli import add_config_arguments, config_from_args
from easyvideor1.logging import event, get_logger
from easyvideor1.rewards.client import TOKEN_ENV
from services.auth import resolve_token
from services.http_limits import uvicorn_http_options

_log = get_logger("services.reward")
FLAGS = ("serve.reward.host", "serve.reward.port", "serve.reward.max_batch", "serve.reward.max_body_bytes",
         "serve.reward.max_item_chars", "serve.reward.max_header_bytes", "serve.reward.max_json_depth",
         "serve.reward.token_env", "serve.reward.log_level",
         "worker.reward.workers", "worker.reward.timeout_s")


def add_parser(serve_subparsers) -> None:
    p = serve_subparsers.add_parser(
        "reward", help="reward scoring service (POST /v1/score)",
        description="Score model responses per problem type over HTTP. See docs/reward-service.md.")
    add_config_arguments(p, FLAGS)
    p.set_defaults(func=serve)


def serve(args: argparse.Namespace) -> int:
    import uvicorn

    from services.reward.app import create_app

    cfg = config_from_args(args)
    service, reward = cfg.serve.reward, cfg.worker.reward
    token = resolve_token(service.token_env, TOKEN_ENV)
    app = create_app(cfg, token=token)
    event(_log, "reward_service_starting", host=service.host, port=service.port, workers=reward.workers,
          max_batch=service.max_batch, max_body_bytes=service.max_body_bytes,
          max_header_bytes=service.max_header_bytes, timeout_s=reward.timeout_s,
          auth=token is not None)
    server = uvicorn.Server(uvicorn.Config(
        app, host=service.host, port=service.port, log_level=service.log_level, access_log=False,
        timeout_graceful_shutdown=int(reward.timeout_s) + 5,
        **uvicorn_http_options(service.max_header_bytes, "serve.reward.max_header_bytes")))
    server.run()
    return 0 if server.started else 1

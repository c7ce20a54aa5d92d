"""``evr1 serve reward``: run the reward service under uvicorn (SIGTERM = graceful stop)."""

from __future__ import annotations

import argparse
import os

from easyvideor1.logging import event, get_logger
from easyvideor1.rewards.client import DEFAULT_MAX_ITEM_CHARS, TOKEN_ENV
from easyvideor1.rewards.types import RewardConfig
from services.auth import add_token_argument, resolve_token
from services.reward.config import load_reward_config

_log = get_logger("services.reward")


def _positive(kind: type):
    def parse(text: str):
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value

    parse.__name__ = kind.__name__
    return parse


def add_parser(serve_subparsers) -> None:
    p = serve_subparsers.add_parser(
        "reward", help="reward scoring service (POST /v1/score)",
        description="Score model responses per problem type over HTTP. See docs/reward-service.md.")
    p.add_argument("--host", default="127.0.0.1", help="bind address (0.0.0.0 in a container)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--workers", type=_positive(int), default=None,
                   help="scoring worker processes (default: the CPUs this process may use)")
    p.add_argument("--max-batch", type=_positive(int), default=4096, help="items per request (more: 413)")
    p.add_argument("--max-body-bytes", type=_positive(int), default=32 << 20, help="request body size (more: 413)")
    p.add_argument("--max-item-chars", type=_positive(int), default=DEFAULT_MAX_ITEM_CHARS,
                   help="longest response/ground_truth/problem per item (more: a per-item error)")
    add_token_argument(p, TOKEN_ENV)
    p.add_argument("--item-timeout", type=_positive(float), default=60.0, metavar="S",
                   help="hard limit per item; the worker running it is killed and replaced")
    p.add_argument("--config", default=None, metavar="FILE",
                   help="YAML/JSON reward settings (RewardConfig fields, optionally under 'rewards:')")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.set_defaults(func=serve)


def serve(args: argparse.Namespace) -> int:
    import uvicorn

    from services.reward.app import RewardServiceSettings, create_app

    config = load_reward_config(args.config) if args.config else RewardConfig()
    settings = RewardServiceSettings(
        workers=args.workers or len(os.sched_getaffinity(0)), max_batch=args.max_batch,
        max_body_bytes=args.max_body_bytes, token=resolve_token(args.token_env, TOKEN_ENV), item_timeout=args.item_timeout,
        config=config, max_item_chars=args.max_item_chars)
    event(_log, "reward_service_starting", host=args.host, port=args.port, workers=settings.workers,
          max_batch=settings.max_batch, max_body_bytes=settings.max_body_bytes, auth=settings.token is not None)
    server = uvicorn.Server(uvicorn.Config(
        create_app(settings), host=args.host, port=args.port, log_level=args.log_level, access_log=False,
        timeout_graceful_shutdown=int(settings.item_timeout) + 5))
    server.run()
    return 0 if server.started else 1

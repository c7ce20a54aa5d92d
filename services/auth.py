"""Bearer-token settings shared by the services' command lines."""

from __future__ import annotations

import argparse
import os

from easyvideor1.errors import ConfigError


def add_token_argument(parser: argparse.ArgumentParser, default_env: str) -> None:
    parser.add_argument("--token-env", default=None, metavar="VAR",
                        help=f"require 'Authorization: Bearer $VAR' (default: ${default_env} when it is set)")


def resolve_token(token_env: str | None, default_env: str) -> str | None:
    """The bearer token from ``--token-env VAR``, else ``$default_env``, else none (open)."""
    if token_env:
        token = os.environ.get(token_env)
        if not token:  # an explicit auth request must never fall back to an open service
            raise ConfigError(f"token_env {token_env}: that environment variable is unset or empty")
        return token
    return os.environ.get(default_env) or None


def check_distinct(tokens: dict[str, str | None]) -> None:
    """ConfigError when two roles (read, write, admin) were given one token: a role's
    credential must never also be another's, or a reader could write."""
    seen: dict[str, str] = {}
    for role, token in tokens.items():
        if token is None:
            continue
        if token in seen:
            raise ConfigError(f"the {seen[token]} and {role} credentials are the same token; each role needs "
                              "its own")
        seen[token] = role

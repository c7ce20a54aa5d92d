"""``evr1 serve <service>``: each service package with a ``command`` module adds its parser.

A service package ``services/<name>/command.py`` defines ``add_parser(serve_subparsers)``.
"""

from __future__ import annotations

import importlib
import pkgutil

import services


def register(subparsers) -> None:
    serve = subparsers.add_parser("serve", help="run one of the project's services")
    serve_sub = serve.add_subparsers(dest="service", metavar="SERVICE")
    serve.set_defaults(func=lambda args: (serve.print_help(), 2)[1])
    for info in sorted(pkgutil.iter_modules(services.__path__), key=lambda m: m.name):
        if not info.ispkg:
            continue
        try:
            module = importlib.import_module(f"services.{info.name}.command")
        except ModuleNotFoundError as exc:
            if exc.name == f"services.{info.name}.command":
                continue
            raise
        module.add_parser(serve_sub)

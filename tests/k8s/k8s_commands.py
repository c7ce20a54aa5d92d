"""Resolve container commands against the real CLIs, and read Dockerfiles.

``evr1 ...`` is parsed by ``easyvideor1.cli.main.build_parser()`` and must reach a leaf
command; ``kopf``/``ray`` by their click groups (kopf's ``-m`` modules must import);
``python -m X`` must import X. Anything else is unknown and fails.

Given ``files`` (path -> text: what the pod's ConfigMap volumes put there), a command that
reads a run config is also run up to its config: ``evr1 serve ... --config FILE`` loads FILE
with its flags as the command itself does (``config_from_args``), and the trainer
entrypoint's FILE and KEY=VALUE overrides load the same way. The file must be one the pod
mounts, and the config must validate.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import io
import json
import re
import shlex
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from k8s_support import REPO

PROJECT_REGISTRY = "ghcr.io/easyvideor1/"
# Images not built from docker/: their commands are theirs; the chart must pin them.
THIRD_PARTY_IMAGES = {"quay.io/minio/minio": {"minio"}, "docker.io/library/redis": {"redis-server", "sh"}}


@functools.cache
def evr1_parser() -> argparse.ArgumentParser:
    from easyvideor1.cli.main import build_parser

    return build_parser()


RUN_CONFIG_TRAINER = "services.trainer.entrypoint"


def resolve_evr1(args: list[str], files: dict[str, str] | None = None) -> argparse.Namespace:
    parser = evr1_parser()
    _require_leaf(parser, args, "evr1")
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            namespace = parser.parse_args(args)
    except SystemExit:
        raise AssertionError(f"evr1 {shlex.join(args)}: {err.getvalue().strip()}") from None
    assert callable(getattr(namespace, "func", None)), f"evr1 {shlex.join(args)}: no command function"
    if any(dest.startswith("config_field__") for dest in vars(namespace)):  # reads the run config
        _load_run_config(f"evr1 {shlex.join(args)}", namespace, files)
    return namespace


def load_mounted_config(where: str, path: str | None, overrides: list[str], files: dict[str, str] | None):
    """The run config at ``path`` as the pod sees it (``files``), with ``overrides``; the
    defaults when ``path`` is None. AssertionError when it is not mounted or does not validate."""
    from easyvideor1.config import load_config
    from easyvideor1.errors import ConfigError

    if path is not None and files is not None:
        assert path in files, f"{where}: {path} is not a file the pod mounts (mounted: {sorted(files)})"
    try:
        if path is None or files is None:
            return load_config(None if files is None else path, overrides)
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as handle:
            handle.write(files[path])
            handle.flush()
            return load_config(handle.name, overrides)
    except ConfigError as exc:
        raise AssertionError(f"{where}: {exc}") from None


def _load_run_config(where: str, namespace: argparse.Namespace, files: dict[str, str] | None):
    from easyvideor1.config.cli import config_overrides

    return load_mounted_config(where, namespace.config, config_overrides(namespace), files)


def _require_leaf(parser: argparse.ArgumentParser, args: list[str], prog: str) -> None:
    """Group commands print help and exit 2; a container must name an actual command."""
    while True:
        sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        if sub is None:
            return
        chosen = next((token for token in args if token in sub.choices), None)
        assert chosen is not None, f"{prog} {shlex.join(args)}: incomplete, needs one of {sorted(sub.choices)}"
        prog = f"{prog} {chosen}"
        args = args[args.index(chosen) + 1:]
        parser = sub.choices[chosen]


def resolve_click(group: Any, prog: str, args: list[str]) -> dict[str, Any]:
    import click

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            ctx = group.make_context(prog, list(args))
            name, command, rest = group.resolve_command(ctx, [*ctx.protected_args, *ctx.args])
            sub = command.make_context(name, rest, parent=ctx)
    except click.ClickException as exc:
        raise AssertionError(f"{prog} {shlex.join(args)}: {exc.format_message()}") from None
    return dict(sub.params)


def resolve_kopf(args: list[str]) -> dict[str, Any]:
    from kopf.cli import main

    params = resolve_click(main, "kopf", args)
    assert params.get("modules") or params.get("paths"), f"kopf {shlex.join(args)}: no handler module"
    for module in params.get("modules", ()):
        import_module(module)
    return params


def resolve_ray(args: list[str]) -> dict[str, Any]:
    from ray.scripts.scripts import cli

    return resolve_click(cli, "ray", args)


def import_module(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise AssertionError(f"module {name} does not import: {exc}") from None


def resolve_import_path(path: str) -> Any:
    """``module:attribute`` (a Ray Serve import_path) -> the callable."""
    module, sep, attribute = path.partition(":")
    assert sep and module and attribute, f"import path {path!r} is not module:attribute"
    target = getattr(import_module(module), attribute, None)
    assert callable(target), f"{path}: no callable {attribute} in {module}"
    return target


def resolve(argv: list[str], files: dict[str, str] | None = None) -> None:
    """``files``: what the pod mounts (path -> text); when given, run configs are loaded from it."""
    assert argv, "empty command"
    prog, args = argv[0], list(argv[1:])
    if prog == "evr1":
        resolve_evr1(args, files)
    elif prog == "kopf":
        resolve_kopf(args)
    elif prog == "ray":
        resolve_ray(args)
    elif prog in ("python", "python3"):
        assert args[:1] == ["-m"] and len(args) > 1, f"{shlex.join(argv)}: only `python -m MODULE` is allowed"
        import_module(args[1])
        if args[1] == RUN_CONFIG_TRAINER:  # CONFIG [KEY=VALUE ...] [--export DIR]
            positional = [a for a in args[2:] if not a.startswith("--")]
            assert positional, f"{shlex.join(argv)}: no run config file"
            load_mounted_config(shlex.join(argv), positional[0], [a for a in positional[1:] if "=" in a], files)
    else:
        raise AssertionError(f"{shlex.join(argv)}: {prog} is not a command of the project's images")


def container_argv(container: dict[str, Any]) -> list[str] | None:
    if "command" not in container:
        return None
    return [*container["command"], *container.get("args", [])]


# ---- Dockerfiles ---------------------------------------------------------------------

@dataclass
class Stage:
    image: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def last(self, keyword: str) -> str | None:
        found = [rest for key, rest in self.instructions if key == keyword]
        return found[-1] if found else None


def parse_dockerfile(path: Path) -> list[Stage]:
    text = re.sub(r"\\\n", " ", path.read_text())
    stages: list[Stage] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, rest = line.partition(" ")
        keyword, rest = keyword.upper(), rest.strip()
        if keyword == "FROM":
            parts = rest.split()
            name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else None
            stages.append(Stage(parts[0], name))
        else:
            assert stages, f"{path.name}: {keyword} before FROM"
            stages[-1].instructions.append((keyword, rest))
    return stages


def exec_form(path: Path, keyword: str, rest: str | None) -> list[str]:
    assert rest is not None, f"{path.name}: no {keyword}"
    try:
        value = json.loads(rest)
    except json.JSONDecodeError:
        raise AssertionError(f"{path.name}: {keyword} must be in exec (JSON) form: {rest}") from None
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), f"{path.name}: {keyword} {rest}"
    return value


def dockerfile_for(image: str) -> Path:
    assert image.startswith(PROJECT_REGISTRY), f"{image} is not a project image"
    name = image[len(PROJECT_REGISTRY):].rpartition(":")[0]
    return REPO / "docker" / f"{name}.Dockerfile"


def pip_requirements(stage: Stage) -> list[str]:
    """Every requirement named on a ``pip install`` line of the stage (options dropped)."""
    found = []
    for keyword, rest in stage.instructions:
        if keyword != "RUN":
            continue
        for command in re.split(r"&&|;", rest):
            words = shlex.split(command)
            if words[:2] != ["pip", "install"]:
                continue
            skip = False
            for word in words[2:]:
                if skip:
                    skip = False
                elif word in ("--constraint", "-c", "-r", "--requirement", "--index-url", "--extra-index-url"):
                    skip = True
                elif not word.startswith("-"):
                    found.append(word)
    return found


_PINNED_TAG = re.compile(r"^[^:@\s]+(:[^:@\s]*\d[^:@\s]*)?(@sha256:[0-9a-f]{64})?$")


def dockerfile_problems(path: Path) -> list[str]:
    """Minimal lint: pinned base images (a version, never 'latest'), a non-root USER in the
    final stage, an exec-form ENTRYPOINT that resolves, pinned pip requirements."""
    problems = []
    stages = parse_dockerfile(path)
    if not stages:
        return [f"{path.name}: no FROM"]
    names = {stage.name for stage in stages if stage.name}
    for stage in stages:
        if stage.image in names:
            continue
        tag = stage.image.rpartition(":")[2] if ":" in stage.image else ""
        if "@sha256:" not in stage.image and (not tag or tag == "latest" or not _PINNED_TAG.match(stage.image)):
            problems.append(f"{path.name}: base image {stage.image} is not pinned to a version")
        for requirement in pip_requirements(stage):
            local = requirement.startswith((".", "/"))
            if not local and "==" not in requirement:
                problems.append(f"{path.name}: pip requirement {requirement} is not pinned (==)")
    final = stages[-1]
    user = final.last("USER")
    if user is None:
        problems.append(f"{path.name}: the final stage sets no USER (runs as root)")
    elif user.split(":")[0] in ("root", "0"):
        problems.append(f"{path.name}: USER {user} is root")
    elif not user.split(":")[0].isdigit():
        problems.append(f"{path.name}: USER {user} must be numeric, so runAsNonRoot can verify it")
    try:
        entrypoint = exec_form(path, "ENTRYPOINT", final.last("ENTRYPOINT"))
        cmd = exec_form(path, "CMD", final.last("CMD")) if final.last("CMD") else []
        resolve(entrypoint + cmd)
    except AssertionError as exc:
        problems.append(f"{path.name}: {exc}")
    return problems

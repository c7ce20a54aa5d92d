"""Load a run config: YAML file, then dotted ``key=value`` overrides, then validation.

Errors name the file, the line, the dotted path and what was expected, e.g.
``config.yaml:12: worker.rollout.nn: unknown key (did you mean 'n'?)``; a field an override
set names the override instead (``override worker.rollout.n=x: ...``).
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from easyvideor1.config.schema import RunConfig
from easyvideor1.errors import ConfigError


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> RunConfig:
    raw: dict[str, Any] = {}
    source = "<defaults>"
    lines: dict[tuple[str, ...], int] = {}
    if path is not None:
        source = str(path)
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read config: {exc.strerror}") from exc
        try:
            loaded = yaml.safe_load(text)
            lines = key_lines(text)
        except yaml.YAMLError as exc:
            raise ConfigError(_yaml_error(path, exc)) from None
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path}: the top level must be a mapping, got {type(loaded).__name__}")
        raw = loaded
    set_by: dict[tuple[str, ...], str] = {}
    for item in overrides or []:
        apply_override(raw, item)
        set_by[_override_key(item)] = item
    return validate_config(raw, source, lines=lines, overrides=set_by)


def _yaml_error(path: str | Path, exc: yaml.YAMLError) -> str:
    """One line: ``FILE:LINE: invalid YAML: what``."""
    mark = getattr(exc, "problem_mark", None)
    if mark is None:
        return f"{path}: invalid YAML: {' '.join(str(exc).split())}"
    problem = getattr(exc, "problem", None) or "cannot parse"
    context = getattr(exc, "context", None)
    return f"{path}:{mark.line + 1}: invalid YAML: {problem}" + (f" ({context})" if context else "")


def key_lines(text: str) -> dict[tuple[str, ...], int]:
    """The 1-based line of every key (and list item) of a YAML document, by its path."""
    found: dict[tuple[str, ...], int] = {}
    stack = [((), yaml.compose(text, Loader=yaml.SafeLoader))]
    while stack:
        path, node = stack.pop()
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                child = (*path, str(key.value))
                found.setdefault(child, key.start_mark.line + 1)
                stack.append((child, value))
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                child = (*path, str(index))
                found.setdefault(child, item.start_mark.line + 1)
                stack.append((child, item))
    return found


def _override_key(item: str) -> tuple[str, ...]:
    return tuple(p for p in item.partition("=")[0].strip().split(".") if p)


def apply_override(raw: dict[str, Any], item: str) -> None:
    """Apply ``a.b.c=value``; the value is parsed as YAML (numbers, bools, lists, null)."""
    if "=" not in item:
        raise ConfigError(f"override {item!r}: expected KEY=VALUE with a dotted key")
    key, _, text = item.partition("=")
    parts = [p for p in key.strip().split(".") if p]
    if not parts:
        raise ConfigError(f"override {item!r}: empty key")
    try:
        value = yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError as exc:
        raise ConfigError(f"override {item!r}: invalid value: {exc}") from exc
    node = raw
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"override {item!r}: '{part}' is a value, not a section")
        node = child
    node[parts[-1]] = value


def validate_config(raw: dict[str, Any], source: str = "<config>", *, lines: dict[tuple[str, ...], int] | None = None,
                    overrides: dict[tuple[str, ...], str] | None = None) -> RunConfig:
    """``raw`` as a RunConfig. ``lines`` (:func:`key_lines` of the file) puts each error's
    line after ``source``; an error under a key of ``overrides`` names that override."""
    try:
        return RunConfig.model_validate(raw)
    except ValidationError as exc:
        found = [f"{_where(err, source, lines or {}, overrides or {})}: {_describe(err)}" for err in exc.errors()]
        raise ConfigError("invalid config:\n" + "\n".join(found)) from None


def _where(err: dict[str, Any], source: str, lines: dict[tuple[str, ...], int],
           overrides: dict[tuple[str, ...], str]) -> str:
    """``FILE:LINE`` of the error's key (or of its nearest section in the file), or the
    override that set it."""
    loc = tuple(str(p) for p in err.get("loc", ()))
    for size in range(len(loc), 0, -1):
        if loc[:size] in overrides:
            return f"override {overrides[loc[:size]]}"
        if loc[:size] in lines:
            return f"{source}:{lines[loc[:size]]}"
    return source


def _describe(err: dict[str, Any]) -> str:
    loc = [str(p) for p in err.get("loc", ())]
    dotted = ".".join(loc) or "<root>"
    if err.get("type") == "extra_forbidden":
        known = _known_keys(loc[:-1])
        hint = difflib.get_close_matches(loc[-1], known, n=1)
        suffix = f" (did you mean '{hint[0]}'?)" if hint else f" (known: {', '.join(known)})"
        return f"{dotted}: unknown key{suffix}"
    return f"{dotted}: {err.get('msg')} (got {err.get('input')!r})"


def _known_keys(path: list[str]) -> list[str]:
    model: type[BaseModel] = RunConfig
    for part in path:
        field = model.model_fields.get(part)
        annotation = getattr(field, "annotation", None)
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return []
        model = annotation
    return sorted(model.model_fields)


def dump_config(config: RunConfig) -> str:
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)


def config_reference() -> str:
    """Markdown reference of every field, its default and its description (docs/config.md)."""
    lines = ["# Run config reference", "",
             "Generated by `evr1 config docs`. YAML file plus dotted overrides, e.g. "
             "`evr1 train run.yaml algorithm.adv_estimator=grpo worker.rollout.n=8`. Unknown keys are errors.",
             ""]
    _walk(RunConfig, "", lines)
    return "\n".join(lines) + "\n"


def _walk(model: type[BaseModel], prefix: str, lines: list[str]) -> None:
    leaves, sections = [], []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            sections.append((name, annotation))
        else:
            leaves.append((name, field))
    if leaves:
        lines.append(f"## `{prefix.rstrip('.') or '(root)'}`")
        lines.append("")
        lines.append("| key | default | description |")
        lines.append("|---|---|---|")
        for name, field in leaves:
            default = field.get_default(call_default_factory=True)
            lines.append(f"| `{prefix}{name}` | `{default!r}` | {field.description or ''} |")
        lines.append("")
    for name, sub in sections:
        _walk(sub, f"{prefix}{name}.", lines)

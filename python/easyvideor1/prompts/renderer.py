"""Render a sample's prompt from the Jinja2 template of its problem type.

Template lookup for a sample's ``problem_type`` (first hit wins):

1. a per-type template string passed as ``overrides={"<any spelling>": "..."}``;
2. ``<name>.j2`` in the user's ``template_dir``;
3. ``<name>.j2`` shipped in ``easyvideor1/prompts/templates``;

where ``<name>`` is the canonical problem type with non-alphanumeric runs turned into ``_``
(``spatial-temporal grounding`` -> ``spatial_temporal_grounding``). Spellings and aliases
resolve through the reward registry; a type with no template uses ``default.j2``. Templates
may ``{% extends "base.j2" %}`` (shared layout; a ``base.j2`` in ``template_dir`` replaces
the shipped one for every type). Whitespace in templates is literal (no ``trim_blocks``);
the rendered prompt is stripped of leading and trailing whitespace.

Context: every sample field, plus defaults for the documented optional fields (``options``
None, ``videos``/``images`` [], ``data_type`` derived from them, ``timestamps`` None: the
frame times, in seconds, a tracking/spatio-temporal answer should cover) and computed values:
``modality`` (video / image / image_video / text), ``media`` (wording such as "video" or
"images"; "" for text), ``labeled_options`` (``["A. red", ...]``, letters assigned to bare
texts), ``option_letters`` and ``reasoning`` (ask for ``<think>`` first; default True).
Sample fields win over computed values of the same name. Undefined names are errors
(StrictUndefined): :class:`PromptError` names the template and the missing field. The text
of ``problem`` is inserted verbatim, so ``<video>``/``<image>`` markers stay where the data
layer put them; the renderer adds none.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jinja2

from easyvideor1.errors import EasyVideoR1Error
from easyvideor1.rewards.multiple_choice import LETTERS, label_options
from easyvideor1.rewards.registry import normalize_name

DEFAULT_TEMPLATE = "default"
_LAYOUT_TEMPLATES = {"base"}
_UNDEFINED_RE = re.compile(r"'([^']+)' is undefined|has no attribute '([^']+)'")
_PACKAGE_DIR = Path(__file__).parent / "templates"


class PromptError(EasyVideoR1Error):
    """A template could not be rendered; the message names the template and the cause."""


def template_stem(problem_type: str) -> str:
    """File stem of a problem type's template: ``spatial-temporal grounding`` -> ``spatial_temporal_grounding``."""
    return re.sub(r"[^0-9a-z]+", "_", str(problem_type).strip().lower()).strip("_")


class PromptRenderer:
    """Renders prompts; ``template_dir`` files and ``overrides`` strings beat shipped templates."""

    def __init__(self, template_dir: str | Path | None = None,
                 overrides: Mapping[str, str] | None = None, reasoning: bool = True):
        loaders: list[jinja2.BaseLoader] = []
        self._override_names: dict[str, str] = {}
        if overrides:
            sources = {}
            for problem_type, source in overrides.items():
                name = f"override/{template_stem(problem_type)}.j2"
                sources[name] = source
                self._override_names[normalize_name(problem_type)] = name
            loaders.append(jinja2.DictLoader(sources))
        self._file_names: dict[str, str] = {}
        dirs = [_PACKAGE_DIR]
        if template_dir is not None:
            path = Path(template_dir)
            if not path.is_dir():
                raise PromptError(f"template_dir {str(path)!r} is not a directory")
            dirs.insert(0, path)
        loaders.append(jinja2.FileSystemLoader([str(d) for d in dirs]))
        for directory in reversed(dirs):  # user files listed last so they win the mapping
            for file in directory.glob("*.j2"):
                if file.stem not in _LAYOUT_TEMPLATES:
                    self._file_names[normalize_name(file.stem)] = file.name
        self.reasoning = reasoning
        self._env = jinja2.Environment(
            loader=jinja2.ChoiceLoader(loaders), undefined=jinja2.StrictUndefined,
            trim_blocks=False, lstrip_blocks=False, keep_trailing_newline=False, autoescape=False,
        )
        self._resolved: dict[str, str] = {}
        self._lock = threading.Lock()

    def template_name(self, problem_type: str | None) -> str:
        """Name of the template used for ``problem_type`` (see the module docstring)."""
        key = str(problem_type or "")
        found = self._resolved.get(key)
        if found is None:
            found = self._resolve(key)
            with self._lock:
                self._resolved[key] = found
        return found

    def _lookup(self, problem_type: str) -> str | None:
        name = normalize_name(problem_type)
        return self._override_names.get(name) or self._file_names.get(name)

    def _resolve(self, problem_type: str) -> str:
        found = self._lookup(problem_type) if problem_type else None
        if found is None and problem_type:
            canonical = _canonical(problem_type)
            if canonical is not None:
                found = self._lookup(canonical)
        return found or self._lookup(DEFAULT_TEMPLATE) or f"{DEFAULT_TEMPLATE}.j2"

    def render(self, sample_fields: Mapping[str, Any]) -> str:
        """The prompt for one sample (a dict of its fields)."""
        if not isinstance(sample_fields, Mapping):
            raise PromptError(f"sample fields must be a mapping, got {type(sample_fields).__name__}")
        name = self.template_name(sample_fields.get("problem_type"))
        context = {**self._computed(sample_fields), **sample_fields}
        try:
            template = self._env.get_template(name)
            text = template.render(context)
        except jinja2.UndefinedError as exc:
            match = _UNDEFINED_RE.search(str(exc))
            missing = next((g for g in match.groups() if g), None) if match else None
            what = f"field {missing!r}" if missing else f"an undefined value ({exc})"
            raise PromptError(
                f"prompt template {name!r} (problem_type {sample_fields.get('problem_type')!r}) uses "
                f"{what}, which the sample does not have; sample fields: {sorted(sample_fields)}"
            ) from None
        except jinja2.TemplateSyntaxError as exc:
            raise PromptError(f"prompt template {exc.name or name!r} line {exc.lineno}: {exc.message}") from None
        except jinja2.TemplateNotFound as exc:
            raise PromptError(f"prompt template {name!r} needs template {exc.name!r}, which was not found") \
                from None
        return text.strip()

    def _computed(self, fields: Mapping[str, Any]) -> dict[str, Any]:
        videos = list(fields.get("videos") or [])
        images = list(fields.get("images") or [])
        modality = str(fields.get("data_type") or _derive_modality(videos, images))
        labelled = label_options(fields.get("options"))
        return {
            "options": None, "timestamps": None, "videos": videos, "images": images, "data_type": modality,
            "modality": modality, "media": _media_wording(modality, len(images)),
            "labeled_options": [f"{letter}. {text}" for letter, text in labelled],
            "option_letters": [letter for letter, _ in labelled] or list(LETTERS[:4]),
            "reasoning": self.reasoning,
        }


def _derive_modality(videos: list[Any], images: list[Any]) -> str:
    if videos and images:
        return "image_video"
    if videos:
        return "video"
    return "image" if images else "text"


def _media_wording(modality: str, image_count: int) -> str:
    if modality == "video":
        return "video"
    if modality == "image":
        return "images" if image_count > 1 else "image"
    if modality == "image_video":
        return "video and images" if image_count > 1 else "video and image"
    return ""


def _canonical(problem_type: str) -> str | None:
    """The registry's canonical name, or None for types it does not know."""
    from easyvideor1.rewards.registry import UnknownProblemType, canonical_problem_type

    try:
        return canonical_problem_type(problem_type)
    except UnknownProblemType:
        return None


_default_renderer: PromptRenderer | None = None


def render_prompt(sample_fields: Mapping[str, Any]) -> str:
    """Render with the shipped templates (a shared default :class:`PromptRenderer`)."""
    global _default_renderer
    if _default_renderer is None:
        _default_renderer = PromptRenderer()
    return _default_renderer.render(sample_fields)

"""The benchmark adapter interface and its registry.

An adapter (one module per benchmark) turns the benchmark's own annotation files under a
local folder into :class:`EvalItem`s, words the prompt, scores a response and aggregates
records the way the benchmark's protocol defines. The shared machinery (scoring through the
rewards library, thresholds, grouping) lives in :mod:`easyvideor1.eval.benchmarks.common`,
so most adapters are only a loader and a few declarations.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# Adapters import the annotation helpers from here, next to the interface they implement.
from easyvideor1.eval.benchmarks.annotations import (  # noqa: F401
    LETTERS,
    VIDEO_EXTENSIONS,
    VideoIndex,
    answer_letter,
    field,
    find_file,
    find_files,
    find_video,
    letter_options,
    options_from_dict,
    read_records,
    require_answer,
    split_embedded_options,
)
from easyvideor1.eval.benchmarks.official import OfficialVerdict, mean_official
from easyvideor1.eval.types import EvalError, EvalItem, ItemScore
from easyvideor1.video.metadata import VideoMetadata

# One module per adapter; imported on first registry use.
ADAPTER_MODULES = (
    "videomme", "videomme_v2", "mvbench", "tempcompass", "motionbench", "lvbench", "longvideobench", "mlvu",
    "video_holmes", "minerva", "vcrbench", "videoreasonbench", "longvideo_reason", "mmvu", "videommmu",
    "videomathqa", "vsibench", "charades_sta", "stvg", "ovobench", "odvbench", "livesports3k_qa",
    "synthetic", "jsonl",
)

_REGISTRY: dict[str, type[Benchmark]] = {}
_LOADED = False


def register(cls: type[Benchmark]) -> type[Benchmark]:
    """Class decorator: make the adapter available under ``cls.name``."""
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"benchmark {cls.name!r} registered twice")
    _REGISTRY[cls.name] = cls
    return cls


def _ensure_loaded() -> None:
    global _LOADED
    if not _LOADED:
        for module in ADAPTER_MODULES:
            importlib.import_module(f"easyvideor1.eval.benchmarks.{module}")
        _LOADED = True


def benchmark_names() -> list[str]:
    _ensure_loaded()
    return sorted(_REGISTRY)


def get_benchmark(name: str) -> Benchmark:
    """A fresh adapter by registered name (case and punctuation insensitive)."""
    _ensure_loaded()
    key = re.sub(r"[^0-9a-z]", "", name.lower())  # "Video-MME-v2" == "videomme_v2"
    for registered, cls in _REGISTRY.items():
        if re.sub(r"[^0-9a-z]", "", registered) == key:
            return cls()
    raise EvalError(f"unknown benchmark {name!r}; known: {', '.join(sorted(_REGISTRY))}")


class Benchmark:
    """Base adapter. Subclasses set the class attributes and implement :meth:`load`.

    ``category_fields`` are the breakdowns the benchmark reports; ``video_defaults`` are
    frame settings its protocol prescribes (applied unless the user overrides them);
    ``needs_judge`` marks benchmarks whose official scoring uses an LLM judge for some items.
    """

    name: str = ""
    title: str = ""
    category_fields: tuple[str, ...] = ()
    video_defaults: dict[str, Any] = {}
    needs_judge: bool = False
    annotation: str = ""  # the files this adapter reads, for docs and error messages
    # Bumped whenever the adapter's items, prompts or scoring change: a run recorded with
    # another version is not resumed into (its records would mix two protocols).
    protocol_version: int = 1
    # The official scorer this adapter reproduces (repository and file), shown in reports.
    official_source: str = ""
    # The per-item metric of the project's headline (strict) and of the official verdicts;
    # the report compares the two item by item.
    strict_metric: str = "accuracy"
    official_item_metric: str = "accuracy"

    def __init__(self) -> None:
        # What loading had to say that the report must show (skipped unlabelled rows, ...).
        self.load_notes: list[str] = []

    def load(self, root: Path) -> list[EvalItem]:
        raise EvalError(f"benchmark {self.name!r} does not define how to load its annotations")

    def choice_item(self, item_id: Any, question: str, options: tuple[str, ...], answer: Any,
                    videos: tuple[str, ...], categories: dict[str, Any], *, path: Path, where: Any,
                    answer_field: str = "answer", **extra: Any) -> EvalItem:
        """A multiple-choice item; ``answer`` is a letter, an index or the option's text as the
        release gives it (``answer_field`` names it in errors)."""
        return EvalItem(
            benchmark=self.name,
            id=str(item_id),
            question=question,
            options=options,
            problem_type="multiple choice",
            answer=answer_letter(answer, options, path, where, answer_field),
            videos=videos,
            categories=categories,
            source=f"{path}:{where}",
            **extra,
        )

    # The methods below have working defaults in common.py; adapters override what differs.
    def prompt(self, item: EvalItem, metas: Sequence[VideoMetadata], style: str, renderer: Any = None) -> str:
        from easyvideor1.eval.benchmarks.common import default_prompt

        return default_prompt(item, style, renderer, hint=self.answer_hint(item, metas))

    def answer_hint(self, item: EvalItem, metas: Sequence[VideoMetadata]) -> str | None:
        """Extra instruction for this item (``None``: the problem type's default)."""
        return None

    def metrics_for(self, item: EvalItem, ctx: Any) -> dict[str, str]:
        from easyvideor1.eval.benchmarks.common import default_metrics

        return default_metrics(item, ctx)

    def score(
        self, item: EvalItem, response: str, ctx: Any, metas: Sequence[VideoMetadata] = ()
    ) -> ItemScore:
        from easyvideor1.eval.benchmarks.common import default_score

        return default_score(item, response, ctx)

    def aggregate(self, records: list[dict[str, Any]], ctx: Any) -> dict[str, Any]:
        from easyvideor1.eval.benchmarks.common import summarize

        return summarize(self, records, ctx)

    def official_item(
        self, item: EvalItem, response: str, ctx: Any, metas: Sequence[VideoMetadata] = ()
    ) -> OfficialVerdict:
        """The official script's verdict on one response (an empty one when the item failed).
        An adapter without one (e.g. a user's own) reports the strict metric only."""
        return OfficialVerdict(not_reproduced=True)

    def official_summary(self, records: list[dict[str, Any]], summary: dict[str, Any]) -> dict[str, Any] | None:
        """The official headline from the records' verdicts: by default the mean of
        ``official_item_metric`` over the items the official script counts."""
        return mean_official(records, self.official_item_metric)

    def extra_metrics(self, records: list[dict[str, Any]], summary: dict[str, Any]) -> None:
        """Add benchmark-defined overall scores (macro means, composites) to ``summary``."""

"""Difficulty filter: keep questions the current policy sometimes but not always solves.

For each question, sample k answers and score them; the pass rate is the fraction with
accuracy >= ``threshold``. Questions with 0 < pass rate < 1 carry a learning signal for
GRPO (a group of all-equal rewards has zero advantage), so they are kept.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from easyvideor1.config.schema import MixPolicyConfig
from easyvideor1.data import Sample, load_samples, write_samples
from easyvideor1.rollout.base import SamplingConfig
from easyvideor1.rollout.stage import RolloutStage


@dataclass
class FilterReport:
    total: int = 0
    kept: int = 0
    too_easy: int = 0
    too_hard: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)
    pass_rates: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"total": self.total, "kept": self.kept, "too_easy": self.too_easy, "too_hard": self.too_hard,
                "failed": [{"problem_id": p, "reason": r} for p, r in self.failed], "pass_rates": self.pass_rates}


def filter_by_pass_rate(stage: RolloutStage, data: str | Path | list[Sample], out_path: str | Path, *, k: int,
                        max_tokens: int, temperature: float = 1.0, threshold: float = 1.0,
                        batch_size: int = 32, seed: int = 0,
                        on_batch: Callable[[int, FilterReport], None] | None = None) -> FilterReport:
    """``data``: a JSONL path or its rows already loaded (and checked). ``on_batch(questions
    done, report so far)`` after each batch (the command's progress)."""
    samples = list(data) if isinstance(data, list) else load_samples(data)
    report = FilterReport(total=len(samples))
    kept = []
    sampling = SamplingConfig(max_tokens=max_tokens, temperature=temperature, seed=seed)
    for start in range(0, len(samples), batch_size):
        chunk = samples[start:start + batch_size]
        result = stage.run(chunk, n=k, sampling=sampling, mix=MixPolicyConfig(), uid_prefix=f"filter{start}")
        report.failed.extend(result.filtered)
        for group in result.groups:
            rate = sum(1 for v in group.values("accuracy") if v >= threshold) / len(group.rewards)
            report.pass_rates[group.sample.problem_id] = rate
            if rate <= 0.0:
                report.too_hard += 1
            elif rate >= 1.0:
                report.too_easy += 1
            else:
                kept.append(group.sample)
        if on_batch is not None:
            on_batch(min(start + batch_size, len(samples)), report)
    report.kept = len(kept)
    write_samples(out_path, kept)
    Path(str(out_path) + ".report.json").write_text(json.dumps(report.as_dict(), indent=2))
    return report

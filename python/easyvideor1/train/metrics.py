"""Metric sinks of a run: console lines, a JSONL log, TensorBoard, optional W&B, and a PNG.

``MetricsLogger.log(step, metrics)`` fans one flat ``{name: number}`` dict out to every
configured sink. Names use ``/`` to group (``reward/accuracy``, ``time/rollout_s``).
:func:`tool_metrics` summarises the multi-turn trajectories of a step (tools on).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from easyvideor1.logging import get_logger

if TYPE_CHECKING:
    from easyvideor1.rollout.stage import Group

log = get_logger("train.metrics")


@dataclass(frozen=True)
class ToolUse:
    """What one online response did with the tools, and how well it answered."""

    calls: int
    frames: int
    turns: int
    errors: int
    accuracy: float | None


def tool_uses(groups: Sequence[Group]) -> list[ToolUse]:
    """The online responses of ``groups`` (offline ones are the teacher's, not the policy's); a
    response without a trajectory is one turn and no call."""
    uses = []
    for group in groups:
        accuracies = group.values("accuracy")
        for r, offline in enumerate(group.is_offline):
            if offline:
                continue
            t = group.trajectory(r)
            uses.append(ToolUse(calls=t.tool_calls if t is not None else 0,
                                frames=t.frames_fetched if t is not None else 0,
                                turns=t.turns if t is not None else 1, errors=t.tool_errors if t is not None else 0,
                                accuracy=accuracies[r] if r < len(accuracies) else None))
    return uses


def tool_metrics(groups: Sequence[Group] | Sequence[ToolUse], prefix: str = "tools/") -> dict[str, float]:
    """Per trajectory the mean tool calls, frames fetched and policy turns; the share of
    trajectories that call a tool; refused calls per call; and the accuracy of the trajectories
    with a call and without one (each only when there are such trajectories: a missing value is
    not a zero). ``groups``: a round's groups, or :func:`tool_uses` collected over several."""
    uses = list(groups) if groups and isinstance(groups[0], ToolUse) else tool_uses(groups)  # type: ignore[arg-type]
    if not uses:
        return {}
    calls = sum(u.calls for u in uses)
    out = {f"{prefix}calls_per_trajectory": calls / len(uses),
           f"{prefix}frames_fetched": sum(u.frames for u in uses) / len(uses),
           f"{prefix}turns": sum(u.turns for u in uses) / len(uses),
           f"{prefix}call_share": sum(1 for u in uses if u.calls) / len(uses),
           f"{prefix}error_rate": sum(u.errors for u in uses) / calls if calls else 0.0}
    for name, chosen in (("with_call", [u for u in uses if u.calls]), ("without_call", [u for u in uses if not u.calls])):
        scored = [u.accuracy for u in chosen if u.accuracy is not None]
        if scored:
            out[f"{prefix}accuracy_{name}"] = sum(scored) / len(scored)
    return out


class MetricsLogger:
    def __init__(self, output_dir: str | Path, sinks: Iterable[str], experiment_name: str = "easyvideor1",
                 config: dict[str, Any] | None = None, resume_step: int | None = None):
        """``resume_step``: the checkpoint's step of a resumed run, whose ``metrics.jsonl`` was cut
        there (train/run_dir.py): TensorBoard hides its events of later steps too."""
        self.output_dir = Path(output_dir)
        self.output_dir.mkdir(parents=True, exist_ok=True)
        self.sinks = set(sinks)
        self.jsonl_path = self.output_dir / "metrics.jsonl"
        self._jsonl = open(self.jsonl_path, "a") if "jsonl" in self.sinks else None
        self._tb = None
        if "tensorboard" in self.sinks:
            from torch.utils.tensorboard import SummaryWriter

            purge = resume_step + 1 if resume_step is not None else None
            self._tb = SummaryWriter(log_dir=str(self.output_dir / "tensorboard"), purge_step=purge)
        self._console = None
        if "console" in self.sinks:
            from easyvideor1.console import TrainProgress

            # One progress line over the run's steps (rate, ETA, rewards), not one line per step.
            self._console = TrainProgress(((config or {}).get("trainer") or {}).get("total_steps"))
        self._wandb = None
        if "wandb" in self.sinks:
            import wandb  # optional dependency: only imported when asked for

            self._wandb = wandb.init(project=experiment_name, config=config or {}, dir=str(self.output_dir))

    def log(self, step: int, metrics: dict[str, float]) -> None:
        clean = {k: float(v) for k, v in metrics.items() if _is_number(v)}
        if self._jsonl is not None:
            self._jsonl.write(json.dumps({"step": step, "time": time.time(), **clean}) + "\n")
            self._jsonl.flush()
        if self._tb is not None:
            for key, value in clean.items():
                self._tb.add_scalar(key, value, step)
            self._tb.flush()
        if self._wandb is not None:
            self._wandb.log(clean, step=step)
        if self._console is not None:
            self._console.log(step, clean)

    def close(self) -> None:
        if self._console is not None:
            self._console.close()
            self._console = None
        if self._jsonl is not None:
            self._jsonl.close()
            self._jsonl = None
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None


def read_metrics(path: str | Path) -> list[dict[str, float]]:
    rows = []
    with open(path) as handle:
        for line in handle:
            if line.strip():
                rows.append(json.loads(line))
    return rows


def plot_curves(jsonl_path: str | Path, out_png: str | Path,
                prefixes: tuple[str, ...] = ("reward/", "val/")) -> Path:
    """Plot every metric under ``prefixes`` against step into one PNG (one panel per prefix)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_metrics(jsonl_path)
    fig, axes = plt.subplots(1, len(prefixes), figsize=(6 * len(prefixes), 4), squeeze=False)
    for ax, prefix in zip(axes[0], prefixes):
        keys = sorted({k for row in rows for k in row if k.startswith(prefix)})
        for key in keys:
            points = [(row["step"], row[key]) for row in rows if key in row]
            if points:
                xs, ys = zip(*points)
                ax.plot(xs, ys, marker="o" if len(points) < 30 else None, label=key[len(prefix):])
        ax.set_title(prefix.rstrip("/"))
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if keys:
            ax.legend(fontsize=7)
    fig.tight_layout()
    out_png = Path(out_png)
    fig.savefig(out_png, dpi=100)
    plt.close(fig)
    return out_png


def _is_number(value: Any) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False

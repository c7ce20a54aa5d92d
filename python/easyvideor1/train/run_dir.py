"""A run's ``output_dir`` when a run starts there: resumed, or new beside an earlier run's files.

A resumed run (``trainer.resume=auto`` and a checkpoint at step k) continues the same
``metrics.jsonl``: the rows of steps after k, which the killed run wrote after its last
checkpoint and this run writes again, are dropped first (:func:`keep_rows_through`, an atomic
rewrite), so the file holds each step once. A new run (``resume=never``, or no checkpoint)
never appends to another run's metrics: :func:`set_aside_earlier_run` moves what an earlier
run left (:data:`RUN_FILES`) to ``output_dir/earlier-N/`` first. Its checkpoints go too: left in
``checkpoints/``, a later resume would pick the earlier run's higher step, and the keep policy
would delete the new run's lower-numbered checkpoints as soon as they were written.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

# What a run writes into its output_dir and a new run must not mix with its own (the run's
# evr1.log stays: the command attached it before the trainer started, and it only appends lines).
RUN_FILES = ("metrics.jsonl", "checkpoints", "tensorboard", "curves.png")
_EARLIER = re.compile(r"^earlier-(\d+)$")


def keep_rows_through(path: str | Path, step: int) -> int:
    """Rewrite ``path`` with only its rows of steps ``<= step``, atomically; returns the rows
    dropped. A torn last line (a kill mid-write) is dropped too. A missing file: 0."""
    path = Path(path)
    if not path.is_file():
        return 0
    kept: list[str] = []
    dropped = 0
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        try:
            row_step = int(json.loads(line)["step"])
        except (ValueError, KeyError, TypeError):
            dropped += 1
            continue
        if row_step <= step:
            kept.append(line)
        else:
            dropped += 1
    if dropped:
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text("".join(line + "\n" for line in kept))
        os.replace(tmp, path)
    return dropped


def set_aside_earlier_run(output_dir: str | Path) -> Path | None:
    """Move an earlier run's :data:`RUN_FILES` to ``output_dir/earlier-N/`` (the first free N);
    returns that folder, or None when there was nothing to move."""
    out = Path(output_dir)
    found = [out / name for name in RUN_FILES if (out / name).exists()]
    if not found:
        return None
    taken = [int(m.group(1)) for p in out.iterdir() if (m := _EARLIER.match(p.name))] if out.is_dir() else []
    target = out / f"earlier-{max(taken, default=0) + 1}"
    target.mkdir()
    for path in found:
        os.replace(path, target / path.name)
    return target

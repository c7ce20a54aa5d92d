"""The results file: one JSON record per finished sample, appended as results complete.

Results complete out of order, so each record is appended (and flushed) the moment it is
scored; a killed run loses at most the records in flight. A resumed run reads the file,
skips every ``benchmark/id`` already there, and appends the rest, so each id ends up exactly
once. A kill can leave a torn last line: it is cut off (and logged) on resume. A bad line
anywhere else is corruption and stops the run with its line number.

``run.json`` next to it holds the settings that shape results; resuming with different
ones is refused (mixing them would make the numbers meaningless). An exclusive lock keeps
two runs from writing one results file.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import Any

from easyvideor1.eval.types import EvalError
from easyvideor1.logging import event, get_logger

log = get_logger(__name__)

RESULTS_NAME = "results.jsonl"
RUN_NAME = "run.json"
_FSYNC_EVERY = 32


def record_key(record: dict[str, Any]) -> str:
    return f"{record['benchmark']}/{record['id']}"


def read_results(path: Path, *, repair: bool = False) -> list[dict[str, Any]]:
    """Every record of a results file. A torn last line is dropped (and cut when ``repair``)."""
    if not path.exists():
        return []
    data = path.read_bytes()
    records: list[dict[str, Any]] = []
    good_end = 0
    lines = data.split(b"\n")
    for number, raw in enumerate(lines, start=1):
        is_last = number == len(lines)
        if not raw.strip():
            if not is_last:
                good_end += len(raw) + 1
            continue
        try:
            record = json.loads(raw)
            if not isinstance(record, dict) or "benchmark" not in record or "id" not in record:
                raise ValueError("not a result record")
        except ValueError as exc:
            if is_last or all(not rest.strip() for rest in lines[number:]):
                event(log, "eval_results_torn_line", path=str(path), line=number, bytes=len(raw))
                if repair:
                    with open(path, "r+b") as handle:
                        handle.truncate(good_end)
                break
            raise EvalError(
                f"{path}:{number}: corrupt result record ({exc}); fix or remove the line"
            ) from None
        records.append(record)
        good_end += len(raw) + (0 if is_last else 1)
    return records


def _comparable(settings: dict[str, Any]) -> dict[str, Any]:
    """The parts of the settings that change results (not concurrency or paths)."""
    keep = ("model", "family", "sampling", "prompt_style", "judge", "engine_args")
    out = {k: settings.get(k) for k in keep}
    if isinstance(out["engine_args"], dict):  # concurrency and memory do not change greedy results
        out["engine_args"] = {k: v for k, v in out["engine_args"].items()
                              if k not in ("max_num_seqs", "kv_cache_memory_bytes")}
    out["benchmarks"] = {
        # Runs recorded before adapters carried a version were made with version 1.
        name: {"video": b.get("video"), "image": b.get("image"), "protocol_version": b.get("protocol_version", 1)}
        for name, b in (settings.get("benchmarks") or {}).items()
    }
    return out


def settings_differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """``key: old -> new`` for each result-shaping setting that changed (benchmarks in both)."""
    a, b = _comparable(old), _comparable(new)
    common = set(a["benchmarks"]) & set(b["benchmarks"])
    a["benchmarks"] = {k: v for k, v in a["benchmarks"].items() if k in common}
    b["benchmarks"] = {k: v for k, v in b["benchmarks"].items() if k in common}
    return _diff(a, b, "")


def _diff(a: Any, b: Any, prefix: str) -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [
            line
            for key in sorted(set(a) | set(b))
            for line in _diff(a.get(key), b.get(key), f"{prefix}{key}.")
        ]
    if a != b:
        return [f"{prefix.rstrip('.')}: {json.dumps(a, default=str)} -> {json.dumps(b, default=str)}"]
    return []


def refuse_finished_out(out_dir: Path, *, resume: bool) -> None:
    """A results file with records in ``out_dir`` is a run of its own: continued with
    ``resume``, never appended to or overwritten otherwise."""
    path = Path(out_dir) / RESULTS_NAME
    if not resume and path.exists() and path.stat().st_size:
        raise EvalError(f"{path} already has results: pass --resume to continue that run, or choose another --out")


class ResultsLog:
    """Append-only, locked, resumable results file in ``out_dir``."""

    def __init__(self, out_dir: Path, settings: dict[str, Any], *, resume: bool):
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.out_dir / RESULTS_NAME
        self._lock = open(self.out_dir / ".lock", "w")  # noqa: SIM115 - held for the run's lifetime
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            raise EvalError(f"{self.out_dir} is in use by another evaluation run") from None
        run_file = self.out_dir / RUN_NAME
        settings = json.loads(json.dumps(settings, default=str))  # compare as stored (tuples -> lists)
        try:
            refuse_finished_out(self.out_dir, resume=resume)
        except EvalError:
            self.close()
            raise
        if resume and run_file.exists():
            previous = json.loads(run_file.read_text())
            diffs = settings_differences(previous, settings)
            if diffs:
                self.close()
                raise EvalError(
                    "cannot resume: settings differ from the run in "
                    + str(run_file)
                    + ":\n  "
                    + "\n  ".join(diffs)
                )
        self.records = read_results(self.path, repair=True) if resume else []
        self.done = {record_key(r) for r in self.records}
        run_file.write_text(json.dumps(settings, indent=2, default=str))
        self._handle = open(self.path, "a", encoding="utf-8")  # noqa: SIM115
        self._unsynced = 0

    def append(self, record: dict[str, Any]) -> None:
        key = record_key(record)
        if key in self.done:
            raise EvalError(f"result for {key} written twice")
        self._handle.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
        self._handle.flush()
        self._unsynced += 1
        if self._unsynced >= _FSYNC_EVERY:
            os.fsync(self._handle.fileno())
            self._unsynced = 0
        self.done.add(key)
        self.records.append(record)

    def close(self) -> None:
        handle = getattr(self, "_handle", None)
        if handle is not None and not handle.closed:
            handle.flush()
            os.fsync(handle.fileno())
            handle.close()
        if not self._lock.closed:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()

    def __enter__(self) -> ResultsLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

"""Convert data files to the project's JSONL and export them for veRL and TRL.

Readers (``read_samples(path, fmt)``), each returning ``(samples, problems)`` like
:func:`~easyvideor1.data.loader.load_samples_report`:

- ``evr1``: the project's format (docs/data-format.md), JSON list or JSONL.
- ``video-r1``: Video-R1 / EasyR1-derived rows (``solution`` with ``<answer>...</answer>``,
  ``problem_type``, ``options``, ``path`` + ``data_type``); the same reader, which maps
  ``solution`` to ``answer`` and ``path`` to ``videos``/``images`` by ``data_type``.
- ``verl``: a veRL parquet file (``data_source``, ``prompt``, ``reward_model.ground_truth``,
  ``extra_info``, ``images``/``videos``); files written by :func:`export_verl` come back as
  the samples they were made from.

Writers: :func:`export_verl` (parquet) and :func:`export_trl` (JSONL or parquet). The exact
columns are documented in docs/data-format.md ("Exporting for veRL and TRL"). Prompts are
``render(sample)``: the CLI passes the project's prompt templates (the data layer does not
import them); the default is the bare question.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from easyvideor1.data.loader import GroundTruthCheck, load_samples_report
from easyvideor1.data.schema import IMAGE_PLACEHOLDER, VIDEO_PLACEHOLDER, Sample, parse_row
from easyvideor1.errors import DataError, RowProblem
from easyvideor1.files import atomic_path, atomic_write

FROM_FORMATS = ("evr1", "video-r1", "verl")
EXPORT_FORMATS = ("verl", "trl")
EXTRA_KEY = "evr1_extra"  # extra_info field holding the row's unknown fields as JSON text

Render = Callable[[Sample], str]
_PLACEHOLDER_RE = re.compile(rf"(?:{re.escape(IMAGE_PLACEHOLDER)}|{re.escape(VIDEO_PLACEHOLDER)})[ \t]*\n?")


def _pyarrow():
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError(
            [RowProblem("-", 0, None, "parquet files need pyarrow: pip install 'easyvideor1[data]'")]
        ) from None
    return pa, pq


def read_samples(
    path: str | os.PathLike,
    fmt: str,
    *,
    media_root: str | os.PathLike | None = None,
    check_ground_truth: GroundTruthCheck | None = None,
    verl_problem_type: str | None = None,
) -> tuple[list[Sample], list[RowProblem]]:
    """Every row of ``path`` in format ``fmt`` (one of :data:`FROM_FORMATS`) as samples, and
    every problem (a row with one is left out). ``check_ground_truth`` as in
    :func:`~easyvideor1.data.loader.load_samples_report`; ``verl_problem_type``: the type of
    veRL rows without ``extra_info.problem_type`` (default: their ``data_source``)."""
    if fmt in ("evr1", "video-r1"):
        return load_samples_report(path, media_root=media_root, check_ground_truth=check_ground_truth)
    if fmt == "verl":
        return _read_verl(path, media_root, check_ground_truth, verl_problem_type)
    raise ValueError(f"unknown input format {fmt!r}; one of {', '.join(FROM_FORMATS)}")


# --- veRL parquet -> samples --------------------------------------------------------------------


def _read_verl(
    path: str | os.PathLike,
    media_root: str | os.PathLike | None,
    check_ground_truth: GroundTruthCheck | None,
    default_type: str | None,
) -> tuple[list[Sample], list[RowProblem]]:
    path_str = str(path)
    _, pq = _pyarrow()
    try:
        records = pq.read_table(path_str).to_pylist()  # nested values as Python lists/dicts, never numpy
    except FileNotFoundError:
        return [], [RowProblem(path_str, 0, None, "data file not found")]
    except Exception as exc:  # pyarrow raises several types for a file that is not parquet
        return [], [RowProblem(path_str, 0, None, f"cannot read as parquet: {exc}")]
    base_dir = (
        os.path.abspath(media_root) if media_root is not None else os.path.dirname(os.path.abspath(path))
    )
    stem = Path(path_str).stem
    samples: list[Sample] = []
    problems: list[RowProblem] = []
    first_row_of: dict[str, int] = {}
    for number, record in enumerate(records, start=1):
        row, why = _verl_row(record, default_type)
        if row is None:
            problems.append(RowProblem(path_str, number, why[0], f"row {number}: {why[1]}"))
            continue
        sample, row_problems = parse_row(
            row,
            path=path_str,
            line=number,
            base_dir=base_dir,
            default_id=f"{stem}:row{number}",
            row_label=f"row {number}",
        )
        if sample is not None:
            seen = first_row_of.setdefault(sample.problem_id, number)
            if seen != number:
                row_problems = [
                    RowProblem(
                        path_str,
                        number,
                        "extra_info.problem_id",
                        f"row {number}: duplicate problem_id {sample.problem_id!r} "
                        f"(first used on row {seen}); ids must be unique",
                    )
                ]
            elif check_ground_truth is not None and (found := check_ground_truth(sample)):
                where = (
                    "extra_info.problem_type" if found[0] == "problem_type" else "reward_model.ground_truth"
                )
                row_problems = [RowProblem(path_str, number, where, f"row {number}: {found[1]}")]
        problems.extend(row_problems)
        if sample is not None and not row_problems:
            samples.append(sample)
    if not records:
        problems.append(RowProblem(path_str, 0, None, "the file has no rows"))
    return samples, problems


def _verl_row(
    record: dict[str, Any], default_type: str | None
) -> tuple[dict[str, Any] | None, tuple[str | None, str]]:
    """One veRL record as a project row (for parse_row), or None and (field, why)."""
    info = record.get("extra_info")
    info = {k: v for k, v in info.items() if v is not None} if isinstance(info, dict) else {}
    reward = record.get("reward_model")
    truth = reward.get("ground_truth") if isinstance(reward, dict) else None
    if truth is None:  # some files carry it as a top-level column instead
        truth = next(
            (record[k] for k in ("solution", "answer", "ground_truth") if record.get(k) is not None), None
        )
    if truth is None:
        return None, (
            "reward_model.ground_truth",
            f"expected reward_model = {{style, ground_truth}} with a ground truth, got {reward!r:.80}",
        )
    row: dict[str, Any] = {}
    if EXTRA_KEY in info:  # written by export_verl: the unknown fields, exactly
        try:
            extra = json.loads(info[EXTRA_KEY])
        except ValueError as exc:
            return None, (f"extra_info.{EXTRA_KEY}", f"not JSON text: {exc}")
        if not isinstance(extra, dict):
            return None, (f"extra_info.{EXTRA_KEY}", "expected a JSON object")
        row.update(extra)
    else:  # a foreign veRL file: keep what would otherwise be lost
        for key in ("data_source", "ability"):
            if record.get(key) is not None:
                row[key] = record[key]
        rest = {k: v for k, v in info.items() if k not in _INFO_FIELDS}
        if rest:
            row["extra_info"] = rest
    problem = info.get("problem", info.get("question"))
    inline: dict[str, list[str]] = {}
    if problem is None:
        problem, inline, why = _prompt_text(record.get("prompt"))
        if problem is None:
            return None, ("prompt", why)
    row["problem"] = problem
    row["answer"] = _drop_nulls(truth)
    row["problem_type"] = (
        info.get("problem_type") or record.get("problem_type") or default_type or record.get("data_source")
    )
    for key in ("data_type", "options", "has_offline_trajectory", "offline_output"):
        if key in info:
            row[key] = info[key]
    if "problem_id" in info:
        row["problem_id"] = info["problem_id"]
    for kind, inner in (("videos", "video"), ("images", "image")):
        if kind in info:
            row[kind] = info[kind]
        elif record.get(kind):
            items, why = _media_items(record[kind], inner)
            if items is None:
                return None, (kind, why)
            row[kind] = items
        elif inline.get(kind):
            row[kind] = inline[kind]
    return row, (None, "")


_INFO_FIELDS = (
    "problem",
    "question",
    "problem_type",
    "options",
    "data_type",
    "problem_id",
    "videos",
    "images",
    "has_offline_trajectory",
    "offline_output",
)


def _drop_nulls(value: Any) -> Any:
    """A structured ground truth without the null members parquet adds: a struct column has
    the union of every row's keys, null where a row had none."""
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


def _prompt_text(prompt: Any) -> tuple[str | None, dict[str, list[str]], str]:
    """The last user message's text; typed image/video parts become placeholders, and the
    paths those parts name are returned by kind (``{"videos": [...], "images": [...]}``)."""
    if isinstance(prompt, str):
        return prompt, {}, ""
    if not isinstance(prompt, list) or not prompt:
        return None, {}, f"expected a list of chat messages, got {prompt!r:.80}"
    users = [m for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
    if not users:
        return None, {}, "no message with role 'user'"
    content = users[-1].get("content")
    if isinstance(content, str):
        return content, {}, ""
    if isinstance(content, list):
        parts: list[str] = []
        media: dict[str, list[str]] = {"videos": [], "images": []}
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text":
                parts.append(str(part.get("text", "")))
            elif kind in ("image", "video"):
                parts.append(IMAGE_PLACEHOLDER if kind == "image" else VIDEO_PLACEHOLDER)
                if isinstance(part.get(kind), str):
                    media[f"{kind}s"].append(part[kind])
        return "".join(parts), media, ""
    return None, {}, f"the user message's content is neither text nor parts: {content!r:.80}"


def _media_items(items: Any, inner: str) -> tuple[list[str] | None, str]:
    """veRL media (``{"image": path}``, ``{"video": path}`` or bare paths) as paths."""
    if not isinstance(items, list):
        items = [items]
    out = []
    for i, item in enumerate(items):
        if isinstance(item, dict):
            if item.get(inner) is None and item.get("bytes") is not None:
                return None, (
                    f"item {i} is embedded bytes; only paths convert (write the files out and name them)"
                )
            item = item.get(inner)
        if not isinstance(item, str) or not item:
            return None, f"item {i}: expected a path or {{{inner!r}: path}}, got {item!r:.80}"
        out.append(item[7:] if item.startswith("file://") else item)
    return out, ""


# --- samples -> veRL / TRL ----------------------------------------------------------------------


def bare_prompt(sample: Sample) -> str:
    """The question as written (placeholders included): the default ``render``."""
    return sample.problem


def strip_placeholders(text: str) -> str:
    """The text without ``<image>``/``<video>`` markers (TRL places media itself)."""
    return _PLACEHOLDER_RE.sub("", text).strip()


def verl_record(sample: Sample, index: int, prompt: str) -> dict[str, Any]:
    """One veRL row: the columns of docs/data-format.md."""
    source = sample.extra.get("data_source")
    return {
        "data_source": source if isinstance(source, str) and source else sample.problem_type,
        "prompt": [{"role": "user", "content": prompt}],
        "ability": sample.problem_type,
        "reward_model": {"style": "rule", "ground_truth": sample.answer},
        "extra_info": {
            "index": index,
            "problem_id": sample.problem_id,
            "problem_type": sample.problem_type,
            "data_type": sample.data_type,
            "problem": sample.problem,
            "options": list(sample.options) if sample.options is not None else None,
            "videos": list(sample.videos),
            "images": list(sample.images),
            "has_offline_trajectory": sample.has_offline_trajectory,
            "offline_output": sample.offline_output,
            EXTRA_KEY: json.dumps(sample.extra, ensure_ascii=False),
        },
        # veRL's RLHFDataset reads these (qwen-vl-utils dicts) and puts them where the
        # <image>/<video> markers of the prompt are.
        "images": [{"image": p} for p in sample.images] or None,
        "videos": [{"video": p} for p in sample.videos] or None,
    }


def trl_record(sample: Sample, prompt: str) -> dict[str, Any]:
    """One TRL row: a conversational ``prompt`` plus the columns the project's TRL reward reads."""
    return {
        "prompt": [{"role": "user", "content": strip_placeholders(prompt)}],
        "answer": sample.answer,
        "problem_type": sample.problem_type,
        "options": list(sample.options) if sample.options is not None else None,
        "problem": sample.problem,
        "problem_id": sample.problem_id,
        "data_type": sample.data_type,
    }


def export_verl(samples: Iterable[Sample], out: str | os.PathLike, *, render: Render = bare_prompt) -> Path:
    """Write ``samples`` as a veRL parquet file (atomically)."""
    records = [verl_record(s, i, render(s)) for i, s in enumerate(samples)]
    return _write_parquet(records, out, "verl")


def export_trl(samples: Iterable[Sample], out: str | os.PathLike, *, render: Render = bare_prompt) -> Path:
    """Write ``samples`` for TRL: parquet when ``out`` ends in ``.parquet``, else JSONL."""
    samples = list(samples)
    records = [trl_record(s, render(s)) for s in samples]
    # Media columns only when some row has media: TRL treats an ``images`` column as a VLM dataset.
    for kind in ("images", "videos"):
        if any(getattr(s, kind) for s in samples):
            for record, sample in zip(records, samples):
                record[kind] = list(getattr(sample, kind))
    if str(out).endswith(".parquet"):
        return _write_parquet(records, out, "trl")
    return _write_text(out, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))


def _schema(pa, target: str, columns: Iterable[str] | None):
    """Fixed column types: a column that is null in every row of one file must not become
    Arrow's null type there, or files of one data set would not concatenate (veRL, datasets)."""
    text, texts = pa.string(), pa.list_(pa.string())
    chat = pa.list_(pa.struct([("role", text), ("content", text)]))
    if target == "verl":
        info = pa.struct(
            [
                ("index", pa.int64()),
                ("problem_id", text),
                ("problem_type", text),
                ("data_type", text),
                ("problem", text),
                ("options", texts),
                ("videos", texts),
                ("images", texts),
                ("has_offline_trajectory", pa.bool_()),
                ("offline_output", text),
                (EXTRA_KEY, text),
            ]
        )
        types = {
            "data_source": text,
            "prompt": chat,
            "ability": text,
            "reward_model": pa.struct([("style", text), ("ground_truth", text)]),
            "extra_info": info,
            "images": pa.list_(pa.struct([("image", text)])),
            "videos": pa.list_(pa.struct([("video", text)])),
        }
    else:
        types = {
            "prompt": chat,
            "answer": text,
            "problem_type": text,
            "options": texts,
            "problem": text,
            "problem_id": text,
            "data_type": text,
            "images": texts,
            "videos": texts,
        }
    return pa.schema([(name, types[name]) for name in (types if columns is None else columns)])


def _write_parquet(records: list[dict[str, Any]], out: str | os.PathLike, target: str) -> Path:
    pa, pq = _pyarrow()
    table = pa.Table.from_pylist(records, schema=_schema(pa, target, list(records[0]) if records else None))
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)
    return path


def _write_text(out: str | os.PathLike, text: str) -> Path:
    path = Path(out)
    with atomic_write(path) as handle:
        handle.write(text)
    return path

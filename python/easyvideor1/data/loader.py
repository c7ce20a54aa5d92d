"""Read and write data files: JSON (a list of rows) or JSONL (one row per line).

The format is detected from the content, not the extension: a file whose first
non-blank character is ``[`` is a JSON list, anything else is JSONL. Every bad row is
reported (file, 1-based line, field, what was expected) before anything is raised.

Limits per row: a row longer than ``MAX_ROW_BYTES`` or nested deeper than ``MAX_ROW_DEPTH``
(objects and lists inside each other, the row itself counting 1) is a bad row naming its
file:line, never a parser crash; the other rows are read as usual.

A data file may also be an ``s3://bucket/key`` object (data/remote.py): fetched once, its
relative media resolve against the object's key prefix and become ``s3://`` URLs.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from easyvideor1.console import Progress
from easyvideor1.data.schema import PREPARED_FIELD, Sample, is_url, parse_row
from easyvideor1.errors import DataError, RowProblem
from easyvideor1.files import atomic_write

_PROGRESS_MIN_ROWS = 20000  # below this, loading takes well under a second: no bar
MAX_ROW_BYTES = 16 << 20  # one JSONL line / one row of a JSON list, UTF-8 bytes
MAX_ROW_DEPTH = 64  # legitimate rows nest a few levels (grounding answers: 3)


def _depth_over(value: object, limit: int = MAX_ROW_DEPTH) -> bool:
    """Whether ``value`` nests containers more than ``limit`` deep (no recursion)."""
    stack = [(value, 1)] if isinstance(value, dict | list) else []
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


_TOO_DEEP = f"the row is nested more than {MAX_ROW_DEPTH} levels deep (objects/lists inside each other)"

# A check of one parsed sample's ground truth: None when fine, else (field, message). The
# data layer does not import rewards (docs/architecture.md), so the scorer-based check
# (easyvideor1.rewards.gt_check.sample_check) is passed in by the caller.
GroundTruthCheck = Callable[[Sample], "tuple[str, str] | None"]


def load_samples(
    path: str | os.PathLike,
    *,
    strict: bool = True,
    media_root: str | os.PathLike | None = None,
    check_media: bool = False,
    check_ground_truth: GroundTruthCheck | None = None,
) -> list[Sample]:
    """Load and validate every row of ``path``.

    ``strict=True`` raises :class:`DataError` listing every problem of the file;
    ``strict=False`` returns only the good rows (use :func:`load_samples_report` to also get
    the problems). Relative media paths resolve against ``media_root`` or the file's folder.
    ``path`` (and ``media_root``) may be an ``s3://bucket/key`` URL: the object is fetched,
    and relative media resolve against its key prefix (``s3://`` URLs in the rows stay as
    they are). ``check_media=True`` also reports local media files that do not exist;
    ``check_ground_truth`` as in :func:`load_samples_report`.
    """
    samples, problems = load_samples_report(path, media_root=media_root, check_media=check_media,
                                            check_ground_truth=check_ground_truth)
    if problems and strict:
        raise DataError(problems)
    return samples


def load_samples_report(
    path: str | os.PathLike,
    *,
    media_root: str | os.PathLike | None = None,
    check_media: bool = False,
    check_ground_truth: GroundTruthCheck | None = None,
) -> tuple[list[Sample], list[RowProblem]]:
    """Like :func:`load_samples` but never raises for bad data: ``(good samples, problems)``.

    ``check_ground_truth`` (a sample -> None or ``(field, message)``) is run on every row that
    parsed; what it returns becomes a problem of that row."""
    path_str = str(path)
    remote = _is_s3(path_str)
    if remote:
        from easyvideor1.data.remote import RemoteFileError, read_bytes

        try:
            raw = read_bytes(path_str)
        except RemoteFileError as exc:
            return [], [RowProblem(path_str, 0, None, f"cannot read the data file: {exc.reason}")]
    else:
        try:
            raw = Path(path).read_bytes()
        except FileNotFoundError:
            return [], [RowProblem(path_str, 0, None, "data file not found")]
        except OSError as exc:
            return [], [RowProblem(path_str, 0, None, f"cannot read data file: {exc.strerror or exc}")]
    # Relative media against an s3:// folder: parse_row keeps them relative (base ""), and
    # _in_bucket turns them into URLs; a local folder is joined by parse_row as always.
    s3_base: tuple[str, str] | None = None
    root = str(media_root) if media_root is not None else None
    if root is not None and _is_s3(root):
        from easyvideor1.data.remote import RemoteFileError, parse_prefix

        try:
            s3_base = parse_prefix(root)
        except RemoteFileError as exc:
            return [], [RowProblem(path_str, 0, None, f"media root {root}: {exc.reason}")]
    elif root is None and remote:
        from easyvideor1.data.remote import folder_of

        s3_base = folder_of(path_str)  # a URL read_bytes took is well-formed
    if s3_base is not None:
        base_dir = ""
    else:
        base_dir = os.path.abspath(root) if root is not None else os.path.dirname(os.path.abspath(path))
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    stem = Path(path).stem
    problems: list[RowProblem] = []
    is_list = raw.lstrip()[:1] == b"["
    entries = _json_list_rows(raw, path_str, problems) if is_list else _jsonl_rows(raw, path_str, problems)
    if not entries and problems and _is_one_object(raw):
        problems = [RowProblem(path_str, 1, None, "the file is a single JSON object spread over several lines; "
                                                  "expected JSONL (one row per line) or a JSON list of rows")]

    samples: list[Sample] = []
    first_line_of: dict[str, int] = {}
    n_rows = 0
    rows = Progress(f"load {Path(path).name}", total=len(entries), unit="row",
                    enabled=len(entries) >= _PROGRESS_MIN_ROWS)
    for line, index, value in rows.each(entries):
        n_rows += 1
        # Rows of a JSON list may share a line, so their derived ids use the row index.
        sample, row_problems = parse_row(
            value, path=path_str, line=line, base_dir=base_dir,
            default_id=f"{stem}:row{index}" if is_list else f"{stem}:{line}",
            row_label=f"row {index}" if is_list else "")
        if sample is not None and s3_base is not None:
            sample, row_problems = _in_bucket(sample, s3_base, path_str, line)
        if sample is not None and check_media and PREPARED_FIELD not in sample.extra:
            # A prepared row is read by key: `data validate` checks its keys in the store instead.
            row_problems = _missing_media(sample, path_str, line)
        if sample is not None and check_ground_truth is not None:
            found = check_ground_truth(sample)
            if found:
                row_problems = [*row_problems, RowProblem(path_str, line, *found)]
        if sample is not None:
            seen = first_line_of.get(sample.problem_id)
            if seen is not None:
                row_problems = [*row_problems, RowProblem(
                    path_str, line, "problem_id",
                    f"duplicate problem_id {sample.problem_id!r} (first used on line {seen}); ids must be unique")]
            else:
                first_line_of[sample.problem_id] = line
        problems.extend(row_problems)
        if sample is not None and not row_problems:
            samples.append(sample)
    if n_rows == 0 and not problems:
        problems.append(RowProblem(path_str, 0, None, "the file has no rows (expected JSONL or a JSON list)"))
    problems.sort(key=lambda p: p.line)
    return samples, problems


def _jsonl_rows(raw: bytes, path: str, problems: list[RowProblem]) -> list[tuple[int, int, object]]:
    rows = []
    for line_no, line in enumerate(raw.split(b"\n"), start=1):
        if len(line) > MAX_ROW_BYTES:
            problems.append(RowProblem(path, line_no, None, f"the line is {len(line)} bytes long, more than the "
                                                            f"limit of {MAX_ROW_BYTES} bytes per row"))
            continue
        if not line.strip():
            continue  # blank lines are allowed (editors, concatenated files)
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            problems.append(RowProblem(path, line_no, None, f"not valid UTF-8 at byte {exc.start + 1} of the line"))
            continue
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            problems.append(RowProblem(path, line_no, None, f"invalid JSON at column {exc.colno}: {exc.msg}"))
            continue
        except RecursionError:
            problems.append(RowProblem(path, line_no, None, _TOO_DEEP))
            continue
        if _depth_over(value):
            problems.append(RowProblem(path, line_no, None, _TOO_DEEP))
            continue
        rows.append((line_no, len(rows) + 1, value))
    return rows


def _json_list_rows(raw: bytes, path: str, problems: list[RowProblem]) -> list[tuple[int, int, object]]:
    """Decode a JSON list element by element, so each row keeps the line it starts on."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        problems.append(RowProblem(path, line, None, "not valid UTF-8"))
        return []
    decoder = json.JSONDecoder()
    rows: list[tuple[int, int, object]] = []
    count = 0  # rows decoded, kept or not (a row's index does not depend on the rows refused before it)
    pos = _skip_ws(text, 0) + 1  # past '['
    while True:
        pos = _skip_ws(text, pos)
        if pos < len(text) and text[pos] == "]" and not count:
            break
        line = text.count("\n", 0, pos) + 1
        try:
            value, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            problems.append(RowProblem(path, exc.lineno, None, f"invalid JSON at column {exc.colno}: {exc.msg} "
                                                               f"(rows after this point were not read)"))
            return rows
        except RecursionError:  # where the row ends is unknown: the rest of the list cannot be read
            problems.append(RowProblem(path, line, None, f"{_TOO_DEEP} (rows after this point were not read)"))
            return rows
        count += 1
        if _depth_over(value):
            problems.append(RowProblem(path, line, None, _TOO_DEEP))
        elif end - pos > MAX_ROW_BYTES // 4 and len(text[pos:end].encode("utf-8", "surrogatepass")) > MAX_ROW_BYTES:
            problems.append(RowProblem(path, line, None, f"the row is more than {MAX_ROW_BYTES} bytes long "
                                                         "(the limit per row)"))
        else:
            rows.append((line, count, value))
        pos = _skip_ws(text, end)
        if pos < len(text) and text[pos] == ",":
            pos += 1
            continue
        if pos < len(text) and text[pos] == "]":
            pos = _skip_ws(text, pos + 1)
            if pos < len(text):
                line, col = _line_col(text, pos)
                problems.append(RowProblem(path, line, None, f"invalid JSON at column {col}: extra data "
                                                             "after the closing ']'"))
            return rows
        line, col = _line_col(text, pos)
        problems.append(RowProblem(path, line, None, f"invalid JSON at column {col}: expected ',' or ']' "
                                                     "after a row (rows after this point were not read)"))
        return rows
    return rows


def _is_one_object(raw: bytes) -> bool:
    try:
        return isinstance(json.loads(raw), dict)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return False


def _skip_ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos


def _line_col(text: str, pos: int) -> tuple[int, int]:
    line = text.count("\n", 0, pos) + 1
    return line, pos - (text.rfind("\n", 0, pos) + 1) + 1


def _is_s3(path: str) -> bool:
    return path[:5].lower() == "s3://"


def _in_bucket(sample: Sample, base: tuple[str, str], path: str, line: int
               ) -> tuple[Sample | None, list[RowProblem]]:
    """``sample`` with its relative media (kept relative by parse_row) as URLs under ``base``
    (bucket, key prefix); absolute paths and URLs stay as they are."""
    from easyvideor1.data.remote import object_url, resolve_relative

    bucket, prefix = base
    problems: list[RowProblem] = []
    resolved: dict[str, list[str]] = {}
    for name, items in (("videos", sample.videos), ("images", sample.images)):
        resolved[name] = []
        for i, item in enumerate(items):
            if is_url(item) or os.path.isabs(item):
                resolved[name].append(item)
                continue
            url = resolve_relative(bucket, prefix, item)
            if url is None:
                folder = object_url(bucket, f"{prefix}/" if prefix else "")
                problems.append(RowProblem(path, line, f"{name}[{i}]", f"relative media path {item!r} leaves the "
                                           f"bucket: it is resolved against {folder}"))
            resolved[name].append(url or item)
    if problems:
        return None, problems
    return replace(sample, videos=tuple(resolved["videos"]), images=tuple(resolved["images"])), []


def _missing_media(sample: Sample, path: str, line: int) -> list[RowProblem]:
    problems = []
    for name, items in (("videos", sample.videos), ("images", sample.images)):
        for i, item in enumerate(items):
            if not is_url(item) and not os.path.isfile(item):
                problems.append(RowProblem(path, line, f"{name}[{i}]", f"media file not found: {item}"))
    return problems


def iter_rows(samples: Iterable[Sample], relative_to: str | os.PathLike | None) -> Iterator[str]:
    for sample in samples:
        yield json.dumps(sample.to_row(relative_to=relative_to), ensure_ascii=False)


def write_samples(path: str | os.PathLike, samples: Iterable[Sample], *, relative_media: bool = True) -> Path:
    """Write ``samples`` as JSONL (atomically: a reader never sees a half-written file).

    With ``relative_media`` (default), media inside the file's folder are written relative
    to it, so the folder can be moved or copied as a whole.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    relative_to = os.path.abspath(path.parent) if relative_media else None
    with atomic_write(path) as handle:
        for text in iter_rows(samples, relative_to):
            handle.write(text + "\n")
    return path


@dataclass
class ValidationReport:
    """What ``evr1 data validate`` prints: counts of good rows and every problem."""

    path: str
    samples: list[Sample]
    problems: list[RowProblem]
    by_problem_type: Counter = field(default_factory=Counter)
    by_data_type: Counter = field(default_factory=Counter)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def bad_lines(self) -> int:
        return len({p.line for p in self.problems})

    def format(self, max_problems: int = 200) -> str:
        lines = [f"{self.path}: {len(self.samples)} valid row(s), {len(self.problems)} problem(s) "
                 f"on {self.bad_lines} line(s)"]
        if self.by_data_type:
            lines.append("  data_type:    " + ", ".join(f"{k}={v}" for k, v in sorted(self.by_data_type.items())))
        if self.by_problem_type:
            lines.append("  problem_type: " + ", ".join(f"{k}={v}" for k, v in sorted(self.by_problem_type.items())))
        lines.extend(p.describe() for p in self.problems[:max_problems])
        if len(self.problems) > max_problems:
            lines.append(f"... and {len(self.problems) - max_problems} more")
        return "\n".join(lines)


def validate_file(
    path: str | os.PathLike,
    *,
    media_root: str | os.PathLike | None = None,
    check_media: bool = True,
    check_ground_truth: GroundTruthCheck | None = None,
) -> ValidationReport:
    """Validate every row (and by default that every media file exists); with
    ``check_ground_truth`` also that each row's ground truth parses (``evr1 data validate``
    passes :func:`easyvideor1.rewards.gt_check.sample_check`)."""
    samples, problems = load_samples_report(path, media_root=media_root, check_media=check_media,
                                            check_ground_truth=check_ground_truth)
    return ValidationReport(
        path=str(path),
        samples=samples,
        problems=problems,
        by_problem_type=Counter(s.problem_type for s in samples),
        by_data_type=Counter(s.data_type for s in samples),
    )

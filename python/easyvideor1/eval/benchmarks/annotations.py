"""Reading benchmark annotation files: rows with their location, typed fields, options, answers.

Every problem raises :class:`AnnotationError` naming the file, the line (JSONL), row (JSON
list) or key (JSON object), and the field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from easyvideor1.eval.types import AnnotationError

VIDEO_EXTENSIONS = (".mp4", ".mkv", ".webm", ".avi", ".mov", ".m4v")
LETTERS = "ABCDEFGHIJ"
# A ground-truth letter: "B", "(B)", "B.", "B) text", "B: text".
_ANSWER_LABEL = re.compile(r"^[\(\[]?([A-Ja-j])(?:[\)\]]|\s*[.:：)]|$)")




def find_file(root: Path, candidates: Sequence[str], what: str) -> Path:
    """The first of ``candidates`` (relative to ``root``; glob patterns allowed) that exists."""
    for pattern in candidates:
        matches = sorted(root.glob(pattern)) if any(c in pattern for c in "*?[") else [root / pattern]
        for path in matches:
            if path.is_file():
                return path
    raise AnnotationError(str(root), None, None, f"no {what} found (looked for {', '.join(candidates)})")


def find_files(root: Path, patterns: Sequence[str], what: str) -> list[Path]:
    found: list[Path] = []
    for pattern in patterns:
        found.extend(p for p in sorted(root.glob(pattern)) if p.is_file() and p not in found)
    if not found:
        raise AnnotationError(str(root), None, None, f"no {what} found (looked for {', '.join(patterns)})")
    return found


def read_records(path: Path) -> list[tuple[str, Any]]:
    """``(where, row)`` for every row of a JSON list, a JSON object or a JSONL file.

    ``where`` is ``line N`` for JSONL, ``row N`` for a JSON list and ``key K`` for a JSON
    object of rows (the key is also put in the row as ``__key__``). Parquet exports are
    read as JSON/JSONL (``df.to_json(orient="records", lines=True)``). The whole file is
    parsed first, so a syntax error is reported before any row is checked.
    """
    return list(_iter_records(path))


def _iter_records(path: Path) -> Iterator[tuple[str, Any]]:
    text = _read_text(path)
    stripped = text.lstrip()
    if path.suffix == ".jsonl" or not stripped.startswith(("[", "{")) or _looks_like_jsonl(stripped):
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                yield str(number), json.loads(line)
            except json.JSONDecodeError as exc:
                raise AnnotationError(
                    str(path), number, None, f"invalid JSON (column {exc.colno}): {exc.msg}"
                ) from None
        return
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise AnnotationError(
            str(path), exc.lineno, None, f"invalid JSON (column {exc.colno}): {exc.msg}"
        ) from None
    if isinstance(data, list):
        for index, row in enumerate(data):
            yield f"row {index}", row
    elif isinstance(data, dict):
        for key, row in data.items():
            yield f"key {key}", ({**row, "__key__": key} if isinstance(row, dict) else row)
    else:
        raise AnnotationError(
            str(path), None, None, f"expected a JSON list or object of rows, got {type(data).__name__}"
        )


def _looks_like_jsonl(text: str) -> bool:
    """A file of several top-level objects, one per line, even if named .json."""
    first = text.split("\n", 1)
    if not text.startswith("{") or len(first) < 2 or not first[1].strip().startswith("{"):
        return False
    try:
        json.loads(first[0])
    except json.JSONDecodeError:
        return False
    return True


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise AnnotationError(str(path), None, None, "file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise AnnotationError(str(path), None, None, f"cannot read: {exc}") from None


def where_of(path: Path, where: str) -> str:
    return f"{path}:{where}"


def field(
    row: Any,
    name: str | Sequence[str],
    path: Path,
    where: str,
    kind: type | tuple[type, ...] = str,
    *,
    default: Any = ...,
    allow_empty: bool = False,
) -> Any:
    """``row[name]`` checked against ``kind``; the first present of several alias names.

    A missing field without a ``default`` or a value of the wrong type raises
    :class:`AnnotationError` naming file, row and field.
    """
    if not isinstance(row, dict):
        raise AnnotationError(str(path), where, None, f"expected a JSON object, got {type(row).__name__}")
    names = [name] if isinstance(name, str) else list(name)
    for key in names:
        if key in row and row[key] is not None:
            value = row[key]
            if kind is float and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            if not isinstance(value, kind) or isinstance(value, bool) and bool not in _as_tuple(kind):
                expected = " or ".join(t.__name__ for t in _as_tuple(kind))
                raise AnnotationError(
                    str(path), where, key, f"expected {expected}, got {type(value).__name__} {_short(value)}"
                )
            if isinstance(value, str | list | dict) and not value and not allow_empty:
                raise AnnotationError(str(path), where, key, "must not be empty")
            return value
    if default is not ...:
        return default
    shown = names[0] if len(names) == 1 else f"{names[0]}' (or '{', '.join(names[1:])}"
    raise AnnotationError(str(path), where, shown, "missing")


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _short(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def find_video(root: Path, folders: Sequence[str], stem_or_name: str) -> str:
    """Path of a video under one of ``folders`` (a name with extension, or a stem).

    A video that does not exist is not an annotation error: the path is returned anyway
    (the first candidate) so the item fails at load time as a media failure and stays in
    the denominator.
    """
    name = stem_or_name.strip().lstrip("/")
    has_ext = Path(name).suffix.lower() in VIDEO_EXTENSIONS
    candidates: list[Path] = []
    for folder in folders:
        base = root / folder if folder else root
        if has_ext:
            candidates.append(base / name)
        else:
            candidates.extend(base / f"{name}{ext}" for ext in VIDEO_EXTENSIONS)
    for path in candidates:
        if path.is_file():
            return str(path)
    return str(candidates[0])


def letter_options(texts: Sequence[Any], path: Path, where: str, name: str = "options") -> tuple[str, ...]:
    """``("A. text", ...)`` from bare option texts; labels already present are kept."""
    if not isinstance(texts, list | tuple) or not texts:
        raise AnnotationError(
            str(path), where, name, f"expected a non-empty list of options, got {_short(texts)}"
        )
    if len(texts) > len(LETTERS):
        raise AnnotationError(
            str(path), where, name, f"{len(texts)} options; at most {len(LETTERS)} are supported"
        )
    out = []
    for index, text in enumerate(texts):
        if not isinstance(text, str | int | float) or isinstance(text, bool):
            raise AnnotationError(str(path), where, f"{name}[{index}]", f"expected text, got {_short(text)}")
        text = str(text).strip()
        label = f"{LETTERS[index]}."
        out.append(text if _has_label(text, LETTERS[index]) else f"{label} {text}")
    return tuple(out)


def _has_label(text: str, letter: str) -> bool:
    for form in (f"{letter}.", f"{letter})", f"({letter})", f"{letter}:"):
        if text.startswith(form):
            return True
    return False


def options_from_dict(choices: Any, path: Path, where: str, name: str) -> tuple[str, ...]:
    """``{"A": "x", "B": "y"}`` -> ``("A. x", "B. y")`` in letter order."""
    if not isinstance(choices, dict) or not choices:
        raise AnnotationError(
            str(path), where, name, f"expected an object of lettered options, got {_short(choices)}"
        )
    letters = sorted(choices)
    bad = [k for k in letters if k not in LETTERS]
    if bad:
        raise AnnotationError(str(path), where, name, f"option keys must be letters A-J, got {bad}")
    return tuple(f"{k}. {str(choices[k]).strip()}" for k in letters)


def answer_letter(answer: Any, options: Sequence[str], path: Path, where: str, name: str = "answer") -> str:
    """The ground-truth letter from a letter (``B``, ``(B)``, ``B. text``), an index or an option text."""
    letters = [o.split(".", 1)[0].strip("() ") for o in options]
    if isinstance(answer, int) and not isinstance(answer, bool):
        if 0 <= answer < len(options):
            return LETTERS[answer]
        raise AnnotationError(str(path), where, name, f"index {answer} is outside the {len(options)} options")
    if isinstance(answer, str):
        text = answer.strip()
        match = _ANSWER_LABEL.match(text)
        if match and match.group(1).upper() in letters:
            return match.group(1).upper()
        bare = [o.split(".", 1)[1].strip() if "." in o else o for o in options]
        for letter, option_text in zip(letters, bare):
            if text.lower() == option_text.lower():
                return letter
    raise AnnotationError(
        str(path), where, name, f"{_short(answer)} names none of the options {''.join(letters)}"
    )


_OPTION_LINE = re.compile(r"^\s*\(?([A-J])\s*[\).:：]\s*(.*)$")


def split_embedded_options(
    text: str, path: Path, where: str, name: str = "question"
) -> tuple[str, tuple[str, ...]]:
    """``"Q?\\n(A) x\\n(B) y"`` (or ``A. x`` / ``A: x`` lines) -> ``("Q?", ("A. x", "B. y"))``.

    Lines after an option that are not options themselves continue that option.
    """
    question: list[str] = []
    options: list[list[str]] = []
    letters: list[str] = []
    for line in text.splitlines():
        match = _OPTION_LINE.match(line)
        if match and (
            not letters and match.group(1) == "A" or letters and match.group(1) == LETTERS[len(letters)]
        ):
            letters.append(match.group(1))
            options.append([match.group(2).strip()])
        elif options:
            options[-1].append(line.strip())
        else:
            question.append(line)
    if len(options) < 2:
        raise AnnotationError(
            str(path),
            where,
            name,
            "expected the question followed by at least two option lines ('A. ...' or '(A) ...')",
        )
    return "\n".join(question).strip(), tuple(
        f"{letter}. {' '.join(p for p in parts if p)}" for letter, parts in zip(letters, options)
    )


class VideoIndex:
    """Finds videos by file name anywhere below a folder (benchmarks that nest them by source)."""

    def __init__(self, root: Path):
        self.root = root
        self._by_name: dict[str, str] | None = None

    def find(self, name: str) -> str:
        direct = self.root / name
        if direct.is_file():
            return str(direct)
        if self._by_name is None:
            self._by_name = {}
            if self.root.is_dir():
                for path in sorted(self.root.rglob("*")):
                    if path.is_file():
                        self._by_name.setdefault(path.name, str(path))
                        self._by_name.setdefault(path.stem, str(path))
        found = self._by_name.get(Path(name).name) or self._by_name.get(Path(name).stem)
        return found or str(direct)


def require_answer(row: dict[str, Any], names: Sequence[str], path: Path, where: str) -> Any:
    """The ground-truth value; a missing or ``null`` answer is an annotation error."""
    for name in names:
        value = row.get(name)
        if value is not None and value != "":
            return value
    raise AnnotationError(str(path), where, names[0], "missing ground-truth answer")

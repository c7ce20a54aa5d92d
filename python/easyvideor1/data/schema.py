"""The sample schema: one validated row of a training/evaluation data file.

``parse_row`` turns one decoded JSON value into a :class:`Sample` plus the list of every
problem found in it (never only the first), so the loader can report a whole file at once.
Rules and field meanings are documented in docs/data-format.md.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from easyvideor1.errors import RowProblem

DATA_TYPES = ("video", "image", "text", "image_video")
VIDEO_PLACEHOLDER = "<video>"
IMAGE_PLACEHOLDER = "<image>"

# Fields the schema consumes; everything else passes through in ``Sample.extra``.
# ``solution`` (answer alias) and ``path`` (single-media alias) are consumed only when used.
# The object `evr1 data prepare` adds to a row (data/prepared.py): its frames are in the store,
# read by key, so the row's raw media paths are only a record of where they came from.
PREPARED_FIELD = "prepared"
_KNOWN = ("problem_id", "problem", "answer", "problem_type", "data_type", "options", "videos", "images",
          "has_offline_trajectory", "offline_output")

# Extensions used to route a bare ``path`` when ``data_type`` does not say what it is.
VIDEO_EXTENSIONS = frozenset({".mp4", ".avi", ".mkv", ".mov", ".webm", ".m4v", ".flv", ".wmv", ".mpg",
                              ".mpeg", ".ts", ".3gp", ".gif"})
IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff"})

_ANSWER_WRAPPER = re.compile(r"^\s*<answer>(.*)</answer>\s*$", re.DOTALL)
_URL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")
# Normalised names of the multiple-choice type (the rewards registry's name and aliases;
# repeated here because data must not import rewards).
_MC_NAMES = frozenset({"multiplechoice", "mcq", "mc", "choice", "singlechoice"})
_LETTER_LABEL = re.compile(r"^\(?([A-Ja-j])[).:]?$")
_OPTION_LABEL = re.compile(r"^\(?[A-Ja-j][).:]\s*")
_MAX_OPTIONS = 10  # letters A-J


@dataclass(frozen=True)
class Sample:
    """One validated row. Media paths are absolute (URLs are kept verbatim)."""

    problem_id: str
    problem: str
    answer: str
    problem_type: str
    data_type: str
    options: tuple[str, ...] | None = None
    videos: tuple[str, ...] = ()
    images: tuple[str, ...] = ()
    has_offline_trajectory: bool = False
    offline_output: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    source: str = ""
    # The row field the ground truth came from ("answer", or Video-R1's "solution"), for
    # messages about it; not part of the sample's value.
    answer_field: str = field(default="answer", compare=False, repr=False)

    def to_row(self, *, relative_to: str | os.PathLike | None = None) -> dict[str, Any]:
        """The JSON row form; loading it again gives an equal sample.

        With ``relative_to`` (a folder), media paths inside that folder are written relative
        to it, so a data file and its media can move together.
        """
        row: dict[str, Any] = {
            "problem_id": self.problem_id,
            "problem": self.problem,
            "answer": self.answer,
            "problem_type": self.problem_type,
            "data_type": self.data_type,
        }
        if self.options is not None:
            row["options"] = list(self.options)
        if self.videos:
            row["videos"] = [_relative(p, relative_to) for p in self.videos]
        if self.images:
            row["images"] = [_relative(p, relative_to) for p in self.images]
        if self.has_offline_trajectory:
            row["has_offline_trajectory"] = True
        if self.offline_output is not None:
            row["offline_output"] = self.offline_output
        for key, value in self.extra.items():
            row.setdefault(key, value)
        return row

    @property
    def is_multiple_choice(self) -> bool:
        return normalize_problem_type(self.problem_type) in _MC_NAMES


def normalize_problem_type(name: str) -> str:
    """Case/space/dash/underscore-insensitive form, used only for schema-level checks."""
    return re.sub(r"[\s_\-/]+", "", name.strip().lower())


def count_placeholders(problem: str) -> tuple[int, int]:
    """(number of ``<image>``, number of ``<video>``) placeholders in ``problem``."""
    return problem.count(IMAGE_PLACEHOLDER), problem.count(VIDEO_PLACEHOLDER)


def ensure_placeholders(problem: str, n_images: int, n_videos: int) -> str:
    """Return ``problem`` with exactly one placeholder per image and per video.

    A kind (image or video) with no placeholder at all gets one per item prepended, each on
    its own line, images first, then videos (the order Qwen-VL chat templates list media in
    the public datasets). A kind with some placeholders must have exactly one per item:
    otherwise ``ValueError`` says which count is wrong, since guessing where media goes
    would silently change the prompt.
    """
    have_images, have_videos = count_placeholders(problem)
    errors = []
    for kind, have, want in (("image", have_images, n_images), ("video", have_videos, n_videos)):
        if have and have != want:
            errors.append(f"{have} <{kind}> placeholder(s) for {want} {kind}(s)")
    if errors:
        raise ValueError("; ".join(errors) + " (write one placeholder per item, or none to have them prepended)")
    prefix = ""
    if not have_images:
        prefix += f"{IMAGE_PLACEHOLDER}\n" * n_images
    if not have_videos:
        prefix += f"{VIDEO_PLACEHOLDER}\n" * n_videos
    return prefix + problem


def strip_answer_wrapper(answer: str) -> str:
    """``<answer> B </answer>`` -> ``B``; anything else is returned stripped."""
    match = _ANSWER_WRAPPER.match(answer)
    return (match.group(1) if match else answer).strip()


def derive_data_type(n_images: int, n_videos: int) -> str:
    if n_images and n_videos:
        return "image_video"
    return "video" if n_videos else "image" if n_images else "text"


def resolve_media_path(path: str, base_dir: str) -> str:
    """Absolute, normalised path; URLs (``scheme://``) are returned unchanged."""
    if _URL.match(path):
        return path
    return os.path.normpath(os.path.join(base_dir, os.path.expanduser(path)))


def resolve_roots(roots: Iterable[str | os.PathLike]) -> tuple[str, ...]:
    """Configured data roots as resolved absolute folders (symlinks and ``..`` followed), in order,
    without duplicates; empty entries are ignored."""
    return tuple(dict.fromkeys(os.path.realpath(os.fspath(r)) for r in roots if os.fspath(r)))


def within_roots(path: str, roots: Iterable[str]) -> str | None:
    """The resolved path of ``path`` (symlinks and ``..`` followed, as far as they exist) when it is
    one of the resolved ``roots`` or lies under one, else None. The answer does not depend on
    whether ``path`` exists."""
    real = os.path.realpath(path)
    for root in roots:
        if real == root or real.startswith(root.rstrip(os.sep) + os.sep):
            return real
    return None


def is_url(path: str) -> bool:
    return bool(_URL.match(path))


class _RowChecker:
    """Collects every problem of one row, each tagged with file, line and field."""

    def __init__(self, path: str, line: int, prefix: str):
        self.path, self.line, self.prefix = path, line, prefix
        self.problems: list[RowProblem] = []

    def bad(self, field_name: str | None, message: str) -> None:
        self.problems.append(RowProblem(self.path, self.line, field_name, self.prefix + message))


def parse_row(
    row: Any,
    *,
    path: str,
    line: int,
    base_dir: str,
    default_id: str,
    row_label: str = "",
) -> tuple[Sample | None, list[RowProblem]]:
    """Validate one decoded row. Returns the sample (``None`` when any problem was found)
    and every problem, each naming ``path``, ``line`` and the field."""
    check = _RowChecker(path, line, f"{row_label}: " if row_label else "")
    if not isinstance(row, dict):
        check.bad(None, f"expected a JSON object (a row), got {_kind(row)}")
        return None, check.problems

    problem_id = _problem_id(row, check, default_id)
    problem = row.get("problem")
    if not isinstance(problem, str) or not problem.strip():
        check.bad("problem", f"expected a non-empty string (the question), got {_describe(problem)}")
        problem = None
    answer = _answer(row, check)
    problem_type = row.get("problem_type")
    if not isinstance(problem_type, str) or not problem_type.strip():
        check.bad("problem_type", f"expected a non-empty string (e.g. 'multiple choice'), got {_describe(problem_type)}")
        problem_type = None

    consumed: set[str] = set(_KNOWN)
    data_type = _data_type_value(row, check)
    videos = _media_list(row, "videos", check)
    images = _media_list(row, "images", check)
    if "videos" not in row and "images" not in row and row.get("path") is not None:
        _media_from_path(row, data_type, check, videos, images, consumed)
    if data_type is None and not any(p.field == "data_type" for p in check.problems):
        data_type = derive_data_type(len(images), len(videos))
    elif data_type is not None:
        _check_data_type_media(data_type, len(images), len(videos), check)

    options = _options(row, check, problem_type)
    if answer is not None and options and problem_type and normalize_problem_type(problem_type) in _MC_NAMES:
        _check_choice_answer(answer, options, check)

    offline = row.get("has_offline_trajectory", False)
    if offline is None:
        offline = False
    if not isinstance(offline, bool):
        check.bad("has_offline_trajectory", f"expected true or false, got {_describe(offline)}")
        offline = False
    offline_output = row.get("offline_output")
    if offline_output is not None and not isinstance(offline_output, str):
        check.bad("offline_output", f"expected a string (the offline response), got {_describe(offline_output)}")
        offline_output = None
    elif offline and (offline_output is None or not offline_output.strip()):
        check.bad("offline_output", "has_offline_trajectory is true, so a non-empty offline response string "
                                    f"is required, got {_describe(offline_output)}")

    if problem is not None:
        try:
            problem = ensure_placeholders(problem, len(images), len(videos))
        except ValueError as exc:
            check.bad("problem", str(exc))
    if "answer" not in row:
        consumed.add("solution")  # used as the answer alias; to_row writes it back as ``answer``

    if check.problems:
        return None, check.problems
    sample = Sample(
        problem_id=problem_id,
        problem=problem,
        answer=answer,
        problem_type=problem_type,
        data_type=data_type,
        options=options,
        videos=tuple(resolve_media_path(p, base_dir) for p in videos),
        images=tuple(resolve_media_path(p, base_dir) for p in images),
        has_offline_trajectory=offline,
        offline_output=offline_output,
        extra={k: v for k, v in row.items() if k not in consumed},
        source=f"{path}:{line}",
        answer_field="answer" if "answer" in row else "solution",
    )
    return sample, []


def _problem_id(row: dict, check: _RowChecker, default_id: str) -> str:
    value = row.get("problem_id")
    if value is None:
        return default_id
    if isinstance(value, bool) or not isinstance(value, (str, int)) or (isinstance(value, str) and not value.strip()):
        check.bad("problem_id", f"expected a non-empty string or an integer, got {_describe(value)}")
        return default_id
    return str(value)


def _answer(row: dict, check: _RowChecker) -> str | None:
    # Video-R1 style rows carry the ground truth as ``solution`` ("<answer>B</answer>").
    name = "answer" if "answer" in row or "solution" not in row else "solution"
    value = row.get(name)
    if isinstance(value, bool) or value is None:
        hint = " (booleans are written 'yes' / 'no')" if isinstance(value, bool) else ""
        check.bad(name, f"expected a string (the ground truth){hint}, got {_describe(value)}")
        return None
    if isinstance(value, (int, float)):
        return repr(value) if isinstance(value, float) else str(value)
    if isinstance(value, (list, dict)):
        # Grounding answers are sometimes stored as JSON values rather than JSON text.
        return json.dumps(value)
    if not isinstance(value, str):
        check.bad(name, f"expected a string, got {_describe(value)}")
        return None
    text = strip_answer_wrapper(value)
    if not text:
        check.bad(name, f"expected a non-empty ground truth, got {_describe(value)}")
        return None
    return text


def _data_type_value(row: dict, check: _RowChecker) -> str | None:
    value = row.get("data_type")
    if value is None:
        return None
    if isinstance(value, str) and value.strip().lower() in DATA_TYPES:
        return value.strip().lower()
    check.bad("data_type", f"expected one of {', '.join(DATA_TYPES)}, got {_describe(value)}")
    return None


def _media_list(row: dict, name: str, check: _RowChecker) -> list[str]:
    value = row.get(name)
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]  # public datasets often store a single path as a bare string
    if not isinstance(value, list):
        check.bad(name, f"expected a list of file paths (or one path string), got {_describe(value)}")
        return []
    good = []
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item.strip():
            check.bad(f"{name}[{i}]", f"expected a non-empty path string, got {_describe(item)}")
        else:
            good.append(item.strip())
    return good


def _media_from_path(row: dict, data_type: str | None, check: _RowChecker, videos: list[str],
                     images: list[str], consumed: set[str]) -> None:
    """Video-R1 rows name their single video or image in ``path``; route it by data_type."""
    value = row["path"]
    if data_type == "text":
        return
    if not isinstance(value, str) or not value.strip():
        check.bad("path", f"expected a non-empty path string, got {_describe(value)}")
        return
    kind = data_type
    if kind not in ("video", "image"):
        ext = os.path.splitext(value.split("?")[0])[1].lower()
        kind = "video" if ext in VIDEO_EXTENSIONS else "image" if ext in IMAGE_EXTENSIONS else None
    if kind is None:
        check.bad("path", f"cannot tell whether {value!r} is a video or an image: set data_type to "
                          "'video' or 'image', or use the 'videos' / 'images' fields")
        return
    (videos if kind == "video" else images).append(value.strip())
    consumed.add("path")


def _check_data_type_media(data_type: str, n_images: int, n_videos: int, check: _RowChecker) -> None:
    wanted = {
        "video": (n_videos > 0 and n_images == 0, "at least one video and no images"),
        "image": (n_images > 0 and n_videos == 0, "at least one image and no videos"),
        "text": (n_images == 0 and n_videos == 0, "no videos and no images"),
        "image_video": (n_images > 0 and n_videos > 0, "at least one video and at least one image"),
    }
    ok, expected = wanted[data_type]
    if not ok:
        check.bad("data_type", f"'{data_type}' requires {expected}, but the row has "
                               f"{n_videos} video(s) and {n_images} image(s)")


def _options(row: dict, check: _RowChecker, problem_type: str | None) -> tuple[str, ...] | None:
    value = row.get("options")
    is_mc = bool(problem_type) and normalize_problem_type(problem_type) in _MC_NAMES
    if value is None or value == []:
        if is_mc:
            check.bad("options", f"problem_type '{problem_type}' requires a non-empty list of option "
                                 f"strings, got {_describe(value)}")
        return None
    if not isinstance(value, list):
        check.bad("options", f"expected a list of strings, got {_describe(value)}")
        return None
    bad = False
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item.strip():
            check.bad(f"options[{i}]", f"expected a non-empty string, got {_describe(item)}")
            bad = True
    if is_mc and len(value) > _MAX_OPTIONS:
        check.bad("options", f"multiple choice allows at most {_MAX_OPTIONS} options (A-J), got {len(value)}")
        bad = True
    return None if bad else tuple(value)


def _check_choice_answer(answer: str, options: tuple[str, ...], check: _RowChecker) -> None:
    """The ground truth must name an offered option: its letter (``B``, ``(B)``, ``B.``) or its text."""
    letters = "ABCDEFGHIJ"[: len(options)]
    match = _LETTER_LABEL.match(answer.strip())
    if match:
        if match.group(1).upper() in letters:
            return
    else:
        texts = {_OPTION_LABEL.sub("", o).strip().casefold() for o in options}
        if answer.strip().casefold() in texts or _OPTION_LABEL.sub("", answer).strip().casefold() in texts:
            return
    check.bad("answer", f"multiple choice ground truth must be an option letter {letters[0]}-{letters[-1]} "
                        f"(or an option's text), got {answer!r}")


def _relative(path: str, folder: str | os.PathLike | None) -> str:
    if folder is None or is_url(path):
        return path
    folder = os.path.abspath(folder)
    if os.path.commonpath([folder, path]) != folder:
        return path
    return os.path.relpath(path, folder).replace(os.sep, "/")


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null",
            int: "a number", float: "a number"}.get(type(value), type(value).__name__)


def _describe(value: Any) -> str:
    """Short rendering of an offending value for messages (type plus a clipped repr)."""
    if value is None:
        return "null (or missing)"
    text = json.dumps(value, ensure_ascii=False, default=str)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{_kind(value)} {text}"

"""Typed errors shared across the library.

Every error that reaches a user names *where* (file, line, field, request item, cache key)
and *why*, so bad input never surfaces as a bare traceback from a dependency.
"""

from __future__ import annotations


class EasyVideoR1Error(Exception):
    """Base class of every error raised on purpose by easyvideor1."""


class ConfigError(EasyVideoR1Error):
    """A configuration value is missing, unknown or of the wrong type."""


class DataError(EasyVideoR1Error):
    """A dataset row is malformed. ``problems`` lists every bad row, not just the first."""

    def __init__(self, problems: list[RowProblem]):
        self.problems = problems
        lines = [p.describe() for p in problems[:50]]
        more = len(problems) - len(lines)
        if more > 0:
            lines.append(f"... and {more} more")
        # One bad row is one line (file:line: field 'x': why); more get a count above them.
        super().__init__(lines[0] if len(problems) == 1 else f"{len(problems)} invalid row(s):\n" + "\n".join(lines))


class RowProblem:
    """One problem found in one row: file, 1-based line, field, what was wrong."""

    __slots__ = ("path", "line", "field", "message")

    def __init__(self, path: str, line: int, field: str | None, message: str):
        self.path, self.line, self.field, self.message = path, line, field, message

    def describe(self) -> str:
        where = f"{self.path}:{self.line}"
        if self.field:
            where += f": field '{self.field}'"
        return f"{where}: {self.message}"

    def as_dict(self) -> dict:
        return {"path": self.path, "line": self.line, "field": self.field, "message": self.message}


class MediaError(EasyVideoR1Error):
    """A video or image could not be used. ``path`` and ``reason`` are always set."""

    kind = "media"

    def __init__(self, path: str, reason: str):
        self.path, self.reason = str(path), reason
        super().__init__(f"{self.kind} error for {self.path}: {reason}")


class MediaMissingError(MediaError):
    kind = "missing file"


class MediaDecodeError(MediaError):
    kind = "decode"


class MediaTimeoutError(MediaError):
    kind = "decode timeout"


class MediaTooLargeError(MediaError):
    kind = "too large"


class CacheError(EasyVideoR1Error):
    """A frame-cache blob is corrupt, stale or does not match the request."""


class CacheMismatchError(CacheError):
    """The blob found under a key was built with other parameters than requested."""


class StoreError(EasyVideoR1Error):
    """A frame store could not be reached or refused an operation."""

"""The command lines of README.md, docs/*.md and charts/README.md, as a reader copies them.

A command line is a logical line of a shell code block (continuations with a trailing
backslash and lines inside an open quote joined, the trailing comment dropped) whose first
word, after any ``VAR=value`` prefixes, is one of ``COMMAND_WORDS``. Python blocks are code,
not commands, and are left out.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
COMMAND_WORDS = {"evr1", "make", "python", ".venv/bin/python", "helm", "kubectl", "curl", "ray", "docker", "pytest",
                 ".venv/bin/pytest"}
SHELL_LANGS = {"", "bash", "sh", "shell", "console"}
_FENCE = re.compile(r"^```(\w*)\s*$")
_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=\S*$")


@dataclass(frozen=True)
class DocCommand:
    file: str  # relative to the repository
    line: int  # where the command starts
    block: int  # the code block's index in its file: commands of one block share a session
    text: str  # the command as written, comment dropped, whitespace collapsed

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


def doc_files() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "charts" / "README.md"]


def _strip_comment(line: str) -> str:
    """``line`` without a trailing ``# ...`` that is outside quotes."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def _open_quote(text: str) -> bool:
    try:
        shlex.split(text)
    except ValueError:
        return True
    return False


def _logical_lines(body: list[tuple[int, str]]) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for number, raw in body:
        if pending is None:
            if not raw.strip() or raw.lstrip().startswith("#"):
                continue
            pending = (number, raw)
        else:
            pending = (pending[0], pending[1] + "\n" + raw)
        text = pending[1]
        if text.rstrip().endswith("\\"):
            pending = (pending[0], text.rstrip()[:-1])
            continue
        if _open_quote(_strip_comment(text)):
            continue
        out.append((pending[0], _strip_comment(text)))
        pending = None
    if pending is not None:
        out.append(pending)
    return out


def first_word(text: str) -> str:
    for word in text.split():
        if not _ASSIGN.match(word):
            return word
    return ""


def commands_in(path: Path) -> list[DocCommand]:
    lines = path.read_text().splitlines()
    found: list[DocCommand] = []
    block, i = -1, 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        block += 1
        end = i + 1
        while end < len(lines) and not lines[end].startswith("```"):
            end += 1
        if fence.group(1) in SHELL_LANGS:
            body = [(n + 1, lines[n]) for n in range(i + 1, end)]
            for number, text in _logical_lines(body):
                text = " ".join(text.split())
                if first_word(text) in COMMAND_WORDS:
                    found.append(DocCommand(str(path.relative_to(REPO)), number, block, text))
        i = end + 1
    return found


def documented_commands() -> list[DocCommand]:
    return [cmd for path in doc_files() for cmd in commands_in(path)]

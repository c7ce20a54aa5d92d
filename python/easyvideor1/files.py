"""Writing the files a user (or another pod) reads: atomically, with the mode the umask allows.

A file made by ``tempfile.mkstemp`` (or by safetensors' ``save_file``) is mode 0600 whatever
the umask, and renaming it into place keeps that mode: pods of the chart run as one uid but
share outputs through volumes and S3 with others, which then could not read them. Every
writer of a user-facing output goes through :func:`atomic_path` / :func:`atomic_write`, or
calls :func:`share` on what a library wrote, so the result reads like a plain ``open(path, "w")``.
Files that must stay private (the local cluster's state with its S3 secret) keep 0600 on purpose.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


def current_umask() -> int:
    """The process umask, read without changing it where the kernel shows it."""
    # os.umask can only be read by setting it, which races with other threads creating files.
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def file_mode(executable: bool = False) -> int:
    """The mode ``open(path, "w")`` would give a new file (0644 under umask 022)."""
    return (0o777 if executable else 0o666) & ~current_umask()


def share(path: str | os.PathLike) -> Path:
    """Give ``path`` (a file, or a directory and everything under it) the umask's modes.

    For outputs a library wrote through its own temporary file (safetensors) or a directory
    made with ``tempfile.mkdtemp`` (0700). Executable bits are kept where they were set.
    """
    path = Path(path)
    if path.is_dir():
        os.chmod(path, file_mode(executable=True))
        for root, dirs, files in os.walk(path):
            for name in dirs:
                os.chmod(os.path.join(root, name), file_mode(executable=True))
            for name in files:
                _share_file(os.path.join(root, name))
    else:
        _share_file(path)
    return path


def _share_file(path: str | os.PathLike) -> None:
    os.chmod(path, file_mode(executable=bool(os.stat(path).st_mode & 0o100)))


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary file beside ``path`` to write; on success it replaces ``path``, readable as the umask allows.

    A reader never sees a half-written file; on an error the temporary file is removed and
    ``path`` is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield Path(tmp)
        _share_file(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, binary: bool = False) -> Iterator[IO[Any]]:
    """An open handle (text: UTF-8, ``\\n`` line ends) whose content replaces ``path`` on success."""
    with atomic_path(path) as tmp:
        if binary:
            with open(tmp, "wb") as handle:
                yield handle
        else:
            with open(tmp, "w", encoding="utf-8", newline="\n") as handle:
                yield handle

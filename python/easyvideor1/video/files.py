"""Checks every media reader runs first, so bad paths fail fast with a clear reason."""

from __future__ import annotations

import os
import stat

from easyvideor1.errors import MediaDecodeError, MediaMissingError


def check_media_file(path: str) -> os.stat_result:
    """Stat ``path``: it must exist, be a regular file (a FIFO would block a reader) and be non-empty."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise MediaMissingError(path, "no such file") from None
    except PermissionError:
        raise MediaMissingError(path, "permission denied") from None
    except OSError as exc:
        raise MediaMissingError(path, f"cannot stat: {exc.strerror or exc}") from None
    if stat.S_ISDIR(info.st_mode):
        raise MediaDecodeError(path, "is a directory, not a media file")
    if not stat.S_ISREG(info.st_mode):
        raise MediaDecodeError(path, "not a regular file (device, socket or pipe)")
    if info.st_size == 0:
        raise MediaDecodeError(path, "empty file (0 bytes)")
    if not os.access(path, os.R_OK):
        raise MediaMissingError(path, "permission denied")
    return info

"""The two ways a tool request can fail inside a frame source.

A :class:`ToolRequestError` is the policy's mistake (a box outside the frame, a window the
video does not have): its message goes back to the policy verbatim, so it must say what was
wrong in the policy's terms. Anything else a source raises (:class:`ToolSourceError`, a media
or store error, a timeout) is the infrastructure's; the session answers it with a generic
"could not fetch" message and logs it.
"""

from __future__ import annotations

from easyvideor1.errors import EasyVideoR1Error


class ToolRequestError(EasyVideoR1Error, ValueError):
    """A tool request that no frames can satisfy; the message is shown to the policy."""


class ToolSourceError(EasyVideoR1Error):
    """A frame source cannot serve this video at all (no raw file, a service failure)."""

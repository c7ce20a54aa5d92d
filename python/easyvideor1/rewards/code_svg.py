"""``svg-code``: render the predicted and the reference SVG, compare them with SSIM.

Both are rasterised by CairoSVG onto the same fixed canvas (``width`` x ``height``, 256 x
256 by default, white background; the SVG's own width/height/viewBox only scale into it,
so huge dimensions cost nothing) and compared in grayscale with
:func:`easyvideor1.rewards.image_similarity.ssim`. ``accuracy = max(0, SSIM)``.

Hostile SVG is contained: sources over ``MAX_SVG_BYTES`` (500 kB) are not rendered; XML
entities are refused (CairoSVG ``unsafe=False`` parses with defusedxml); every external
resource (``file:``, ``http:``, relative paths) is refused by our URL fetcher and renders
as nothing, only ``data:`` URLs up to 1 MB load (refused URLs are listed in the details,
and a render that refused any scores format as usual); rendering runs in
a worker process with a 1 GiB address-space limit that is killed when a render exceeds
``render_timeout_s`` (5 s) and replaced for the next call. The worker runs the venv's
interpreter (CairoSVG lives there), as this process's user, not inside the code sandbox.

An SVG that does not render scores accuracy 0; format per :mod:`code_extract` (valid = it
renders). The reference's rendering is cached (LRU, 64 entries) and gets the request's whole
``timeout_s`` (30 s), not ``render_timeout_s``: it is the dataset's own, and a cold cache on a
busy machine must not turn a tight candidate budget into a ground-truth error. A reference
that does not render raises GroundTruthError.
"""

from __future__ import annotations

import atexit
import base64
import functools
import json
import os
import select
import struct
import subprocess
import sys
import threading
import time
from typing import Any

import numpy as np

from easyvideor1.rewards.code_extract import extract_code
from easyvideor1.rewards.extract import GroundTruthError, strip_answer_tags
from easyvideor1.rewards.image_similarity import png_to_gray, ssim
from easyvideor1.rewards.registry import register_scorer
from easyvideor1.rewards.types import Score, ScoreRequest

CANVAS = (256, 256)
MAX_SVG_BYTES = 500_000
MAX_DATA_URL_BYTES = 1_000_000
WORKER_MEMORY_BYTES = 1 << 30
_HEADER = struct.Struct("!I")
_MAX_IDLE_WORKERS = 2


class RenderError(Exception):
    """The SVG did not render; the message says why."""


# ---- worker side (runs in the render subprocess) ------------------------------------------


def _refusing_fetcher(refused: list[str]):
    from urllib.request import urlopen

    def fetch(url: str, resource_type: str) -> bytes:
        if isinstance(url, str) and url.startswith("data:") and len(url) <= MAX_DATA_URL_BYTES * 4 // 3 + 256:
            with urlopen(url) as handle:  # data: URLs decode locally, no I/O
                return handle.read(MAX_DATA_URL_BYTES + 1)[:MAX_DATA_URL_BYTES]
        refused.append(str(url)[:200])
        # What CairoSVG's own safe fetcher returns: the resource renders as nothing.
        return b'<svg xmlns="http://www.w3.org/2000/svg" width="1" height="1"></svg>'


    return fetch


def _read_exact(stream, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = stream.read(size - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def _worker_main() -> None:
    """Render loop: length-prefixed JSON requests on stdin, length-prefixed JSON replies."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY_BYTES, WORKER_MEMORY_BYTES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    from cairosvg.surface import PNGSurface

    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while True:
        try:
            (size,) = _HEADER.unpack(_read_exact(stdin, _HEADER.size))
            request = json.loads(_read_exact(stdin, size))
        except EOFError:
            return
        refused: list[str] = []
        try:
            # PNGSurface.convert (unlike svg2png) forwards url_fetcher to the parser.
            png = PNGSurface.convert(bytestring=request["svg"].encode("utf-8"), unsafe=False,
                                   url_fetcher=_refusing_fetcher(refused), output_width=request["width"],
                                   output_height=request["height"], background_color="white")
            reply = {"png": base64.b64encode(png).decode("ascii"), "refused": refused}
        except BaseException as exc:  # noqa: B036 - any failure of a hostile SVG is a reply, not a crash
            reply = {"error": f"{type(exc).__name__}: {exc}"[:300], "refused": refused}
        data = json.dumps(reply).encode()
        stdout.write(_HEADER.pack(len(data)) + data)
        stdout.flush()


# ---- host side ---------------------------------------------------------------------------


class _Worker:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from easyvideor1.rewards.code_svg import _worker_main; _worker_main()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            start_new_session=True)

    def render(self, svg: str, width: int, height: int, timeout_s: float) -> dict[str, Any]:
        payload = json.dumps({"svg": svg, "width": width, "height": height}).encode()
        self.proc.stdin.write(_HEADER.pack(len(payload)) + payload)
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout_s
        fd = self.proc.stdout.fileno()
        buffer = b""
        need = _HEADER.size
        size = None
        while len(buffer) < need:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                raise TimeoutError(f"render timed out after {timeout_s:g}s")
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise RenderError("renderer crashed (likely out of memory)")
            buffer += chunk
            if size is None and len(buffer) >= _HEADER.size:
                (size,) = _HEADER.unpack(buffer[:_HEADER.size])
                need = _HEADER.size + size
        return json.loads(buffer[_HEADER.size:need])

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, 9)
        except ProcessLookupError:
            pass
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass


class SvgRenderer:
    """A small pool of render worker processes; thread-safe (one worker per call)."""

    def __init__(self) -> None:
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()

    def render(self, svg: str, *, width: int = CANVAS[0], height: int = CANVAS[1],
               timeout_s: float = 5.0) -> tuple[np.ndarray, list[str]]:
        """Grayscale float image and the refused URLs; raises RenderError on failure."""
        if len(svg.encode("utf-8", "replace")) > MAX_SVG_BYTES:
            raise RenderError(f"SVG larger than {MAX_SVG_BYTES} bytes")
        with self._lock:
            worker = self._idle.pop() if self._idle else None
        if worker is None or worker.proc.poll() is not None:
            worker = _Worker()
        try:
            reply = worker.render(svg, width, height, timeout_s)
        except (TimeoutError, RenderError, OSError, ValueError) as exc:
            worker.kill()
            raise RenderError(str(exc) if isinstance(exc, TimeoutError | RenderError)
                              else f"renderer failed: {exc}") from None
        with self._lock:
            if len(self._idle) < _MAX_IDLE_WORKERS:
                self._idle.append(worker)
                worker = None
        if worker is not None:
            worker.kill()
        if "error" in reply:
            raise RenderError(reply["error"])
        try:
            return png_to_gray(base64.b64decode(reply["png"])), list(reply.get("refused", []))
        except (OSError, ValueError, KeyError) as exc:
            raise RenderError(f"unreadable PNG from renderer: {exc}") from None

    def close(self) -> None:
        with self._lock:
            workers, self._idle = self._idle, []
        for worker in workers:
            worker.kill()


RENDERER = SvgRenderer()
atexit.register(RENDERER.close)


@functools.lru_cache(maxsize=64)
def _reference(svg: str, width: int, height: int, timeout_s: float) -> np.ndarray:
    image, _ = RENDERER.render(svg, width=width, height=height, timeout_s=timeout_s)
    image.setflags(write=False)  # shared by every caller of the cache
    return image


@register_scorer("svg-code", aliases=("svg", "svg code"), heavy=True,
                 description="SSIM between the rendered predicted and reference SVG")
def score_svg(req: ScoreRequest, options: dict[str, Any]) -> Score:
    width, height = int(options.get("width", CANVAS[0])), int(options.get("height", CANVAS[1]))
    request_timeout_s = float(options.get("timeout_s", 30.0))
    timeout_s = float(options.get("render_timeout_s", min(5.0, request_timeout_s)))
    reference = strip_answer_tags(req.ground_truth)
    if "<svg" not in reference.lower():
        raise GroundTruthError("svg-code", req.ground_truth, "the reference is not an SVG document")
    try:
        ref_image = _reference(reference, width, height, max(timeout_s, request_timeout_s))
    except RenderError as exc:
        raise GroundTruthError("svg-code", req.ground_truth, f"the reference does not render: {exc}") from None
    found = extract_code(req.response, "svg", options.get("answer_tag_policy", "last"))
    details: dict[str, Any] = found.details()
    if found.code is None:
        return Score(0.0, found.format_score(False), details)
    try:
        image, refused = RENDERER.render(found.code, width=width, height=height, timeout_s=timeout_s)
    except RenderError as exc:
        details["reason"] = f"SVG does not render: {exc}"
        return Score(0.0, found.format_score(False), details)
    if refused:
        details["refused_urls"] = refused[:10]
    value = ssim(image, ref_image)
    details["ssim"] = round(value, 6)
    return Score(max(0.0, value), found.format_score(True), details)

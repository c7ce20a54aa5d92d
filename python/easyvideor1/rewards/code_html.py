"""``html-code``: render the predicted and the reference page, compare them with SSIM.

Both pages are rendered by :mod:`html_renderer` (headless Chromium, no network, fixed
viewport ``width`` x ``height``, 512 x 384 by default, JS time limit ``render_timeout_s``,
5 s) and compared in grayscale with :func:`easyvideor1.rewards.image_similarity.ssim`.
``accuracy = max(0, SSIM)``. A page that does not render (timeout, JS that never yields,
too large) scores accuracy 0 with the reason; format per :mod:`code_extract` (valid = it
renders and contains markup). The reference screenshot is cached (LRU, 64 entries); a
reference that does not render raises GroundTruthError; a browser that cannot start raises RendererUnavailable
(the dispatcher reports it as an error, never as a 0 the response earned).

Options: ``width``, ``height``, ``render_timeout_s``, ``chromium_path``
(default ``/usr/bin/chromium``).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from easyvideor1.rewards.code_extract import extract_code, looks_like
from easyvideor1.rewards.extract import GroundTruthError, strip_answer_tags
from easyvideor1.rewards.html_renderer import (
    DEFAULT_CHROMIUM,
    HtmlRenderError,
    RendererUnavailable,
    get_renderer,
)
from easyvideor1.rewards.image_similarity import png_to_gray, ssim
from easyvideor1.rewards.registry import register_scorer
from easyvideor1.rewards.types import Score, ScoreRequest

VIEWPORT = (512, 384)


def render_gray(html: str, *, width: int, height: int, timeout_s: float, chromium: str) -> np.ndarray:
    """Grayscale screenshot of ``html``; raises HtmlRenderError."""
    png = get_renderer(chromium).render(html, width=width, height=height, timeout_s=timeout_s)
    return png_to_gray(png)


@functools.lru_cache(maxsize=64)
def _reference(html: str, width: int, height: int, timeout_s: float, chromium: str) -> np.ndarray:
    image = render_gray(html, width=width, height=height, timeout_s=timeout_s, chromium=chromium)
    image.setflags(write=False)  # shared by every caller of the cache
    return image


@register_scorer("html-code", aliases=("html", "web", "webpage", "html code", "web page"), heavy=True,
                 description="SSIM between the rendered predicted and reference web page")
def score_html(req: ScoreRequest, options: dict[str, Any]) -> Score:
    width, height = int(options.get("width", VIEWPORT[0])), int(options.get("height", VIEWPORT[1]))
    request_timeout_s = float(options.get("timeout_s", 30.0))
    timeout_s = float(options.get("render_timeout_s", min(5.0, request_timeout_s)))
    chromium = str(options.get("chromium_path", DEFAULT_CHROMIUM))
    reference = strip_answer_tags(req.ground_truth)
    if not looks_like(reference, "html"):
        raise GroundTruthError("html-code", req.ground_truth, "the reference contains no HTML markup")
    try:
        ref_image = _reference(reference, width, height, max(timeout_s, request_timeout_s), chromium)
    except RendererUnavailable:
        raise
    except HtmlRenderError as exc:
        raise GroundTruthError("html-code", req.ground_truth, f"the reference does not render: {exc}") from None
    found = extract_code(req.response, "html", options.get("answer_tag_policy", "last"))
    details: dict[str, Any] = found.details()
    if found.code is None:
        return Score(0.0, found.format_score(False), details)
    try:
        image = render_gray(found.code, width=width, height=height, timeout_s=timeout_s, chromium=chromium)
    except RendererUnavailable:
        raise
    except HtmlRenderError as exc:
        details["reason"] = f"page does not render: {exc}"
        return Score(0.0, found.format_score(False), details)
    value = ssim(image, ref_image)
    details["ssim"] = round(value, 6)
    valid = looks_like(found.code, "html")  # Chromium renders any text; valid HTML has markup
    if not valid:
        details["reason"] = "no HTML markup in the answer"
    return Score(max(0.0, value), found.format_score(valid), details)

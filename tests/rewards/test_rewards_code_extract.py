"""Finding code in responses (fences inside/outside the answer tag) and the shared SSIM."""

from __future__ import annotations

import numpy as np
import pytest
from skimage.metrics import structural_similarity

from easyvideor1.rewards.code_extract import extract_code, pick_fence
from easyvideor1.rewards.image_similarity import ssim, to_gray

SVG = '<svg xmlns="http://www.w3.org/2000/svg"><rect width="5" height="5"/></svg>'


def test_fence_inside_the_tag_wins():
    found = extract_code(f"```svg\n<svg>draft</svg>\n```\n<answer>```svg\n{SVG}\n```</answer>", "svg")
    assert (found.code, found.source, found.in_tag) == (SVG, "answer_tag_fence", True)
    assert found.format_score(True) == 1.0 and found.format_score(False) == 0.5


def test_tag_content_without_fence():
    found = extract_code(f"<answer>{SVG}</answer>", "svg")
    assert (found.code, found.source) == (SVG, "answer_tag")


def test_fence_outside_the_tag():
    found = extract_code("```python\nprint(1)\n```\n<answer>the code above</answer>", "python")
    assert (found.code, found.source, found.tag_found, found.in_tag) == ("print(1)", "fence", True, False)
    assert found.format_score(True) == 0.5


def test_language_tagged_fence_beats_untagged_and_others():
    text = "```\nuntagged\n```\n```html\n<p>yes</p>\n```\n```css\nbody{}\n```"
    assert pick_fence(text, "html") == "<p>yes</p>"
    assert pick_fence("```\nplain\n```", "python") == "plain"
    assert pick_fence("```js\nx\n```", "python") is None
    assert pick_fence("```xml\n<svg/>\n```", "svg") == "<svg/>"


def test_raw_markup_and_unterminated_fence():
    found = extract_code(f"Sure! {SVG} hope it helps", "svg")
    assert (found.code, found.source, found.tag_found) == (SVG, "raw_markup", False)
    page = extract_code("intro <!DOCTYPE html><html><body>x</body></html> outro", "html")
    assert page.code == "<!DOCTYPE html><html><body>x</body></html>"
    cut = extract_code("<answer>```python\nprint(2)\n", "python")  # truncated generation
    assert cut.code == "print(2)"


def test_nothing_found():
    assert extract_code("", "svg").code is None
    missing = extract_code("I cannot draw that.", "svg")
    assert missing.code is None and missing.reason == "no svg code found"
    with pytest.raises(ValueError):
        extract_code("x", "cobol")


def test_think_block_is_ignored_outside_the_tag():
    found = extract_code(f"<think>```svg\n<svg>old</svg>\n```</think>```svg\n{SVG}\n```", "svg")
    assert found.code == SVG


def test_ssim_matches_scikit_image():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (48, 64)).astype(np.float64)
    b = np.clip(a + rng.normal(0, 40, a.shape), 0, 255)
    expected = structural_similarity(a, b, gaussian_weights=True, sigma=1.5, use_sample_covariance=False,
                                     data_range=255)
    assert ssim(a, b) == pytest.approx(expected, abs=1e-9)
    assert ssim(a, a) == pytest.approx(1.0)
    assert ssim(np.zeros((32, 32)), np.full((32, 32), 255.0)) < 0.01
    with pytest.raises(ValueError):
        ssim(a, a[:10])


def test_to_gray_composites_alpha_over_white():
    transparent = np.zeros((4, 4, 4), dtype=np.uint8)
    assert to_gray(transparent).tolist() == [[255.0] * 4] * 4


N = 30_000
HOSTILE = {
    "digits": "1" * N, "fence no newline": "```" + "x" * N, "svg openers": "<svg" * N, "html openers": "<html" * N,
    "open tags": "<answer>" * (N // 8), "spaced close": "</svg" + " " * N, "think closers": "</think>" * (N // 8),
    "newline fences": "```\n" * N,
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_responses_are_scanned_in_linear_time(name):
    import time

    text = HOSTILE[name]
    start = time.monotonic()
    for language in ("svg", "html", "python"):
        extract_code(text, language)
        extract_code(f"<answer>{text}</answer>", language)
    assert time.monotonic() - start < 1.0

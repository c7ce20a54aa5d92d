"""``svg-code``: real CairoSVG rendering in worker processes, hostile SVGs contained."""

from __future__ import annotations

import threading
import time

import pytest

from easyvideor1.rewards import ScoreRequest, score
from easyvideor1.rewards.code_svg import RENDERER, _reference, score_svg
from easyvideor1.rewards.extract import GroundTruthError

NS = 'xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink"'
SHAPES = '<rect x="10" y="10" width="50" height="50" fill="red"/><circle cx="70" cy="70" r="20" fill="blue"/>'
REF = f'<svg {NS} width="100" height="100">{SHAPES}</svg>'
OPTS = {"answer_tag_policy": "last", "timeout_s": 30.0}


def run(response: str, gt: str = REF, **options):
    return score_svg(ScoreRequest(response, gt, "svg-code"), {**OPTS, **options})


def test_same_svg_scores_one():
    result = run(f"<answer>```svg\n{REF}\n```</answer>")
    assert result.accuracy == pytest.approx(1.0) and result.format == 1.0


def test_different_svg_scores_low():
    other = (f'<svg {NS} width="100" height="100"><rect width="100" height="100" fill="black"/>'
             '<text x="5" y="50" font-size="30" fill="white">Hi</text></svg>')
    result = run(f"<answer>{other}</answer>")
    assert result.accuracy < 0.3 and result.format == 1.0
    slightly = REF.replace('r="20"', 'r="18"')
    assert 0.8 < run(f"<answer>{slightly}</answer>").accuracy < 1.0


def test_external_file_references_are_refused():
    hostile = (f'<svg {NS} width="100" height="100"><image href="file:///etc/passwd" width="100" height="100"/>'
               '<image xlink:href="/etc/hostname" width="50" height="50"/>'
               '<style>@import url(http://127.0.0.1:9/x.css);</style>'
               f'{SHAPES}</svg>')
    result = run(f"<answer>{hostile}</answer>")
    assert sorted(result.details["refused_urls"]) == ["file:///etc/hostname", "file:///etc/passwd",
                                                      "http://127.0.0.1:9/x.css"]
    assert result.accuracy == pytest.approx(1.0)  # refused resources render as nothing
    inline = (f'<svg {NS} width="100" height="100"><image width="100" height="100" '
              'href="data:image/svg+xml;utf8,%3Csvg xmlns=%22http://www.w3.org/2000/svg%22 width=%22100%22 '
              'height=%22100%22%3E%3Crect width=%22100%22 height=%22100%22/%3E%3C/svg%3E"/></svg>')
    dark = run(f"<answer>{inline}</answer>")
    assert "refused_urls" not in dark.details and dark.accuracy < 0.2  # the data: URL did load


def test_huge_dimensions_render_on_the_fixed_canvas():
    huge = f'<svg {NS} width="100000000" height="100000000" viewBox="0 0 100 100">{SHAPES}</svg>'
    start = time.monotonic()
    result = run(f"<answer>{huge}</answer>")
    assert result.accuracy == pytest.approx(1.0) and time.monotonic() - start < 5


def test_entity_bomb_and_broken_xml_are_invalid():
    bomb = ('<?xml version="1.0"?><!DOCTYPE s [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;">]>'
            f'<svg {NS}><text>&b;</text></svg>')
    result = run(f"<answer>{bomb}</answer>")
    assert (result.accuracy, result.format) == (0.0, 0.5)
    assert "EntitiesForbidden" in result.details["reason"]
    broken = run("<answer><svg><rect</answer>")
    assert (broken.accuracy, broken.format) == (0.0, 0.5) and "does not render" in broken.details["reason"]
    assert run("no svg at all").format == 0.0


def test_oversized_and_slow_svgs_are_cut_off_and_the_next_render_works():
    circles = '<circle cx="50" cy="50" r="40" fill="none" stroke="black" stroke-width="0.1"/>' * 6000
    slow = run(f"<answer><svg {NS} width='100' height='100'>{circles}</svg></answer>", render_timeout_s=0.05)
    assert slow.accuracy == 0.0 and "timed out" in slow.details["reason"]
    big = run(f"<answer><svg {NS}>{'<g/>' * 200_000}</svg></answer>")
    assert big.accuracy == 0.0 and "larger than" in big.details["reason"]
    huge = run(f"<answer><svg {NS}>{'<g/>' * 300_000}</svg></answer>")
    assert huge.format == 0.0 and "longer than" in huge.details["reason"]
    assert run(f"<answer>{REF}</answer>").accuracy == pytest.approx(1.0)


def test_reference_cache_and_bad_reference():
    _reference.cache_clear()
    run(f"<answer>{REF}</answer>")
    run(f"<answer>{REF}</answer>")
    assert _reference.cache_info().hits >= 1
    with pytest.raises(GroundTruthError):
        run(f"<answer>{REF}</answer>", gt="a red square")
    with pytest.raises(GroundTruthError):
        run(f"<answer>{REF}</answer>", gt="<svg><rect</svg>")


def test_thread_safe_rendering_and_dispatcher():
    results: list[float] = []

    def one() -> None:
        results.append(score(ScoreRequest(f"<answer>{REF}</answer>", REF, "SVG")).accuracy)

    threads = [threading.Thread(target=one) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [pytest.approx(1.0)] * 4
    RENDERER.close()

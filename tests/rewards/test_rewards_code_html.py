"""``html-code``: real headless Chromium (Debian's) through Playwright, no network."""

from __future__ import annotations

import socket
import threading
import time

import psutil
import pytest

from easyvideor1.rewards import ScoreRequest, score
from easyvideor1.rewards.code_html import score_html
from easyvideor1.rewards.extract import GroundTruthError
from easyvideor1.rewards.html_renderer import HtmlRenderer, RendererUnavailable, get_renderer

REF = ("<html><body style='margin:0;background:#fff'><h1 style='color:#c00;font-family:sans-serif'>Title</h1>"
       "<div style='width:240px;height:120px;background:#00c'></div></body></html>")
OPTS = {"answer_tag_policy": "last", "timeout_s": 30.0, "render_timeout_s": 2.0}


@pytest.fixture(scope="module")
def chromium(chromium_path):
    yield chromium_path
    get_renderer(chromium_path).close()


def run(response: str, chromium: str, gt: str = REF, **options):
    return score_html(ScoreRequest(response, gt, "html-code"), {**OPTS, "chromium_path": chromium, **options})


def test_same_page_scores_one(chromium):
    result = run(f"<answer>```html\n{REF}\n```</answer>", chromium)
    assert result.accuracy == pytest.approx(1.0, abs=1e-6) and result.format == 1.0


def test_different_page_scores_low(chromium):
    other = ("<html><body style='background:#000;color:#fff;font-size:40px'><p>Totally different</p>"
             "<table border=1><tr><td>1</td><td>2</td></tr></table></body></html>")
    result = run(f"<answer>{other}</answer>", chromium)
    assert result.accuracy < 0.2 and result.format == 1.0


def test_external_requests_get_no_network_and_do_not_hang(chromium):
    hits: list[bytes] = []
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(32)
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            hits.append(conn.recv(100))
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.getsockname()[1]}"
    page = (f"<html><body><h1>x</h1><img src='{url}/img.png'><link rel=stylesheet href='{url}/s.css'>"
            f"<iframe src='{url}/frame'></iframe><meta http-equiv='refresh' content='0;url={url}/go'>"
            f"<script>fetch('{url}/fetch'); new WebSocket('ws://127.0.0.1:{server.getsockname()[1]}/ws');"
            f"navigator.sendBeacon('{url}/beacon', 'x'); new Image().src = 'http://example.com/x.png';</script>"
            "</body></html>")
    try:
        start = time.monotonic()
        result = run(f"<answer>{page}</answer>", chromium)
        assert time.monotonic() - start < 10
        assert result.format == 1.0  # it rendered, just without anything from the network
        time.sleep(0.5)
        assert hits == []
    finally:
        stop.set()
        thread.join()
        server.close()


def test_infinite_js_loops_time_out_and_the_next_render_works(chromium):
    looping = run("<answer><html><body><script>while (true) {}</script></body></html></answer>", chromium,
                  render_timeout_s=1.0)
    assert (looping.accuracy, looping.format) == (0.0, 0.5)
    assert "did not load" in looping.details["reason"]
    later = run("<answer><html><body><h1>x</h1><script>setTimeout(() => { while (true) {} }, 0)</script>"
                "</body></html></answer>", chromium, render_timeout_s=1.0)
    assert later.accuracy == 0.0 and "unresponsive" in later.details["reason"]
    assert run(f"<answer>{REF}</answer>", chromium).accuracy == pytest.approx(1.0, abs=1e-6)


def test_thread_safe_through_the_dispatcher(chromium):
    results: list[float] = []

    def one() -> None:
        results.append(score(ScoreRequest(f"<answer>{REF}</answer>", REF, "webpage")).accuracy)

    threads = [threading.Thread(target=one) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [pytest.approx(1.0, abs=1e-6)] * 3


def test_bad_reference_and_missing_browser(chromium, tmp_path):
    with pytest.raises(GroundTruthError):
        run(f"<answer>{REF}</answer>", chromium, gt="just words")
    renderer = HtmlRenderer(str(tmp_path / "no-chromium"))
    with pytest.raises(RendererUnavailable):
        renderer.render("<p>x</p>")
    renderer.close()


def test_watchdog_kills_a_wedged_browser(chromium):
    """A job overrunning its limit gets its browser killed; the renderer relaunches."""
    renderer = HtmlRenderer(chromium)
    try:
        assert renderer.render("<p>warm</p>", timeout_s=2)
        renderer._busy = (time.monotonic() - 100, 1.0)  # pretend the current job is long overdue
        time.sleep(1.2)
        assert renderer._busy is None  # the watchdog acted and cleared it
        assert renderer.render("<p>again</p>", timeout_s=2)
        assert renderer.launches == 2
    finally:
        renderer.close()


def test_a_killed_playwright_driver_is_started_again(chromium):
    """Playwright's driver (a node process) killed from outside, as the OOM killer would: the
    next render starts a new driver and browser instead of failing every later job."""
    def drivers() -> list[psutil.Process]:
        return [child for child in psutil.Process().children() if "playwright/driver" in " ".join(child.cmdline())]

    others = {driver.pid for driver in drivers()}  # the module's shared renderer keeps its own
    renderer = HtmlRenderer(chromium)
    try:
        first = renderer.render(REF, timeout_s=5)
        drivers = [driver for driver in drivers() if driver.pid not in others]
        assert len(drivers) == 1, "this renderer's Playwright driver is a child of this process"
        for driver in drivers:
            driver.kill()
        psutil.wait_procs(drivers, timeout=30)
        assert renderer.render(REF, timeout_s=5) == first
        assert renderer.render("<p>and the next</p>", timeout_s=5)
    finally:
        renderer.close()


def test_text_without_markup_renders_but_is_not_valid_html(chromium):
    result = run("<answer>just some words</answer>", chromium)
    assert result.format == 0.5 and result.details["reason"] == "no HTML markup in the answer"

"""Headless-Chromium HTML renderer for the ``html-code`` reward: :func:`get_renderer`.

One browser per process, started lazily on a dedicated thread (Playwright's sync API is
bound to the thread that created it), restarted when it dies; a Playwright driver that died
(killed, out of memory) is started again once per job. :meth:`HtmlRenderer.render`
is thread-safe: callers submit jobs to that thread and wait for the result.

Each render gets a fresh browser context with a fixed viewport and no network:
the context is ``offline``, every request is routed to ``abort`` (``set_content`` writes
the page itself without a request, so nothing legitimate is lost), service workers are
blocked, and the browser resolves no host name (``--host-resolver-rules``), which also
stops the connections Chromium opens speculatively before routing sees a navigation.
JavaScript runs, under limits: loading (``set_content`` until ``load``), a responsiveness
probe after it (``wait_for_function``: a page whose script never yields fails here) and the
screenshot each have ``timeout_s``; the context is then closed, which kills a renderer
stuck in a loop. A watchdog kills the browser (by pid, found through a per-instance marker
switch) if one job ever overruns ``2 * timeout_s + 15`` s, so a wedged call cannot block
the queue forever.
"""

from __future__ import annotations

import atexit
import os
import queue
import signal
import threading
import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass, field

from easyvideor1.logging import event, get_logger

DEFAULT_CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
    "--host-resolver-rules=MAP * ~NOTFOUND", "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
    "--disable-dev-shm-usage",
)
MAX_HTML_CHARS = 1_000_000
_LOG = get_logger("rewards.html_renderer")


class HtmlRenderError(Exception):
    """The page could not be rendered (timeout, crash, browser missing); the message says why."""


class RendererUnavailable(HtmlRenderError):
    """The browser itself cannot be started: no page can be rendered here."""


class _DriverGone(RendererUnavailable):
    """Playwright's driver process ended (killed, out of memory): a new driver may still work."""


def _driver_gone(exc: Exception) -> bool:
    return "connection closed" in str(exc).lower()


@dataclass
class _Job:
    html: str
    width: int
    height: int
    timeout_s: float
    future: Future = field(default_factory=Future)


class HtmlRenderer:
    """Renders HTML to PNG screenshots in one headless Chromium (see the module docstring)."""

    def __init__(self, executable_path: str = DEFAULT_CHROMIUM, extra_args: tuple[str, ...] = ()):
        self.executable_path = executable_path
        self._marker = f"--evr1-renderer-id={uuid.uuid4().hex}"
        self._args = [*CHROMIUM_ARGS, *extra_args, self._marker]
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._busy: tuple[float, float] | None = None  # (started, limit) of the running job
        self._closed = False
        self._browser = None  # owned by the Playwright thread
        self._wedged = False  # set by the watchdog when it killed the browser over the running job
        self.launches = 0

    def render(self, html: str, *, width: int = 512, height: int = 384, timeout_s: float = 5.0) -> bytes:
        """PNG screenshot of ``html`` at ``width`` x ``height``; raises HtmlRenderError."""
        if len(html) > MAX_HTML_CHARS:
            raise HtmlRenderError(f"HTML longer than {MAX_HTML_CHARS} characters")
        job = _Job(html, int(width), int(height), float(timeout_s))
        with self._lock:
            if self._closed:
                raise HtmlRenderError("renderer is closed")
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="evr1-html-renderer", daemon=True)
                self._thread.start()
                threading.Thread(target=self._watchdog, name="evr1-html-watchdog", daemon=True).start()
            self._jobs.put(job)
        return job.future.result()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            thread = self._thread
            self._jobs.put(None)
        if thread is not None:
            thread.join(timeout=30)

    # ---- the Playwright thread -------------------------------------------------------------

    def _loop(self) -> None:
        from playwright.sync_api import Error as PlaywrightError
        from playwright.sync_api import sync_playwright

        try:
            playwright = sync_playwright().start()
        except Exception as exc:  # noqa: BLE001 - reported to every waiting job
            self._fail_all(RendererUnavailable(f"cannot start Playwright: {exc}"))
            return
        try:
            while True:
                job = self._jobs.get()
                if job is None:
                    return
                try:
                    try:
                        self._run_job(playwright, job)
                    except _DriverGone:  # start a new driver and browser, retry the job once
                        playwright = self._restart_driver(playwright, sync_playwright)
                        self._run_job(playwright, job)
                except HtmlRenderError as exc:
                    job.future.set_exception(exc)
                except PlaywrightError as exc:
                    job.future.set_exception(HtmlRenderError(f"browser error: {str(exc).splitlines()[0][:200]}"))
                except Exception as exc:  # noqa: BLE001 - one bad job must not end the thread
                    job.future.set_exception(HtmlRenderError(f"{type(exc).__name__}: {exc}"[:300]))
                finally:
                    self._busy = None
        finally:
            browser, self._browser = self._browser, None
            for closer in ((browser.close if browser is not None else None), playwright.stop):
                try:
                    if closer is not None:
                        closer()
                except Exception:  # noqa: BLE001, S110 - shutting down anyway
                    pass

    def _restart_driver(self, playwright, sync_playwright):
        event(_LOG, "html_renderer.driver_restart")
        self._browser = None
        try:
            playwright.stop()
        except Exception:  # noqa: BLE001, S110 - the old driver is gone already
            pass
        try:
            return sync_playwright().start()
        except Exception as exc:  # noqa: BLE001 - Playwright raises its own Error types
            raise RendererUnavailable(f"cannot restart Playwright: {exc}") from None

    def _run_job(self, playwright, job: _Job) -> None:
        """Render one job, (re)launching the browser when it is not running."""
        from playwright.sync_api import Error as PlaywrightError

        self._wedged = False
        for attempt in (0, 1):
            if self._browser is None or not self._browser.is_connected():
                self._browser = self._launch(playwright)
            self._busy = (time.monotonic(), 2 * job.timeout_s + 15.0)
            try:
                job.future.set_result(self._render_one(self._browser, job))
                return
            except PlaywrightError as exc:
                if _driver_gone(exc):
                    raise _DriverGone(str(exc).splitlines()[0][:200]) from None
                # A browser that died between jobs is noticed only now: relaunch and retry
                # once, unless the watchdog killed it because of this very job. One whose
                # driver died still reports itself connected, but its targets are closed.
                closed = "has been closed" in str(exc) or not self._browser.is_connected()
                if attempt == 1 or self._wedged or not closed:
                    raise
                self._browser = None

    def _launch(self, playwright):
        if not os.access(self.executable_path, os.X_OK):
            raise RendererUnavailable(f"Chromium not found at {self.executable_path}")
        self.launches += 1
        event(_LOG, "html_renderer.launch", executable=self.executable_path, launches=self.launches)
        try:
            return playwright.chromium.launch(executable_path=self.executable_path, args=self._args,
                                              headless=True, timeout=60_000)
        except Exception as exc:  # noqa: BLE001 - Playwright raises its own Error types
            kind = _DriverGone if _driver_gone(exc) else RendererUnavailable
            raise kind(f"cannot launch Chromium: {str(exc).splitlines()[0][:200]}") from None

    def _render_one(self, browser, job: _Job) -> bytes:
        from playwright.sync_api import TimeoutError as PlaywrightTimeout

        ms = max(1, int(job.timeout_s * 1000))
        context = browser.new_context(viewport={"width": job.width, "height": job.height}, offline=True,
                                      service_workers="block", device_scale_factor=1, accept_downloads=False)
        try:
            context.route("**/*", lambda route: route.abort())
            page = context.new_page()
            page.set_default_timeout(ms)
            try:
                page.set_content(job.html, timeout=ms, wait_until="load")
            except PlaywrightTimeout:
                raise HtmlRenderError(f"page did not load within {job.timeout_s:g}s (script never yields?)") from None
            try:
                page.wait_for_function("() => true", timeout=ms)  # the page's JS must yield
                return page.screenshot(timeout=ms, animations="disabled", type="png")
            except PlaywrightTimeout:
                raise HtmlRenderError(f"page unresponsive after load (JS busy > {job.timeout_s:g}s)") from None
        finally:
            context.close()

    # ---- safety nets -------------------------------------------------------------------------

    def _fail_all(self, exc: Exception) -> None:
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                return
            if job is not None:
                job.future.set_exception(exc)

    def _watchdog(self) -> None:
        thread = self._thread
        while thread is not None and thread.is_alive():
            busy = self._busy
            if busy is not None and time.monotonic() - busy[0] > busy[1]:
                self._wedged = True
                event(_LOG, "html_renderer.wedged", killed=self._kill_browser())
                self._busy = None
            time.sleep(0.5)

    def _kill_browser(self) -> list[int]:
        """SIGKILL the processes started with this instance's marker switch (ours only)."""
        killed = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as handle:
                    cmdline = handle.read()
            except OSError:
                continue
            if self._marker.encode() in cmdline:
                try:
                    os.kill(int(entry), signal.SIGKILL)
                    killed.append(int(entry))
                except ProcessLookupError:
                    pass
        return killed


_RENDERER: HtmlRenderer | None = None
_RENDERER_LOCK = threading.Lock()


def get_renderer(executable_path: str = DEFAULT_CHROMIUM) -> HtmlRenderer:
    """The process-wide renderer (created on first use)."""
    global _RENDERER
    with _RENDERER_LOCK:
        if _RENDERER is not None and not _RENDERER._closed and _RENDERER.executable_path != executable_path:
            _RENDERER.close()
        if _RENDERER is None or _RENDERER._closed:
            _RENDERER = HtmlRenderer(executable_path)
        return _RENDERER


@atexit.register
def _shutdown() -> None:
    if _RENDERER is not None and not _RENDERER._closed:
        _RENDERER.close()

"""What a test leaves running: the processes it started and the ports this process listens on.

``conftest.py`` snapshots before each test and checks after its teardown. Processes that
session- and module-scoped fixtures start (and what those processes start later, e.g. a Ray
raylet's workers) belong to the fixture, not to the test that happened to set it up. A started
process whose parent exited (``evr1 up``'s services outlive the command) is found by the
session marker every child inherits in its environment. Read from /proc: psutil's per-process
objects cost too much to do twice per test in a 2,000-test suite.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid

import pytest

MARKER = "EVR1_TEST_SESSION"
TOKEN = f"{MARKER}={uuid.uuid4().hex}".encode()
# Helpers that libraries and the rewards start once per process on first use and keep for its
# life (with what they start: Chromium under Playwright's driver): not a test's to stop.
SESSION_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver", "compile_worker",
                   "playwright/driver", "chrome_crashpad_handler", "code_svg import _worker_main")

Proc = tuple[int, int]  # (pid, start time in clock ticks): a pid alone may be reused


def snapshot() -> dict[Proc, tuple[int, bytes]]:
    """Every live process: (pid, start) -> (parent pid, state)."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                raw = f.read()
        except OSError:
            continue
        fields = raw[raw.rindex(b")") + 2:].split()
        out[(int(name), int(fields[19]))] = (int(fields[1]), fields[0])
    return out


def _read(pid: int, what: str) -> bytes:
    try:
        with open(f"/proc/{pid}/{what}", "rb") as f:
            return f.read()
    except OSError:
        return b""


def cmdline(pid: int) -> str:
    return _read(pid, "cmdline").replace(b"\0", b" ").decode(errors="replace").strip()


def _tree(snap: dict, root: int) -> set[int]:
    """The pids of ``root`` and its descendants in ``snap``."""
    children: dict[int, list[int]] = {}
    for (pid, _), (ppid, _) in snap.items():
        children.setdefault(ppid, []).append(pid)
    tree, todo = set(), [root]
    while todo:
        pid = todo.pop()
        tree.add(pid)
        todo.extend(children.get(pid, ()))
    return tree


def new_processes(before: dict, after: dict, owned: set[Proc]) -> list[Proc]:
    """Processes in ``after`` started since ``before`` by this process (directly, or by one it
    started, or orphaned by one it started), not by a fixture's process (``owned``) nor by a
    process of this session that was already running."""
    me = os.getpid()
    by_pid = {key[0]: key for key in after}
    session = _tree(before, me) | _tree(after, me)
    found = []
    for key, (_, state) in after.items():
        if key in before or key in owned or state == b"Z":
            continue
        top = key
        while True:  # up through the processes started since ``before``
            parent = by_pid.get(after[top][0])
            if parent is None or parent in before or parent in owned:
                break
            top = parent
        parent_pid = after[top][0]
        if parent_pid == me:
            ours = True
        elif parent_pid in session or by_pid.get(parent_pid) in owned:
            ours = False  # a fixture's (or an earlier) process started it
        else:  # its parent is outside this session: orphaned, ours if it carries our marker
            ours = TOKEN in _read(top[0], "environ").split(b"\0")
        helper = any(name in cmdline(pid) for pid in (key[0], top[0]) for name in SESSION_HELPERS)
        if ours and not helper:
            found.append(key)
    return found


# What fixtures built lazily, inside a test (``owned_by_fixture``): theirs, not that test's.
ADOPTED_PROCS: set[Proc] = set()
ADOPTED_PORTS: set[int] = set()


@contextlib.contextmanager
def owned_by_fixture():
    """The processes and listening ports the block starts belong to the session or module fixture
    that builds something on first use (an engine per model family), not to the test asking."""
    before, ports = snapshot(), listening_ports()
    try:
        yield
    finally:
        ADOPTED_PROCS.update(started_by(before, snapshot()))
        ADOPTED_PORTS.update(listening_ports() - ports)


def started_by(before: dict, after: dict) -> set[Proc]:
    """Everything started between two snapshots (a fixture's processes)."""
    return {key for key, (_, state) in after.items() if key not in before and state != b"Z"}


def wait_gone(procs: list[Proc], timeout: float) -> list[Proc]:
    """The processes still alive after up to ``timeout`` s (a process that is stopping may
    take a moment under load; only one still there after a minute is a leak)."""
    deadline = time.monotonic() + timeout
    while True:
        now = snapshot()
        alive = [p for p in procs if p in now and now[p][1] != b"Z"]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)


def kill(procs: list[Proc]) -> None:
    """Stop leaked processes (by pid, each one this session started) so the next test starts clean."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid, _ in procs:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
        procs = wait_gone(procs, 10)
        if not procs:
            return


def listening_ports() -> set[int]:
    """TCP ports this process itself listens on (a server thread a test left running)."""
    mine = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            link = os.readlink(f"/proc/self/fd/{fd}")
            if link.startswith("socket:["):
                mine.add(link[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                if cols[3] == "0A" and cols[9] in mine:  # 0A: LISTEN
                    ports.add(int(cols[1].rsplit(":", 1)[1], 16))
    return ports


class LeakCheck:
    """Fail the test that leaves a process or a listening port behind (and stop what it left,
    so the next test starts clean): tests that start services release them."""

    def __init__(self) -> None:
        self.fixture_procs = ADOPTED_PROCS  # started by session/module fixtures: theirs, not a test's
        self.fixture_ports = ADOPTED_PORTS
        self.before = pytest.StashKey[tuple]()
        # A process being stopped may take this long under load before it counts as leaked.
        self.budget_s = float(os.environ.get("EVR1_LEAK_BUDGET_S", 60))

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(self, fixturedef, request):
        if fixturedef.scope == "function":
            return (yield)
        before, ports = snapshot(), listening_ports()
        try:
            return (yield)
        finally:
            self.fixture_procs.update(started_by(before, snapshot()))
            self.fixture_ports.update(listening_ports() - ports)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(self, item):
        item.stash[self.before] = (snapshot(), listening_ports())
        return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item, nextitem):
        result = yield
        before, ports = item.stash.get(self.before, (None, None))
        if before is None:
            return result
        if item.get_closest_marker("restarts_fixture_services"):
            # What the test started again (a killed Redis, reward service, worker) is the module
            # fixture's now: it stops those at its own teardown.
            self.fixture_procs.update(new_processes(before, snapshot(), self.fixture_procs))
            self.fixture_ports.update(listening_ports() - ports)
            return result
        left = new_processes(before, snapshot(), self.fixture_procs)
        left = wait_gone(left, self.budget_s) if left else []
        open_ports = listening_ports() - ports - self.fixture_ports
        if left:
            names = [f"pid {pid}: {cmdline(pid)[:200]}" for pid, _ in left]
            kill(left)
            pytest.fail("the test left processes running (stopped now):\n  " + "\n  ".join(names), pytrace=False)
        if open_ports:
            pytest.fail(f"the test left this process listening on port(s) {sorted(open_ports)}", pytrace=False)
        return result

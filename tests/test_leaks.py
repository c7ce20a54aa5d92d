"""The session's leak check (conftest.py, leaks.py) fails the test that leaves a process or a
listening port behind, and only that test: a module fixture's process is the fixture's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = '''
import socket, subprocess, sys
import pytest

SLEEP = [sys.executable, "-c", "import time; time.sleep(600)"]

@pytest.fixture(scope="module")
def shared():
    proc = subprocess.Popen(SLEEP)
    yield proc
    proc.kill()
    proc.wait()

def test_uses_the_module_fixture(shared):
    assert shared.poll() is None

def test_leaks_a_child():
    subprocess.Popen(SLEEP)

def test_leaks_an_orphan():
    subprocess.run(["bash", "-c", "setsid sleep 600 >/dev/null 2>&1 &"], check=True)

def test_leaks_a_port():
    test_leaks_a_port.held = socket.create_server(("127.0.0.1", 0))

def test_stops_what_it_starts():
    proc = subprocess.Popen(SLEEP)
    proc.kill()
    proc.wait()

@pytest.mark.restarts_fixture_services
def test_restarts_the_fixtures_service(shared):
    shared.kill()
    shared.wait()
    restarted = subprocess.Popen(SLEEP)
    shared.kill = restarted.kill  # the fixture stops what now stands in for its process
    shared.wait = restarted.wait

def test_after(shared):
    pass
'''


def test_a_leak_fails_the_test_that_leaked_it(tmp_path):
    (tmp_path / "test_cases.py").write_text(TESTS)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parent), EVR1_LEAK_BUDGET_S="2")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-p", "no:cacheprovider", "-rE",
                          "--rootdir", str(tmp_path), str(tmp_path / "test_cases.py")],
                         capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    errors = [line for line in run.stdout.splitlines() if line.startswith("ERROR ")]
    assert [e.split("::")[1].split(" ")[0] for e in errors] == [
        "test_leaks_a_child", "test_leaks_an_orphan", "test_leaks_a_port"], run.stdout[-4000:]
    assert "7 passed, 3 errors" in run.stdout
    assert "time.sleep(600)" in run.stdout and "sleep 600" in run.stdout  # the leaked processes, named
    assert "left this process listening on port" in run.stdout

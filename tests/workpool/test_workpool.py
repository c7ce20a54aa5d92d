"""The shared worker pool with real processes: per-item kill and replacement, crashes, start-up
failures, per-item errors, process groups, dying with the parent, and idle workers at 0 CPU."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import workpool_handlers as h

from easyvideor1.workpool import WorkerPool, WorkerSpec, WorkerStartError

NAME = "evr1-test-pool"
LIMIT = 2.0  # per-item limit of the jobs that must time out; everything else finishes far below it


def _spec(init=h.init, *args, **fields) -> WorkerSpec:
    return WorkerSpec(init, h.handle, args or ("t",), name=NAME, **fields)


@pytest.fixture()
def pool():
    with WorkerPool(_spec(), 2) as p:
        p.start()
        yield p


def _alive(pid: int) -> bool:
    try:  # a zombie waiting to be reaped is not alive
        return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False


def _eventually(check, what: str, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout}s: {what}")


def _stat(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def test_workers_lead_their_own_named_group(pool):
    for pid in pool.pids():
        assert os.getpgid(pid) == pid  # a group kill takes only this worker and its children
        assert Path(f"/proc/{pid}/comm").read_text().strip() == NAME
    results = pool.run_job([{"x": 1}, {"x": 2}], LIMIT, context={"job": 7})
    assert [r.value["echo"] for r in results] == [1, 2]
    assert results[0].value["context"] == {"job": 7} and results[0].value["tag"] == "t"
    assert all(r.kind is None and r.seconds is not None for r in results)


def test_an_item_past_its_limit_kills_its_worker_group_and_the_rest_is_done(pool, tmp_path):
    before = pool.pids()
    pidfile = tmp_path / "grandchild.pid"
    items = [{"x": 0}, {"do": "spawn", "pidfile": str(pidfile)}, {"x": 2}, {"x": 3}]
    results = pool.run_job(items, LIMIT)
    hung = results[1]
    assert hung.kind == "timeout" and hung.error == f"timeout after {LIMIT:g}s" and hung.exit_code == -9
    assert hung.pid in before and not _alive(hung.pid)
    grandchild = int(pidfile.read_text())
    _eventually(lambda: not _alive(grandchild), "the worker's child died with its group", 5)
    assert [r.value["echo"] for r in (results[0], results[2], results[3])] == [0, 2, 3]
    after = _eventually(lambda: pool.live == 2 and pool.pids(), "the pool is back to 2 workers")
    assert hung.pid not in after and len(set(after) - set(before)) == 1  # replaced, the other one kept
    assert pool.restarts == 1
    assert pool.run_job([{"x": 9}], LIMIT)[0].value["echo"] == 9


def test_a_crashing_worker_costs_its_item_only(pool):
    results = pool.run_job([{"x": 0}, {"do": "crash"}, {"x": 2}], LIMIT)
    crash = results[1]
    assert crash.kind == "worker_crash" and crash.exit_code == 3
    assert crash.error == "worker crashed (exit code 3)"
    assert "dying on purpose" in crash.output  # what it printed before it died
    assert [results[0].value["echo"], results[2].value["echo"]] == [0, 2]
    _eventually(lambda: pool.live == 2, "the crashed worker was replaced")


def test_a_raising_item_gets_an_error_and_keeps_its_worker(pool):
    before = pool.pids()
    results = pool.run_job([{"x": 0}, {"do": "raise"}, {"x": 2}], LIMIT)
    assert results[1].kind == "error" and results[1].error == "ValueError: bad item"
    assert [r.kind for r in results] == [None, "error", None]
    assert pool.pids() == before and pool.restarts == 0


def test_several_jobs_and_each(pool):
    jobs = [[{"x": i}, {"x": i + 100}] for i in range(5)]
    out = pool.run_jobs(jobs, LIMIT)
    assert [[r.value["echo"] for r in job] for job in out] == [[i, i + 100] for i in range(5)]
    done = dict(pool.each([{"x": i} for i in range(6)] + [{"do": "crash"}], LIMIT))
    assert sorted(done) == list(range(7))
    assert [done[i].value["echo"] for i in range(6)] == list(range(6)) and done[6].kind == "worker_crash"


def test_workers_see_the_environment_of_their_start(monkeypatch):
    monkeypatch.setenv("EVR1_TEST_POOL_ENV", "now")  # the forkserver may have started before this
    with WorkerPool(_spec(), 1) as p:
        assert p.run_job([{"do": "env", "name": "EVR1_TEST_POOL_ENV"}], LIMIT)[0].value["value"] == "now"


def test_start_up_failure_names_the_exception_and_the_output():
    with WorkerPool(_spec(h.init_fails, "no database"), 2) as p:
        with pytest.raises(WorkerStartError) as err:
            p.start()
    message = str(err.value)
    assert "worker failed to start" in message and "RuntimeError: no database" in message
    assert "about to fail: no database" in message  # its stderr
    with WorkerPool(_spec(h.init_exits, 7), 1) as p:
        with pytest.raises(WorkerStartError, match=r"exited during start-up \(exit code 7\)") as err:
            p.run_job([{"x": 1}], LIMIT)  # the first job starts the pool
    assert "exiting during start-up" in str(err.value)


def test_close_stops_every_worker():
    p = WorkerPool(_spec(), 2)
    p.start()
    pids = p.pids()
    p.close()
    assert p.live == 0 and not any(_alive(pid) for pid in pids)
    assert p.run_job([{"x": 1}], LIMIT)[0].kind == "internal"  # a closed pool answers, it does not hang


def test_idle_workers_use_no_cpu(pool):
    pool.run_job([{"x": 1}], LIMIT)  # warm: they have done work and are idle again
    time.sleep(0.2)
    before = {pid: _stat(pid) for pid in pool.pids()}
    time.sleep(1.5)
    for pid, old in before.items():
        new = _stat(pid)
        assert new[0] == "S", f"idle worker {pid} is not asleep: {new[0]}"
        ticks = sum(int(new[i]) - int(old[i]) for i in (11, 12))  # utime + stime, clock ticks
        assert ticks <= 1, f"idle worker {pid} used {ticks} clock ticks of CPU in 1.5 s"


_PARENT = """
import sys, threading, time
sys.path.insert(0, {tests!r})
import workpool_handlers as h
from easyvideor1.workpool import WorkerPool, WorkerSpec

if __name__ == "__main__":
    pool = WorkerPool(WorkerSpec(h.init, h.handle, ("t",), name="evr1-test-pool"), 2)
    pool.start()
    # One worker busy (not reading its pipe), one idle.
    threading.Thread(target=pool.run_job, args=([{{"do": "sleep", "s": 600}}], None), daemon=True).start()
    time.sleep(0.5)
    print(" ".join(map(str, pool.pids())), flush=True)
    time.sleep(600)
"""


def test_workers_die_with_their_parent(tmp_path):
    script = tmp_path / "parent.py"
    script.write_text(_PARENT.format(tests=str(Path(h.__file__).parent)))
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    pids: list[int] = []
    try:
        pids = [int(p) for p in parent.stdout.readline().split()]
        assert len(pids) == 2 and all(_alive(pid) for pid in pids)
        parent.kill()  # SIGKILL by the pid this test started: no clean-up code runs in it
        parent.wait()
        _eventually(lambda: not any(_alive(pid) for pid in pids), "workers died with their parent")
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        for pid in pids:  # on failure, leave nothing behind: these are the workers it started
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_forked_child_gets_workers_of_its_own(pool):
    assert pool.run_job([{"x": 1}], LIMIT)[0].kind is None  # the forkserver runs in this process
    pid = os.fork()
    if pid == 0:  # the child: the parent's pool is not its own, a new one works
        code = 1
        try:
            with pytest.raises(WorkerStartError, match="belongs to process"):
                pool.run_job([{"x": 1}], LIMIT)
            with WorkerPool(_spec(), 1) as mine:
                code = 0 if mine.run_job([{"x": 5}], LIMIT)[0].value["echo"] == 5 else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0

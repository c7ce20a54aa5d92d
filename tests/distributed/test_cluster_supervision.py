"""The supervisor of `evr1 up` (issue #33 item 2): a service killed with SIGKILL is restarted on
its port with its data (Redis from its append-only file), cluster.json and `evr1 status` count
the restarts, the Ray head is reported rather than restarted, a service that keeps failing is
given up on with the reason, and `evr1 down` stops the supervisor before the services.
One cluster for the file (a start costs about a minute); the tests run in file order."""

from __future__ import annotations

import json
import os
import signal
import sys

import httpx
import pytest
import redis
from dist_helpers import DOWN_TIMEOUT_S, UP_TIMEOUT_S, assert_all_stopped, evr1, user_env, wait_for

from easyvideor1.cli import supervise
from easyvideor1.cli._procs import alive, free_port, spawn, start_time

RESTART_BUDGET_S = 300  # a hang's budget: a restart takes seconds on a quiet machine


def _state(root):
    return json.loads((root / "cluster.json").read_text())


def _kill(record):
    assert alive(record["pid"], record["start"])
    os.kill(record["pid"], signal.SIGKILL)


def _restarted(root, name, count):
    """The service's record once its restart number ``count`` is alive (None before)."""
    record = _state(root)["services"][name]
    return record if record.get("restarts", 0) >= count and alive(record["pid"], record["start"]) else None


def _ready(url):
    try:
        return httpx.get(url, timeout=5).status_code == 200
    except httpx.HTTPError:  # not listening yet
        return False


def _log_with(root, text):
    log = (root / "logs" / "supervisor.log").read_text()
    return log if text in log else None


def test_a_service_that_keeps_failing_is_given_up_with_the_reason(tmp_path):
    """No cluster needed: a cluster.json whose reward service exits at once, every time."""
    logs = tmp_path / "logs"
    argv = [sys.executable, "-c", "import sys; print('ValueError: no reward today', flush=True); sys.exit(3)"]
    first = spawn(argv, log_path=logs / "reward.log", env=dict(os.environ))
    wait_for(lambda: not alive(first["pid"], first["start"]), 120, "the first reward process to exit")
    port = free_port()
    state = {"version": 1, "state": "up", "dir": str(tmp_path), "services": {
        "reward": {**first, "port": port, "url": f"http://127.0.0.1:{port}"}}}
    (tmp_path / "cluster.json").write_text(json.dumps(state))
    state["supervisor"] = spawn([sys.executable, "-m", "easyvideor1.cli.supervise", "--dir", str(tmp_path),
                                 "--backoff-s", "0.1", "--backoff-max-s", "0.5", "--max-failures", "3",
                                 "--interval-s", "0.2"], log_path=logs / "supervisor.log", env=dict(os.environ))
    try:
        record = wait_for(lambda: _state(tmp_path)["services"]["reward"].get("down"), RESTART_BUDGET_S,
                          "the supervisor to give up")
    finally:
        after = supervise.stop(tmp_path, state, grace=30)
    assert not alive(state["supervisor"]["pid"], state["supervisor"]["start"])
    assert after["state"] == "stopping"
    reward = after["services"]["reward"]
    assert reward["restarts"] == 3 and record.startswith("gave up after 3 quick failures in a row")
    log = (logs / "supervisor.log").read_text()
    assert "reward exited with code 3 before it was ready" in log  # the supervisor's own child: its status
    assert "ValueError: no reward today" in log  # the root cause, from the service's log
    assert "reward: restarting in 0.1s" in log and "reward: restarting in 0.4s" in log  # backoff doubles
    assert "stopping: the cluster is being stopped" in log


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, tiny_model_dir):
    root = tmp_path_factory.mktemp("supervised") / ".evr1"
    env = user_env()
    up = evr1("up", "--dir", root, "--model", tiny_model_dir, "--namespace", "supervised", "--ray-cpus", "4",
              "--timeout", UP_TIMEOUT_S - 60, env=env)
    try:
        assert up.returncode == 0, f"evr1 up failed:\n{up.stdout[-2000:]}\n{up.stderr[-6000:]}"
        yield root, env
    finally:
        if (root / "cluster.json").exists() and _state(root).get("state") != "down":
            evr1("down", "--dir", root, env=env, timeout=DOWN_TIMEOUT_S)


@pytest.mark.slow
@pytest.mark.timeout(UP_TIMEOUT_S + 120)
def test_up_starts_the_supervisor(cluster):
    root, env = cluster
    state = _state(root)
    watcher = state["supervisor"]
    assert alive(watcher["pid"], watcher["start"]) and watcher["log"] == str(root / "logs" / "supervisor.log")
    status = evr1("status", "--dir", root, "--json", env=env, timeout=120)
    report = json.loads(status.stdout)
    assert status.returncode == 0 and report["healthy"] and report["supervisor"]["alive"], status.stdout
    assert all(row["restarts"] == 0 for row in report["services"])


@pytest.mark.slow
@pytest.mark.timeout(RESTART_BUDGET_S + 120)
def test_a_killed_reward_service_comes_back_on_its_port(cluster):
    root, env = cluster
    before = _state(root)["services"]["reward"]
    _kill(before)
    record = wait_for(lambda: _restarted(root, "reward", 1), RESTART_BUDGET_S, "the reward service's restart")
    assert record["pid"] != before["pid"] and record["port"] == before["port"] and record["restarts"] == 1
    assert record["start"] == start_time(record["pid"])  # the record names the new process exactly
    wait_for(lambda: _ready(f"{before['url']}/readyz"), RESTART_BUDGET_S, "the reward service ready")
    assert alive(record["pid"], record["start"])  # the restart answers, not some other process
    shown = evr1("status", "--dir", root, env=env, timeout=120)
    line = next(x for x in shown.stdout.splitlines() if x.strip().startswith("reward"))
    assert "healthy" in line and "restarts 1 (last " in line, shown.stdout
    # the supervisor's own look at /readyz may come a second after the test's
    log = wait_for(lambda: _log_with(root, "reward is back"), RESTART_BUDGET_S, "the supervisor's word")
    assert f"reward exited (pid {before['pid']})" in log and "reward: restarting in 1s" in log


@pytest.mark.slow
@pytest.mark.timeout(RESTART_BUDGET_S + 120)
def test_a_killed_redis_comes_back_with_its_data(cluster):
    root, _ = cluster
    before = _state(root)["services"]["redis"]
    client = redis.Redis.from_url(before["url"])
    # fsync each write before the reply: the key is on disk when SET returns (the cluster's default,
    # everysec, is the usual trade-off; this restart is the config's, so it goes back to it)
    client.config_set("appendfsync", "always")
    client.set("supervision-test", "kept")
    client.close()
    _kill(before)
    record = wait_for(lambda: _restarted(root, "redis", 1), RESTART_BUDGET_S, "Redis's restart")
    assert record["port"] == before["port"] and record["argv"] == before["argv"]  # same --dir, AOF on

    def value():
        with redis.Redis.from_url(before["url"], socket_timeout=5) as again:
            try:
                return again.get("supervision-test")
            except redis.ConnectionError:  # still loading its append-only file
                return None
    assert wait_for(value, RESTART_BUDGET_S, "the key after the restart") == b"kept"


@pytest.mark.slow
@pytest.mark.timeout(RESTART_BUDGET_S + 120)
def test_a_dead_ray_head_is_reported_not_restarted(cluster):
    root, env = cluster
    before = _state(root)["services"]["ray"]
    _kill(before)  # `ray start --block`: the leader of the head's session
    reason = wait_for(lambda: _state(root)["services"]["ray"].get("down"), RESTART_BUDGET_S, "the ray report")
    assert "not restarted" in reason and "evr1 down" in reason
    assert _state(root)["services"]["ray"]["pid"] == before["pid"]
    shown = evr1("status", "--dir", root, env=env, timeout=120)
    assert shown.returncode == 1 and "not restarted: the Ray head is not restarted" in shown.stdout, shown.stdout


@pytest.mark.slow
@pytest.mark.timeout(DOWN_TIMEOUT_S + 120)
def test_down_stops_the_supervisor_first_and_everything(cluster):
    root, env = cluster
    restarted = {name: _state(root)["services"][name] for name in ("reward", "redis")}
    down = evr1("down", "--dir", root, env=env, timeout=DOWN_TIMEOUT_S)
    assert down.returncode == 0, down.stderr[-3000:]
    assert_all_stopped(root)  # the supervisor included, and the restarted services by their new pids
    assert all(not alive(r["pid"], r["start"]) for r in restarted.values())
    assert "stopping: the cluster is being stopped" in (root / "logs" / "supervisor.log").read_text()

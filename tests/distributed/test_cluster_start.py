"""`evr1 up` as a new user meets it: no Makefile environment, and failures that name their root
cause (the replica's exception, the port in use, the missing binary) with the logs kept and
nothing left running. A start with RAM held by another process is in test_dist_cluster.py, on
the cluster the tests of a running cluster share."""

from __future__ import annotations

import os
import re
import socket
import sys
from pathlib import Path

import pytest
from dist_helpers import UP_TIMEOUT_S, assert_all_stopped, evr1, user_env

from easyvideor1.cli._procs import cli_error, root_cause_lines, spawn, stop_session
from easyvideor1.cli.cluster import ServiceFailed, _wait, failure_report


@pytest.mark.slow
@pytest.mark.timeout(2 * UP_TIMEOUT_S)
def test_engine_that_cannot_start_is_reported_with_the_replica_error(tmp_path, tiny_model_dir):
    """Owns its cluster: one that fails to start (the shared one of test_dist_cluster.py is up).
    The start's budget is a hang's, not the time Serve's retries of the replica take under load:
    with too short a one the pool was still retrying when `evr1 up` gave up, another report."""
    cluster = tmp_path / ".evr1"
    up = evr1("up", "--dir", cluster, "--model", tiny_model_dir, "--ray-cpus", "4", "--timeout", UP_TIMEOUT_S - 60,
              "--kv-cache-gib", "4096", env=user_env())
    assert up.returncode == 1, up.stderr[-4000:]
    err = up.stderr
    assert "rollout pool exited before it was ready" in err
    # vLLM's CPU worker's own exception, not just Serve's "Failed to update the deployments": first
    # as `evr1 serve rollout` itself reported it (from serve.status()), in its log's part of the report.
    own = err.split("from Ray's log")[0]
    assert "Failed to update the deployments ['RolloutEngine']" in own
    assert "deployment RolloutEngine: DEPLOY_FAILED" in own
    assert re.search(r"ValueError: Available memory on node \d+ .* requested memory for kv \(4096\.0 GiB\)", own), err
    assert "--kv-cache-gib" in err  # the hint names the knob
    kept = re.search(r"Ray's session logs kept: (\S+)", err)
    assert kept and Path(kept.group(1)).is_dir(), err
    traceback_log = re.search(r"from Ray's log (\S+)", err)
    assert traceback_log and "ValueError" in Path(traceback_log.group(1)).read_text(errors="replace")
    assert list(Path(kept.group(1)).glob("serve/replica_rollout_RolloutEngine_*.log"))
    assert "stopped everything it had started" in err
    assert_all_stopped(cluster)


def test_a_taken_port_is_named_before_anything_starts(tmp_path):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        up = evr1("up", "--dir", tmp_path / ".evr1", "--reward-port", port, env=user_env(), timeout=120)
    assert up.returncode == 1
    assert f"port {port} (--reward-port) is already in use by pid {os.getpid()}" in up.stderr, up.stderr
    assert "nothing was started" in up.stderr
    assert not (tmp_path / ".evr1" / "cluster.json").exists()


def test_a_service_that_loses_its_port_says_so(tmp_path):
    """The race the check above cannot cover: the port is taken when the service binds it."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        record = spawn([sys.executable, "-m", "easyvideor1.cli.main", "serve", "reward", "--port", str(port)],
                       log_path=tmp_path / "logs" / "reward.log", env=user_env())
        record["port"] = port
        try:
            with pytest.raises(ServiceFailed) as failed:
                _wait("reward service", "reward", record, lambda: False, timeout=120)
        finally:
            assert stop_session(record, grace=5) == []
    report = failure_report(failed.value, tmp_path, "stopped")
    assert "reward service exited before it was ready" in report
    assert f"port {port} of the reward service is already in use by pid {os.getpid()}" in report, report
    assert "address already in use" in report  # the service's own line


def test_a_missing_binary_is_named_with_how_to_install_it(tmp_path):
    bare = tmp_path / "bin"  # a PATH without redis-server (Ray and weed are beside this Python)
    bare.mkdir()
    up = evr1("up", "--dir", tmp_path / ".evr1", env=user_env(PATH=str(bare)), timeout=120)
    assert up.returncode == 1
    assert "redis-server not found" in up.stderr and "apt-get install redis-server" in up.stderr, up.stderr
    assert "weed not found" not in up.stderr and "ray not found" not in up.stderr
    assert not (tmp_path / ".evr1" / "cluster.json").exists()


def test_root_cause_lines_are_the_exceptions_once():
    log = """INFO starting
(Worker pid=7) ERROR 12-01 19:49:36 [multiproc_executor.py:1063] Traceback (most recent call last):
(Worker pid=7) ERROR 12-01 19:49:36 [multiproc_executor.py:1063]     raise ValueError(
(Worker pid=7) ERROR 12-01 19:49:36 [multiproc_executor.py:1063] ValueError: Available memory (7.97 GiB) is less
(Worker pid=9) ERROR 12-01 19:49:51 [multiproc_executor.py:1063] ValueError: Available memory (8.10 GiB) is less
ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 8000): address already in use
ray.exceptions.ActorDiedError: The actor died because of an error raised in its creation task
"""
    assert root_cause_lines(log) == [
        "ValueError: Available memory (8.10 GiB) is less",  # the last of the retries, once
        "ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 8000): address already in use",
        "ray.exceptions.ActorDiedError: The actor died because of an error raised in its creation task"]
    assert cli_error("INFO x\nevr1: error: deploy failed\ndeployment X: DEPLOY_FAILED\n") == [
        "evr1: error: deploy failed", "deployment X: DEPLOY_FAILED"]
    assert cli_error("all fine\n") == []

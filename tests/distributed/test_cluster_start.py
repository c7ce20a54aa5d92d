"""`evr1 up` as a new user meets it: no Makefile environment, other processes holding RAM, and
failures that name their root cause (the replica's exception, the port in use, the missing
binary) with the logs kept and nothing left running."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml

from easyvideor1.cli._procs import alive, cli_error, root_cause_lines, session_tree, spawn, stop_session
from easyvideor1.cli.cluster import ServiceFailed, _wait, failure_report

BIN = Path(sys.executable).parent
# What the Makefile exports for the tests; a user's shell has none of it.
MAKEFILE_ENV = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "VLLM_CPU_KVCACHE_SPACE", "VLLM_ENABLE_V1_MULTIPROCESSING",
                "RAY_USAGE_STATS_ENABLED", "TOKENIZERS_PARALLELISM")
HOG = r"""
import sys
block = bytearray(int(sys.argv[1]))
for i in range(0, len(block), 4096):  # touch every page: resident, not just reserved
    block[i] = 1
print("held", flush=True)
sys.stdin.read()
"""


def _user_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in MAKEFILE_ENV}
    env.update(extra)
    return env


def _evr1(*argv: object, env: dict, timeout: float = 480) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "evr1"), *map(str, argv)], capture_output=True, text=True, timeout=timeout,
                          env=env)


def _assert_all_stopped(cluster: Path) -> None:
    state = json.loads((cluster / "cluster.json").read_text())
    assert state["state"] == "down"
    for name, record in state["services"].items():
        assert not alive(record["pid"], record["start"]), f"{name} (pid {record['pid']}) still alive"
        assert session_tree(record["pid"]) == [], f"processes of {name} still alive"
    assert not Path(state["services"]["ray"]["temp_dir"]).exists()  # Ray's temp dir went, its logs were kept


@pytest.fixture()
def memory_hog():
    """A process holding 3 GiB of touched RAM while the test runs."""
    proc = subprocess.Popen([sys.executable, "-c", HOG, str(3 << 30)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=30)


@pytest.mark.slow
def test_up_without_makefile_env_while_ram_is_held(tmp_path, tiny_model_dir, memory_hog):
    cluster = tmp_path / ".evr1"
    env = _user_env()  # and PATH as the user has it: Ray and weed are found beside this Python
    up = _evr1("up", "--dir", cluster, "--model", tiny_model_dir, "--ray-cpus", "4", "--timeout", "300", env=env)
    try:
        assert up.returncode == 0, f"evr1 up failed:\n{up.stdout[-2000:]}\n{up.stderr[-6000:]}"
        state = json.loads((cluster / "cluster.json").read_text())
        run = yaml.safe_load((cluster / "run.yaml").read_text())  # every service started from this file
        assert run["worker"]["rollout"]["kv_cache_gib"] == 1.0
        assert run["worker"]["actor"]["model_path"] == str(Path(tiny_model_dir).resolve())
        assert run["serve"]["reward"]["port"] == state["services"]["reward"]["port"]
        assert all(record["argv"][-2:] == ["--config", str(cluster / "run.yaml")]
                   for name, record in state["services"].items() if name in ("frame_cache", "reward", "rollout"))
        replica = httpx.get(f"{state['defaults']['rollout_url']}/status", timeout=10).json()
        assert replica["healthy"]
    finally:
        down = _evr1("down", "--dir", cluster, env=env, timeout=180)
    assert down.returncode == 0, down.stderr[-3000:]
    _assert_all_stopped(cluster)
    # The replica's vLLM took the configured 1 GiB, not a share of the host's RAM (its log, kept).
    outs = "".join(p.read_text(errors="replace") for p in (cluster / "logs" / "ray").glob("worker-*.out"))
    assert "Explicitly set (1.0/" in outs


@pytest.mark.slow
def test_engine_that_cannot_start_is_reported_with_the_replica_error(tmp_path, tiny_model_dir):
    cluster = tmp_path / ".evr1"
    up = _evr1("up", "--dir", cluster, "--model", tiny_model_dir, "--ray-cpus", "4", "--timeout", "300",
               "--kv-cache-gib", "4096", env=_user_env())
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
    _assert_all_stopped(cluster)


def test_a_taken_port_is_named_before_anything_starts(tmp_path):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        up = _evr1("up", "--dir", tmp_path / ".evr1", "--reward-port", port, env=_user_env(), timeout=120)
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
                       log_path=tmp_path / "logs" / "reward.log", env=_user_env())
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
    up = _evr1("up", "--dir", tmp_path / ".evr1", env=_user_env(PATH=str(bare)), timeout=120)
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

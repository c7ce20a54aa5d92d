"""One local cluster (``evr1 up``, started as a user starts it) shared by the tests of a running
cluster: its configuration, its network (loopback only), the trainer as a Ray job (two FSDP
ranks as Ray actors, rollouts from the Ray Serve pool), then ``evr1 down`` with nothing left
running. The tests run in file order; the last one stops the cluster (the fixture stops it too
when that test did not run)."""

from __future__ import annotations

import ipaddress
import json
import subprocess
import sys
from pathlib import Path

import httpx
import psutil
import pytest
import yaml
from dist_helpers import (
    BIN,
    DOWN_TIMEOUT_S,
    UP_TIMEOUT_S,
    assert_all_stopped,
    evr1,
    make_data,
    run_overrides,
    user_env,
)

from easyvideor1.cli._procs import session_tree
from easyvideor1.config import dump_config, load_config

# A module's worth of work on one cluster: each test's budget covers a start on a loaded machine.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(2 * UP_TIMEOUT_S)]
HOG = r"""
import sys
block = bytearray(int(sys.argv[1]))
for i in range(0, len(block), 4096):  # touch every page: resident, not just reserved
    block[i] = 1
print("held", flush=True)
sys.stdin.read()
"""


def _run(argv: list, timeout: float, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, tiny_model_dir):
    """`evr1 up` without the Makefile's environment (PATH as the user has it: Ray and weed are
    found beside this Python), while another process holds 3 GiB of touched RAM: the replica's
    vLLM must take the configured KV cache, not a share of what is free."""
    root = tmp_path_factory.mktemp("cluster") / ".evr1"
    env = user_env()
    hog = subprocess.Popen([sys.executable, "-c", HOG, str(3 << 30)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           text=True)
    try:
        assert hog.stdout.readline().strip() == "held"
        up = evr1("up", "--dir", root, "--model", tiny_model_dir, "--namespace", "clustertest", "--ray-cpus", "4",
                  "--timeout", UP_TIMEOUT_S - 60, env=env)
    finally:
        hog.kill()
        hog.wait(timeout=60)
    try:
        assert up.returncode == 0, f"evr1 up failed:\n{up.stdout[-2000:]}\n{up.stderr[-6000:]}"
        yield root, env
    finally:
        state = json.loads((root / "cluster.json").read_text()) if (root / "cluster.json").exists() else {}
        if state.get("state") != "down":
            evr1("down", "--dir", root, env=env, timeout=DOWN_TIMEOUT_S)


def test_up_without_makefile_env_while_ram_is_held(cluster, tiny_model_dir):
    root, env = cluster
    state = json.loads((root / "cluster.json").read_text())
    assert state["state"] == "up"
    assert set(state["services"]) == {"redis", "s3", "ray", "frame_cache", "reward", "rollout"}
    assert (root / "cluster.json").stat().st_mode & 0o777 == 0o600  # it holds the S3 keys
    run = yaml.safe_load((root / "run.yaml").read_text())  # every service started from this file
    assert run["worker"]["rollout"]["kv_cache_gib"] == 1.0
    assert run["worker"]["actor"]["model_path"] == str(Path(tiny_model_dir).resolve())
    assert run["serve"]["reward"]["port"] == state["services"]["reward"]["port"]
    assert all(record["argv"][-2:] == ["--config", str(root / "run.yaml")]
               for name, record in state["services"].items() if name in ("frame_cache", "reward", "rollout"))
    again = evr1("up", "--dir", root, env=env, timeout=120)
    assert again.returncode == 1 and "still running" in again.stderr  # never two clusters on one state file
    status = evr1("status", "--dir", root, "--json", env=env, timeout=120)
    assert status.returncode == 0 and json.loads(status.stdout)["healthy"] is True
    replica = httpx.get(f"{state['defaults']['rollout_url']}/status", timeout=30).json()  # the Serve route
    assert replica["healthy"] and replica["engine_version"] == 0


def _on_loopback(ip: str) -> bool:
    addr = ipaddress.ip_address(ip.split("%")[0])
    addr = getattr(addr, "ipv4_mapped", None) or addr
    return addr.is_loopback


def test_the_cluster_talks_over_loopback_only(cluster):
    """Every TCP connection of every process of the cluster (Ray's GCS, raylet, dashboard and its
    agent, workers, the Serve proxy and replica, Redis, SeaweedFS, the services) has a peer in
    127.0.0.0/8, and no server listens on a non-loopback address of its own choosing."""
    root, _ = cluster
    state = json.loads((root / "cluster.json").read_text())
    pids = {pid for record in state["services"].values() for pid, _ in session_tree(record["pid"])}
    assert len(pids) > len(state["services"])  # the trees, not just their leaders
    outside, checked = [], 0
    for pid in sorted(pids):
        try:
            proc = psutil.Process(pid)
            conns = proc.net_connections(kind="tcp")
            name = proc.name()
        except psutil.NoSuchProcess:
            continue
        for conn in conns:
            if conn.status == psutil.CONN_ESTABLISHED:
                checked += 1
                if not _on_loopback(conn.raddr.ip):
                    outside.append(f"{name} (pid {pid}): {conn.laddr.ip}:{conn.laddr.port} -> "
                                   f"{conn.raddr.ip}:{conn.raddr.port}")
            elif conn.status == psutil.CONN_LISTEN and conn.laddr.ip not in ("0.0.0.0", "::") \
                    and not _on_loopback(conn.laddr.ip):
                outside.append(f"{name} (pid {pid}) listens on {conn.laddr.ip}:{conn.laddr.port}")
    assert checked > 10  # the cluster's processes do talk (GCS clients at least)
    assert not outside, "\n".join(outside)


def test_train_as_a_ray_job(cluster, tmp_path, tiny_model_dir):
    root, env = cluster
    state = json.loads((root / "cluster.json").read_text())
    data = make_data(tmp_path / "data")
    # URLs (queue, weights store, frame-cache service, Ray) come from cluster.json.
    output = tmp_path / "run"
    cfg = load_config(None, run_overrides(data, tiny_model_dir, output, distributed__train_ranks=2,
                                          data__frame_cache__build_before_training="true"))
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    (job_dir / "run.yaml").write_text(dump_config(cfg))
    job = _run([BIN / "ray", "job", "submit", "--address", state["defaults"]["dashboard_url"], "--working-dir",
                job_dir, "--", "python", "-m", "services.trainer.entrypoint", "run.yaml"], UP_TIMEOUT_S, env)
    assert job.returncode == 0 and "succeeded" in job.stdout, f"{job.stdout[-6000:]}\n{job.stderr[-2000:]}"
    assert "trainer_ranks_ready ranks=2" in job.stdout
    summary = json.loads([line for line in job.stdout.splitlines() if line.startswith('{"steps"')][-1])
    assert summary["steps"] == 2 and summary["output_dir"] == str(output)
    rows = [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "reward/overall" in r]
    assert [r["step"] for r in steps] == [1, 2]
    assert all(r["distributed/worker_frame_hits"] > 0 for r in steps)  # the trainer warmed the cache
    run = json.loads((output / "distributed_run.json").read_text())
    replica = httpx.get(f"{state['defaults']['rollout_url']}/status", timeout=30).json()
    assert replica["engine_version"] == 2  # the replica followed both published policies
    assert replica["board"] == f"weights-{run['run_id']}-g0"


def test_down_stops_everything(cluster):
    root, env = cluster
    down = evr1("down", "--dir", root, env=env, timeout=DOWN_TIMEOUT_S)
    assert down.returncode == 0, down.stderr[-3000:]
    assert_all_stopped(root)
    # The replica's vLLM took the configured 1 GiB, not a share of the host's RAM (its log, kept).
    outs = "".join(p.read_text(errors="replace") for p in (root / "logs" / "ray").glob("worker-*.out"))
    assert "Explicitly set (1.0/" in outs

"""``evr1 up`` -> the trainer as a Ray job (``ray job submit``, two FSDP ranks as Ray actors, rollouts
from the Ray Serve pool) -> ``evr1 down``, all real processes on loopback, and nothing left running."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
from dist_helpers import make_data, run_overrides

from easyvideor1.cli._procs import alive, session_tree
from easyvideor1.config import dump_config, load_config

BIN = Path(sys.executable).parent


def _run(argv: list, timeout: float, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout, env=env)


def test_up_train_as_a_ray_job_then_down(tmp_path, tiny_model_dir):
    data = make_data(tmp_path / "data")
    cluster = tmp_path / ".evr1"
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    up = _run([BIN / "evr1", "up", "--dir", cluster, "--model", tiny_model_dir, "--namespace", "clustertest",
               "--ray-cpus", "4", "--timeout", "300"], 480, env)
    try:
        assert up.returncode == 0, f"evr1 up failed:\n{up.stdout[-2000:]}\n{up.stderr[-4000:]}"
        state = json.loads((cluster / "cluster.json").read_text())
        assert state["state"] == "up"
        assert set(state["services"]) == {"redis", "s3", "ray", "frame_cache", "reward", "rollout"}
        assert (cluster / "cluster.json").stat().st_mode & 0o777 == 0o600  # it holds the S3 keys
        again = _run([BIN / "evr1", "up", "--dir", cluster], 60, env)
        assert again.returncode == 1 and "still running" in again.stderr  # never two clusters on one state file
        status = _run([BIN / "evr1", "status", "--dir", cluster, "--json"], 60, env)
        assert status.returncode == 0 and json.loads(status.stdout)["healthy"] is True
        rollout_url = state["defaults"]["rollout_url"]
        replica = httpx.get(f"{rollout_url}/status", timeout=10).json()  # the Serve deployment's route
        assert replica["healthy"] and replica["engine_version"] == 0

        # URLs (queue, weights store, frame-cache service, Ray) come from cluster.json.
        output = tmp_path / "run"
        cfg = load_config(None, run_overrides(data, tiny_model_dir, output, distributed__train_ranks=2,
                                              data__frame_cache__build_before_training="true"))
        job_dir = tmp_path / "job"
        job_dir.mkdir()
        (job_dir / "run.yaml").write_text(dump_config(cfg))
        job = _run([BIN / "ray", "job", "submit", "--address", state["defaults"]["dashboard_url"], "--working-dir",
                    job_dir, "--", "python", "-m", "services.trainer.entrypoint", "run.yaml"], 480, env)
        assert job.returncode == 0 and "succeeded" in job.stdout, f"{job.stdout[-6000:]}\n{job.stderr[-2000:]}"
        assert "trainer_ranks_ready ranks=2" in job.stdout
        summary = json.loads([line for line in job.stdout.splitlines() if line.startswith('{"steps"')][-1])
        assert summary["steps"] == 2 and summary["output_dir"] == str(output)
        rows = [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]
        steps = [r for r in rows if "reward/overall" in r]
        assert [r["step"] for r in steps] == [1, 2]
        assert all(r["distributed/worker_frame_hits"] > 0 for r in steps)  # the trainer warmed the cache
        run = json.loads((output / "distributed_run.json").read_text())

        replica = httpx.get(f"{rollout_url}/status", timeout=10).json()
        assert replica["engine_version"] == 2  # the replica followed both published policies
        assert replica["board"] == f"weights-{run['run_id']}-g0"
    finally:
        down = _run([BIN / "evr1", "down", "--dir", cluster], 180, env)
    assert down.returncode == 0, down.stderr[-3000:]
    state = json.loads((cluster / "cluster.json").read_text())
    assert state["state"] == "down"
    for name, record in state["services"].items():
        assert not alive(record["pid"], record["start"]), f"{name} (pid {record['pid']}) still alive"
        assert session_tree(record["pid"]) == [], f"processes of {name} still alive"

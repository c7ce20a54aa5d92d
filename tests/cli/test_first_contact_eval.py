"""`evr1 eval` as a new user runs it (issue #29): from a plain shell (no VLLM_CPU_KVCACHE_SPACE,
none of the Makefile's variables), on a tiny model from `evr1 model tiny` and tasks from
`evr1 data synth`, with the output going to a pipe. One engine start for the module: the run
below; the other commands here stop before an engine would start."""

from __future__ import annotations

import json
import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from demo_env import plain_env

from easyvideor1.logging import EXPECTED_WARNINGS

ENGINE_S = 900  # a budget for a hang: an engine start takes ~30 s on a quiet machine
GIB = 1 << 30


def _evr1(*argv: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(["evr1", *argv], cwd=cwd, env=plain_env(), capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Path:
    """models/tiny and ROOT/synthetic/ (the `synthetic` benchmark's folder), made by the commands."""
    ws = tmp_path_factory.mktemp("first-contact")
    for argv in (("model", "tiny", "--family", "qwen2_5_vl", "--out", "models/tiny"),
                 ("data", "synth", "--out", "ROOT/synthetic", "--n-per-type", "2", "--seed", "0")):
        done = _evr1(*argv, cwd=ws)
        assert done.returncode == 0, done.stdout + done.stderr
    return ws


def _eval_argv(out: str) -> list[str]:
    # docs/evaluation.md's command line; mvbench has no folder under ROOT (left out, exit 3).
    return ["eval", "--model", "models/tiny", "--benchmarks", "synthetic,mvbench", "--data-root", "ROOT",
            "--out", out, "--limit", "4", "--max-tokens", "8"]


@pytest.fixture(scope="module")
def run(ws) -> subprocess.CompletedProcess:
    return _evr1(*_eval_argv("eval_runs/first"), cwd=ws, timeout=ENGINE_S)


def test_eval_starts_on_cpu_from_a_plain_shell(ws, run):
    console = run.stdout + run.stderr
    assert "Traceback" not in console, console[-4000:]
    assert run.returncode == 3, console[-4000:]  # done, one benchmark left out
    assert re.search(r"^synthetic: accuracy=.*; 4 items, 0 failed$", run.stdout, re.M), run.stdout
    settings = json.loads((ws / "eval_runs/first/run.json").read_text())
    # The KV cache every engine gets (rollout/vllm_memory.py), not a share of the host's RAM.
    assert settings["engine_args"]["kv_cache_memory_bytes"] == GIB
    assert settings["sampling"]["top_k"] == -1  # the config's "off" (worker.rollout.top_k)


def test_a_missing_benchmark_folder_is_left_out_with_its_reason(ws, run):
    missing = (ws / "ROOT" / "mvbench").resolve()
    assert f"mvbench: not run, its data did not load: {missing} does not exist" in run.stdout
    report = json.loads((ws / "eval_runs/first/report.json").read_text())
    assert set(report["summaries"]) == {"synthetic"} and "mvbench" in report["load_failures"]


def test_console_shows_each_warning_once_and_progress_as_lines(ws, run):
    err = run.stderr
    assert "\r" not in err  # not a terminal: no bar redraws
    progress = [line for line in err.splitlines() if line.startswith("eval ")]
    assert progress and progress[-1].startswith("eval 4/4 (100%)"), err
    # Each distinct warning once, whichever of the command's processes (engine core, worker) logged it.
    warnings = [re.sub(r"^\S+ \S+ ", "", line) for line in err.splitlines() if " WARNING " in line]
    repeated = [text for text, n in Counter(warnings).items() if n > 1]
    assert not repeated, err
    for _, text in EXPECTED_WARNINGS:  # start-up notes that ask nothing of the user: the log only
        assert text not in err
    for noise in ("Loading safetensors checkpoint shards", "NUMA binding", " INFO vllm"):
        assert noise not in err, err
    log = (ws / "eval_runs/first/evr1.log").read_text()
    assert "Enforce eager set" in log and "eval_engine_started" in log


def test_an_existing_out_is_refused_before_the_engine_starts(ws, run):
    assert (ws / "eval_runs/first/results.jsonl").stat().st_size
    again = _evr1(*_eval_argv("eval_runs/first"), cwd=ws)
    assert again.returncode == 1
    assert again.stderr.strip().splitlines() == [
        "evr1: error: eval_runs/first/results.jsonl already has results: pass --resume to continue "
        "that run, or choose another --out"], again.stderr
    assert "eval_engine_started" not in again.stderr + again.stdout


def test_no_benchmark_loading_stops_before_the_engine(ws):
    done = _evr1("eval", "--model", "models/tiny", "--benchmarks", "mvbench", "--data-root", "ROOT",
                 "--out", "eval_runs/none", cwd=ws)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "no benchmark could be loaded:" in done.stderr and "does not exist" in done.stderr
    assert not (ws / "eval_runs/none/run.json").exists()


def test_top_k_means_what_the_config_field_means():
    """--top-k overrides worker.rollout.top_k: the same default (-1, off); 0 is off too."""
    from easyvideor1.cli.main import build_parser
    from easyvideor1.config.schema import RolloutConfig
    from easyvideor1.rollout.base import SamplingConfig
    from easyvideor1.rollout.vllm_common import sampling_params

    args = build_parser().parse_args(["eval", "--model", "m", "--benchmarks", "b"])
    assert args.top_k == RolloutConfig().top_k == -1
    off = {sampling_params(SamplingConfig(top_k=k), n=1, forbidden_tokens=(), seed=None).top_k for k in (-1, 0)}
    assert len(off) == 1
    tools = build_parser().parse_args(["eval", "--max-turns", "2", "--tool-frames-per-call", "4"])
    assert (tools.tools_max_turns, tools.tools_frames_per_call) == (2, 4)  # the field's name; the old one too

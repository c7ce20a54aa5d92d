"""README's `evr1 data filter-by-pass-rate data/train.jsonl --model DIR -k 8` from a plain shell
(issue #29): the engine starts with no VLLM_CPU_KVCACHE_SPACE, the console shows progress lines
and the summary, vLLM's INFO stream goes to the log file beside the output. One engine start."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from demo_env import plain_env

ENGINE_S = 900  # a budget for a hang, not a measure of speed


def _evr1(*argv: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(["evr1", *argv], cwd=cwd, env=plain_env(), capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    ws = tmp_path_factory.mktemp("pass-rate")
    for argv in (("model", "tiny", "--family", "qwen2_5_vl", "--out", "DIR"),
                 ("data", "synth", "--out", "data", "--n-per-type", "1", "--seed", "0")):
        done = _evr1(*argv, cwd=ws)
        assert done.returncode == 0, done.stdout + done.stderr
    # README's line; short answers keep the tiny model's sampling quick (the flag is documented).
    return ws, _evr1("data", "filter-by-pass-rate", "data/train.jsonl", "--model", "DIR", "-k", "8",
                     "--max-tokens", "8", cwd=ws, timeout=ENGINE_S)


def test_filter_by_pass_rate_from_a_plain_shell(run):
    ws, done = run
    console = done.stdout + done.stderr
    assert done.returncode == 0 and "Traceback" not in console, console[-4000:]
    total = len((ws / "data/train.jsonl").read_text().splitlines())
    assert f"of {total} (too easy" in done.stdout and "data/train.filtered.jsonl" in done.stdout
    assert (ws / "data/train.filtered.jsonl").exists() and (ws / "data/train.filtered.jsonl.report.json").exists()


def test_progress_on_the_console_and_vllm_in_the_log_file(run):
    ws, done = run
    err = done.stderr
    assert "\r" not in err
    lines = [line for line in err.splitlines() if line.startswith("filter ")]
    assert lines and lines[-1].startswith("filter ") and "(100%)" in lines[-1] and "kept=" in lines[-1], err
    assert " INFO vllm" not in err, err  # vLLM's INFO stream is off the console
    log = ws / "data/train.filtered.log"
    assert f"log: {log}" in done.stdout
    text = log.read_text()
    assert " INFO vllm." in text and "vllm_engine_started" in text

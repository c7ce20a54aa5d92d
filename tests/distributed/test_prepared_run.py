"""Pods that need only the frame store: the data is prepared into SeaweedFS S3 (`evr1 data
prepare`), then the raw videos are DELETED, and still

* a distributed run trains and validates: a real Redis, a rollout worker process (vLLM on the
  tiny model) reading frames by key from S3, the trainer's FSDP rank as a Ray actor loading its
  own frames by key (prompts travel as token ids and keys, never pixels);
* ``evr1 eval`` over the prepared manifest scores every item, its frames read by key.

Every frame comes from the store: the worker reports frame hits and no decode, the rank no
on-the-fly decode, the eval run only key loads.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path

import pytest
import yaml
from dist_helpers import DEMO_TYPES, read_status, start_config_worker, wait_worker_ready
from servers import redis_server, stop_process

from easyvideor1.config import load_config
from easyvideor1.data.prepared import load_prepared

pytestmark = pytest.mark.slow
FRAMES = {"data.video_fps": 4, "data.video_max_frames": 8, "data.video_min_frames": 4,
          "data.video_min_pixels": 3136, "data.video_max_pixels": 3136, "data.image_min_pixels": 784,
          "data.image_max_pixels": 3136}


def _run_yaml(work: Path, model: Path, store: str, redis_url: str) -> dict:
    data: dict = {"train_files": str(work / "prepared" / "train.jsonl"), "val_files": str(work / "prepared" / "val.jsonl"),
                  "max_prompt_length": 1024, "max_response_length": 16, "rollout_batch_size": 4,
                  "val_batch_size": 16, "frame_cache": {"store": store, "build_before_training": False}}
    data.update({k.split(".", 1)[1]: v for k, v in FRAMES.items()})
    return {
        "data": data,
        "algorithm": {"mix_policy": {"enable": True}},
        "worker": {"actor": {"model_path": str(model), "gradient_checkpointing": False, "mini_batch_size": 4,
                             "optim": {"lr": 0.002}},
                   "rollout": {"n": 2}},
        "trainer": {"total_steps": 2, "val_every": 0, "val_before_train": False, "output_dir": str(work / "run"),
                    "loggers": ["jsonl"], "resume": "never", "device": "cpu"},
        "distributed": {"mode": "distributed", "queue_url": redis_url, "namespace": "prepared",
                        "weights_store": str(work / "weights"), "result_timeout_s": 300, "train_ranks": 1},
        "serve": {"rollout": {"batch_size": 4, "weights_timeout_s": 60}},
    }


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, tiny_model_dir, s3):
    from easyvideor1.data.synth import generate_synthetic
    from easyvideor1.train.prepare import prepare

    saved = dict(os.environ)
    os.environ.update(s3.url_env)  # what a pod gets: the store's endpoint and keys, for every child too
    work = tmp_path_factory.mktemp("prepared-run")
    generate_synthetic(work / "raw", 4, seed=0, types=list(DEMO_TYPES), offline_type=list(DEMO_TYPES),
                       offline_fraction=0.5, val_fraction=0.25, progress=False)
    store = f"s3://prep-run-{uuid.uuid4().hex[:10]}/frames"
    cfg = load_config(None, [f"{k}={v}" for k, v in FRAMES.items()] + [f"data.frame_cache.store={store}"])
    for name in ("train.jsonl", "val.jsonl"):
        summary = prepare(work / "raw" / name, cfg, [tiny_model_dir], work / "prepared" / name, progress=False)
        assert summary.ok, summary.format()
    shutil.rmtree(work / "raw" / "media")  # nothing downstream may need the raw videos now
    try:
        yield {"work": work, "store": store}
    finally:
        os.environ.clear()
        os.environ.update(saved)


def test_a_distributed_run_trains_and_validates_without_the_raw_videos(prepared, tiny_model_dir):
    import ray

    from easyvideor1.train.trainer import RLTrainer
    from services.trainer.ray_actors import RayActorGroup

    work = prepared["work"]
    val = load_prepared(work / "prepared" / "val.jsonl")
    assert val and not any(Path(v).exists() for p in val for v in p.sample.videos)
    with redis_server() as redis:
        config = work / "run.yaml"
        config.write_text(yaml.safe_dump(_run_yaml(work, Path(tiny_model_dir), prepared["store"], redis.url)))
        worker, status = start_config_worker(config, work)
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        group = trainer = None
        try:
            wait_worker_ready(worker, status, work / "w0.log")
            cfg = load_config(config)
            group = RayActorGroup(cfg, timeout_s=600)
            trainer = RLTrainer.from_config(cfg, actor=group)
            result = trainer.fit()
            loader = trainer.loader.stats()
        finally:
            if trainer is not None:
                trainer.close()
            if group is not None:
                group.close()
            ray.shutdown()
            counters = read_status(status).get("counters", {})
            stop_process(worker, grace=20)
    assert result["steps"] == 2
    report = result["last_validation"]
    assert report is not None and sum(report.counts.values()) == len(val)
    assert len(report.responses) == len(val)  # every held-out sample was rolled out and scored
    rows = [json.loads(line) for line in (work / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "actor/pg_loss" in r] == [1, 2]
    assert all(r.get("data/filtered_samples", 0) == 0 for r in rows if "actor/pg_loss" in r)
    assert counters.get("frame_hits", 0) > 0 and counters.get("frame_decodes", 0) == 0, counters
    assert loader.get("on_the_fly", 0) == 0 and loader.get("misses", 0) == 0, loader


def test_eval_over_the_prepared_manifest_reads_frames_by_key(prepared, tiny_model_dir):
    from easyvideor1.cli.main import main

    work, out = prepared["work"], prepared["work"] / "eval"
    argv = ["eval", "--model", str(tiny_model_dir), "--benchmarks", f"jsonl={work / 'prepared' / 'val.jsonl'}",
            "--store", prepared["store"], "--out", str(out), "--max-tokens", "8", "--max-model-len", "1100",
            "--fps", "4", "--min-frames", "4", "--max-frames", "8", "--min-pixels", "3136", "--max-pixels", "3136",
            "--image-min-pixels", "784", "--image-max-pixels", "3136", "--no-progress"]
    assert main(argv) == 0
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    n_val = len(load_prepared(work / "prepared" / "val.jsonl"))
    assert len(records) == n_val and all(r.get("status") == "ok" for r in records), records

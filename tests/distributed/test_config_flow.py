"""One run config drives the trainer, the reward service and the rollout pool: what it says is
what the pool computes. Real Redis, a real reward service, a real rollout worker process (vLLM
on the tiny model), all started with ``--config`` of the same file, as the chart's ConfigMap does.

* reward settings: a run whose config weighs format as much as accuracy gets exactly that from
  the pool's scores; a second run on the same pool and service with other weights gets its own;
* engine limits: a 128-frame video whose prompt is longer than 4K tokens (the old fixed
  ``--max-model-len 4096`` of the pool dropped it) is rolled out by the pool exactly as the
  embedded stage does it (same prompt ids, same greedy response, same reward).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml
from dist_helpers import make_data, start_config_worker, wait_worker_ready
from servers import redis_server, stop_process

from easyvideor1.config import load_config
from easyvideor1.config.schema import MixPolicyConfig
from easyvideor1.data import load_samples
from easyvideor1.rollout.base import SamplingConfig
from easyvideor1.train.parts import remote_rollout_parts
from easyvideor1.video.encode import write_video
from services.reward.launch import RewardServer

pytestmark = pytest.mark.slow
NAMESPACE = "config-flow"
GREEDY = SamplingConfig(max_tokens=16, temperature=0.0)
LONG_FRAMES = 128


def _run_config(work: Path, model: Path, redis_url: str, reward_url: str | None, data: Path) -> dict:
    return {
        "data": {"train_files": str(data / "train.jsonl"), "max_prompt_length": 6000, "max_response_length": 16,
                 "video_fps": 2.0, "video_min_frames": 4, "video_max_frames": LONG_FRAMES,
                 "video_min_pixels": 3136, "video_max_pixels": 224 * 252, "image_max_pixels": 3136,
                 "image_min_pixels": 784, "frame_cache": {"build_before_training": False}},
        "worker": {"actor": {"model_path": str(model)},
                   "reward": {"url": reward_url, "accuracy_weight": 2.0, "format_weight": 0.25}},
        "distributed": {"mode": "distributed", "queue_url": redis_url, "namespace": NAMESPACE,
                        "weights_store": str(work / "weights"), "result_timeout_s": 300},
        "serve": {"rollout": {"batch_size": 4, "visibility_timeout_s": 120, "weights_timeout_s": 60}},
        "trainer": {"output_dir": str(work / "run"), "resume": "never", "loggers": ["jsonl"]},
    }


def _long_video_sample(work: Path) -> Path:
    """A 64 s video (128 frames at 2 fps): 64 temporal groups x 72 tokens at 224x252 = 4,608 vision tokens."""
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 255, size=(LONG_FRAMES * 2, 224, 252, 3), dtype=np.uint8)
    video = write_video(work / "long" / "long.mp4", frames, fps=4.0)
    row = {"problem_id": "long-0", "problem": "<video>\nIs there a red square? Answer yes or no.", "answer": "yes",
           "problem_type": "boolean", "data_type": "video", "videos": [str(video)]}
    path = work / "long" / "long.jsonl"
    path.write_text(json.dumps(row) + "\n")
    return path


def _long_context_copy(model_dir: Path, out: Path) -> Path:
    """The tiny model with room for 8K positions (rotary positions: no weights change)."""
    shutil.copytree(model_dir, out)
    config = json.loads((out / "config.json").read_text())
    config["text_config"]["max_position_embeddings"] = 8192
    (out / "config.json").write_text(json.dumps(config))
    return out


@pytest.fixture(scope="module")
def pool(tmp_path_factory, tiny_model_dir):
    work = tmp_path_factory.mktemp("config-flow")
    data = make_data(work / "data", n_per_type=4)
    model = _long_context_copy(Path(tiny_model_dir), work / "model")
    with redis_server() as redis:
        config = work / "run.yaml"
        # The reward service learns its own URL only once started: write the file in two passes.
        config.write_text(yaml.safe_dump(_run_config(work, model, redis.url, None, data)))
        reward = RewardServer(["--config", str(config), "--workers", "1"]).start()
        config.write_text(yaml.safe_dump(_run_config(work, model, redis.url, reward.url, data)))
        worker, status = start_config_worker(config, work)
        try:
            wait_worker_ready(worker, status, work / "w0.log")
            yield {"work": work, "config": config, "data": data, "reward": reward}
        finally:
            stop_process(worker, grace=20)
            reward.close()


def _round(config: Path, overrides: list[str], samples, prefix: str):
    owned: list = []
    cfg = load_config(config, overrides)
    _builder, _loader, stage, _sync = remote_rollout_parts(cfg, owned)
    try:
        # Mix-policy puts each sample's offline (tagged, correct) answer in its group's last slot.
        return cfg, stage.run(samples, n=2, sampling=SamplingConfig(max_tokens=16, temperature=1.0),
                              mix=MixPolicyConfig(enable=True), uid_prefix=prefix)
    finally:
        for part in reversed(owned):
            part.close()


def test_the_runs_reward_settings_decide_the_pools_scores(pool):
    samples = load_samples(pool["data"] / "train.jsonl")
    assert any(s.has_offline_trajectory for s in samples)
    cfg, result = _round(pool["config"], [f"trainer.output_dir={pool['work'] / 'run-a'}"], samples, "a")
    assert cfg.worker.reward.accuracy_weight == 2.0 and not result.filtered, result.filtered
    scored = [(r, off) for g in result.groups for r, off in zip(g.rewards, g.is_offline)]
    assert len(scored) == 2 * len(samples)
    for r, _ in scored:
        assert r.overall == pytest.approx(2.0 * r.accuracy + 0.25 * r.format)
    # A correct, tagged offline answer: 2.25 under this run's weights (1.0 under the defaults).
    assert any(off and r.overall == pytest.approx(2.25) for r, off in scored)

    # Another run on the same pool and reward service, with its own weights: scored its own way.
    _cfg, other = _round(pool["config"], [f"trainer.output_dir={pool['work'] / 'run-b'}",
                                          "worker.reward.accuracy_weight=0.0", "worker.reward.format_weight=1.0"],
                         samples, "b")
    others = [r for g in other.groups for r in g.rewards]
    assert others and all(r.overall == pytest.approx(r.format) for r in others)
    assert any(r.accuracy == 1.0 and r.overall == pytest.approx(1.0) for r in others)


def test_a_long_video_prompt_is_rolled_out_as_in_embedded_mode(pool, tiny_model_dir):
    from easyvideor1.rewards.client import open_reward_client
    from easyvideor1.rollout.factory import make_engine
    from easyvideor1.rollout.stage import EngineRolloutStage
    from easyvideor1.train.media import build_frame_loader

    samples = load_samples(_long_video_sample(pool["work"]))
    owned: list = []
    cfg = load_config(pool["config"], [f"trainer.output_dir={pool['work'] / 'run-long'}"])
    _builder, _loader, stage, _sync = remote_rollout_parts(cfg, owned)
    try:
        remote = stage.run(samples, n=1, sampling=GREEDY, mix=MixPolicyConfig(), uid_prefix="long")
    finally:
        for part in reversed(owned):
            part.close()
    assert not remote.filtered, remote.filtered
    [group] = remote.groups
    assert len(group.prompt.prompt_ids) > 4096  # the old fixed model length would have filtered it

    embedded_cfg = load_config(pool["config"], ["distributed.mode=embedded", "worker.reward.url=null"])
    engine = make_engine(embedded_cfg)
    rewards = open_reward_client(None, embedded_cfg.worker.reward)
    try:
        local = EngineRolloutStage(engine, build_frame_loader(embedded_cfg, engine.family), stage.renderer, rewards,
                                   max_prompt_length=embedded_cfg.data.max_prompt_length,
                                   max_response_length=embedded_cfg.data.max_response_length)
        [expected] = local.run(samples, n=1, sampling=GREEDY, mix=MixPolicyConfig(), uid_prefix="long").groups
    finally:
        rewards.close()
        engine.close()
    assert list(group.prompt.prompt_ids) == list(expected.prompt.prompt_ids)
    assert group.responses == expected.responses
    assert [r.overall for r in group.rewards] == [r.overall for r in expected.rewards]

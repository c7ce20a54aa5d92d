"""Video tools in distributed mode, end to end: a real rollout worker process (vLLM on the tiny
model) takes a task with tools on from a real Redis queue, runs the task's tool call against the
frame-cache service's tool endpoint over HTTP (the worker has the frame store's URL, never the
store), and the trajectory travels back over the queue to the trainer's remote stage, which
fetches its tool media again through the same endpoint.

A random tiny policy does not write a valid call by itself, so the call comes from the sample's
offline (mix-policy) trajectory: the worker executes it exactly as it executes a sampled call
(the same kit, budgets and tool source), so the whole distributed tool path is the real one; only
who wrote the call differs.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import httpx
import pytest
from dist_helpers import log_tail, make_config, read_status, start_worker, wait_for
from servers import metric_sum, redis_server, stop_process

from easyvideor1.config.schema import MixPolicyConfig
from easyvideor1.data.schema import Sample
from easyvideor1.rollout.base import SamplingConfig
from easyvideor1.rollout.tools.calls import format_tool_call
from easyvideor1.train.parts import remote_rollout_parts
from services.frame_cache.launch import FrameCacheServer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "video"))
from video_samples import make_video  # noqa: E402

NAMESPACE = "tools"
RESPONSE = 256  # a call in the tiny tokenizer's pieces, the tool turn and an answer
PROMPT = 2048  # the tools' JSON schemas in the chat template are ~830 tokens of the tiny tokenizer
# The frame params every part shares (dist_helpers.run_overrides sets the same data.* fields).
FRAMES = ["data.video_fps=4", "data.video_max_frames=8", "data.video_min_frames=4", "data.video_min_pixels=3136",
          "data.video_max_pixels=3136", "data.image_max_pixels=3136", "data.image_min_pixels=784"]
WINDOW = {"start_s": 1.0, "end_s": 2.0, "fps": 4}


@pytest.fixture(scope="module")
def infra(tmp_path_factory, tiny_model_dir):
    work = tmp_path_factory.mktemp("dist-tools")
    media = work / "media"
    media.mkdir()
    video = make_video(media / "clip.mp4", count=40, fps=10, height=56, width=56, seed=7)
    frame_cache = FrameCacheServer(str(work / "frames"), [*FRAMES, f"serve.frame_cache.source_roots=[{media}]"])
    with redis_server() as redis:
        frame_cache.start()
        tool_cfg = ["worker.rollout.tools.enabled=true", "distributed.mode=distributed",
                    f"distributed.frame_cache_url={frame_cache.url}", f"data.max_response_length={RESPONSE}", f"data.max_prompt_length={PROMPT}"]
        proc, status = start_worker(tiny_model_dir, redis.url, NAMESPACE, work, "w0", frame_store=frame_cache.url,
                                    weights_store=str(work / "weights"), batch_size=1, overrides=tool_cfg)
        try:
            def ready():
                if proc.poll() is not None:
                    raise RuntimeError(f"worker exited:\n{log_tail(work / 'w0.log')}")
                return read_status(status).get("state") == "ready"
            wait_for(ready, 240, "tools worker ready")
            yield {"work": work, "video": video, "redis": redis, "frame_cache": frame_cache, "worker": proc,
                   "status": status, "model": Path(tiny_model_dir)}
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            stop_process(proc, grace=20)
            frame_cache.close()


def tool_sample(video: Path, problem_id: str) -> Sample:
    call = format_tool_call("json", "get_frames", WINDOW)
    return Sample(problem_id=problem_id, problem="<video>What moves?", answer="3", problem_type="numerical",
                  data_type="video", videos=(str(video),), has_offline_trajectory=True,
                  offline_output=f"{call}<answer>3</answer>")


def test_a_workers_tool_call_goes_to_the_frame_cache_service_and_back_over_the_queue(infra):
    fc = infra["frame_cache"]
    before = httpx.get(f"{fc.url}/metrics", timeout=10).text
    cfg = make_config(infra["work"], infra["model"], infra["work"] / "run",
                      distributed__queue_url=infra["redis"].url, distributed__namespace=NAMESPACE,
                      distributed__weights_store=str(infra["work"] / "weights"), distributed__result_timeout_s=240,
                      distributed__frame_cache_url=fc.url, data__frame_cache__store=fc.url,
                      data__max_response_length=RESPONSE, data__max_prompt_length=PROMPT, worker__rollout__tools__enabled=True)
    _builder, loader, stage, sync = remote_rollout_parts(cfg, [])
    try:
        result = stage.run([tool_sample(infra["video"], "t0")], n=2, sampling=SamplingConfig(max_tokens=16),
                           mix=MixPolicyConfig(enable=True), uid_prefix="tools")
    finally:
        sync.close()
        stage.close()
    assert result.filtered == [], result.filtered
    [group] = result.groups
    offline = [t for t, is_offline in zip(group.trajectories, group.is_offline) if is_offline]
    assert len(offline) == 1 and offline[0] is not None
    trajectory = offline[0]
    assert trajectory.tool_calls == 1 and trajectory.tool_errors == 0 and trajectory.turns == 2
    # 1 s at 4 fps from the service: 4 frames, on the trainer's side again with their pixels.
    assert trajectory.frames_fetched == 4 and len(trajectory.videos) == 1
    assert trajectory.videos[0].frames.shape[0] == 4
    assert trajectory.media_refs[0]["tool"] == "get_frames"
    assert 0 in trajectory.loss_mask and 1 in trajectory.loss_mask  # the tool turn is not trained on
    assert "<answer>3</answer>" in trajectory.final_text
    assert group.rewards[group.is_offline.index(True)].accuracy == 1.0
    assert result.timings["distributed/trajectory_media_refetched"] == 1

    after = httpx.get(f"{fc.url}/metrics", timeout=10).text
    answered = metric_sum(after, "evr1_frame_cache_tool_requests_total", tool="window", status="200") - \
        metric_sum(before, "evr1_frame_cache_tool_requests_total", tool="window", status="200")
    # The worker's call (a miss, decoded from the source root) and the trainer's re-fetch (a hit).
    assert answered == 2
    assert metric_sum(after, "evr1_frame_cache_tool_store_total", tool="window", outcome="miss") >= 1
    assert metric_sum(after, "evr1_frame_cache_tool_store_total", tool="window", outcome="hit") >= 1
    assert metric_sum(after, "evr1_frame_cache_tool_frames_total", tool="window") >= 8
    assert infra["worker"].poll() is None  # the worker served the task and lives on

"""Multi-turn trajectories over the work queue (rollout/wire.py): a completion's trajectory travels
as JSON without pixels, and the trainer side fetches its tool media again by their refs, through
the in-process tool source and through the frame-cache service's tool endpoint (real uvicorn on
loopback), with the real processor of a tiny model rebuilding the pixel tensors."""

from __future__ import annotations

import dataclasses
import json
import sys
import threading
import uuid
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import torch
from servers import serve_in_thread

from easyvideor1.cache import FrameLoader, open_store
from easyvideor1.config.schema import MixPolicyConfig, RewardConfig, RunConfig, ToolsConfig
from easyvideor1.data import Sample
from easyvideor1.models.families import frame_params
from easyvideor1.models.inputs import PromptBuilder
from easyvideor1.models.trajectory import Trajectory
from easyvideor1.prompts.renderer import PromptRenderer
from easyvideor1.queue import open_queue
from easyvideor1.rewards.types import RewardResult
from easyvideor1.rollout.base import Completion, SamplingConfig
from easyvideor1.rollout.remote_run import RunIdentity
from easyvideor1.rollout.remote_stage import RemoteRolloutStage
from easyvideor1.rollout.stage import Group
from easyvideor1.rollout.tools.base import ToolVideo
from easyvideor1.rollout.tools.frames import LocalToolFrameSource
from easyvideor1.rollout.tools.kit import tool_template_kwargs
from easyvideor1.rollout.tools.remote import HttpToolFrameSource
from easyvideor1.rollout.tools.window import crop_ref, fetch_crop, fetch_window, refetch, window_ref
from easyvideor1.rollout.wire import (
    TaskError,
    WeightsRef,
    completion_from_wire,
    completion_to_wire,
    parse_task,
    result_payload,
    task_payload,
    trajectories_from_wire,
)
from services.frame_cache.app import create_app

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "video"))
from video_samples import make_video  # noqa: E402

FAMILY = "qwen2_5_vl"
DATA = {"video_fps": 2.0, "video_min_frames": 2, "video_max_frames": 8, "video_min_pixels": 3136,
        "video_max_pixels": 12544, "image_min_pixels": 3136, "image_max_pixels": 12544}


def serving(cfg: RunConfig):
    """``create_app(cfg)`` served over HTTP on loopback; yields its URL."""
    return serve_in_thread(create_app(cfg))


@pytest.fixture(scope="module")
def setup(tmp_path_factory, tiny_model_dir):
    root = tmp_path_factory.mktemp("wire-media")
    video = make_video(root / "clip.mp4", count=40, fps=10, height=96, width=128, seed=5)
    store = str(tmp_path_factory.mktemp("wire-store"))
    cfg = RunConfig.model_validate({"data": {**DATA, "frame_cache": {"store": store}},
                                    "serve": {"frame_cache": {"build_workers": 0, "source_roots": [str(root)]}}})
    builder = PromptBuilder.from_pretrained(str(tiny_model_dir))
    video_params, image_params = frame_params(cfg, builder.family)
    loader = FrameLoader(open_store(store), video_params, image_params, write_back=True)
    whole = loader.load_video(video)[1]
    tool_video = ToolVideo(str(video), loader.key_for(video, video_params).key, whole.duration)
    return {"cfg": cfg, "builder": builder, "loader": loader, "video": tool_video}


def tool_trajectory(setup) -> Trajectory:
    """A trajectory with three tool media (window, crop, window) as a rollout leaves it."""
    loader, video, builder = setup["loader"], setup["video"], setup["builder"]
    calls = [("get_frames", (0.5, 2.5, 2.0), {"max_frames": 8, "max_pixels": None}),
             ("zoom", (1.2, (8, 4, 72, 52)), {"max_pixels": 6272}),
             ("get_frames", (3.0, 3.9, 6.0), {"max_frames": 6, "max_pixels": 3136})]
    videos, images, refs = [], [], []
    for tool, args, kwargs in calls:
        if tool == "get_frames":
            videos.append(fetch_window(loader, video, *args, **kwargs, family=FAMILY))
            refs.append(window_ref(video, *args, **kwargs))
        else:
            images.append(fetch_crop(loader, video, *args, **kwargs, family=FAMILY))
            refs.append(crop_ref(video, *args, **kwargs))
    tensors = builder.pixel_tensors(videos, images)
    n = 57
    grid = lambda key: tuple(tuple(int(x) for x in g) for g in tensors[key].tolist())  # noqa: E731
    return Trajectory(
        token_ids=list(range(1000, 1000 + n)), loss_mask=[int(i % 3 != 0) for i in range(n)],
        position_ids=np.stack([np.arange(40, 40 + n)] * 3), mm_token_type_ids=[(i // 7) % 3 for i in range(n)],
        next_position=40 + n, tensors=tensors, videos=tuple(videos), images=tuple(images),
        video_grid_thw=grid("video_grid_thw"), image_grid_thw=grid("image_grid_thw"),
        second_per_grid_ts=tuple(float(x) for x in tensors["second_per_grid_ts"].tolist()),
        media_refs=tuple(refs), turns=4, tool_calls=3, tool_errors=0, frames_fetched=sum(
            int(v.frames.shape[0]) for v in videos) + len(images), final_text="<answer>7</answer>")


def assert_same(got: Trajectory, want: Trajectory) -> None:
    for field in dataclasses.fields(Trajectory):
        a, b = getattr(got, field.name), getattr(want, field.name)
        if field.name == "position_ids":
            assert a.dtype == b.dtype and np.array_equal(a, b)
        elif field.name == "tensors":
            assert set(a) == set(b)
            for key in b:
                assert torch.equal(a[key], b[key]), key
        elif field.name == "videos":
            assert len(a) == len(b)
            for x, y in zip(a, b):
                assert x.metadata == y.metadata and np.array_equal(x.frames, y.frames)
        elif field.name == "images":
            assert len(a) == len(b)
            for x, y in zip(a, b):
                assert x.metadata == y.metadata and np.array_equal(x.image, y.image)
        else:
            assert a == b, field.name


@pytest.fixture(scope="module", params=["local", "service"])
def make_source(request, setup):
    """Makes tool sources of one kind: in-process, or the frame-cache service's endpoint."""
    if request.param == "local":
        yield lambda: LocalToolFrameSource(setup["loader"], FAMILY)
        return
    with serving(setup["cfg"]) as url:
        yield lambda: HttpToolFrameSource(url, timeout_s=60, family=FAMILY)


@pytest.fixture(scope="module")
def tool_source(make_source):
    source = make_source()
    yield source
    source.close()


def test_a_completion_with_a_trajectory_round_trips(setup, tool_source):
    traj = tool_trajectory(setup)
    completion = Completion(token_ids=list(traj.token_ids), text="...<answer>7</answer>",
                            logprobs=[-0.25 * (i % 4) for i in range(len(traj.token_ids))], finish_reason="stop",
                            trajectory=traj)
    wire = json.loads(json.dumps(completion_to_wire(completion)))  # what the queue stores
    assert "pixel_values" not in json.dumps(wire) and len(json.dumps(wire)) < 20_000  # no frames travel
    back = completion_from_wire(wire, refetch=partial(refetch, tool_source), builder=setup["builder"])
    assert (back.token_ids, back.text, back.logprobs, back.finish_reason, back.is_offline) == \
        (completion.token_ids, completion.text, completion.logprobs, completion.finish_reason, False)
    assert_same(back.trajectory, traj)
    # Without the builder the media come back, their tensors are left to the trainer's forward.
    bare = completion_from_wire(wire, refetch=partial(refetch, tool_source))
    assert bare.trajectory.tensors == {} and len(bare.trajectory.videos) == 2 and len(bare.trajectory.images) == 1


def test_a_group_result_carries_its_trajectories_over_the_queue(setup, tool_source):
    traj = tool_trajectory(setup)
    sample = Sample(problem_id="p0", problem="<video>What digit flashes?", answer="7", problem_type="numerical",
                    data_type="video", videos=(setup["video"].path,))
    task = parse_task("run/t0", task_payload(
        sample=sample, uid="u0", prompt_text="prompt", n=2, sampling=SamplingConfig(max_tokens=8), mix=MixPolicyConfig(),
        max_prompt_length=512, max_response_length=256, video_params=setup["loader"].video_params,
        image_params=setup["loader"].image_params, weights=WeightsRef("b", "p", 0), reward=RewardConfig(),
        tools=ToolsConfig(enabled=True, frames_per_call=6)))
    assert task.tools == ToolsConfig(enabled=True, frames_per_call=6)
    prompt = setup["builder"].expand("<video>What digit flashes?", [setup["loader"].load_video(sample.videos[0])[1]])
    group = Group(sample=sample, uid="u0", prompt=prompt, responses=[traj.token_ids, [5, 6]],
                  texts=["a", "b"], is_offline=[False, False], finish_reasons=["stop", "length"])
    group.trajectories = [traj, None]  # what a multi-turn rollout's group holds (one per response)
    queue = open_queue(f"memory://tool-wire-{uuid.uuid4().hex[:8]}", namespace="wire")
    try:
        queue.put("run/t0", {"task": True})
        [message] = queue.get("worker", 1)
        assert queue.put_result(message.task_id, result_payload(task, group, policy_version=0, board="b",
                                                                mix_injected=False, worker="w", attempt=1,
                                                                counters={}))
        queue.ack(message)
        result = queue.wait_results(["run/t0"], 10)["run/t0"]
    finally:
        queue.close()
    back = trajectories_from_wire(result["trajectories"], refetch=partial(refetch, tool_source),
                                  builder=setup["builder"], where="sample 'u0'")
    assert back[1] is None
    assert_same(back[0], traj)


def test_a_task_without_tools_has_none(setup):
    sample = Sample(problem_id="p1", problem="<video>?", answer="1", problem_type="numerical", data_type="video",
                    videos=(setup["video"].path,))
    payload = task_payload(sample=sample, uid="u1", prompt_text="p", n=1, sampling=SamplingConfig(),
                           mix=MixPolicyConfig(), max_prompt_length=8, max_response_length=8,
                           video_params=setup["loader"].video_params, image_params=setup["loader"].image_params,
                           weights=WeightsRef("b", "p", 0), reward=RewardConfig(), tools=ToolsConfig())
    assert "tools" not in payload and parse_task("run/t1", payload).tools is None


def test_media_that_differ_or_cannot_be_fetched_are_refused(setup, tool_source):
    wire = completion_to_wire(Completion([1], "x", None, "stop", trajectory=tool_trajectory(setup)))["trajectory"]
    changed = json.loads(json.dumps(wire))
    changed["media_refs"][0]["fps"] = 3.0  # another window than the rollout showed
    with pytest.raises(TaskError, match="medium 0: the re-fetched frames differ"):
        trajectories_from_wire([changed], refetch=partial(refetch, tool_source))
    with pytest.raises(TaskError, match="re-fetching them needs a tool frame source"):
        trajectories_from_wire([wire], refetch=None)
    broken = dict(wire, media=wire["media"][:2])
    with pytest.raises(TaskError, match="3 media refs for 2 media records"):
        trajectories_from_wire([broken], refetch=partial(refetch, tool_source))
    with pytest.raises(TaskError, match="malformed"):
        trajectories_from_wire([{k: v for k, v in wire.items() if k != "loss_mask"}],
                               refetch=partial(refetch, tool_source))
    unknown = json.loads(json.dumps(wire))
    unknown["media_refs"][1]["tool"] = "teleport"
    with pytest.raises(TaskError, match="unknown tool 'teleport'"):
        trajectories_from_wire([unknown], refetch=partial(refetch, tool_source))


def test_the_remote_stage_refetches_a_rounds_trajectories(setup, make_source):
    """A round of RemoteRolloutStage over a real queue: the task carries the tools settings, the
    pool's answer (put here as a worker would) carries a trajectory, and the stage's group holds it
    with its media fetched again through the tool source."""
    traj = tool_trajectory(setup)
    builder, loader = setup["builder"], setup["loader"]
    sample = Sample(problem_id="p2", problem="<video>What digit flashes?", answer="7", problem_type="numerical",
                    data_type="video", videos=(setup["video"].path,))
    queue = open_queue(f"memory://tool-stage-{uuid.uuid4().hex[:8]}", namespace="stage")
    stage = RemoteRolloutStage(queue, builder, loader, PromptRenderer(), RunIdentity("toolrun"),
                               max_prompt_length=4096, max_response_length=512, tools=ToolsConfig(enabled=True),
                               tool_source=make_source(), poll_s=0.05, result_timeout_s=60)
    seen: dict[str, object] = {}

    def worker() -> None:
        [message] = queue.get("worker", 1, block_s=30)
        task = parse_task(message.task_id, message.payload)
        seen["tools"] = task.tools
        metadata = loader.load_video(task.sample.videos[0])[1]
        # Laid out as a worker's kit does: the tools declared in the chat template.
        declared = tool_template_kwargs(builder.family, task.tools)
        prompt = builder.expand(task.prompt_text, [metadata], tools=declared.pop("tools"),
                                template_kwargs=declared or None)
        group = Group(sample=task.sample, uid=task.uid, prompt=prompt,
                      responses=[traj.token_ids, [5, 6]], texts=["a", "b"], is_offline=[False, False],
                      finish_reasons=["stop", "length"], rewards=[RewardResult(1.0, 1.0, 1.0)] * 2,
                      trajectories=[traj, None])
        queue.put_result(message.task_id, result_payload(task, group, policy_version=0, board=stage.identity.board,
                                                         mix_injected=False, worker="w", attempt=1, counters={}))
        queue.ack(message)

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    try:
        result = stage.run([sample], n=2, sampling=SamplingConfig(max_tokens=8), mix=MixPolicyConfig(),
                           uid_prefix="r0")
    finally:
        thread.join(timeout=60)
        stage.close()
    assert seen["tools"] == ToolsConfig(enabled=True)
    assert result.filtered == []
    [group] = result.groups
    assert group.trajectories[1] is None
    assert_same(group.trajectories[0], traj)
    assert result.timings["distributed/trajectory_media_refetched"] == 3

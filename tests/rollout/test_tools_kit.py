"""The video tool kit over a real frame store: get_frames/zoom frames equal the loader's own
decode, a second fetch is a store hit, budgets and clamping, every bad call answered with a
message, crops land on a known pattern, and tool turns carry one placeholder per medium
(checked through the real tiny processors' prompt builder)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from easyvideor1.cache.key import HashIndex
from easyvideor1.cache.loader import FrameLoader
from easyvideor1.cache.stores.local import LocalStore
from easyvideor1.config.schema import RunConfig, ToolsConfig
from easyvideor1.models.families import get_family
from easyvideor1.models.inputs import PromptBuilder, build_segment
from easyvideor1.rollout.tools import (
    IMAGE_PLACEHOLDER,
    VIDEO_PLACEHOLDER,
    LocalToolFrameSource,
    ToolOutcome,
    ToolVideo,
    VideoToolKit,
    make_tool_frame_source,
    make_tool_kit,
)
from easyvideor1.video import VideoParams, decode_video
from easyvideor1.video.encode import write_video
from easyvideor1.video.metadata import ImageParams

FPS, SECONDS, HEIGHT, WIDTH = 10, 3.0, 96, 128
RED_BOX = (80, 16, 112, 48)  # x1, y1, x2, y2 of a red square present in every frame


def pattern_frames() -> np.ndarray:
    frames = np.full((int(FPS * SECONDS), HEIGHT, WIDTH, 3), 40, dtype=np.uint8)
    x1, y1, x2, y2 = RED_BOX
    frames[:, y1:y2, x1:x2] = (230, 20, 20)
    for i in range(frames.shape[0]):  # a bar whose length counts the frame (the frames differ)
        frames[i, 80:88, : 4 * (i + 1)] = (20, 220, 20)
    return frames


@pytest.fixture(scope="module")
def video_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("tools_video") / "pattern.mp4"
    return str(write_video(path, pattern_frames(), FPS, crf=12))


def data_params(family: str) -> tuple[VideoParams, ImageParams]:
    fam = get_family(family)
    video = VideoParams(fps=2.0, min_frames=2, max_frames=16, min_pixels=fam.factor**2, max_pixels=64 * 96,
                        factor=fam.factor, temporal_patch_size=fam.temporal_patch_size)
    return video, ImageParams(min_pixels=fam.factor**2, max_pixels=128 * 128, factor=fam.factor)


def make_loader(tmp_path, family: str) -> FrameLoader:
    video, image = data_params(family)
    return FrameLoader(LocalStore(tmp_path / "store"), video, image, index=HashIndex(tmp_path / "index"))


def make_kit(tmp_path, family: str = "qwen2_5_vl", **tools) -> tuple[VideoToolKit, FrameLoader]:
    loader = make_loader(tmp_path, family)
    cfg = ToolsConfig(zoom_max_pixels=4 * 56 * 56, **tools)
    return VideoToolKit(family, LocalToolFrameSource(loader, family), cfg), loader


def call(name: str, **arguments) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def xml(name: str, **arguments) -> str:
    params = "".join(f"<parameter={k}>\n{json.dumps(v)}\n</parameter>\n" for k, v in arguments.items())
    return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"


def video(path: str) -> ToolVideo:
    return ToolVideo(path=path, key=None, duration_s=SECONDS)


def test_get_frames_equals_the_loaders_decode_and_hits_the_store_the_second_time(tmp_path, video_path):
    kit, loader = make_kit(tmp_path)
    outcome = kit.session(video(video_path)).run(call("get_frames", start_s=1.0, end_s=2.0, fps=4))
    assert outcome is not None and outcome.error is None, outcome
    (clip,) = outcome.videos
    assert clip.frames.shape[0] == 4 and clip.metadata.clip == (1.0, 2.0)
    assert all(1.0 - 1e-6 <= t < 2.0 for t in clip.metadata.timestamps)
    # Exactly the project's frames for that window: a loader with those parameters, and the decoder.
    base, image = data_params("qwen2_5_vl")
    params = VideoParams(**{**base.as_dict(), "fps": 4.0, "min_frames": 2, "max_frames": 8})
    expected, meta = FrameLoader(None, params, image).load_video(video_path, clip=(1.0, 2.0))
    np.testing.assert_array_equal(clip.frames, expected)
    assert clip.metadata == meta
    np.testing.assert_array_equal(clip.frames, decode_video(video_path, params.with_window(1.0, 2.0))[0])
    stats = loader.stats()
    assert (stats["hits"], stats["misses"], stats["write_backs"]) == (0, 1, 1)
    # The same window again (a re-fetch by the outcome's ref): from the store, the same frames.
    again = kit.refetch(outcome.refs[0])
    np.testing.assert_array_equal(again.frames, clip.frames)
    assert again.metadata == clip.metadata
    assert loader.stats()["hits"] == 1 and loader.stats()["misses"] == 1
    ref = outcome.refs[0]
    assert ref["tool"] == "get_frames" and ref["video_path"] == video_path and ref["max_frames"] == 8
    assert (ref["start_s"], ref["end_s"], ref["fps"]) == (1.0, 2.0, 4.0)
    json.dumps(ref)
    assert "4 frames of 1.00-2.00 s" in outcome.text and "source frame 128x96" in outcome.text
    assert "at 4 fps, 84x56 pixels each" in outcome.text and "frame times (s): 1.00, 1.30, 1.60, 1.90." in outcome.text
    assert "12 of 16 frames left" in outcome.text


def test_fps_is_capped_and_a_long_window_thinned_to_the_call_budget(tmp_path, video_path):
    kit, _ = make_kit(tmp_path, max_fps=5, frames_per_call=6, frames_per_trajectory=40)
    session = kit.session(video(video_path))
    capped = session.run(call("get_frames", start_s=0.0, end_s=1.0, fps=30))
    assert capped.error is None and capped.videos[0].frames.shape[0] == 4  # 5 fps: 5 frames, whole patches: 4
    assert "fps 30 is above the limit of 5, sampled at 5" in capped.text
    thinned = session.run(call("get_frames", start_s=0.0, end_s=3.0))  # fps left out: the highest rate
    assert thinned.error is None and thinned.videos[0].frames.shape[0] == 6
    assert "at 5 fps this window would give 15 frames; it was thinned to 6 frames (2 fps) to stay within the " \
           "limit of 6 frames per call" in thinned.text
    assert thinned.refs[0]["fps"] == pytest.approx(2.0) and thinned.refs[0]["max_frames"] == 6
    assert session.frames_fetched == 10 and session.calls == 2


def test_the_trajectory_budget_thins_then_refuses(tmp_path, video_path):
    kit, _ = make_kit(tmp_path, frames_per_call=8, frames_per_trajectory=11, max_turns=5)
    session = kit.session(video(video_path))
    first = session.run(call("get_frames", start_s=0.0, end_s=2.0, fps=4))
    assert first.frames == 8 and "3 of 11 frames left" in first.text
    second = session.run(call("get_frames", start_s=2.0, end_s=3.0, fps=4))
    assert second.frames == 2 and "within the 3 frames left for this answer" in second.text
    third = session.run(call("get_frames", start_s=0.0, end_s=1.0, fps=2))
    assert third.error is not None and third.frames == 0
    assert "frame budget used up: 10 of 11 frames fetched for this answer, 1 left and this call needs at least 2" \
           in third.text
    zoom = session.run(call("zoom", t_s=1.0, box=list(RED_BOX)))
    assert zoom.error is None and zoom.frames == 1
    refused = session.run(call("zoom", t_s=1.0, box=list(RED_BOX)))
    assert refused.error is not None and "0 left and this call needs at least 1" in refused.text
    assert (session.calls, session.errors, session.frames_fetched) == (5, 2, 11)


def test_a_call_past_the_turn_limit_is_told_to_answer(tmp_path, video_path):
    kit, _ = make_kit(tmp_path, max_turns=2)
    session = kit.session(video(video_path))
    turn = call("get_frames", start_s=0.0, end_s=0.5, fps=4)
    assert session.run(turn).error is None and session.run("<tool_call>{oops</tool_call>").error is not None
    limited = session.run(turn)
    assert limited.error is not None and not limited.videos
    assert limited.text == ("Error: turn limit reached: this answer has used its 2 tool call(s); answer now "
                            "without calling a tool")
    assert session.calls == 3
    assert session.run("<answer>3</answer>") is None and session.calls == 3


@pytest.mark.parametrize(("turn", "message"), [
    (call("get_frames", start_s=2.0, end_s=1.0), "get_frames: start_s (2) must be before end_s (1)"),
    (call("get_frames", start_s=1.0, end_s=1.0), "get_frames: start_s (1) must be before end_s (1)"),
    (call("get_frames", start_s=-1.0, end_s=1.0), "get_frames: start_s=-1 is before the start of the video (0 s)"),
    (call("get_frames", start_s=3.0, end_s=4.0), "get_frames: start_s=3 is at or after the end of the video (3.00 s)"),
    (call("get_frames", start_s=1.0, end_s=3.5), "get_frames: end_s=3.5 is after the end of the video (3.00 s)"),
    (call("get_frames", start_s=0.0, end_s=1.0, fps=0), "get_frames: argument 'fps' must be > 0, got 0"),
    (call("get_frames", start_s=0.0), "get_frames is missing the argument 'end_s'"),
    (call("get_frames", start_s=0.0, end_s="2"), "argument 'end_s' must be a number of seconds, got the string '2'"),
    (call("zoom", t_s=5.0, box=[0, 0, 8, 8]), "zoom: t_s=5 is after the end of the video (3.00 s)"),
    (call("zoom", t_s=1.0, box=[0, 0, 200, 8]), "zoom: box: [0, 0, 200, 8]"),  # found by the source
    (call("zoom", t_s=1.0, box=[10, 10, 10, 20]), "zoom: box [10, 10, 10, 20] is empty: it needs x1 < x2 and y1 < y2"),
    (call("zoom", t_s=1.0, box=[30, 10, 20, 20]), "zoom: box [30, 10, 20, 20] is empty"),
    (call("zoom", t_s=1.0, box=[-4, 0, 8, 8]), "zoom: box [-4, 0, 8, 8] has a negative coordinate"),
    (call("rewind", t_s=1.0), "unknown tool 'rewind': the tools are get_frames and zoom"),
    ("<tool_call>\n{\"name\": \"zoom\", \"arguments\": {\"t_s\": 1.0\n</tool_call>", "bad tool call: the tool call "
                                                                                     "is not valid JSON"),
])
def test_every_bad_call_gets_a_message_saying_what_was_wrong(tmp_path, video_path, turn, message):
    kit, loader = make_kit(tmp_path)
    session = kit.session(video(video_path))
    outcome = session.run("Checking. " + turn)
    assert isinstance(outcome, ToolOutcome) and outcome.error is not None
    assert message in outcome.text, outcome.text
    assert outcome.text == "Error: " + outcome.error
    assert not outcome.videos and not outcome.images and not outcome.refs
    assert session.calls == 1 and session.errors == 1 and session.frames_fetched == 0
    # The refused call still gets a tool turn: no placeholders, the message inside <tool_response>.
    text = kit.tool_turn_text(outcome)
    assert VIDEO_PLACEHOLDER not in text and IMAGE_PLACEHOLDER not in text and outcome.text in text


def test_a_file_that_cannot_be_decoded_is_a_message_not_an_exception(tmp_path):
    broken = tmp_path / "broken.mp4"
    broken.write_bytes(b"not a video at all")
    kit, _ = make_kit(tmp_path)
    session = kit.session(ToolVideo(path=str(broken), key=None, duration_s=3.0))
    outcome = session.run(call("get_frames", start_s=0.0, end_s=1.0))
    assert outcome.error is not None and "get_frames: the frames could not be fetched" in outcome.text
    no_file = kit.session(ToolVideo(path=None, key="abc", duration_s=3.0)).run(call("zoom", t_s=1.0, box=[0, 0, 8, 8]))
    assert no_file.error is not None and "zoom: the frames could not be fetched (ToolSourceError)" in no_file.text


def test_zoom_crops_the_source_frame_where_the_box_says(tmp_path, video_path):
    kit, loader = make_kit(tmp_path)
    session = kit.session(video(video_path))
    outcome = session.run(call("zoom", t_s=1.2, box=list(RED_BOX)))
    assert outcome.error is None, outcome.text
    (crop,) = outcome.images
    meta = crop.metadata
    assert (meta.source_width, meta.source_height) == (32, 32)  # the box's size in source pixels
    assert meta.height % 28 == 0 and meta.width % 28 == 0 and meta.height * meta.width <= 4 * 56 * 56
    assert meta.height * meta.width >= 56 * 56  # a small detail is enlarged
    inner = crop.image[meta.height // 4: -meta.height // 4, meta.width // 4: -meta.width // 4].astype(int)
    assert inner[..., 0].mean() > 180 and inner[..., 1].mean() < 60 and inner[..., 2].mean() < 60
    elsewhere = session.run(call("zoom", t_s=1.2, box=[8, 16, 40, 48])).images[0].image.astype(int)
    assert elsewhere[..., 0].mean() < 80
    assert "box [80, 16, 112, 48] (32x32 source pixels)" in outcome.text
    again = kit.refetch(outcome.refs[0])
    np.testing.assert_array_equal(again.image, crop.image)
    # One decode of the full-resolution frame at 1.2 s; the second box and the re-fetch read it from the store.
    assert (loader.stats()["misses"], loader.stats()["write_backs"], loader.stats()["hits"]) == (1, 1, 2)


def test_a_zoom_at_the_very_end_reads_the_last_frame(tmp_path, video_path):
    kit, _ = make_kit(tmp_path)
    outcome = kit.session(video(video_path)).run(call("zoom", t_s=SECONDS, box=[0, 0, 16, 16]))
    assert outcome.error is None and outcome.refs[0]["t_s"] < SECONDS


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5"])
def test_tool_turns_build_through_the_family_processor(tmp_path, video_path, tiny_model_factory, family):
    kit, _ = make_kit(tmp_path, family)
    write = xml if family == "qwen3_5" else call
    session = kit.session(video(video_path))
    clip = session.run("Let me look again.\n" + write("get_frames", start_s=0.5, end_s=1.5, fps=3))
    zoom = session.run(write("zoom", t_s=1.0, box=list(RED_BOX)))
    assert clip.error is None and zoom.error is None, (clip.text, zoom.text)
    assert clip.videos[0].frames.shape[0] % 2 == 0
    both = ToolOutcome(text=clip.text + " " + zoom.text, videos=clip.videos, images=zoom.images,
                       refs=clip.refs + zoom.refs)
    text = kit.tool_turn_text(both)
    assert text.startswith("<|im_end|>\n<|im_start|>user\n<tool_response>\n") and \
        text.endswith("</tool_response><|im_end|>\n<|im_start|>assistant\n")
    assert text.count(VIDEO_PLACEHOLDER) == 1 and text.count(IMAGE_PLACEHOLDER) == 1
    assert text.index(VIDEO_PLACEHOLDER) < text.index(IMAGE_PLACEHOLDER)
    builder = PromptBuilder.from_pretrained(str(tiny_model_factory(family)))
    # The project's strict placeholder/feature checks on the tool turn with the tool's own media.
    segment = build_segment(builder.processor, text, both.videos, both.images, family=family)
    assert segment.num_video_tokens > 0 and segment.num_image_tokens > 0
    tokenizer = builder.tokenizer
    assert segment.prompt_ids.count(tokenizer.convert_tokens_to_ids("<|vision_start|>")) >= 2
    # What the tiny template renders for the same conversation is prompt + policy turn + tool turn.
    prompt = [{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "What is red?"}]}]
    turn = "Let me look again.\n" + write("zoom", t_s=1.0, box=list(RED_BOX))
    rendered = builder.processor.apply_chat_template(
        [*prompt, {"role": "assistant", "content": turn},
         {"role": "tool", "content": [{"type": "text", "text": zoom.text + "\n"}, {"type": "image"}]}],
        tokenize=False, add_generation_prompt=True)
    start = builder.processor.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
    assert rendered == start + turn + kit.tool_turn_text(zoom)


def test_a_turn_without_a_call_ends_the_trajectory(tmp_path, video_path):
    kit, _ = make_kit(tmp_path)
    session = kit.session(video(video_path))
    assert session.run("<think>The square is red.</think><answer>red</answer>") is None
    assert session.calls == 0 and kit.stop_strings == ("</tool_call>",)
    assert kit.chat_template_kwargs()["tool_call_format"] == "json"
    assert [s["function"]["name"] for s in kit.chat_template_kwargs()["tools"]] == ["get_frames", "zoom"]


def test_the_factory_picks_the_local_or_the_service_source(tmp_path):
    store = tmp_path / "store"
    cfg = RunConfig.model_validate({"data": {"frame_cache": {"store": str(store)}},
                                    "worker": {"rollout": {"tools": {"enabled": True, "frames_per_call": 4}}}})
    local = make_tool_frame_source(cfg, "qwen3_vl")
    assert isinstance(local, LocalToolFrameSource)
    assert local.loader.write_back and local.loader.video_params.factor == 32
    assert local.loader.store is not None and local.loader.store.url.endswith("store")
    kit = make_tool_kit(cfg, "qwen3_vl")
    assert kit.cfg.frames_per_call == 4 and kit.family.name == "qwen3_vl"
    from easyvideor1.rollout.tools.remote import HttpToolFrameSource

    remote = make_tool_frame_source(cfg, "qwen3_vl", service_url="http://127.0.0.1:9")
    try:
        assert isinstance(remote, HttpToolFrameSource) and remote.url == "http://127.0.0.1:9"
        assert remote.timeout_s == cfg.worker.rollout.tools.timeout_s
    finally:
        remote.close()


def test_only_the_parts_module_decides_the_tool_frames_by_mode():
    """train/parts.py is the one place that reads distributed.mode: the frame source is told a URL."""
    from easyvideor1.train.parts import tool_frames_url

    url = "http://127.0.0.1:9"
    embedded = RunConfig.model_validate({"distributed": {"frame_cache_url": url}})
    assert tool_frames_url(embedded) is None  # embedded: this process's store, even with a URL set
    distributed = RunConfig.model_validate({"distributed": {"mode": "distributed", "frame_cache_url": url}})
    assert tool_frames_url(distributed) == url
    # Distributed mode without a service URL serves the tools from the store in this process.
    assert tool_frames_url(RunConfig.model_validate({"distributed": {"mode": "distributed"}})) is None
    assert isinstance(make_tool_frame_source(embedded, "qwen3_vl", service_url=tool_frames_url(embedded)),
                      LocalToolFrameSource)
    # No other runtime code compares the mode (config/memory.py's GPU estimate is not a part).
    import re
    from pathlib import Path

    import easyvideor1

    root = Path(easyvideor1.__file__).parent
    readers = sorted(str(p.relative_to(root)) for p in root.rglob("*.py")
                     if re.search(r"\w\.distributed\.mode\s*[!=]=", p.read_text()))
    assert readers == ["config/memory.py", "train/parts.py"], readers


def test_window_max_pixels_sizes_the_clip_frames(tmp_path, video_path):
    kit, _ = make_kit(tmp_path, window_max_pixels=28 * 28 * 4)
    clip = kit.session(video(video_path)).run(call("get_frames", start_s=0.0, end_s=1.0, fps=2)).videos[0]
    assert clip.metadata.height * clip.metadata.width <= 28 * 28 * 4 and clip.metadata.width % 28 == 0
    assert clip.metadata.width < 84  # smaller than the data's own budget gives


def test_an_unknown_duration_leaves_the_end_to_the_decoder(tmp_path, video_path):
    kit, _ = make_kit(tmp_path)
    session = kit.session(ToolVideo(path=video_path, key=None, duration_s=0.0))
    inside = session.run(call("get_frames", start_s=2.0, end_s=9.0, fps=2))
    assert inside.error is None and inside.videos[0].metadata.clip == (2.0, 3.0)  # clamped to the real end
    past = session.run(call("get_frames", start_s=5.0, end_s=9.0, fps=2))
    assert past.error is not None and "starts at or after the end of the video" in past.text


def test_a_call_budget_below_one_temporal_patch_leaves_only_zoom(tmp_path, video_path):
    kit, _ = make_kit(tmp_path, frames_per_call=1)
    session = kit.session(video(video_path))
    refused = session.run(call("get_frames", start_s=0.0, end_s=1.0))
    assert refused.error is not None and "frames_per_call (1) is below one temporal patch of 2 frames" in refused.text
    assert session.run(call("zoom", t_s=0.5, box=[0, 0, 32, 32])).error is None

"""The shared prompt builder: same tokens as the processor, strict and early errors."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from easyvideor1.models import (
    MediaInputError,
    PlaceholderMismatchError,
    VideoInput,
    build_prompt,
    check_visual_tokens,
    messages_from_problem,
)
from easyvideor1.models.inputs import hf_video_metadata
from easyvideor1.models.tiny import random_image_input, random_video_input


def test_messages_from_problem():
    messages = messages_from_problem("<video>\nWhat is in <image> here?", system="Be brief.")
    assert messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "\nWhat is in "},
                                     {"type": "image"}, {"type": "text", "text": " here?"}]},
    ]


@pytest.mark.parametrize("name", ["qwen2_5_vl", "qwen3_vl"])
def test_builder_equals_direct_processor_call(processors, name):
    processor = processors[name]
    video = random_video_input(name, 6, 2, 3, source_fps=30.0, stride=15)
    image = random_image_input(name, 2, 2)
    inputs = build_prompt(processor, "<video><image>Where?", [video], [image], family=name, sample_id="a")
    direct = processor(text=[inputs.prompt_text], videos=[video.frames], images=[image.image],
                       video_metadata=[hf_video_metadata(video.metadata)], do_sample_frames=False, do_resize=False,
                       return_tensors="pt")
    assert inputs.prompt_ids == direct["input_ids"][0].tolist()
    assert inputs.mm_token_type_ids == direct["mm_token_type_ids"][0].tolist()
    for key in ("pixel_values_videos", "video_grid_thw", "pixel_values", "image_grid_thw"):
        assert torch.equal(inputs.tensors[key], direct[key]), key
    # Frames are neither re-sampled nor resized: 6 frames -> 3 temporal patches of 2x3 units.
    assert inputs.tensors["video_grid_thw"].tolist() == [[3, 4, 6]]


def test_qwen3_timestamps_come_from_true_indices_and_fps(processors):
    # Frames 0, 30, 60, 90 of a 30 fps clip: without metadata the processor would assume 24 fps.
    video = random_video_input("qwen3_vl", 4, 1, 1, source_fps=30.0, stride=30)
    inputs = build_prompt(processors["qwen3_vl"], "<video>When?", [video], family="qwen3_vl", sample_id="t")
    text = processors["qwen3_vl"].tokenizer.decode(inputs.prompt_ids)
    assert "<0.5 seconds>" in text and "<2.5 seconds>" in text and "<0.6 seconds>" not in text


def test_placeholder_count_mismatch_names_sample_and_counts(processors):
    video = random_video_input("qwen2_vl", 2, 1, 1)
    with pytest.raises(PlaceholderMismatchError, match=r"sample 'row-7'.*1 video and 0 image placeholder.*2 video"):
        build_prompt(processors["qwen2_vl"], "<video>What?", [video, video], family="qwen2_vl", sample_id="row-7")


def test_frames_not_on_factor_grid_are_refused(processors):
    video = random_video_input("qwen2_vl", 2, 2, 2)  # 56x56: right for Qwen2, wrong for Qwen3
    with pytest.raises(MediaInputError, match=r"sample 's1' video 0: 56x56 is not a multiple of the qwen3_vl factor 32"):
        build_prompt(processors["qwen3_vl"], "<video>Hm?", [video], family="qwen3_vl", sample_id="s1")


def test_metadata_that_disagrees_with_frames_is_refused(processors):
    video = random_video_input("qwen2_vl", 4, 1, 1)
    fewer = VideoInput(video.frames[:3], video.metadata)
    with pytest.raises(MediaInputError, match="metadata lists 4 frame indices for 3 frames"):
        build_prompt(processors["qwen2_vl"], "<video>Hm?", [fewer], family="qwen2_vl", sample_id="s2")
    wrong_size = VideoInput(video.frames, dataclasses.replace(video.metadata, height=56))
    with pytest.raises(MediaInputError, match="metadata says 56x28, frames are 28x28"):
        build_prompt(processors["qwen2_vl"], "<video>Hm?", [wrong_size], family="qwen2_vl", sample_id="s3")
    floats = VideoInput(video.frames.astype(np.float32), video.metadata)
    with pytest.raises(MediaInputError, match=r"\(T, H, W, 3\) uint8"):
        build_prompt(processors["qwen2_vl"], "<video>Hm?", [floats], family="qwen2_vl", sample_id="s4")


def test_check_visual_tokens_message():
    with pytest.raises(PlaceholderMismatchError) as info:
        check_visual_tokens("clip-3", [1, 9, 9, 9, 2], image_token_id=8, video_token_id=9,
                            video_grid_thw=[[2, 2, 4]], merge_size=2)
    message = str(info.value)
    assert "sample 'clip-3': video features and video tokens do not match" in message
    assert "3 video placeholder tokens" in message and "4 video features" in message


def test_text_only_prompt(processors):
    inputs = build_prompt(processors["qwen3_5"], "Count to three.", family="qwen3_5", sample_id="t")
    assert inputs.num_visual_tokens == 0 and inputs.tensors == {}
    assert inputs.position_ids.shape == (3, len(inputs.prompt_ids))
    assert inputs.position_ids[0].tolist() == list(range(len(inputs.prompt_ids)))

"""Family registry, detection and visual-token arithmetic, checked against the real processors."""

from __future__ import annotations

import json

import pytest

from easyvideor1.errors import ConfigError
from easyvideor1.models import (
    FAMILIES,
    IMAGE_PAD,
    VIDEO_PAD,
    build_prompt,
    detect_family,
    get_family,
    qwen3_frame_timestamps,
    video_prompt_token_count,
    visual_token_count,
)
from easyvideor1.models.tiny import random_image_input, random_video_input

FAMILY_NAMES = tuple(FAMILIES)


def test_registry_geometry():
    assert get_family("qwen2_vl").factor == 28
    assert get_family("Qwen2.5-VL").factor == 28
    assert get_family("qwen3_vl").factor == 32
    assert get_family("qwen3_5").factor == 32
    assert get_family("qwen2_vl").hf_rope_index_differs and not get_family("qwen3_vl").hf_rope_index_differs
    with pytest.raises(ConfigError, match="unknown model family 'llama'"):
        get_family("llama")


@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_detect_family_from_config(tiny_dirs, name):
    family = detect_family(tiny_dirs[name])
    assert family.name == name
    assert family.patch_size == (16 if name.startswith("qwen3") else 14)
    assert (family.temporal_patch_size, family.merge_size) == (2, 2)


def test_detect_family_errors(tmp_path):
    with pytest.raises(ConfigError, match="no config.json"):
        detect_family(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(ConfigError, match="model_type 'llama' is not a supported VL family"):
        detect_family(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ConfigError, match="invalid JSON"):
        detect_family(tmp_path)


def test_visual_token_arithmetic():
    # Qwen2-VL: 16 frames of 56x84 -> 8 temporal patches x (4 x 6 patches) / 4
    assert visual_token_count("qwen2_vl", (16, 56, 84, 3)) == 8 * 4 * 6 // 4
    # An odd frame count is padded to a whole temporal patch.
    assert visual_token_count("qwen2_vl", (5, 56, 56)) == 3 * 4 * 4 // 4
    assert visual_token_count("qwen3_vl", (4, 64, 96, 3)) == 2 * 4 * 6 // 4
    assert visual_token_count("qwen3_vl", (64, 128, 3), kind="image") == 4 * 8 // 4
    with pytest.raises(ValueError, match="not a multiple of the qwen3_vl factor 32"):
        visual_token_count("qwen3_vl", (4, 60, 64, 3))
    with pytest.raises(ValueError, match="video shape must be"):
        visual_token_count("qwen2_vl", (56, 56))
    with pytest.raises(ValueError, match="at least one frame"):
        visual_token_count("qwen2_vl", (0, 56, 56))


def test_qwen3_timestamps_are_patch_means():
    # Frames 0, 30, 60, 90 of a 30 fps video: patches (0 s, 1 s) and (2 s, 3 s).
    assert qwen3_frame_timestamps([0, 30, 60, 90], 30.0) == [0.5, 2.5]
    # An odd tail repeats its last index.
    assert qwen3_frame_timestamps([0, 30, 60], 30.0) == [0.5, 2.0]


@pytest.mark.parametrize("name", FAMILY_NAMES)
@pytest.mark.parametrize(("num_frames", "rows", "cols"), [(4, 2, 2), (7, 1, 3), (10, 3, 2)])
def test_token_counts_match_real_processor(processors, name, num_frames, rows, cols):
    processor = processors[name]
    video = random_video_input(name, num_frames, rows, cols, source_fps=7.0, stride=3)
    image = random_image_input(name, rows + 1, cols)
    inputs = build_prompt(processor, "<image><video>Describe.", [video], [image], family=name, sample_id="s")
    ids = inputs.prompt_ids
    vid_id, img_id = processor.video_token_id, processor.image_token_id
    assert ids.count(vid_id) == visual_token_count(name, video.frames.shape)
    assert ids.count(img_id) == visual_token_count(name, image.image.shape, kind="image")

    # The prompt grows by exactly what video_prompt_token_count says (minus the one placeholder).
    text_only = processor.tokenizer(inputs.prompt_text, add_special_tokens=False)["input_ids"]
    image_tokens = visual_token_count(name, image.image.shape, kind="image")
    video_tokens = video_prompt_token_count(name, video.frames.shape, frame_indices=video.metadata.frame_indices,
                                            fps=video.metadata.source_fps, tokenizer=processor.tokenizer)
    assert len(ids) == len(text_only) - 2 + image_tokens + video_tokens
    if get_family(name).per_frame_timestamps:
        stamps = qwen3_frame_timestamps(video.metadata.frame_indices, video.metadata.source_fps)
        text = processor.tokenizer.decode(ids)
        assert all(f"<{s:.1f} seconds>" in text for s in stamps)
        assert text.count(IMAGE_PAD) == image_tokens and VIDEO_PAD in text
    else:
        assert video_tokens == visual_token_count(name, video.frames.shape)

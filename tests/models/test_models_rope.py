"""M-RoPE positions: the original Qwen rule, and where transformers 5.19 departs from it (Trap 1)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from easyvideor1.models import PositionError, build_prompt, mrope_positions
from easyvideor1.models.tiny import random_image_input, random_video_input

VID, IMG, TXT = 9, 8, 1  # video placeholder, image placeholder, any text token


def test_qwen2_vl_text_after_video_continues_after_the_temporal_extent():
    # 8 frames -> 4 temporal patches of 1x2 merged units: t in 0..3, h in 0..0, w in 0..1.
    ids = [TXT, TXT, *([VID] * 8), TXT, TXT]
    positions, next_position = mrope_positions("qwen2_vl", ids, image_token_id=IMG, video_token_id=VID,
                                               video_grid_thw=[[4, 2, 4]])
    block = positions[:, 2:10]
    assert block[0].tolist() == [2, 2, 3, 3, 4, 4, 5, 5]  # time
    assert block[1].tolist() == [2] * 8  # row
    assert block[2].tolist() == [2, 3] * 4  # column
    # Text continues at max(t, h, w) + 1 = 6, not at start + max(h, w) = 4.
    assert positions[:, 10:].tolist() == [[6, 7]] * 3
    assert next_position == 8


def test_qwen2_5_vl_scales_time_by_seconds():
    ids = [*([VID] * 3), TXT]
    positions, _ = mrope_positions("qwen2_5_vl", ids, image_token_id=IMG, video_token_id=VID,
                                   video_grid_thw=[[3, 2, 2]], second_per_grid_ts=[1.5])
    # tokens_per_second 2 x 1.5 s per temporal patch: t = 0, 3, 6 (truncated floats)
    assert positions[0, :3].tolist() == [0, 3, 6]
    assert positions[:, 3].tolist() == [7, 7, 7]


def test_qwen3_vl_video_is_one_block_per_temporal_patch():
    ids = [TXT, *([VID] * 2), TXT, TXT, *([VID] * 2), TXT]
    positions, next_position = mrope_positions("qwen3_vl", ids, image_token_id=IMG, video_token_id=VID,
                                               video_grid_thw=[[2, 2, 4]])
    assert positions[0, 1:3].tolist() == [1, 1]  # time restarts at the block start
    assert positions[:, 3].tolist() == [3, 3, 3]  # after a 1x2 block starting at 1: max 2, next 3
    assert next_position == 8


def test_grids_and_placeholders_must_agree():
    with pytest.raises(PositionError, match="sample 'x': 1 video block"):
        mrope_positions("qwen2_vl", [TXT, TXT], image_token_id=IMG, video_token_id=VID, video_grid_thw=[[2, 2, 2]],
                        sample_id="x")
    with pytest.raises(PositionError, match="more image placeholder blocks than image grids"):
        mrope_positions("qwen2_vl", [IMG], image_token_id=IMG, video_token_id=VID, sample_id="y")
    with pytest.raises(PositionError, match="needs 2 consecutive placeholder tokens"):
        mrope_positions("qwen2_vl", [VID, TXT], image_token_id=IMG, video_token_id=VID, video_grid_thw=[[2, 2, 2]])


def _transformers_positions(model, inputs):
    extra = {}
    if "second_per_grid_ts" in inputs.tensors:
        extra["second_per_grid_ts"] = inputs.tensors["second_per_grid_ts"]
    positions, _ = model.model.get_rope_index(
        torch.tensor([inputs.prompt_ids]), mm_token_type_ids=torch.tensor([inputs.mm_token_type_ids]),
        image_grid_thw=inputs.tensors.get("image_grid_thw"), video_grid_thw=inputs.tensors.get("video_grid_thw"),
        **extra)
    return positions[:, 0].numpy()


@pytest.mark.parametrize("name", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5"])
def test_against_transformers_get_rope_index(processors, hf_models, name):
    processor, model = processors[name], hf_models[name]
    image = build_prompt(processor, "<image>Which?", [], [random_image_input(name, 2, 3)], family=name)
    assert np.array_equal(image.position_ids, _transformers_positions(model, image))
    # 8 frames of 1x2 units: the temporal extent (4 patches) exceeds the spatial one (2 units).
    video = build_prompt(processor, "<video>Which?", [random_video_input(name, 8, 1, 2)], family=name)
    theirs = _transformers_positions(model, video)
    if name.startswith("qwen2"):
        # Trap 1: transformers 5.19 restarts text too early after a multi-frame video.
        first_video = video.prompt_ids.index(processor.video_token_id)
        n_video = video.num_video_tokens
        assert np.array_equal(video.position_ids[:, :first_video + n_video], theirs[:, :first_video + n_video])
        assert (video.position_ids[:, first_video + n_video:] > theirs[:, first_video + n_video:]).all()
    else:
        assert np.array_equal(video.position_ids, theirs)

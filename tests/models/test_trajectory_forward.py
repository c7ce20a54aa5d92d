"""The trainer's forward on multi-turn trajectories: a trajectory row, padded or packed (beside
single-turn rows), gives the log-probs of one forward over the whole sequence built by the real
processor, and its loss mask covers only the policy's tokens."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from easyvideor1.models import attention, perturb_weights
from easyvideor1.models.forward import collate_forward_batch, compute_log_probs
from easyvideor1.models.inputs import PROCESSOR_KWARGS, PromptBuilder, hf_video_metadata
from easyvideor1.models.packing import pack_forward_batch, packed_log_probs
from easyvideor1.models.rope import mrope_positions
from easyvideor1.models.tiny import random_image_input, random_video_input
from easyvideor1.models.trajectory import TrajectoryBuilder

TOOL_TURN = ("<|im_end|>\n<|im_start|>user\n<tool_response>\n{media}</tool_response><|im_end|>\n"
             "<|im_start|>assistant\n")
VIDEO_SLOT = "<|vision_start|><|video_pad|><|vision_end|>"
IMAGE_SLOT = "<|vision_start|><|image_pad|><|vision_end|>"


def _encode(builder: PromptBuilder, text: str) -> list[int]:
    return builder.tokenizer.encode(text, add_special_tokens=False)


def two_call_trajectory(builder: PromptBuilder, prompt, name: str):
    """prompt -> call -> tool turn with a video -> call -> tool turn with an image -> answer."""
    out = TrajectoryBuilder(builder, prompt)
    first = 'look<tool_call>{"name": "get_frames"}</tool_call>'
    clip = random_video_input(name, 4, 1, 2, seed=7, source_fps=8.0, stride=1, first_index=3)
    out.add_policy(_encode(builder, first), text=first)
    out.add_tool(out.tool_segment(TOOL_TURN.format(media=VIDEO_SLOT), [clip]))
    second = 'closer<tool_call>{"name": "zoom"}</tool_call>'
    crop = random_image_input(name, 2, 1, seed=8)
    out.add_policy(_encode(builder, second), text=second)
    out.add_tool(out.tool_segment(TOOL_TURN.format(media=IMAGE_SLOT), images=[crop]))
    answer = "<answer>7</answer>"
    out.add_policy(_encode(builder, answer) + [builder.tokenizer.eos_token_id], text=answer)
    trajectory = out.trajectory()
    assert (trajectory.turns, trajectory.tool_calls, trajectory.frames_fetched) == (3, 2, 5)
    full_text = (prompt.prompt_text + first + TOOL_TURN.format(media=VIDEO_SLOT) + second
                 + TOOL_TURN.format(media=IMAGE_SLOT) + answer + builder.tokenizer.eos_token)
    return trajectory, full_text, [*prompt.videos, clip], [*prompt.images, crop]


def whole_sequence(builder: PromptBuilder, full_text: str, videos, images):
    """The processor's ids and pixels for the whole multi-turn text, and our positions over it."""
    processor = builder.processor
    out = processor(text=[full_text], videos=[v.frames for v in videos],
                    video_metadata=[hf_video_metadata(v.metadata) for v in videos],
                    images=[im.image for im in images], return_tensors="pt", **PROCESSOR_KWARGS)
    ids = out["input_ids"][0].tolist()
    seconds = out.get("second_per_grid_ts")
    positions, _ = mrope_positions(builder.family, ids, image_token_id=processor.image_token_id,
                                   video_token_id=processor.video_token_id,
                                   image_grid_thw=out["image_grid_thw"].tolist(),
                                   video_grid_thw=out["video_grid_thw"].tolist(),
                                   second_per_grid_ts=None if seconds is None else seconds.tolist())
    return out, ids, positions


@pytest.fixture(scope="module", params=["qwen2_5_vl", "qwen3_vl"])
def setup(request, tiny_model_factory):
    from transformers import AutoModelForImageTextToText

    name = request.param
    model_dir = tiny_model_factory(name)
    builder = PromptBuilder.from_pretrained(str(model_dir))
    model = AutoModelForImageTextToText.from_pretrained(model_dir, attn_implementation=attention.register(),
                                                        dtype=torch.float32)
    attention.use_packed_attention(model)
    perturb_weights(model, seed=5)
    model.eval()
    prompt = builder.build("<video>\nWhich digit flashes?", [random_video_input(name, 4, 1, 1, seed=1)],
                           sample_id="traj")
    trajectory, full_text, videos, images = two_call_trajectory(builder, prompt, name)
    plain = builder.build("<image>\nWhat colour?", images=[random_image_input(name, 1, 1, seed=2)],
                          sample_id="plain")
    return name, builder, model, prompt, trajectory, (full_text, videos, images), plain


def test_trajectory_matches_the_processor_on_the_whole_sequence(setup):
    name, builder, _, prompt, trajectory, (full_text, videos, images), _ = setup
    out, ids, positions = whole_sequence(builder, full_text, videos, images)
    assert prompt.prompt_ids + trajectory.token_ids == ids
    np.testing.assert_array_equal(np.concatenate([prompt.position_ids, trajectory.position_ids], axis=1), positions)
    assert trajectory.next_position == int(positions.max()) + 1
    types = out["mm_token_type_ids"][0].tolist() if "mm_token_type_ids" in out else None
    if types is not None:
        assert list(prompt.mm_token_type_ids) + trajectory.mm_token_type_ids == types
    # The tool media's pixels are the tail of the whole sequence's, in order.
    for key in ("pixel_values_videos", "video_grid_thw"):
        tail = out[key][-len(trajectory.tensors[key]):]
        torch.testing.assert_close(trajectory.tensors[key], tail)
    torch.testing.assert_close(trajectory.tensors["pixel_values"], out["pixel_values"])
    policy = np.asarray(trajectory.loss_mask, dtype=bool)
    tool_ids = np.asarray(trajectory.token_ids)[~policy]
    assert processor_tokens(builder) <= set(tool_ids.tolist())  # every vision token is a tool token
    assert not set(np.asarray(trajectory.token_ids)[policy].tolist()) & processor_tokens(builder)
    assert trajectory.policy_tokens < len(trajectory.token_ids)


def processor_tokens(builder: PromptBuilder) -> set[int]:
    return {builder.processor.image_token_id, builder.processor.video_token_id}


def _reference_log_probs(model, builder, full_text, videos, images, start: int) -> torch.Tensor:
    out, ids, positions = whole_sequence(builder, full_text, videos, images)
    visual = {k: out[k] for k in ("pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw")}
    input_ids = torch.tensor([ids])
    types = torch.tensor([[1 if t == builder.processor.image_token_id else
                           2 if t == builder.processor.video_token_id else 0 for t in ids]])
    with torch.no_grad():
        logits = model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
                       position_ids=torch.from_numpy(positions)[:, None, :], mm_token_type_ids=types,
                       use_cache=False, **visual).logits[0].float()
    log_softmax = torch.log_softmax(logits[start - 1:-1], dim=-1)
    return log_softmax.gather(-1, input_ids[0, start:, None]).squeeze(-1)


def test_padded_and_packed_rows_equal_one_forward_of_the_whole_sequence(setup):
    _, builder, model, prompt, trajectory, (full_text, videos, images), plain = setup
    reference = _reference_log_probs(model, builder, full_text, videos, images, len(prompt.prompt_ids))
    plain_response = [40, 41, 42, 43]
    prompts, responses = [plain, prompt], [plain_response, trajectory.token_ids]
    padded = collate_forward_batch(prompts, responses, pad_token_id=0, trajectories=[None, trajectory])
    packed = pack_forward_batch(prompts, responses, trajectories=[None, trajectory])
    assert padded.images_per_row == packed.images_per_row == [1, 0 + 1]
    assert padded.videos_per_row == packed.videos_per_row == [0, 1 + 1]
    n = len(trajectory.token_ids)
    for batch in (padded, packed):
        assert batch.loss_mask[1, :n].tolist() == trajectory.loss_mask
        assert batch.loss_mask[0].tolist()[:4] == [1, 1, 1, 1] and batch.loss_mask[0, 4:].sum() == 0
        assert batch.response_mask[1, :n].sum() == n  # log-probs cover the tool turns too
    with torch.no_grad():
        padded_lp, _ = compute_log_probs(model, padded)
        packed_lp, _ = packed_log_probs(model, packed)
        alone, _ = compute_log_probs(model, collate_forward_batch([plain], [plain_response], pad_token_id=0))
    policy = torch.tensor(trajectory.loss_mask, dtype=torch.bool)
    for log_probs in (padded_lp, packed_lp):
        torch.testing.assert_close(log_probs[1, :n][policy], reference[policy], rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(log_probs[1, :n], reference, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(log_probs[0, :4], alone[0], rtol=1e-4, atol=1e-4)


def test_single_turn_rows_are_unchanged_by_the_trajectory_path(setup):
    _, _, _, prompt, _, _, plain = setup
    responses = [[5, 6, 7], [8, 9]]
    old = collate_forward_batch([prompt, plain], responses, pad_token_id=0)
    new = collate_forward_batch([prompt, plain], responses, pad_token_id=0, trajectories=[None, None])
    for key in ("input_ids", "attention_mask", "position_ids", "mm_token_type_ids", "response_mask"):
        assert torch.equal(getattr(old, key), getattr(new, key)), key
    assert torch.equal(old.loss_mask, old.response_mask)
    assert old.visual.keys() == new.visual.keys()
    assert all(torch.equal(old.visual[k], new.visual[k]) for k in old.visual)
    assert pack_forward_batch([prompt, plain], responses).loss_masks is None


def test_a_trajectory_that_does_not_fit_its_row_is_refused(setup):
    _, _, _, prompt, trajectory, _, plain = setup
    with pytest.raises(ValueError, match="response ids differ from its trajectory"):
        collate_forward_batch([prompt], [trajectory.token_ids[:-1]], pad_token_id=0, trajectories=[trajectory])
    with pytest.raises(ValueError, match="sample 'plain': the trajectory's positions start at"):
        pack_forward_batch([plain], [trajectory.token_ids], trajectories=[trajectory])
    import dataclasses

    without_pixels = dataclasses.replace(trajectory, tensors={})
    with pytest.raises(ValueError, match="tool media have no pixel tensors"):
        collate_forward_batch([prompt], [trajectory.token_ids], pad_token_id=0, trajectories=[without_pixels])
    with pytest.raises(ValueError, match="1 trajectories for 2 responses"):
        pack_forward_batch([prompt, plain], [[1], [2]], trajectories=[None])

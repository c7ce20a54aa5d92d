"""A multi-turn sequence built turn by turn equals the whole conversation processed at once.

A prompt with a video, a policy turn, a tool turn with a video and an image, a second policy
turn: the trajectory's full-sequence ids, token types, pixel tensors and grids equal what the
HF processor gives for the whole conversation rendered in one go; its positions equal
models/rope.py on the processor's output (and transformers' own for Qwen3-VL, where it is
right, Trap 1); and the model's log-probs of the policy tokens computed from our inputs
(models/forward.py, as the engines and the trainer do) equal a plain forward of the HF model
on the processor's whole sequence.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from easyvideor1.models import PositionError, collate_forward_batch, compute_log_probs, mrope_positions
from easyvideor1.models.forward import response_log_probs_numpy
from easyvideor1.models.inputs import PromptBuilder, hf_video_metadata
from easyvideor1.models.tiny import perturb_weights, random_image_input, random_video_input
from easyvideor1.models.trajectory import TrajectoryBuilder, TrajectoryError

FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")
TURN_1 = "I will look closer."
TURN_2 = "The answer is 3."
TOOL_TEXT = ("<|im_end|>\n<|im_start|>user\n<|vision_start|><|video_pad|><|vision_end|>Frames 1 to 2 s."
             "<|vision_start|><|image_pad|><|vision_end|>Zoomed.<|im_end|>\n<|im_start|>assistant\n")


@pytest.fixture(scope="module")
def setups(tiny_model_factory):
    from transformers import AutoModelForImageTextToText

    out = {}
    for name in FAMILIES:
        path = tiny_model_factory(name)
        model = AutoModelForImageTextToText.from_pretrained(path)
        perturb_weights(model, seed=1)
        out[name] = (PromptBuilder.from_pretrained(str(path)), model.eval())
    return out


def _media(name):
    # Prompt: 4 frames of 1x2 units; tool: 6 frames of 2x1 units from later in a 5 fps source
    # (other seconds per patch for Qwen2.5-VL, other timestamps for Qwen3-VL); a 2x1 crop.
    prompt_video = random_video_input(name, 4, 1, 2, source_fps=4.0, stride=3, seed=5)
    tool_video = random_video_input(name, 6, 2, 1, source_fps=5.0, stride=1, seed=6, first_index=10)
    return prompt_video, tool_video, random_image_input(name, 2, 1, seed=7)


def _sequence(builder, name):
    prompt_video, tool_video, image = _media(name)
    tok = builder.tokenizer
    prompt = builder.build([{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "Count."}]}],
                           [prompt_video], sample_id="s")
    trajectory = TrajectoryBuilder(builder, prompt)
    turn_1 = tok(TURN_1, add_special_tokens=False)["input_ids"]
    trajectory.add_policy(turn_1, [-0.5] * len(turn_1), text=TURN_1)
    trajectory.add_tool(trajectory.tool_segment(TOOL_TEXT, [tool_video], [image]), refs=[{"tool": "get_frames"}])
    before_turn_2 = trajectory.full_inputs()
    turn_2 = tok(TURN_2 + "<|im_end|>", add_special_tokens=False)["input_ids"]
    trajectory.add_policy(turn_2, None, text=TURN_2)
    return prompt, trajectory, before_turn_2, turn_1, turn_2, (prompt_video, tool_video, image)


def _whole_conversation(builder, media):
    prompt_video, tool_video, image = media
    messages = [
        {"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "Count."}]},
        {"role": "assistant", "content": TURN_1},
        {"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "Frames 1 to 2 s."},
                                     {"type": "image"}, {"type": "text", "text": "Zoomed."}]},
        {"role": "assistant", "content": TURN_2},
    ]
    text = builder.processor.apply_chat_template(messages, tokenize=False)
    assert text.endswith("<|im_end|>\n")
    return builder.processor(
        text=[text[:-1]], videos=[prompt_video.frames, tool_video.frames],
        video_metadata=[hf_video_metadata(prompt_video.metadata), hf_video_metadata(tool_video.metadata)],
        images=[image.image], do_sample_frames=False, do_resize=False, return_tensors="pt")


@pytest.mark.parametrize("name", FAMILIES)
def test_full_sequence_equals_the_processor_on_the_whole_conversation(setups, name):
    builder, model = setups[name]
    prompt, trajectory, _, turn_1, turn_2, media = _sequence(builder, name)
    full = trajectory.full_inputs()
    direct = _whole_conversation(builder, media)
    ids = direct["input_ids"][0].tolist()
    assert full.prompt_ids == ids
    assert full.mm_token_type_ids == direct["mm_token_type_ids"][0].tolist()
    for key in ("pixel_values", "pixel_values_videos", "image_grid_thw", "video_grid_thw", "second_per_grid_ts"):
        assert (key in full.tensors) == (direct.get(key) is not None), key
        if key in full.tensors:
            assert torch.equal(full.tensors[key], direct[key]), key
    assert (name == "qwen2_5_vl") == ("second_per_grid_ts" in full.tensors)

    seconds = direct.get("second_per_grid_ts")
    theirs, next_position = mrope_positions(
        name, ids, image_token_id=builder.processor.image_token_id, video_token_id=builder.processor.video_token_id,
        image_grid_thw=direct["image_grid_thw"].tolist(), video_grid_thw=direct["video_grid_thw"].tolist(),
        second_per_grid_ts=None if seconds is None else seconds.tolist())
    assert np.array_equal(full.position_ids, theirs) and full.next_position == next_position
    if name == "qwen3_vl":
        hf_positions, _ = model.model.get_rope_index(
            direct["input_ids"], mm_token_type_ids=direct["mm_token_type_ids"],
            image_grid_thw=direct["image_grid_thw"], video_grid_thw=direct["video_grid_thw"])
        assert np.array_equal(full.position_ids, hf_positions[:, 0].numpy())

    # The trajectory itself: what comes after the prompt, with its masks and tool media.
    traj = trajectory.trajectory()
    n_prompt = len(prompt.prompt_ids)
    assert traj.token_ids == ids[n_prompt:]
    assert np.array_equal(traj.position_ids, full.position_ids[:, n_prompt:])
    n_tool = len(traj.token_ids) - len(turn_1) - len(turn_2)
    assert traj.loss_mask == [1] * len(turn_1) + [0] * n_tool + [1] * len(turn_2)
    assert trajectory.logprobs == [-0.5] * len(turn_1) + [0.0] * (n_tool + len(turn_2))
    assert (traj.turns, traj.tool_calls, traj.tool_errors, traj.frames_fetched) == (2, 1, 0, 7)
    assert traj.final_text == TURN_2 and traj.media_refs == ({"tool": "get_frames"},)
    assert len(traj.videos) == len(traj.images) == 1
    assert torch.equal(traj.tensors["video_grid_thw"], direct["video_grid_thw"][1:])
    # vLLM's input: the same sequence with one unexpanded placeholder per medium.
    placeholders = full.placeholder_ids
    assert placeholders.count(builder.processor.video_token_id) == 2
    assert placeholders.count(builder.processor.image_token_id) == 1
    assert placeholders[-len(turn_2):] == turn_2


@pytest.mark.parametrize("name", FAMILIES)
def test_policy_log_probs_from_our_inputs_equal_a_forward_on_the_whole_sequence(setups, name):
    builder, model = setups[name]
    prompt, trajectory, before_turn_2, turn_1, turn_2, media = _sequence(builder, name)
    direct = _whole_conversation(builder, media)
    ids = direct["input_ids"][0].tolist()
    seconds = direct.get("second_per_grid_ts")
    positions, _ = mrope_positions(
        name, ids, image_token_id=builder.processor.image_token_id, video_token_id=builder.processor.video_token_id,
        image_grid_thw=direct["image_grid_thw"].tolist(), video_grid_thw=direct["video_grid_thw"].tolist(),
        second_per_grid_ts=None if seconds is None else seconds.tolist())
    visual = {k: direct[k] for k in ("pixel_values", "pixel_values_videos", "image_grid_thw", "video_grid_thw",
                                     "second_per_grid_ts") if direct.get(k) is not None}
    with torch.no_grad():
        logits = model(input_ids=direct["input_ids"], attention_mask=direct["attention_mask"],
                       position_ids=torch.from_numpy(positions)[:, None, :],
                       mm_token_type_ids=direct["mm_token_type_ids"], **visual).logits[0].float()
    whole = torch.log_softmax(logits, dim=-1)
    per_token = whole[:-1].gather(-1, direct["input_ids"][0, 1:, None])[:, 0].numpy()  # log p(ids[i+1])

    # Turn 2 continued from the full sequence (what an engine gets), turn 1 from the prompt.
    for context, turn in ((before_turn_2, turn_2), (prompt, turn_1)):
        batch = collate_forward_batch([context], [turn], pad_token_id=0)
        with torch.no_grad():
            ours, _ = compute_log_probs(model, batch)
        ours = response_log_probs_numpy(ours, batch)[0]
        start = len(context.prompt_ids)
        assert ids[start:start + len(turn)] == turn
        np.testing.assert_allclose(ours, per_token[start - 1:start - 1 + len(turn)], atol=1e-5)


def test_a_policy_turn_with_a_vision_token_or_a_bad_tool_turn_is_refused(setups):
    builder, _ = setups["qwen2_5_vl"]
    prompt_video, tool_video, image = _media("qwen2_5_vl")
    prompt = builder.build("<video>Count.", [prompt_video], sample_id="bad")
    trajectory = TrajectoryBuilder(builder, prompt)
    with pytest.raises(TrajectoryError, match="sample 'bad': a policy turn holds a vision placeholder"):
        trajectory.add_policy([1, builder.processor.video_token_id], text="x")
    with pytest.raises(TrajectoryError, match="2 log-probs for 1 sampled tokens"):
        trajectory.add_policy([1], [0.0, 0.0], text="x")
    from easyvideor1.models import PlaceholderMismatchError

    with pytest.raises(PlaceholderMismatchError, match="sample 'bad'"):
        trajectory.tool_segment(TOOL_TEXT, [tool_video], [])  # an image placeholder without its image
    assert len(trajectory) == 0 and trajectory.trajectory().token_ids == []


def test_positions_that_contradict_the_prompt_are_refused(setups):
    import dataclasses

    builder, _ = setups["qwen2_5_vl"]
    prompt_video, _, _ = _media("qwen2_5_vl")
    prompt = builder.build("<video>Count.", [prompt_video], sample_id="p")
    shifted = dataclasses.replace(prompt, position_ids=prompt.position_ids + 1)
    with pytest.raises(PositionError, match="sample 'p': the positions of prompt \\+ trajectory differ"):
        TrajectoryBuilder(builder, shifted).trajectory()

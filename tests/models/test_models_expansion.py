"""Prompt ids from text + media metadata only: equal to the HF processor run on real pixels."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from easyvideor1.models import MediaInputError, PlaceholderMismatchError, build_prompt, mrope_positions
from easyvideor1.models import expansion as expansion_module
from easyvideor1.models.expansion import expand_prompt
from easyvideor1.models.families import get_family
from easyvideor1.models.inputs import (
    PIXEL_KEYS,
    PromptBuilder,
    attach_pixels,
    expand,
    hf_video_metadata,
    pixel_tensors,
    render_prompt,
)
from easyvideor1.models.tiny import random_image_input, random_video_input

FAMILY_NAMES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5")

# problem, videos as (frames, rows, cols, source fps, stride, first index), images as (rows, cols)
CASES = {
    "text": ("Count to three.", [], []),
    "video": ("<video>What moves first?", [(6, 2, 3, 30.0, 15, 0)], []),
    "image": ("<image>Which colour?", [], [(2, 3)]),
    "image_video": ("<image>\nand <video> the same?", [(4, 1, 2, 24.0, 12, 0)], [(1, 1)]),
    "two_videos": ("<video> then <video>: which is longer?",
                   [(5, 2, 2, 29.97, 7, 0), (2, 1, 3, 23.976, 11, 40)], []),
    "one_frame": ("<video>Still?", [(1, 1, 1, 7.5, 1, 3)], []),
    "odd_sizes": ("<video>Odd?<image>", [(7, 3, 1, 12.5, 5, 2)], [(1, 5)]),
    "interleaved": ("A <image> B <video> C <image> D <video> E",
                    [(3, 1, 2, 0.5, 1, 0), (9, 2, 1, 59.94, 19, 7)], [(2, 2), (3, 1)]),
}


def _media(name, spec):
    problem, video_specs, image_specs = spec
    videos = [random_video_input(name, t, r, c, source_fps=fps, stride=stride, first_index=first, seed=i)
              for i, (t, r, c, fps, stride, first) in enumerate(video_specs)]
    images = [random_image_input(name, r, c, seed=10 + i) for i, (r, c) in enumerate(image_specs)]
    return problem, videos, images


def _reference(processor, name, prompt_text, videos, images):
    """Today's build_prompt: the processor on real pixels, then positions from its outputs."""
    call = {"text": [prompt_text], "do_sample_frames": False, "do_resize": False, "return_tensors": "pt"}
    if videos:
        call["videos"] = [v.frames for v in videos]
        call["video_metadata"] = [hf_video_metadata(v.metadata) for v in videos]
    if images:
        call["images"] = [im.image for im in images]
    out = processor(**call)
    ids = out["input_ids"][0].tolist()
    grids = {k: [] if out.get(k) is None else out[k].tolist() for k in ("image_grid_thw", "video_grid_thw")}
    seconds = out.get("second_per_grid_ts")
    seconds = None if seconds is None else tuple(float(s) for s in seconds.tolist())
    positions, next_position = mrope_positions(
        name, ids, image_token_id=processor.image_token_id, video_token_id=processor.video_token_id,
        image_grid_thw=grids["image_grid_thw"], video_grid_thw=grids["video_grid_thw"], second_per_grid_ts=seconds)
    return out, ids, positions, next_position, grids, seconds


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_expand_equals_processor_on_pixels(processors, name, case):
    processor = processors[name]
    problem, videos, images = _media(name, CASES[case])
    prompt_text = render_prompt(processor, problem)
    out, ids, positions, next_position, grids, seconds = _reference(processor, name, prompt_text, videos, images)

    inputs = expand(processor, problem, [v.metadata for v in videos], [im.metadata for im in images], family=name,
                    sample_id=case)
    assert inputs.prompt_text == prompt_text
    assert inputs.prompt_ids == ids
    assert inputs.mm_token_type_ids == out["mm_token_type_ids"][0].tolist()
    assert np.array_equal(inputs.position_ids, positions) and inputs.position_ids.dtype == np.int64
    assert inputs.next_position == next_position
    assert [list(g) for g in inputs.video_grid_thw] == grids["video_grid_thw"]
    assert [list(g) for g in inputs.image_grid_thw] == grids["image_grid_thw"]
    assert inputs.second_per_grid_ts == seconds
    assert (seconds is not None) == (name == "qwen2_5_vl" and bool(videos))
    assert inputs.num_video_tokens == ids.count(processor.video_token_id)
    assert inputs.num_image_tokens == ids.count(processor.image_token_id)
    assert inputs.tensors == {} and inputs.videos == () and inputs.images == ()
    assert inputs.pixels_pending == bool(videos or images)
    assert (inputs.num_videos, inputs.num_images) == (len(videos), len(images))

    # The splice equals tokenizing the expanded text, which is what the processor does.
    fam = get_family(name)
    tokens = expansion_module._resolve_tokens(processor)
    stamps = ([expansion_module.qwen3_frame_timestamps(v.metadata.frame_indices, v.metadata.source_fps)
               for v in videos] if fam.per_frame_timestamps else None)
    text = expansion_module._expanded_text(tokens, fam, prompt_text, inputs.video_grid_thw, inputs.image_grid_thw,
                                           stamps)
    assert processor.tokenizer(text)["input_ids"] == ids

    # Pixels without text: exactly the processor's tensors (values and dtypes).
    tensors = pixel_tensors(processor, videos, images, family=name, sample_id=case)
    assert sorted(tensors) == sorted(k for k in PIXEL_KEYS if out.get(k) is not None)
    for key, value in tensors.items():
        assert value.dtype == out[key].dtype and torch.equal(value, out[key]), key

    # build_prompt (= expansion + pixels + checks) and attach_pixels give the same prompt.
    built = build_prompt(processor, problem, videos, images, family=name, sample_id=case)
    attached = attach_pixels(processor, inputs, videos, images)
    for other in (built, attached):
        assert other.prompt_ids == ids and np.array_equal(other.position_ids, positions)
        assert other.mm_token_type_ids == inputs.mm_token_type_ids and not other.pixels_pending
        assert sorted(other.tensors) == sorted(tensors)
        assert all(torch.equal(other.tensors[k], tensors[k]) for k in tensors)
        assert other.num_visual_tokens == inputs.num_visual_tokens


@pytest.mark.parametrize("name", ["qwen2_5_vl", "qwen3_vl"])
def test_builder_methods_and_bare_tokenizer(processors, name):
    processor = processors[name]
    builder = PromptBuilder(processor, name)
    _, videos, images = _media(name, CASES["interleaved"])
    problem = CASES["interleaved"][0]
    metas = [v.metadata for v in videos], [im.metadata for im in images]
    inputs = builder.expand(problem, *metas, sample_id="b")
    built = builder.build(problem, videos, images, sample_id="b")
    assert inputs.prompt_ids == built.prompt_ids
    assert builder.attach_pixels(inputs, videos, images).tensors.keys() == built.tensors.keys()
    pixels = builder.pixel_tensors(videos, images)
    assert all(torch.equal(pixels[k], built.tensors[k]) for k in built.tensors)
    # The tokenizer alone is enough for the ids.
    from_tokenizer = expand_prompt(processor.tokenizer, name, inputs.prompt_text, *metas)
    assert from_tokenizer.prompt_ids == inputs.prompt_ids
    assert np.array_equal(from_tokenizer.position_ids, inputs.position_ids)
    assert builder.pixel_tensors() == {}


@pytest.mark.parametrize("name", ["qwen3_vl", "qwen3_5"])
def test_text_glued_to_a_video_pad_is_tokenized_whole(processors, name):
    # Hand-written prompt: the first timestamp lands right after ": " instead of after
    # <|vision_start|>, so BPE may merge across the boundary; the expansion must notice.
    processor = processors[name]
    video = random_video_input(name, 4, 1, 1, source_fps=29.97, stride=7)
    prompt_text = "<|im_start|>user\nlook: <|video_pad|> and<|vision_start|><|video_pad|><|vision_end|><|im_end|>\n"
    videos = [video, random_video_input(name, 3, 1, 2, seed=3)]
    _, ids, positions, *_ = _reference(processor, name, prompt_text, videos, [])
    expanded = expand_prompt(processor, name, prompt_text, [v.metadata for v in videos])
    assert expanded.prompt_ids == ids and np.array_equal(expanded.position_ids, positions)
    tokens = expansion_module._resolve_tokens(processor)
    base = processor.tokenizer(prompt_text)["input_ids"]
    assert expansion_module._splice(tokens, base, [[0], [0]], [], timestamps=True) is None
    # Splicing anyway would be wrong: the processor's text has " <" as one BPE token.
    tok = processor.tokenizer
    stamp = expansion_module.timestamp_text(expansion_module.qwen3_frame_timestamps(video.metadata.frame_indices,
                                                                                    video.metadata.source_fps)[0])
    i = base.index(processor.video_token_id)
    naive = base[:i] + tok(stamp, add_special_tokens=False)["input_ids"]
    assert ids[:len(naive)] != naive


def test_real_qwen3_5_tokenizer_class(processors):
    """Qwen3.5 ships its own tokenizer (marks joined to letters in the split regex)."""
    import transformers
    from tokenizers import AddedToken

    from easyvideor1.models.tiny_tokenizer import CHAT_TEMPLATE, ENDOFTEXT, IM_END, SPECIAL_TOKENS, train_bpe

    vocab, merges = train_bpe(450)
    tokenizer = transformers.Qwen3_5Tokenizer(vocab=vocab, merges=merges, eos_token=IM_END, pad_token=ENDOFTEXT)
    tokenizer.add_special_tokens(
        {"additional_special_tokens": [AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS]},
        replace_extra_special_tokens=False)
    tokenizer.chat_template = CHAT_TEMPLATE
    base = processors["qwen3_5"]
    processor = transformers.Qwen3VLProcessor(image_processor=base.image_processor, tokenizer=tokenizer,
                                              video_processor=base.video_processor, chat_template=CHAT_TEMPLATE)
    # A combining mark right after the video block: NFC must not join it to the marker.
    problem = "Cafe\u0301 <video>\u0301 and <image> at 0.5 seconds?"
    _, videos, images = _media("qwen3_5", ("", [(5, 1, 2, 29.97, 7, 0)], [(1, 2)]))
    prompt_text = render_prompt(processor, problem)
    _, ids, positions, *_ = _reference(processor, "qwen3_5", prompt_text, videos, images)
    inputs = expand(processor, problem, [v.metadata for v in videos], [im.metadata for im in images],
                    family="qwen3_5")
    assert inputs.prompt_ids == ids and np.array_equal(inputs.position_ids, positions)


def test_metadata_errors_name_the_sample(processors):
    processor = processors["qwen3_vl"]
    video = random_video_input("qwen2_vl", 2, 2, 2)  # 56x56: on Qwen2's grid, not Qwen3's
    with pytest.raises(MediaInputError, match=r"sample 's1' video 0: 56x56 is not a multiple of the qwen3_vl factor 32"):
        expand(processor, "<video>Hm?", [video.metadata], family="qwen3_vl", sample_id="s1")
    with pytest.raises(PlaceholderMismatchError, match=r"sample 's2'.*1 video and 0 image placeholder.*2 video"):
        expand(processor, "<video>Hm?", [video.metadata] * 2, family="qwen3_vl", sample_id="s2")
    good = random_video_input("qwen3_vl", 2, 1, 1)
    with pytest.raises(MediaInputError, match="expected VideoMetadata, got VideoInput"):
        expand(processor, "<video>Hm?", [good], family="qwen3_vl", sample_id="s3")
    with pytest.raises(MediaInputError, match="source fps must be > 0"):
        expand(processor, "<video>Hm?", [dataclasses.replace(good.metadata, source_fps=0.0)], family="qwen3_vl")
    image = random_image_input("qwen3_vl", 1, 1)
    with pytest.raises(MediaInputError, match=r"image 0: 48x32 is not a multiple"):
        expand(processor, "<image>Hm?", [], [dataclasses.replace(image.metadata, height=48)], family="qwen3_vl")


def test_attach_refuses_other_frames(processors):
    processor = processors["qwen2_5_vl"]
    video = random_video_input("qwen2_5_vl", 4, 1, 1, stride=2)
    inputs = expand(processor, "<video>Hm?", [video.metadata], family="qwen2_5_vl", sample_id="a")
    other = random_video_input("qwen2_5_vl", 4, 1, 1, stride=3)
    with pytest.raises(MediaInputError, match="sample 'a' video 0: its metadata differs"):
        attach_pixels(processor, inputs, [other])
    with pytest.raises(PlaceholderMismatchError, match="expanded for 1 video"):
        attach_pixels(processor, inputs, [])


def test_template_kwargs_reach_only_a_template_that_reads_them(processors, caplog):
    """A real Qwen template has no ``tool_call_format``: transformers would hand it to the processor
    with a warning on every prompt. The tiny template reads it, so there it still changes the text."""
    import copy
    import logging

    from easyvideor1.config.schema import ToolsConfig
    from easyvideor1.models.inputs import template_variables
    from easyvideor1.rollout.tools.kit import tool_template_kwargs

    tiny = processors["qwen2_5_vl"]
    declared = tool_template_kwargs("qwen3_5", ToolsConfig())
    tools, extra = declared.pop("tools"), declared
    assert "tool_call_format" in template_variables(tiny.chat_template)
    as_xml = render_prompt(tiny, "Where?", tools=tools, template_kwargs=extra)
    assert as_xml != render_prompt(tiny, "Where?", tools=tools, template_kwargs={"tool_call_format": "json"})
    plain = copy.copy(tiny)  # a template that declares tools without reading the call syntax
    plain.chat_template = ("{%- if tools %}{{ tools | length }} tools. {% endif -%}"
                           "{%- for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor -%}")
    with caplog.at_level(logging.WARNING):
        text = render_prompt(plain, [{"role": "user", "content": "Where?"}], tools=tools, template_kwargs=extra)
    assert text == "2 tools. user: Where?\n"
    assert not [r for r in caplog.records if "processor_kwargs" in r.getMessage()]
    assert template_variables("{% if %}") is None  # unparsable: every kwarg is passed as before

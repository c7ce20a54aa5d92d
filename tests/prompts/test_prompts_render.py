"""Prompt rendering: every type and modality, option lists, overrides, strict undefined."""

from __future__ import annotations

import json
import re

import pytest

from easyvideor1.prompts import PromptError, PromptRenderer, render_prompt, template_stem

TYPES = {
    "multiple choice": "option's letter",
    "numerical": "single number",
    "regression": "Estimate",
    "boolean": "yes or no",
    "temporal grounding": "[start, end]",
    "spatial grounding": "[x1, y1, x2, y2]",
    "spatial-temporal grounding": '{"time": [start, end], "boxes"',
    "tracking": "bounding box [x1, y1, x2, y2]",
    "open-ended": "plain sentences",
    "ocr": "exactly as written",
    "math": "final value or expression",
    "svg-code": "SVG document",
    "html-code": "HTML document",
    "code": "Python 3 solution",
    "preference": "verdict only",
}
MODALITIES = {
    "video": ({"videos": ["v.mp4"]}, "<video>"),
    "image": ({"images": ["i.png"]}, "<image>"),
    "text": ({}, ""),
}


def sample(problem_type: str, modality: str, **extra):
    media, marker = MODALITIES[modality]
    fields = {"problem": f"{marker}What is shown?", "answer": "x", "problem_type": problem_type, **media}
    if problem_type == "multiple choice":
        fields["options"] = ["A. red", "B. blue", "C. green"]
    return {**fields, **extra}


@pytest.mark.parametrize("modality", sorted(MODALITIES))
@pytest.mark.parametrize("problem_type", sorted(TYPES))
def test_every_type_and_modality(problem_type, modality):
    text = render_prompt(sample(problem_type, modality))
    marker = MODALITIES[modality][1]
    assert text.startswith(f"{marker}What is shown?")
    assert text.count("<video>") == (marker == "<video>") and text.count("<image>") == (marker == "<image>")
    assert TYPES[problem_type] in text
    assert "<think> </think>" in text and "<answer> </answer>" in text
    if modality == "text" and "grounding" not in problem_type and problem_type != "tracking":
        assert " the video" not in text and " the image" not in text


def test_template_for_each_type_is_its_own():
    renderer = PromptRenderer()
    names = {renderer.template_name(t) for t in TYPES}
    assert len(names) == len(TYPES)
    assert renderer.template_name("spatial-temporal grounding") == "spatial_temporal_grounding.j2"


def test_modality_wording():
    assert "based on the video" in render_prompt(sample("numerical", "video"))
    assert "based on the image." in render_prompt(sample("numerical", "image"))
    two = render_prompt({"problem": "<image><image>Same?", "problem_type": "boolean", "images": ["a", "b"]})
    assert "based on the images" in two
    both = render_prompt({"problem": "<video><image>Q", "problem_type": "boolean", "videos": ["v"], "images": ["i"]})
    assert "video and image" in both


def test_multiple_choice_options_one_per_line():
    text = render_prompt(sample("multiple choice", "video"))
    assert "Options:\nA. red\nB. blue\nC. green\n" in text
    assert "(A, B, C)" in text


def test_bare_options_get_letters():
    text = render_prompt({"problem": "Q?", "problem_type": "mc", "options": ["red", "blue"]})
    assert "A. red\nB. blue" in text


def test_aliases_and_spellings_resolve():
    renderer = PromptRenderer()
    assert renderer.template_name("Multiple_Choice") == "multiple_choice.j2"
    assert renderer.template_name("mc") == "multiple_choice.j2"
    assert renderer.template_name("stg") == "spatial_temporal_grounding.j2"
    assert renderer.template_name("yes/no") == "boolean.j2"
    assert renderer.template_name("critic") == "preference.j2"
    assert renderer.template_name("svg") == "svg_code.j2"


def test_unknown_type_uses_the_generic_template():
    renderer = PromptRenderer()
    assert renderer.template_name("interpretive dance") == "default.j2"
    assert renderer.template_name(None) == "default.j2"
    text = renderer.render({"problem": "<video>Why?", "problem_type": "interpretive dance", "videos": ["v"]})
    assert text.startswith("<video>Why?") and "<answer> </answer>" in text


def example_answer(prompt: str):
    """The JSON value of the prompt's "for example <answer>...</answer>"."""
    return json.loads(re.search(r"example <answer>(.*?)</answer>", prompt).group(1))


def test_grounding_prompts_ask_for_the_documented_json():
    stg = render_prompt(sample("spatial-temporal grounding", "video", timestamps=[1.0, 1.5]))
    assert "these timestamps: 1.0, 1.5" in stg
    assert set(example_answer(stg)) == {"time", "boxes"}
    assert "sampled frame" in render_prompt(sample("spatial-temporal grounding", "video"))
    assert example_answer(render_prompt(sample("tracking", "video"))) == {
        "0.0": [0, 0, 8, 8], "0.5": [4, 0, 12, 8]}
    assert example_answer(render_prompt(sample("temporal grounding", "video"))) == [1.5, 3.0]
    assert example_answer(render_prompt(sample("spatial grounding", "image"))) == [10, 20, 50, 60]


def test_reasoning_can_be_turned_off():
    text = PromptRenderer(reasoning=False).render(sample("boolean", "video"))
    assert "<think>" not in text and "<answer> </answer>" in text


def test_extra_fields_are_available_and_markers_kept(tmp_path):
    (tmp_path / "numerical.j2").write_text("{{ problem }} | {{ source_dataset }} | {{ answer }}")
    renderer = PromptRenderer(template_dir=tmp_path)
    text = renderer.render({"problem": "<video>Count <image>", "problem_type": "counting", "answer": "3",
                            "source_dataset": "demo"})
    assert text == "<video>Count <image> | demo | 3"


def test_template_dir_takes_precedence_and_can_replace_base(tmp_path):
    (tmp_path / "boolean.j2").write_text("custom boolean: {{ problem }}")
    (tmp_path / "base.j2").write_text("BASE {% block answer_format %}{% endblock %} {{ problem }}")
    renderer = PromptRenderer(template_dir=tmp_path)
    assert renderer.render(sample("boolean", "text")) == "custom boolean: What is shown?"
    assert renderer.render(sample("numerical", "text")).startswith("BASE Answer with a single number")


def test_per_type_override_strings():
    renderer = PromptRenderer(overrides={"Multiple-Choice": "Pick: {{ labeled_options | join(' / ') }}",
                                         "default": "generic {{ problem }}"})
    mc = {**sample("multiple choice", "text"), "problem_type": "mc"}
    assert renderer.render(mc) == "Pick: A. red / B. blue / C. green"
    assert renderer.render(sample("unheard of", "text")) == "generic What is shown?"


def test_override_can_extend_base():
    renderer = PromptRenderer(overrides={"boolean": '{% extends "base.j2" %}{% block answer_format %}Y/N.{% endblock %}'})
    assert "Y/N." in renderer.render(sample("boolean", "video"))


def test_missing_field_names_template_and_field():
    renderer = PromptRenderer(overrides={"ocr": "{{ problem }} in {{ language }}"})
    with pytest.raises(PromptError, match=r"override/ocr\.j2.*'language'"):
        renderer.render(sample("ocr", "image"))
    with pytest.raises(PromptError, match=r"numerical\.j2.*'problem'"):
        render_prompt({"problem_type": "numerical"})


def test_template_errors_are_clear(tmp_path):
    with pytest.raises(PromptError, match="line 1"):
        PromptRenderer(overrides={"ocr": "{% if %}"}).render(sample("ocr", "image"))
    with pytest.raises(PromptError, match="nope.j2"):
        PromptRenderer(overrides={"ocr": '{% extends "nope.j2" %}'}).render(sample("ocr", "image"))
    with pytest.raises(PromptError, match="not a directory"):
        PromptRenderer(template_dir=tmp_path / "missing")
    with pytest.raises(PromptError, match="mapping"):
        render_prompt(["not", "a", "dict"])


def test_template_stem():
    assert template_stem("spatial-temporal grounding") == "spatial_temporal_grounding"
    assert template_stem(" Open-Ended ") == "open_ended"

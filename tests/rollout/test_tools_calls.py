"""Tool-call parsing per family (JSON and XML-parameter syntax), argument checks, the declared
schemas, and the tiny chat template's tools block and tool turns (real tiny tokenizer)."""

from __future__ import annotations

import json

import pytest

from easyvideor1.config.schema import ToolsConfig
from easyvideor1.models.tiny_tokenizer import build_tiny_tokenizer
from easyvideor1.rollout.tools import (
    STOP_STRINGS,
    BadCall,
    ToolCall,
    call_syntax,
    check_arguments,
    find_tool_call,
    format_tool_call,
    tool_schemas,
)

# What the tiny chat template rendered before tools (its output without tools must not change):
# each conversation and its text, without the generation prompt.
SYSTEM = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
RENDERED_BEFORE_TOOLS = [
    ([{"role": "user", "content": "hi"}], SYSTEM + "<|im_start|>user\nhi<|im_end|>\n"),
    ([{"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "What moves?"}]}],
     "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n"
     "<|vision_start|><|video_pad|><|vision_end|>What moves?<|im_end|>\n"),
    ([{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Color?"}, {"type": "video"}]},
      {"role": "assistant", "content": "<answer>red</answer>"}],
     SYSTEM + "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Color?"
     "<|vision_start|><|video_pad|><|vision_end|><|im_end|>\n<|im_start|>assistant\n<answer>red</answer><|im_end|>\n"),
]


def json_call(name: str, arguments: dict, closed: bool = True) -> str:
    body = json.dumps({"name": name, "arguments": arguments})
    return f"I should look closer.\n<tool_call>\n{body}\n" + ("</tool_call>" if closed else "")


def xml_call(name: str, arguments: dict) -> str:
    params = "".join(f"<parameter={k}>\n{v if isinstance(v, str) else json.dumps(v)}\n</parameter>\n"
                     for k, v in arguments.items())
    return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"


@pytest.fixture(scope="module")
def tokenizer():
    return build_tiny_tokenizer()


def test_each_family_has_its_call_syntax():
    assert [call_syntax(f) for f in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5")] == ["json"] * 3 + ["xml"]
    assert STOP_STRINGS == ("</tool_call>",)


def test_json_call_is_parsed_with_or_without_its_closing_tag():
    args = {"start_s": 1.0, "end_s": 2.5, "fps": 4}
    call = find_tool_call(json_call("get_frames", args), "json")
    assert isinstance(call, ToolCall) and call.name == "get_frames" and call.arguments == args
    assert call.raw.startswith("<tool_call>") and call.raw.endswith("</tool_call>")
    # vLLM drops the stop string from the text unless told to keep it: the body is the rest.
    unclosed = find_tool_call(json_call("get_frames", args, closed=False), "json")
    assert isinstance(unclosed, ToolCall) and unclosed.arguments == args
    # Arguments encoded as a JSON string (OpenAI style) are read too.
    encoded = find_tool_call('<tool_call>{"name": "zoom", "arguments": "{\\"t_s\\": 1}"}</tool_call>', "json")
    assert isinstance(encoded, ToolCall) and encoded.arguments == {"t_s": 1}


def test_xml_call_values_are_read_as_json_where_they_are_json():
    call = find_tool_call("Zooming in.\n" + xml_call("zoom", {"t_s": 2.5, "box": [10, 20, 30.5, 40]}), "xml")
    assert isinstance(call, ToolCall) and call.name == "zoom"
    assert call.arguments == {"t_s": 2.5, "box": [10, 20, 30.5, 40]}
    text = find_tool_call(xml_call("get_frames", {"start_s": "soon"}), "xml")
    assert isinstance(text, ToolCall) and text.arguments == {"start_s": "soon"}


def test_the_other_syntax_is_read_when_the_body_plainly_is_it():
    args = {"t_s": 1.0, "box": [0, 0, 8, 8]}
    assert find_tool_call(json_call("zoom", args), "xml") == find_tool_call(json_call("zoom", args), "json")
    assert isinstance(find_tool_call(xml_call("zoom", args), "json"), ToolCall)


def test_a_turn_without_a_call_is_none():
    assert find_tool_call("<think>It is red.</think> <answer>A</answer>", "json") is None
    assert find_tool_call("no tools here", "xml") is None


@pytest.mark.parametrize(("syntax", "turn", "message"), [
    ("json", "<tool_call>\n{\"name\": \"zoom\", \"arguments\": {\"t_s\": 1,}}\n</tool_call>", "not valid JSON"),
    ("json", "<tool_call>\n\n</tool_call>", "the tool call is empty"),
    ("json", "<tool_call>[1, 2]</tool_call>", "must be a JSON object, got a list"),
    ("json", "<tool_call>{\"arguments\": {}}</tool_call>", "has no \"name\""),
    ("json", "<tool_call>{\"name\": \"zoom\", \"arguments\": [1]}</tool_call>", "\"arguments\" must be a JSON object"),
    ("json", "<tool_call>{\"name\": \"zoom\", \"arguments\": \"{oops\"}</tool_call>", "not a JSON object"),
    ("json", "the answer</tool_call>", "without an opening <tool_call>"),
    ("json", "<tool_call><tool_call>{}</tool_call>", "a second <tool_call>"),
    ("xml", "<tool_call>\nzoom(1)\n</tool_call>", "does not start with <function=NAME>"),
    ("xml", "<tool_call>\n<function=>\n</function>\n</tool_call>", "names no tool"),
    ("xml", "<tool_call>\n<function=zoom>\n<parameter=t_s>\n1\n</parameter>\n</tool_call>",
     "<function=zoom> is not closed"),
    ("xml", "<tool_call>\n<function=zoom>\n<parameter=t_s>\n1\n</function>\n</tool_call>",
     "<parameter=t_s> is not closed"),
    ("xml", "<tool_call>\n<function=zoom>\nt_s=1\n</function>\n</tool_call>", "unexpected text 't_s=1'"),
    ("xml", xml_call("zoom", {"t_s": 1}).replace("</function>", "<parameter=t_s>\n2\n</parameter>\n</function>"),
     "argument 't_s' is given twice"),
    ("xml", "<tool_call>\n<function=zoom>\n</function>\nmore\n</tool_call>", "text after </function>"),
])
def test_malformed_calls_say_what_is_wrong(syntax, turn, message):
    bad = find_tool_call(turn, syntax)
    assert isinstance(bad, BadCall), bad
    assert message in bad.message


@pytest.mark.parametrize(("name", "arguments", "message"), [
    ("crop", {"t_s": 1}, "unknown tool 'crop': the tools are get_frames and zoom"),
    ("get_frames", {"start_s": 1}, "get_frames is missing the argument 'end_s'; it takes get_frames(start_s, "
                                   "end_s, fps)"),
    ("get_frames", {"start_s": 1, "end_s": 2, "speed": 3}, "get_frames has no argument 'speed'"),
    ("get_frames", {"start_s": "1", "end_s": 2}, "argument 'start_s' must be a number of seconds, got the string '1'"),
    ("get_frames", {"start_s": 0, "end_s": 2, "fps": True}, "argument 'fps' must be a number of frames per second, "
                                                           "got the boolean true"),
    ("zoom", {"t_s": 1}, "zoom is missing the argument 'box'"),
    ("zoom", {"t_s": 1, "box": [1, 2, 3]}, "argument 'box' must be a list of four numbers [x1, y1, x2, y2], got "
                                           "[1, 2, 3]"),
    ("zoom", {"t_s": 1, "box": [1, 2, 3, "4"]}, "argument 'box' must be a list of four numbers"),
    ("zoom", {"t_s": float("nan"), "box": [1, 2, 3, 4]}, "argument 't_s' must be a number of seconds, got nan"),
])
def test_bad_arguments_name_the_argument(name, arguments, message):
    result = check_arguments(ToolCall(name, arguments, raw=""))
    assert isinstance(result, str) and message in result, result


def test_good_arguments_are_resolved_to_floats():
    assert check_arguments(ToolCall("get_frames", {"start_s": 1, "end_s": 2}, "")) == {"start_s": 1.0, "end_s": 2.0}
    assert check_arguments(ToolCall("zoom", {"t_s": 0, "box": [1, 2, 3, 4]}, "")) == {"t_s": 0.0,
                                                                                      "box": (1.0, 2.0, 3.0, 4.0)}


def test_schemas_declare_both_tools_with_the_configured_limits():
    schemas = tool_schemas(ToolsConfig(frames_per_call=6, frames_per_trajectory=12, max_fps=5))
    names = [s["function"]["name"] for s in schemas]
    assert names == ["get_frames", "zoom"] and all(s["type"] == "function" for s in schemas)
    get_frames, zoom = (s["function"] for s in schemas)
    assert get_frames["parameters"]["required"] == ["start_s", "end_s"]
    assert set(get_frames["parameters"]["properties"]) == {"start_s", "end_s", "fps"}
    assert "at most 6 per call" in get_frames["description"] and "12 per answer" in get_frames["description"]
    assert "fps at most 5" in get_frames["description"]
    assert zoom["parameters"]["required"] == ["t_s", "box"]
    assert zoom["parameters"]["properties"]["box"]["minItems"] == 4
    json.dumps(schemas)  # plain JSON: it travels in configs and requests


def test_the_template_without_tools_renders_as_before(tokenizer):
    for messages, before in RENDERED_BEFORE_TOOLS:
        assert tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False) == before
        assert (tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
                == before + "<|im_start|>assistant\n")


@pytest.mark.parametrize("syntax", ["json", "xml"])
def test_the_template_declares_tools_and_renders_calls_and_tool_turns(tokenizer, syntax):
    schemas = tool_schemas(ToolsConfig())
    call = {"type": "function", "function": {"name": "zoom", "arguments": {"t_s": 1.5, "box": [1, 2, 30, 40]}}}
    messages = [
        {"role": "system", "content": "Answer about the video."},
        {"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "What is written?"}]},
        {"role": "assistant", "content": "Let me zoom.", "tool_calls": [call]},
        {"role": "tool", "content": [{"type": "text", "text": "zoom: done\n"}, {"type": "image"}]},
    ]
    text = tokenizer.apply_chat_template(messages, tools=schemas, tool_call_format=syntax, tokenize=False,
                                         add_generation_prompt=True)
    system = text[:text.index("<|im_end|>")]
    assert system.startswith("<|im_start|>system\nAnswer about the video.\n\n# Tools\n")
    assert text.count("<|im_start|>system") == 1  # the system message went into the tools block
    for schema in schemas:
        assert "\n" + json.dumps(schema) in system
    assert ("<function=<function-name>>" in system) == (syntax == "xml")
    # The rendered call is what the parser reads back.
    assistant = text[text.index("<|im_start|>assistant\n"):]
    parsed = find_tool_call(assistant, syntax)
    assert isinstance(parsed, ToolCall) and parsed.name == "zoom"
    assert parsed.arguments == {"t_s": 1.5, "box": [1, 2, 30, 40]}
    assert text.endswith("</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\nzoom: done\n"
                         "<|vision_start|><|image_pad|><|vision_end|>\n</tool_response><|im_end|>\n"
                         "<|im_start|>assistant\n")
    ids = tokenizer(text)["input_ids"]
    assert ids.count(tokenizer.convert_tokens_to_ids("<|image_pad|>")) == 1


def test_consecutive_tool_messages_share_one_user_turn(tokenizer):
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"},
                {"role": "tool", "content": "one"}, {"role": "tool", "content": "two"}]
    text = tokenizer.apply_chat_template(messages, tools=tool_schemas(ToolsConfig()), tokenize=False)
    assert text.endswith("<|im_start|>user\n<tool_response>\none\n</tool_response>\n<tool_response>\ntwo\n"
                         "</tool_response><|im_end|>\n")


@pytest.mark.parametrize("syntax", ["json", "xml"])
def test_a_formatted_call_is_what_the_template_renders_and_the_parser_reads(tokenizer, syntax):
    arguments = {"start_s": 0.5, "end_s": 2, "fps": 4}
    written = format_tool_call(syntax, "get_frames", arguments)
    parsed = find_tool_call("Looking again. " + written, syntax)
    assert isinstance(parsed, ToolCall) and parsed.name == "get_frames" and parsed.arguments == arguments
    messages = [{"role": "user", "content": "q"},
                {"role": "assistant", "content": "",
                 "tool_calls": [{"type": "function", "function": {"name": "get_frames", "arguments": arguments}}]}]
    text = tokenizer.apply_chat_template(messages, tools=tool_schemas(ToolsConfig()), tool_call_format=syntax,
                                         tokenize=False)
    assert text.endswith("<|im_start|>assistant\n" + written + "<|im_end|>\n")

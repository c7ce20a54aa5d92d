"""Finding and parsing the tool call in a policy turn, in each family's syntax.

Qwen2-VL, Qwen2.5-VL and Qwen3-VL write a JSON object between the call tags (their chat
templates declare tools with ``{"name": <function-name>, "arguments": <args-json-object>}``)::

    <tool_call>
    {"name": "get_frames", "arguments": {"start_s": 1.0, "end_s": 3.0, "fps": 4}}
    </tool_call>

Qwen3.5 writes the XML-parameter form of Qwen3-Coder (one block per argument; a value is
text, read as JSON when it is JSON, so ``2.5`` is a number and ``[1, 2, 3, 4]`` a list)::

    <tool_call>
    <function=zoom>
    <parameter=t_s>
    2.5
    </parameter>
    </function>
    </tool_call>

Each family's syntax is the one read; a body that plainly is the other form (it starts with
``{`` or ``<function=``) is read in that form, so a template that declared the tools the other
way does not make every call fail. A turn's first ``<tool_call>`` counts (generation stops at ``</tool_call>``). The closing tag
may be missing: vLLM leaves a stop string out of the text unless asked to keep it, and the
body up to the end of the turn is then the call. Parsing never raises: a malformed call
is a :class:`BadCall` whose message says what was wrong, for the tool message.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from easyvideor1.models.families import ModelFamily, get_family
from easyvideor1.rollout.tools.base import ToolCall

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
STOP_STRINGS = (TOOL_CALL_CLOSE,)

CallSyntax = Literal["json", "xml"]
_SYNTAX_BY_FAMILY: dict[str, CallSyntax] = {"qwen2_vl": "json", "qwen2_5_vl": "json", "qwen3_vl": "json",
                                            "qwen3_5": "xml"}

_FUNCTION_OPEN = re.compile(r"<function=([^>\n]*)>")
_PARAMETER_OPEN = re.compile(r"<parameter=([^>\n]*)>")


@dataclass(frozen=True)
class BadCall:
    """A ``<tool_call>`` block that could not be read as a call; ``message`` says why."""

    raw: str
    message: str


def call_syntax(family: str | ModelFamily) -> CallSyntax:
    """``"json"`` or ``"xml"``: how ``family`` writes a tool call."""
    return _SYNTAX_BY_FAMILY[get_family(family).name]


def find_tool_call(turn: str, syntax: CallSyntax) -> ToolCall | BadCall | None:
    """The call in ``turn`` (the first ``<tool_call>`` block); None when the turn makes none."""
    start = turn.find(TOOL_CALL_OPEN)
    if start < 0:
        if TOOL_CALL_CLOSE in turn:
            return BadCall(turn, f"{TOOL_CALL_CLOSE} without an opening {TOOL_CALL_OPEN}: a tool call must start "
                                 f"with {TOOL_CALL_OPEN}")
        return None
    body_start = start + len(TOOL_CALL_OPEN)
    end = turn.find(TOOL_CALL_CLOSE, body_start)
    body = turn[body_start:] if end < 0 else turn[body_start:end]
    raw = turn[start:] if end < 0 else turn[start:end + len(TOOL_CALL_CLOSE)]
    if TOOL_CALL_OPEN in body:
        return BadCall(raw, f"a second {TOOL_CALL_OPEN} inside the first one: write one call per block and close "
                            f"it with {TOOL_CALL_CLOSE}")
    parsed = parse_json_call(body) if _body_syntax(body, syntax) == "json" else parse_xml_call(body)
    if isinstance(parsed, str):
        return BadCall(raw, parsed)
    name, arguments = parsed
    return ToolCall(name=name, arguments=arguments, raw=raw)


def format_tool_call(syntax: CallSyntax, name: str, arguments: dict[str, Any]) -> str:
    """The call as a policy of this syntax writes it (and the chat templates render an assistant
    message's ``tool_calls``), closing tag included: for offline trajectories and tests."""
    if syntax == "json":
        body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
        return f"{TOOL_CALL_OPEN}\n{body}\n{TOOL_CALL_CLOSE}"
    params = "".join(f"<parameter={key}>\n{value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)}"
                     "\n</parameter>\n" for key, value in arguments.items())
    return f"{TOOL_CALL_OPEN}\n<function={name}>\n{params}</function>\n{TOOL_CALL_CLOSE}"


def _body_syntax(body: str, syntax: CallSyntax) -> CallSyntax:
    """The family's syntax, unless the body plainly is the other one (a template that declared
    the tools in the other form, a model trained on both): then that one is read."""
    head = body.lstrip()
    if syntax == "json" and head.startswith("<function="):
        return "xml"
    if syntax == "xml" and head.startswith("{"):
        return "json"
    return syntax


def parse_json_call(body: str) -> tuple[str, dict[str, Any]] | str:
    """``(name, arguments)`` of a JSON call body, or what is wrong with it."""
    text = body.strip()
    shape = 'write {"name": "<tool>", "arguments": {...}} inside <tool_call></tool_call>'
    if not text:
        return f"the tool call is empty: {shape}"
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        return f"the tool call is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}): {shape}"
    if not isinstance(obj, dict):
        return f"the tool call must be a JSON object, got {_json_kind(obj)}: {shape}"
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return f'the tool call has no "name" (a string naming the tool): {shape}'
    arguments = obj.get("arguments", {})
    if isinstance(arguments, str):
        # Some models encode the arguments object as a JSON string, as OpenAI's API does.
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return f'"arguments" is a string that is not a JSON object: {shape}'
    if not isinstance(arguments, dict):
        return f'"arguments" must be a JSON object, got {_json_kind(arguments)}: {shape}'
    return name.strip(), arguments


def parse_xml_call(body: str) -> tuple[str, dict[str, Any]] | str:
    """``(name, arguments)`` of an XML-parameter call body, or what is wrong with it."""
    shape = "write <function=NAME> with one <parameter=ARGUMENT>VALUE</parameter> per argument, then </function>"
    text = body.strip()
    if not text:
        return f"the tool call is empty: {shape}"
    opening = _FUNCTION_OPEN.match(text)
    if opening is None:
        return f"the tool call does not start with <function=NAME>: {shape}"
    block = _named_block(text, opening, "function", f"<function=> names no tool: {shape}", f": {shape}")
    if isinstance(block, str):
        return block
    name, close = block
    if text[close + len("</function>"):].strip():
        return "text after </function>: nothing but </tool_call> may follow it"
    arguments = _xml_parameters(text[opening.end():close], name)
    if isinstance(arguments, str):
        return arguments
    return name, arguments


def _named_block(text: str, opening: re.Match[str], tag: str, nameless: str, hint: str = "") -> tuple[str, int] | str:
    """The name in ``opening`` (``<tag=NAME>``) and where its ``</tag>`` starts, or what is wrong."""
    name = opening.group(1).strip()
    if not name:
        return nameless
    close = text.find(f"</{tag}>", opening.end())
    if close < 0:
        return f"<{tag}={name}> is not closed with </{tag}>{hint}"
    return name, close


def _xml_parameters(inner: str, function: str) -> dict[str, Any] | str:
    arguments: dict[str, Any] = {}
    position = 0
    while True:
        rest = inner[position:]
        if not rest.strip():
            return arguments
        opening = _PARAMETER_OPEN.search(inner, position)
        if opening is None or inner[position:opening.start()].strip():
            stray = inner[position:opening.start() if opening else len(inner)].strip()
            return f"unexpected text {stray[:40]!r} in <function={function}>: every argument goes in its own " \
                   "<parameter=NAME>VALUE</parameter> block"
        block = _named_block(inner, opening, "parameter",
                             f"<parameter=> without an argument name in <function={function}>")
        if isinstance(block, str):
            return block
        argument, close = block
        if argument in arguments:
            return f"argument {argument!r} is given twice"
        arguments[argument] = xml_value(inner[opening.end():close])
        position = close + len("</parameter>")


def xml_value(text: str) -> Any:
    """A parameter's value: its JSON reading when it is JSON (numbers, lists), else its text."""
    # The template writes '<parameter=NAME>\nVALUE\n</parameter>': the newlines are layout.
    value = text.strip()
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list",
            dict: "an object"}.get(type(value), type(value).__name__)

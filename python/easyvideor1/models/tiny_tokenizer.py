"""A small Qwen-style tokenizer trained locally (no hub access), for tiny test/demo models.

Byte-level BPE with the Qwen2 pre-tokenizer regex, trained on a built-in English corpus
that covers the words of our prompts and answers, digits, letters and the reasoning tags.
The Qwen special tokens are appended after the learned vocabulary (as in the real
tokenizers), so ``len(tokenizer)`` is the model's vocabulary size.
"""

from __future__ import annotations

import itertools
import json
import string

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from easyvideor1.models.families import (
    IMAGE_PAD,
    VIDEO_PAD,
    VISION_END,
    VISION_START,
)

# The regex Qwen2/2.5/3 tokenizers split text with before byte-level BPE.
QWEN_PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"

# Special tokens in the order the real Qwen2-VL tokenizer lists them after its BPE vocab.
SPECIAL_TOKENS = (
    ENDOFTEXT,
    IM_START,
    IM_END,
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    VISION_START,
    VISION_END,
    "<|vision_pad|>",
    IMAGE_PAD,
    VIDEO_PAD,
)
# Reasoning/answer tags are ordinary added tokens (not special): they survive decoding
# with skip_special_tokens, which reward extraction relies on.
TAG_TOKENS = ("<think>", "</think>", "<answer>", "</answer>")

# The pieces of a JSON ``get_frames`` call as single tokens (``evr1 demo --tools``' model only):
# the BPE vocabulary spells them in ~70 pieces, too long for a two-layer policy to copy exactly.
# ``}}`` closes the call's two objects in one token, as in the real Qwen vocabularies: spelt
# ``}`` ``}``, a model that mostly learns which token follows which cannot count the braces
# (it wrote ``2}</tool_call>`` as often as ``2}}</tool_call>``).
TOOL_CALL_TOKENS = ("<tool_call>", "</tool_call>", '{"name": "get_frames", "arguments": ',
                    '{"start_s": ', '"end_s": ', "}}")

DEFAULT_VOCAB_SIZE = 450
SYSTEM_PROMPT = "You are a helpful assistant."

_CORPUS_SENTENCES = (
    "You are a helpful assistant.",
    "Watch the video and answer the question.",
    "Look at the image and answer the question.",
    "What color is the square in the video? Answer with one word.",
    "How many objects move from left to right? Give a number.",
    "Which option is correct? Choose the letter of the best option.",
    "Options: A. red B. blue C. green D. yellow",
    "Think about the question first, then give the final answer.",
    "Output the thinking process in <think> </think> and the final answer in <answer> </answer> tags.",
    "<think> The red square moves to the right and the blue circle stays. </think> <answer>A</answer>",
    "<think> I count two objects, so the answer is 2. </think> <answer>2</answer>",
    "<think> The event starts at 1.5 seconds and ends at 3.0 seconds. </think> <answer>[1.5, 3.0]</answer>",
    "Is the ball moving up? Answer yes or no. <answer>yes</answer> <answer>no</answer>",
    "When does the circle appear? Give the start and end time in seconds.",
    "Where is the box? Give the bounding box as [x1, y1, x2, y2].",
    "Read the text in the frame. The text says HELLO 42.",
    "The object is at the top left, the bottom right, or the center of the frame.",
    "a red square moves left while a green circle moves down",
    "the first frame, the second frame, the last frame of the clip",
    "user assistant system video image question answer problem solution",
    "<0.0 seconds> <0.5 seconds> <1.0 seconds> <1.5 seconds> <2.0 seconds> <10.5 seconds>",
    "0 1 2 3 4 5 6 7 8 9 10 12 16 24 32 64 100 0.25 1/4 3.14",
)


def training_corpus() -> list[str]:
    """The built-in corpus: fixed sentences plus every letter, digit and punctuation mark."""
    lines = list(_CORPUS_SENTENCES)
    lines.append(" ".join(string.ascii_letters))
    lines.append(" ".join(string.digits))
    lines.append(" ".join(string.punctuation))
    # Number words and decimals, as they appear in timestamps and numeric answers.
    lines.extend(f"{a}.{b} {a}{b} {a} {b}" for a, b in itertools.product(range(10), range(10)))
    return lines


def qwen_pipeline_tokenizer(bpe: models.BPE) -> Tokenizer:
    """A ``tokenizers.Tokenizer`` with the Qwen2 normalizer, pre-tokenizer and decoder."""
    tokenizer = Tokenizer(bpe)
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def train_bpe(vocab_size: int = DEFAULT_VOCAB_SIZE) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Train byte-level BPE on the built-in corpus; returns (vocab, merges), specials excluded.

    ``vocab_size`` counts the whole final tokenizer (BPE + special + tag tokens).
    """
    n_added = len(SPECIAL_TOKENS) + len(TAG_TOKENS)
    bpe_size = vocab_size - n_added
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    if bpe_size < len(alphabet):
        raise ValueError(f"vocab_size {vocab_size} is below the byte alphabet ({len(alphabet)}) + {n_added} added")
    tokenizer = qwen_pipeline_tokenizer(models.BPE())
    trainer = trainers.BpeTrainer(
        vocab_size=bpe_size, min_frequency=1, initial_alphabet=alphabet, show_progress=False,
        special_tokens=[],
    )
    # Training is deterministic for a fixed corpus: identical tokenizers across runs.
    tokenizer.train_from_iterator(training_corpus(), trainer=trainer)
    # The trained model's merges are readable only through its serialized form.
    state = json.loads(tokenizer.to_str())
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else (m[0], m[1]) for m in state["model"]["merges"]]
    return tokenizer.get_vocab(), merges


# A Qwen2-VL-style chat template: each image/video content item becomes
# <|vision_start|><|image_pad|/video_pad|><|vision_end|>, expanded later by the processor.
# With ``tools=`` (function schemas, rollout/tools) the system turn declares them, Qwen2.5-style,
# and says how to call one: JSON inside <tool_call></tool_call>, or with ``tool_call_format='xml'``
# Qwen3.5's <function=...><parameter=...> form. A ``tool`` message is a user turn wrapping
# <tool_response>...</tool_response> (consecutive ones share the turn), as in the Qwen templates;
# an assistant message's ``tool_calls`` are written in the same syntax. Without tools or tool
# messages the output is what it always was.
_TOOLS_PREAMBLE = ("\\n\\n# Tools\\n\\nYou may call these functions to look at the video again. Their "
                   "signatures, as JSON schemas, are inside <tools></tools>:\\n<tools>")
_JSON_CALL_HOWTO = ("\\n</tools>\\n\\nTo call one, write a JSON object with its name and arguments between "
                    "<tool_call> and </tool_call>, then stop:\\n<tool_call>\\n"
                    "{\"name\": <function-name>, \"arguments\": <arguments-json-object>}\\n</tool_call>")
_XML_CALL_HOWTO = ("\\n</tools>\\n\\nTo call one, write this block, one <parameter=...> per argument, then "
                   "stop:\\n<tool_call>\\n<function=<function-name>>\\n<parameter=<argument-name>>\\n<value>\\n"
                   "</parameter>\\n</function>\\n</tool_call>")
CHAT_TEMPLATE = (
    "{%- macro render_content(content) -%}"
    "{%- if content is string -%}"
    "{{- content -}}"
    "{%- else -%}"
    "{%- for item in content -%}"
    "{%- if item['type'] == 'image' or 'image' in item or 'image_url' in item -%}"
    "{{- '<|vision_start|><|image_pad|><|vision_end|>' -}}"
    "{%- elif item['type'] == 'video' or 'video' in item -%}"
    "{{- '<|vision_start|><|video_pad|><|vision_end|>' -}}"
    "{%- elif 'text' in item -%}"
    "{{- item['text'] -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{%- endmacro -%}"
    "{%- set xml_calls = tool_call_format is defined and tool_call_format == 'xml' -%}"
    "{%- if tools -%}"
    "{{- '<|im_start|>system\\n' -}}"
    "{%- if messages and messages[0]['role'] == 'system' -%}"
    "{{- render_content(messages[0]['content']) -}}"
    "{%- else -%}"
    "{{- '" + SYSTEM_PROMPT + "' -}}"
    "{%- endif -%}"
    "{{- '" + _TOOLS_PREAMBLE + "' -}}"
    "{%- for tool in tools -%}"
    "{{- '\\n' + (tool | tojson) -}}"
    "{%- endfor -%}"
    "{%- if xml_calls -%}"
    "{{- '" + _XML_CALL_HOWTO + "' -}}"
    "{%- else -%}"
    "{{- '" + _JSON_CALL_HOWTO + "' -}}"
    "{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if loop.first and message['role'] != 'system' and not tools -%}"
    "{{- '<|im_start|>system\\n" + SYSTEM_PROMPT + "<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- if message['role'] == 'tool' -%}"
    "{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' -%}"
    "{{- '<|im_start|>user' -}}"
    "{%- endif -%}"
    "{{- '\\n<tool_response>\\n' + render_content(message['content']) + '\\n</tool_response>' -}}"
    "{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- elif not (loop.first and message['role'] == 'system' and tools) -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['content'] is not none -%}"
    "{{- render_content(message['content']) -}}"
    "{%- endif -%}"
    "{%- if message['role'] == 'assistant' and message['tool_calls'] is defined and message['tool_calls'] -%}"
    "{%- for call in message['tool_calls'] -%}"
    "{%- set call = call['function'] if call['function'] is defined else call -%}"
    "{%- if message['content'] or not loop.first -%}"
    "{{- '\\n' -}}"
    "{%- endif -%}"
    "{%- if xml_calls -%}"
    "{{- '<tool_call>\\n<function=' + call['name'] + '>\\n' -}}"
    "{%- for name, value in call['arguments'].items() -%}"
    "{{- '<parameter=' + name + '>\\n' -}}"
    "{{- value if value is string else value | tojson -}}"
    "{{- '\\n</parameter>\\n' -}}"
    "{%- endfor -%}"
    "{{- '</function>\\n</tool_call>' -}}"
    "{%- else -%}"
    "{{- '<tool_call>\\n{\"name\": \"' + call['name'] + '\", \"arguments\": ' + (call['arguments'] | tojson)"
    " + '}\\n</tool_call>' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- endif -%}"
)


def build_tiny_tokenizer(vocab_size: int = DEFAULT_VOCAB_SIZE, extra_tokens: tuple[str, ...] = ()):
    """A ``Qwen2Tokenizer`` (transformers, tokenizers-backed) with specials and chat template.

    ``extra_tokens`` are ordinary added tokens appended after the tags (ids ``vocab_size`` and up),
    e.g. :data:`TOOL_CALL_TOKENS`; ``len(tokenizer)`` is then ``vocab_size + len(extra_tokens)``.
    Without them the tokenizer is the one it always was.
    """
    from tokenizers import AddedToken
    from transformers import Qwen2Tokenizer

    vocab, merges = train_bpe(vocab_size)
    tokenizer = Qwen2Tokenizer(
        vocab=vocab,
        merges=merges,
        unk_token=None,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        bos_token=None,
    )
    tokenizer.add_special_tokens(
        {"additional_special_tokens": [AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS]},
        replace_extra_special_tokens=False,
    )
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in TAG_TOKENS])
    if extra_tokens:
        tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in extra_tokens])
    tokenizer.chat_template = CHAT_TEMPLATE
    if len(tokenizer) != vocab_size + len(extra_tokens):
        raise RuntimeError(f"tiny tokenizer has {len(tokenizer)} tokens, expected {vocab_size} + "
                           f"{len(extra_tokens)} extra (is one already in the vocabulary?)")
    return tokenizer

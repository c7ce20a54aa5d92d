"""The tiny-model factory: real architectures, offline, deterministic, small and trainable."""

from __future__ import annotations

import json

import pytest
import torch

from easyvideor1.cli.main import main as evr1
from easyvideor1.models import FAMILIES, build_prompt, build_tiny_model, safetensors_digest
from easyvideor1.models.forward import collate_forward_batch, compute_log_probs
from easyvideor1.models.tiny import random_video_input
from easyvideor1.models.tiny_tokenizer import SPECIAL_TOKENS, TAG_TOKENS

FAMILY_NAMES = tuple(FAMILIES)


def test_same_seed_same_weights_other_seed_other_weights(tmp_path, tiny_dirs):
    again = build_tiny_model("qwen2_vl", tmp_path / "again", seed=0)
    other = build_tiny_model("qwen2_vl", tmp_path / "other", seed=1)
    assert safetensors_digest(again) == safetensors_digest(tiny_dirs["qwen2_vl"])
    assert safetensors_digest(other) != safetensors_digest(again)


def test_cli_builds_the_same_model(tmp_path, capsys, tiny_dirs):
    assert evr1(["model", "tiny", "--family", "qwen3_vl", "--out", str(tmp_path / "m"), "--seed", "0"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["weights_sha256"] == safetensors_digest(tiny_dirs["qwen3_vl"])
    assert evr1(["model", "info", str(tmp_path / "m")]) == 0
    assert json.loads(capsys.readouterr().out)["family"] == "qwen3_vl"


def test_cli_rejects_unknown_family(tmp_path, capsys):
    with pytest.raises(SystemExit):
        evr1(["model", "tiny", "--family", "llama", "--out", str(tmp_path)])
    assert "invalid choice" in capsys.readouterr().err


@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_config_and_tokenizer_agree(tiny_dirs, processors, name):
    config = json.loads((tiny_dirs[name] / "config.json").read_text())
    tokenizer = processors[name].tokenizer
    text = config["text_config"]
    assert text["vocab_size"] == len(tokenizer) == 450
    assert text["hidden_size"] == 128 and text["num_hidden_layers"] == 2 and text["head_dim"] == 64
    rotary = text["head_dim"] * text.get("rope_parameters", {}).get("partial_rotary_factor", 1.0)
    assert sum(text["rope_parameters"]["mrope_section"]) == rotary // 2
    assert text["rope_parameters"].get("mrope_interleaved", False) == name.startswith("qwen3")
    assert config["vision_config"]["depth"] == 2 and config["tie_word_embeddings"] is True
    for token in SPECIAL_TOKENS + TAG_TOKENS:
        assert len(tokenizer.encode(token, add_special_tokens=False)) == 1, token
    assert config["video_token_id"] == tokenizer.convert_tokens_to_ids("<|video_pad|>")
    assert config["image_token_id"] == tokenizer.convert_tokens_to_ids("<|image_pad|>")
    sentence = "<think> 2 red squares </think> <answer>B</answer>"
    ids = tokenizer.encode(sentence, add_special_tokens=False)
    assert tokenizer.decode(ids, skip_special_tokens=True) == sentence
    assert len(ids) < len(sentence) / 2  # BPE merges learned from the built-in corpus
    chat = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert chat == ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")


@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_processor_keeps_small_frames(processors, name):
    """With resizing on (the processor defaults), a 64x64 frame is not upscaled."""
    import numpy as np

    processor = processors[name]
    frames = np.zeros((4, 64, 64, 3), dtype=np.uint8)
    out = processor.video_processor(videos=[frames], do_sample_frames=False, return_tensors="pt")
    patch = processor.video_processor.patch_size
    _, grid_h, grid_w = out["video_grid_thw"][0].tolist()
    assert grid_h * patch <= 64 and grid_w * patch <= 64


@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_loads_offline_and_trains(tiny_dirs, processors, name):
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(tiny_dirs[name])
    assert type(model).__name__ == FAMILIES[name].hf_architecture
    assert 0.4e6 < sum(p.numel() for p in model.parameters()) < 1.5e6
    video = random_video_input(name, 16, 2, 2)
    prompt = build_prompt(processors[name], "<video>What moves?", [video], family=name, sample_id="v")
    batch = collate_forward_batch([prompt], [[5, 6, 7, 8]], pad_token_id=0)
    log_probs, entropy = compute_log_probs(model, batch)
    loss = -(log_probs.sum()) - 0.01 * entropy.sum()
    loss.backward()
    visual_grads = [p.grad for n, p in model.named_parameters() if ".visual." in f".{n}" and p.grad is not None]
    assert visual_grads and all(torch.isfinite(g).all() for g in visual_grads)
    assert any(g.abs().sum() > 0 for g in visual_grads)


def test_extra_tokens_append_to_the_default_vocabulary_and_make_the_demo_call_short(tmp_path):
    from easyvideor1.data.synth_tool_tasks import tool_trajectory_text
    from easyvideor1.models.tiny_tokenizer import DEFAULT_VOCAB_SIZE, TOOL_CALL_TOKENS, build_tiny_tokenizer

    plain, tools = build_tiny_tokenizer(), build_tiny_tokenizer(extra_tokens=TOOL_CALL_TOKENS)
    assert len(plain) == DEFAULT_VOCAB_SIZE and len(tools) == DEFAULT_VOCAB_SIZE + len(TOOL_CALL_TOKENS)
    # Every default id keeps its token; the extras take the ids after them.
    kept = {t: i for t, i in tools.get_vocab().items() if i < DEFAULT_VOCAB_SIZE}
    assert kept == plain.get_vocab()
    assert [tools.convert_tokens_to_ids(t) for t in TOOL_CALL_TOKENS] == list(
        range(DEFAULT_VOCAB_SIZE, DEFAULT_VOCAB_SIZE + len(TOOL_CALL_TOKENS)))
    text = tool_trajectory_text("red")
    ids = tools.encode(text)
    assert len(ids) < 20 < len(plain.encode(text)) - 40  # 17 tokens instead of ~80
    assert tools.decode(ids, skip_special_tokens=True) == text  # not special: kept when decoding
    with pytest.raises(RuntimeError, match="extra"):
        build_tiny_tokenizer(extra_tokens=("<answer>",))  # already a token: the vocabulary would not grow
    model_dir = build_tiny_model("qwen2_5_vl", tmp_path / "tools", extra_tokens=TOOL_CALL_TOKENS)
    config = json.loads((model_dir / "config.json").read_text())
    assert config.get("text_config", config)["vocab_size"] == len(tools)

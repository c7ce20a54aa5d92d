"""TRL 1.16's GRPOTrainer training with easyvideor1's reward functions; run by
test_interop_trl.py in a child process whose PYTHONPATH has the interop folder.

Usage: trl_run.py WORKDIR OUT.json. A tiny random Qwen2 text model (transformers config,
the repo's locally trained tiny tokenizer), Video-R1-shaped rows (``solution`` column, no
``answer_key`` given), 2 steps on CPU. Generation is steered with a logit bias towards
``<answer>B</answer>`` so that the rewards are known: the multiple-choice row is right,
the numerical row wrong but well formatted, the row of an unknown problem type an error.
TRL's log history goes to OUT.json for the test to check.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from easyvideor1.models.tiny_tokenizer import build_tiny_tokenizer
from easyvideor1.rewards.adapters import make_trl_reward_func, make_trl_reward_funcs

# torch, datasets, transformers and TRL are imported in the functions: the in-process
# scorer's workers come from a forkserver that imports this script's top level, and these
# imports would add their seconds to the first reward call (docs/integrations.md).

ROWS = [  # as in Video-R1-260k: problem, problem_type, options, solution, data_type
    {
        "problem": "Which animal runs?",
        "problem_type": "multiple choice",
        "options": ["A. a cat", "B. a dog"],
        "solution": "<answer>B</answer>",
        "data_type": "video",
    },
    {
        "problem": "How many dogs are there?",
        "problem_type": "numerical",
        "options": [],
        "solution": "<answer>3</answer>",
        "data_type": "video",
    },
    {
        "problem": "What does the dog think?",
        "problem_type": "telepathy",
        "options": [],
        "solution": "<answer>food</answer>",
        "data_type": "video",
    },
]


def tiny_model(tokenizer):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    return Qwen2ForCausalLM(config)


def answer_bias(tokenizer) -> list:
    """``sequence_bias`` making the completion ``<answer>B</answer>`` then end of turn."""
    open_tag, close_tag = tokenizer.convert_tokens_to_ids(["<answer>", "</answer>"])
    letter = tokenizer.encode("B", add_special_tokens=False)
    assert len(letter) == 1, letter
    b, eos = letter[0], tokenizer.eos_token_id
    return [[[open_tag], 20.0], [[open_tag, b], 40.0], [[b, close_tag], 40.0], [[close_tag, eos], 60.0]]


def main(workdir: Path, out: Path) -> None:
    sys.path.append(os.environ["EVR1_INTEROP_DIR"])  # after site-packages: the venv's packages win
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    tokenizer = build_tiny_tokenizer()
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": r["problem"]}], **r} for r in ROWS])
    funcs = make_trl_reward_funcs()  # evr1_accuracy, evr1_format
    overall = make_trl_reward_func()  # evr1_reward, logged only (weight 0)
    args = GRPOConfig(
        output_dir=str(workdir / "grpo"),
        max_steps=2,
        per_device_train_batch_size=6,
        num_generations=2,
        max_completion_length=8,
        learning_rate=1e-3,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        bf16=False,
        seed=0,
        dataloader_num_workers=0,
        disable_tqdm=True,
        reward_weights=[*funcs.reward_weights, 0.0],
        generation_kwargs={"sequence_bias": answer_bias(tokenizer)},
    )
    trainer = GRPOTrainer(
        model=tiny_model(tokenizer),
        reward_funcs=[*funcs, overall],
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    start = time.monotonic()
    trainer.train()
    result = {
        "log_history": trainer.state.log_history,
        "global_step": trainer.state.global_step,
        "train_s": time.monotonic() - start,
        "reward_weights": funcs.reward_weights,
    }
    out.write_text(json.dumps(result, default=float))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))

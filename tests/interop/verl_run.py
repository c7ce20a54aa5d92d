"""veRL 0.9.1's own loader and reward managers over easyvideor1's adapter; run by
test_interop_verl.py in a child process whose PYTHONPATH has the interop folder.

Usage: verl_run.py WORKDIR OUT.json [REWARD_URL]. Writes veRL-format parquet files (ground truths as a
string, a list, a struct and an integer), reads them back with pandas as veRL's main_eval
does (nested values come back as numpy arrays and scalars), builds a DataProto with veRL's
collate_fn and scores it with: the reward-loop NaiveRewardManager (0.9.1's default, through
RewardLoopWorker), the legacy NaiveRewardManager and the BatchRewardManager; with
REWARD_URL, the reward loop again scoring through that reward service (the URL given as
``reward_kwargs.url``). The results go to OUT.json for the test to check.
"""

# ruff: noqa: E402  (veRL and its dependencies import only once the interop folder is on sys.path)
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.append(os.environ["EVR1_INTEROP_DIR"])  # after site-packages: the venv's packages win

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from omegaconf import OmegaConf
from verl import DataProto
from verl.experimental.reward_loop.reward_loop import RewardLoopWorker
from verl.experimental.reward_loop.reward_manager import NaiveRewardManager
from verl.trainer.ppo.metric_utils import process_validation_metrics
from verl.trainer.ppo.reward import get_custom_reward_fn
from verl.utils.dataset.rl_dataset import collate_fn
from verl.workers.reward_manager import BatchRewardManager
from verl.workers.reward_manager import NaiveRewardManager as LegacyNaiveRewardManager

from easyvideor1.models.tiny_tokenizer import build_tiny_tokenizer

PKG_PATH = "pkg://easyvideor1.rewards.adapters"
PROMPT_LEN, RESPONSE_LEN = 24, 40
MC_OPTIONS = ["A. a cat", "B. a dog"]

# One parquet file per ground-truth shape (a parquet column has one type).
FILES = {
    "text": (
        pa.string(),
        [
            # problem type from extra_info
            ("video-r1/mc", "<think>a dog</think><answer>B</answer>", "B", "multiple choice", MC_OPTIONS),
            # no problem type: inferred from the known data source (gsm8k -> math)
            ("openai/gsm8k", "<think>6 * 12</think><answer>72</answer>", "72", None, None),
            ("lighteval/MATH", "so \\boxed{1/2}", "0.5", None, None),
            # no problem type and an unknown data source: a per-item error
            ("my-lab/videos", "<answer>B</answer>", "B", None, None),
        ],
    ),
    "span": (
        pa.list_(pa.float64()),
        [("charades", "<answer>[1.5, 3.0]</answer>", [1.5, 3.0], "temporal grounding", None)],
    ),
    "box": (
        pa.struct([("bbox_2d", pa.list_(pa.float64()))]),
        [("refcoco", "<answer>[10, 10, 50, 50]</answer>", {"bbox_2d": [10.0, 10.0, 50.0, 50.0]}, "sg", None)],
    ),
    "count": (pa.int64(), [("counting", "<answer>7</answer>", 7, "numerical", None)]),
}


def write_parquet(workdir: Path) -> list[Path]:
    extra_type = pa.struct(
        [("problem_type", pa.string()), ("options", pa.list_(pa.string())), ("index", pa.int64())]
    )
    paths = []
    for name, (gt_type, rows) in FILES.items():
        schema = pa.schema(
            [
                ("data_source", pa.string()),
                ("response", pa.string()),
                ("reward_model", pa.struct([("ground_truth", gt_type), ("style", pa.string())])),
                ("extra_info", extra_type),
            ]
        )
        table = pa.Table.from_pylist(
            [
                {
                    "data_source": source,
                    "response": response,
                    "reward_model": {"ground_truth": gt, "style": "rule"},
                    "extra_info": {"problem_type": ptype, "options": options, "index": i},
                }
                for i, (source, response, gt, ptype, options) in enumerate(rows)
            ],
            schema=schema,
        )
        path = workdir / f"{name}.parquet"
        pq.write_table(table, path)
        paths.append(path)
    return paths


def sample(tokenizer, row: pd.Series) -> dict:
    """One rollout as veRL's trainer holds it: left-padded prompt, right-padded response."""
    prompt = tokenizer.encode("Watch the video and answer the question.")[-PROMPT_LEN:]
    response = tokenizer.encode(row["response"])[:RESPONSE_LEN]
    pad = tokenizer.pad_token_id
    prompt_ids = [pad] * (PROMPT_LEN - len(prompt)) + prompt
    response_ids = response + [pad] * (RESPONSE_LEN - len(response))
    mask = (
        [0] * (PROMPT_LEN - len(prompt))
        + [1] * (len(prompt) + len(response))
        + [0] * (RESPONSE_LEN - len(response))
    )
    return {
        "prompts": torch.tensor(prompt_ids),
        "responses": torch.tensor(response_ids),
        "input_ids": torch.tensor(prompt_ids + response_ids),
        "attention_mask": torch.tensor(mask),
        "data_source": row["data_source"],
        "reward_model": row["reward_model"],
        "extra_info": row["extra_info"],
    }


def make_batch(tokenizer, paths: list[Path]) -> tuple[DataProto, dict]:
    frames = [pd.read_parquet(p) for p in paths]
    rows = [row for frame in frames for _, row in frame.iterrows()]
    gt_types = sorted({type(row["reward_model"]["ground_truth"]).__name__ for row in rows})
    nested = frames[2].iloc[0]["reward_model"]["ground_truth"]
    shapes = {"ground_truth_types": gt_types, "struct_value_type": type(nested["bbox_2d"]).__name__}
    return DataProto.from_single_dict(collate_fn([sample(tokenizer, r) for r in rows])), shapes


def config(tokenizer_dir: Path, name: str, manager: str, reward_kwargs: dict | None = None):
    return OmegaConf.create(
        {
            "actor_rollout_ref": {"model": {"path": str(tokenizer_dir), "tokenizer_path": None}},
            "reward": {
                "custom_reward_function": {
                    "path": PKG_PATH,
                    "name": name,
                    "reward_kwargs": reward_kwargs or {},
                },
                "reward_manager": {
                    "source": "register",
                    "name": manager,
                    "module": {"path": None, "name": None},
                },
                "reward_model": {"enable": False},
                "sandbox_fusion": None,
            },
        }
    )


def reward_loop(tokenizer_dir: Path, batch: DataProto, reward_kwargs: dict | None = None) -> dict:
    """0.9.1's default path: RewardLoopWorker scores each item with the registered manager;
    the stacking below is what RewardLoopManager.compute_rm_score does with the outputs."""
    worker = RewardLoopWorker(config(tokenizer_dir, "compute_score", "naive", reward_kwargs))
    assert isinstance(worker.reward_manager, NaiveRewardManager)
    outputs = worker.loop.run_until_complete(worker.compute_score_batch(batch))
    scores = [o["reward_score"] for o in outputs]
    rm_scores = NaiveRewardManager.assemble_rm_scores(batch, scores)
    infos = [o["reward_extra_info"] for o in outputs]
    keys = list(infos[0])
    stacked = {k: np.array([info[k] for info in infos]).tolist() for k in keys}
    return {"scores": scores, "rm_scores_sum": rm_scores.sum(dim=1).tolist(), "extra": stacked}


def legacy(tokenizer, tokenizer_dir: Path, batch: DataProto, name: str, cls) -> dict:
    fn = get_custom_reward_fn(config(tokenizer_dir, name, "naive"))
    out = cls(tokenizer=tokenizer, num_examine=0, compute_score=fn)(batch, return_dict=True)
    return {
        "scores": out["reward_tensor"].sum(dim=1).tolist(),
        "extra": {k: list(v) for k, v in out["reward_extra_info"].items()},
    }


def main(workdir: Path, out: Path, url: str | None = None) -> None:
    tokenizer = build_tiny_tokenizer()
    tokenizer_dir = workdir / "tokenizer"
    tokenizer.save_pretrained(tokenizer_dir)
    batch, shapes = make_batch(tokenizer, write_parquet(workdir))
    results = {
        "shapes": shapes,
        "data_sources": batch.non_tensor_batch["data_source"].tolist(),
        "reward_loop": reward_loop(tokenizer_dir, batch),
        "legacy_naive": legacy(tokenizer, tokenizer_dir, batch, "compute_score", LegacyNaiveRewardManager),
        "batch": legacy(tokenizer, tokenizer_dir, batch, "compute_score_batch", BatchRewardManager),
    }
    if url:
        results["reward_loop_http"] = reward_loop(tokenizer_dir, batch, {"url": url})
    # Validation metrics as veRL's trainer computes them from the reward extra infos.
    extra = results["reward_loop"]["extra"]
    sources = results["data_sources"]
    metrics = process_validation_metrics(sources, [str(i) for i in range(len(sources))], extra)
    results["val_metrics"] = {
        f"{src}/{var}/{m}": v for src, d in metrics.items() for var, mv in d.items() for m, v in mv.items()
    }
    out.write_text(json.dumps(results, default=float))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), *sys.argv[3:])

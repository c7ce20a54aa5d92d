"""The veRL/TRL adapters' own rules, in this process (no veRL/TRL needed): plain values from
parquet, problem types from data sources, per-item errors, TRL's answer columns and one
scoring call per batch for all component functions. The HTTP path against a real service."""

from __future__ import annotations

import os

import numpy as np
import pytest

from easyvideor1.config.schema import RewardConfig
from easyvideor1.rewards import adapters
from easyvideor1.rewards.adapters import ItemError, plain
from easyvideor1.rewards.client import InProcessRewardClient, RewardClient
from services.reward.launch import reward_server

MC = ("<answer>B</answer>", ["A. a cat", "B. a dog"])


def test_plain_converts_what_parquet_readers_give():
    value = {
        "boxes": np.array([[1, 2, 3, 4]], dtype=np.int32),
        3: np.float32(0.5),
        "ok": np.bool_(True),
        "t": (np.int64(2), np.array(7)),
        "objs": np.array([{"a": np.array([1.5])}, None], dtype=object),
        "b": b"x",
    }
    out = plain(value)
    assert out == {
        "boxes": [[1, 2, 3, 4]],
        "3": 0.5,
        "ok": True,
        "t": [2, 7],
        "objs": [{"a": [1.5]}, None],
        "b": "x",
    }
    assert type(out["t"][0]) is int and type(out["ok"]) is bool
    for bad, message in (
        ({1, 2}, "holds a value of type set"),
        (float("nan"), "non-finite"),
        (np.float64("inf"), "non-finite"),
        (b"\xff", "not UTF-8"),
        (object(), "holds a value of type object"),
    ):
        with pytest.raises(ItemError, match=message):
            plain(bad)


@pytest.mark.parametrize(
    ("data_source", "expected"),
    [
        ("openai/gsm8k", "math"),
        ("lighteval/MATH", "math"),
        ("HuggingFaceH4/MATH-500", "math"),
        ("math_dapo", "math"),
        ("AI-MO/aimo-validation-aime", "math"),
        ("hiyouga/geometry3k", "math"),
        ("multiple choice", "multiple choice"),
        ("tg", "temporal grounding"),
        ("my-lab/videos", "my-lab/videos"),  # unknown: sent as it is (a service's extra type, or its error)
        (None, None),
    ],
)
def test_problem_type_from_data_source(data_source, expected):
    assert adapters.problem_type_of({}, data_source) == expected
    assert adapters.problem_type_of({"problem_type": "ocr"}, data_source) == "ocr"  # extra_info wins
    assert adapters.problem_type_of({"problem_type": "ocr"}, data_source, column="boolean") == "boolean"


def test_verl_batch_with_bad_items_scores_the_rest():
    gts = ["B", {1, 2}, np.array([1.5, 3.0]), "72", "x", None]
    sources = ["mc", "numerical", "temporal grounding", "openai/gsm8k", "my-lab/videos", "numerical"]
    responses = [
        MC[0],
        "<answer>1</answer>",
        "<answer>[1.5, 3.0]</answer>",
        "<answer>72</answer>",
        "x",
        "<answer>1</answer>",
    ]
    extras = [{"options": np.array(MC[1])}, None, {}, {"problem_type": None}, {}, {}]
    out = adapters.compute_score_batch(sources, responses, gts, extras)
    assert [o["score"] for o in out] == [1.0, 0.0, 1.0, 1.0, 0.0, 0.0]
    assert [o["reward/errors"] for o in out] == [0.0, 1.0, 0.0, 0.0, 1.0, 1.0]
    assert (
        adapters.compute_score("openai/gsm8k", "<answer>72</answer>", np.int64(72), return_dict=False) == 1.0
    )


def test_unknown_data_source_error_says_what_to_set():
    results = adapters._verl_results([("my-lab/videos", "x", "y", {})], None)
    assert "data_source 'my-lab/videos' is neither a problem type nor a known data set" in results[0].error
    assert "set extra_info.problem_type" in results[0].error
    typed = adapters._verl_results([("my-lab/videos", "x", "y", {"problem_type": "telepathy"})], None)
    assert (
        typed[0].error.startswith("unknown problem_type 'telepathy'") and "data_source" not in typed[0].error
    )


class CountingClient(RewardClient):
    """A real in-process client that counts its scoring calls."""

    def __init__(self):
        self.inner, self.calls = InProcessRewardClient(), 0

    def score(self, items, problem_type=None):
        self.calls += 1
        return self.inner.score(items, problem_type)

    def close(self):
        self.inner.close()


def test_trl_components_share_one_scoring_call_and_log_errors():
    client = CountingClient()
    funcs = adapters.make_trl_reward_funcs(components=("overall", "accuracy", "format"), client=client)
    assert [f.__name__ for f in funcs] == ["evr1_reward", "evr1_accuracy", "evr1_format"]
    assert funcs.reward_weights == [1.0, 0.9, 0.1]
    metrics, extra = [], []
    # Mixed row formats: ours (answer), Video-R1 (solution), veRL (reward_model, extra_info, data_source).
    columns = {
        "problem_type": ["multiple choice", "numerical", None, None],
        "answer": ["B", None, None, None],
        "solution": [None, "<answer>3</answer>", None, None],
        "reward_model": [None, None, {"ground_truth": np.array([1.5, 3.0])}, {"ground_truth": "x"}],
        "extra_info": [{}, {}, {"problem_type": "temporal grounding"}, {}],
        "data_source": ["a", "b", "c", "my-lab/videos"],
        "options": [np.array(MC[1]), None, None, None],
        "log_metric": lambda name, value: metrics.append((name, value)),
        "log_extra": lambda name, values: extra.append((name, values)),
        "trainer_state": object(),
    }
    completions = [
        [{"role": "assistant", "content": MC[0]}],
        "<answer>3</answer>",
        "<answer>[1.5, 3.0]</answer>",
        "x",
    ]
    out = [f(prompts=["p"] * 4, completions=completions, **columns) for f in funcs]
    assert out == [[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 0.0]]
    assert client.calls == 1
    assert metrics == [("reward/errors", 0.25)]
    assert (
        extra[0][0] == "reward_error"
        and extra[0][1][:3] == ["", "", ""]
        and "my-lab/videos" in extra[0][1][3]
    )
    funcs[0](prompts=["p"] * 4, completions=list(completions), **columns)  # a new batch: scored again
    assert client.calls == 2
    client.close()


def test_trl_missing_columns_are_named():
    reward = adapters.make_trl_reward_func()
    with pytest.raises(
        ValueError,
        match=r"dataset column 'answer' is missing; columns passed: problem_type \(the answer may also be in 'solution'",
    ):
        reward(["p"], ["x"], problem_type=["boolean"], trainer_state=None)
    with pytest.raises(
        ValueError, match="dataset column 'problem_type' is missing .*; columns passed: answer$"
    ):
        reward(["p"], ["x"], answer=["yes"])
    with pytest.raises(ValueError, match="choose from overall, accuracy, format"):
        adapters.make_trl_reward_funcs(components=("speed",))
    weighted = adapters.make_trl_reward_funcs(config=RewardConfig(accuracy_weight=0.7, format_weight=0.3))
    assert weighted.reward_weights == [0.7, 0.3]


def test_nested_ground_truths_over_http_match_in_process():
    env = {k: v for k, v in os.environ.items() if k not in ("EVR1_REWARD_TOKEN", "EVR1_REWARD_URL")}
    args = (
        ["temporal grounding", "sg", "openai/gsm8k"],
        ["<answer>[1.5, 3.0]</answer>", "<answer>[0, 0, 10, 10]</answer>", "<answer>72</answer>"],
        [np.array([1.5, 3.0]), {"bbox_2d": np.array([0.0, 0.0, 10.0, 10.0])}, np.int64(72)],
        [{}, {"index": np.int64(1)}, None],
    )
    local = adapters.compute_score_batch(*args)
    assert [o["score"] for o in local] == [1.0, 1.0, 1.0]
    with reward_server(["--workers", "1"], env=env) as server:
        assert adapters.compute_score_batch(*args, url=server.url) == local

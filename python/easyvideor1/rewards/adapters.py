"""Reward functions in the shapes other RL frameworks call, backed by a :class:`RewardClient`.

Both use the reward service when a URL is given (argument, or the ``EVR1_REWARD_URL``
environment variable) and the in-process registry otherwise, with identical results.

veRL (``custom_reward_function.path`` = this file, ``name`` = ``compute_score``)::

    compute_score(data_source, solution_str, ground_truth, extra_info=None) -> dict
    # {"score": overall, "accuracy": ..., "format": ...}; return_dict=False -> float

The problem type is ``extra_info["problem_type"]`` when present, else ``data_source``.
``compute_score_batch`` is the batched form (veRL's batch reward manager): one request.

TRL (``GRPOTrainer(reward_funcs=[make_trl_reward_func()])``)::

    reward(prompts, completions, **dataset_columns) -> list[float]

Completions may be plain strings or conversations (``[{"role": "assistant", "content":
...}]``; content may be a list of ``{"type": "text", "text": ...}`` parts).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

from easyvideor1.config.schema import RewardConfig
from easyvideor1.logging import event, get_logger
from easyvideor1.rewards.client import URL_ENV, RewardClient, RewardResult, open_reward_client

_log = get_logger("rewards.adapters")
_CLIENTS: dict[tuple[int, str], RewardClient] = {}
_LOCK = threading.Lock()


def _shared_client(url: str | None) -> RewardClient:
    """One client per URL per process: frameworks call the reward function per sample.
    Keyed by pid too: a forked reward worker must not share its parent's connections."""
    url = url if url is not None else os.environ.get(URL_ENV) or None
    key = (os.getpid(), url or "inprocess")
    with _LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            client = _CLIENTS[key] = open_reward_client(url)
    return client


def _as_text(value: Any) -> Any:
    # Datasets store structured answers as lists/dicts/numbers; the wire format wants text.
    if value is None or isinstance(value, str):
        return value
    if hasattr(value, "tolist"):  # numpy values from parquet
        value = value.tolist()
    return json.dumps(value)


def _as_options(value: Any) -> Any:
    if hasattr(value, "tolist"):
        value = value.tolist()
    return list(value) if isinstance(value, tuple) else value


def _log_errors(results: list[RewardResult], where: str) -> None:
    for r in results:
        if r.error:
            event(_log, "reward_item_error", logging.WARNING, adapter=where, problem_type=r.problem_type,
                  error=r.error)


def _verl_item(data_source: Any, solution_str: Any, ground_truth: Any, extra_info: Any) -> dict[str, Any]:
    extra = extra_info if isinstance(extra_info, dict) else {}
    item: dict[str, Any] = {
        "problem_type": extra.get("problem_type") or data_source,
        "response": solution_str,
        "ground_truth": _as_text(ground_truth),
    }
    for key, source in (("options", "options"), ("problem", "problem"), ("problem", "question"),
                        ("data_type", "data_type")):
        if extra.get(source) is not None and key not in item:
            item[key] = _as_options(extra[source]) if key == "options" else extra[source]
    return item


def _verl_value(result: RewardResult, return_dict: bool) -> float | dict[str, float]:
    if not return_dict:
        return result.overall
    return {"score": result.overall, "accuracy": result.accuracy, "format": result.format}


def compute_score(data_source: Any, solution_str: str, ground_truth: Any, extra_info: dict | None = None, *,
                  return_dict: bool = True, url: str | None = None, **_framework_kwargs: Any
                  ) -> float | dict[str, float]:
    """veRL ``custom_reward_function``: score one response. Extra keyword arguments that
    veRL versions pass (sandbox URLs, semaphores...) are accepted and ignored."""
    item = _verl_item(data_source, solution_str, ground_truth, extra_info)
    result = _shared_client(url).score([item])
    _log_errors(result, "verl")
    return _verl_value(result[0], return_dict)


def compute_score_batch(data_sources: Sequence[Any], solution_strs: Sequence[str], ground_truths: Sequence[Any],
                        extra_infos: Sequence[dict | None] | None = None, *, return_dict: bool = True,
                        url: str | None = None, **_framework_kwargs: Any) -> list[float | dict[str, float]]:
    """veRL batch reward manager form: all items in one request."""
    extra_infos = extra_infos if extra_infos is not None else [None] * len(solution_strs)
    items = [_verl_item(*row) for row in zip(data_sources, solution_strs, ground_truths, extra_infos)]
    results = _shared_client(url).score(items)
    _log_errors(results, "verl")
    return [_verl_value(r, return_dict) for r in results]


def completion_text(completion: Any) -> Any:
    """The text of a TRL completion: a string, or the last assistant message's content."""
    if isinstance(completion, dict):
        completion = [completion]
    if isinstance(completion, list):
        messages = [m for m in completion if isinstance(m, dict)]
        chosen = next((m for m in reversed(messages) if m.get("role") == "assistant"),
                      messages[-1] if messages else {})
        content = chosen.get("content", "")
        if isinstance(content, list):  # multimodal message parts
            return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
        return content
    return completion


def make_trl_reward_func(url: str | None = None, problem_type_key: str = "problem_type", answer_key: str = "answer",
                         *, options_key: str = "options", problem_key: str = "problem",
                         config: RewardConfig | None = None) -> Callable[..., list[float]]:
    """A TRL reward function reading the problem type and answer from dataset columns.

    ``url=None`` reads ``EVR1_REWARD_URL``; unset or ``inprocess`` scores in this process
    with ``config``. Bad items score 0.0 (and are logged), they never raise.
    """
    url = url if url is not None else os.environ.get(URL_ENV) or None
    client = open_reward_client(url, config) if config is not None else _shared_client(url or "inprocess")

    def evr1_reward(prompts: Sequence[Any] | None = None, completions: Sequence[Any] = (), **columns: Any
                    ) -> list[float]:
        n = len(completions)
        for key in (problem_type_key, answer_key):
            if key not in columns:
                raise ValueError(f"TRL reward: dataset column {key!r} is missing; columns passed: "
                                 f"{', '.join(sorted(columns)) or 'none'}")
        items = []
        for i in range(n):
            item: dict[str, Any] = {"problem_type": columns[problem_type_key][i],
                                    "response": completion_text(completions[i]),
                                    "ground_truth": _as_text(columns[answer_key][i])}
            if columns.get(options_key) is not None and columns[options_key][i] is not None:
                item["options"] = _as_options(columns[options_key][i])
            if columns.get(problem_key) is not None and isinstance(columns[problem_key][i], str):
                item["problem"] = columns[problem_key][i]
            items.append(item)
        results = client.score(items)
        _log_errors(results, "trl")
        return [r.overall for r in results]

    evr1_reward.__name__ = "evr1_reward"  # TRL logs each reward function under its __name__
    return evr1_reward

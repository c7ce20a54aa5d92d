"""Reward functions in the shapes other RL frameworks call, backed by a :class:`RewardClient`.

All use the reward service when a URL is given (argument, or the ``EVR1_REWARD_URL``
environment variable) and the in-process registry otherwise, with identical results.
docs/integrations.md is the user guide; in short:

veRL (``reward.custom_reward_function.path = pkg://easyvideor1.rewards.adapters``,
``name = compute_score``, or ``compute_score_batch`` for the batch reward manager)::

    compute_score(data_source, solution_str, ground_truth, extra_info=None) -> dict
    # {"score", "accuracy", "format", "reward/errors"}; return_dict=False -> the score

TRL (``GRPOTrainer(reward_funcs=make_trl_reward_funcs())``: one function per component,
so TRL logs ``rewards/evr1_accuracy/mean`` and ``rewards/evr1_format/mean``)::

    reward(prompts, completions, **dataset_columns) -> list[float]

Each item's problem type is ``extra_info["problem_type"]`` (TRL: the ``problem_type``
column first), else ``data_source`` when it names a problem type or a known text data set
(gsm8k, MATH, AIME... -> ``math``). An item that cannot be scored (unknown type,
a ground truth that is not plain data) scores 0 with its error counted in
``reward/errors`` (the fraction of items in error); it never fails the batch.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from easyvideor1.config.schema import RewardConfig
from easyvideor1.logging import event, get_logger
from easyvideor1.rewards.client import URL_ENV, RewardClient, RewardResult, open_reward_client
from easyvideor1.rewards.registry import UnknownProblemType, canonical_problem_type

ERRORS_METRIC = "reward/errors"
COMPONENTS = ("overall", "accuracy", "format")
# Where the answer is, per known row format: ours, Video-R1's, veRL's (nested and flat).
ANSWER_COLUMNS = ("answer", "solution", "reward_model", "ground_truth")
# Keyword arguments TRL adds to every reward call; they are not dataset columns.
_TRL_KWARGS = frozenset({"trainer_state", "log_extra", "log_metric", "completion_ids", "environments"})
# Public text data sets whose answers the math scorer reads (<answer> tag or \boxed{}),
# matched as substrings of the data_source's last path part, lower-cased.
_MATH_SOURCES = (
    "gsm8k",
    "math",
    "aime",
    "amc",
    "numina",
    "dapo",
    "geometry3k",
    "geo3k",
    "deepscaler",
    "olympiad",
    "minerva",
)

_log = get_logger("rewards.adapters")
_CLIENTS: dict[tuple[int, str], RewardClient] = {}
_LOCK = threading.Lock()


class ItemError(ValueError):
    """One item cannot be sent for scoring; it scores 0 with this message."""


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


def plain(value: Any, what: str = "ground truth", _depth: int = 0) -> Any:
    """``value`` as plain Python data: numpy arrays and scalars (what parquet readers give
    for nested columns) become lists and numbers, tuples lists, mapping keys strings.
    Raises :class:`ItemError` for anything else (it would not survive JSON)."""
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):  # numpy float64 too
        if not math.isfinite(value):
            raise ItemError(f"{what} holds a non-finite number ({value})")
        return float(value)
    if _depth > 32:
        raise ItemError(f"{what} is nested more than 32 levels deep")
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            raise ItemError(f"{what} holds bytes that are not UTF-8") from None
    if isinstance(value, Mapping):
        return {str(k): plain(v, what, _depth + 1) for k, v in value.items()}
    tolist = getattr(value, "tolist", None)  # numpy arrays and scalars, pyarrow arrays
    if callable(tolist):
        converted = tolist()
        if type(converted) is type(value):
            raise ItemError(f"{what} holds a value of type {type(value).__name__} that has no plain value")
        return plain(converted, what, _depth + 1)
    if isinstance(value, list | tuple):
        return [plain(v, what, _depth + 1) for v in value]
    raise ItemError(
        f"{what} holds a value of type {type(value).__name__}, not plain data (str, number, list, dict)"
    )


def ground_truth_text(value: Any) -> str:
    """The wire format's ground truth: text as it is, anything else as plain data in JSON."""
    if isinstance(value, str):
        return str(value)
    if value is None:
        raise ItemError("ground truth is missing (None)")
    return json.dumps(plain(value))


def _data_source_type(data_source: Any) -> str | None:
    """The problem type a data_source names: a problem type itself, or a known data set."""
    if not isinstance(data_source, str) or not data_source:
        return None
    try:
        return canonical_problem_type(data_source)
    except UnknownProblemType:
        pass
    name = data_source.rsplit("/", 1)[-1].lower()
    if any(token in name for token in _MATH_SOURCES):
        return "math"
    return data_source  # maybe a type of the service's extra scorer modules; else its error says so


def problem_type_of(extra_info: Any, data_source: Any, column: Any = None) -> Any:
    """``column`` (TRL), else ``extra_info["problem_type"]``, else from ``data_source``."""
    for value in (column, extra_info.get("problem_type") if isinstance(extra_info, Mapping) else None):
        if value is not None:
            return str(value) if isinstance(value, str) else value  # a non-string is the item's error
    return _data_source_type(data_source)


def _hint(result: RewardResult, data_source: Any, typed: bool) -> RewardResult:
    """An unknown type that came from data_source: say what to add to the rows."""
    if (
        not result.error
        or typed
        or data_source is None
        or not result.error.startswith("unknown problem_type")
    ):
        return result
    error = (
        f"{result.error}; data_source {data_source!r} is neither a problem type nor a known data set: "
        "set extra_info.problem_type (or a problem_type column) for its rows"
    )
    return RewardResult(
        result.overall, result.accuracy, result.format, result.details, error, result.problem_type
    )


def _typed(extra_info: Any) -> bool:
    return isinstance(extra_info, Mapping) and extra_info.get("problem_type") is not None


def _score(client: RewardClient, items: list[dict | ItemError]) -> list[RewardResult]:
    """Score the items; an :class:`ItemError` in place of an item becomes its error result."""
    todo = [k for k, item in enumerate(items) if not isinstance(item, ItemError)]
    scored = client.score([items[k] for k in todo]) if todo else []
    out = [
        RewardResult(0.0, 0.0, 0.0, {}, str(item), None) if isinstance(item, ItemError) else None
        for item in items
    ]
    for k, result in zip(todo, scored):
        out[k] = result
    return out  # type: ignore[return-value]


def _log_errors(results: list[RewardResult], where: str) -> None:
    # One line per batch, not per item: a misconfigured data set must not flood the console.
    errors = [r.error for r in results if r.error]
    if errors:
        event(
            _log,
            "reward_item_errors",
            logging.WARNING,
            adapter=where,
            errors=len(errors),
            items=len(results),
            first=sorted(set(errors))[:3],
        )


def error_fraction(results: Sequence[RewardResult]) -> float:
    return sum(1 for r in results if r.error) / len(results) if results else 0.0


# --------------------------------------------------------------------------------------------- veRL


def _verl_item(data_source: Any, solution_str: Any, ground_truth: Any, extra_info: Any) -> dict | ItemError:
    extra = extra_info if isinstance(extra_info, Mapping) else {}
    try:
        item: dict[str, Any] = {"response": solution_str, "ground_truth": ground_truth_text(ground_truth)}
        problem_type = problem_type_of(extra, data_source)
        if problem_type is not None:
            item["problem_type"] = problem_type
        for key, source in (
            ("options", "options"),
            ("problem", "problem"),
            ("problem", "question"),
            ("data_type", "data_type"),
        ):
            if extra.get(source) is not None and key not in item:
                item[key] = plain(extra[source], f"extra_info.{source}")
    except ItemError as exc:
        return exc
    return item


def _verl_value(result: RewardResult, return_dict: bool) -> float | dict[str, float]:
    if not return_dict:
        return result.overall
    # Every item has every key: veRL stacks each key over the batch and fails on a missing one.
    return {
        "score": result.overall,
        "accuracy": result.accuracy,
        "format": result.format,
        ERRORS_METRIC: 1.0 if result.error else 0.0,
    }


def _verl_results(rows: list[tuple[Any, Any, Any, Any]], url: str | None) -> list[RewardResult]:
    items = [_verl_item(*row) for row in rows]
    results = _score(_shared_client(url), items)
    results = [_hint(r, row[0], _typed(row[3])) for r, row in zip(results, rows)]
    _log_errors(results, "verl")
    return results


def compute_score(
    data_source: Any,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict | None = None,
    *,
    return_dict: bool = True,
    url: str | None = None,
    **_framework_kwargs: Any,
) -> float | dict[str, float]:
    """veRL ``custom_reward_function``: score one response. Extra keyword arguments that
    veRL versions pass (sandbox URLs, semaphores, reward router...) are accepted and ignored."""
    result = _verl_results([(data_source, solution_str, ground_truth, extra_info)], url)[0]
    return _verl_value(result, return_dict)


def compute_score_batch(
    data_sources: Sequence[Any],
    solution_strs: Sequence[str],
    ground_truths: Sequence[Any],
    extra_infos: Sequence[dict | None] | None = None,
    *,
    return_dict: bool = True,
    url: str | None = None,
    **_framework_kwargs: Any,
) -> list[float | dict[str, float]]:
    """veRL batch reward manager form: all items in one request."""
    extra_infos = extra_infos if extra_infos is not None else [None] * len(solution_strs)
    rows = list(zip(data_sources, solution_strs, ground_truths, extra_infos))
    return [_verl_value(r, return_dict) for r in _verl_results(rows, url)]


# ---------------------------------------------------------------------------------------------- TRL


def completion_text(completion: Any) -> Any:
    """The text of a TRL completion: a string, or the last assistant message's content."""
    if isinstance(completion, dict):
        completion = [completion]
    if isinstance(completion, list):
        messages = [m for m in completion if isinstance(m, dict)]
        chosen = next(
            (m for m in reversed(messages) if m.get("role") == "assistant"), messages[-1] if messages else {}
        )
        content = chosen.get("content", "")
        if isinstance(content, list):  # multimodal message parts
            return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
        return content
    return completion


class _TrlScorer:
    """Builds scoring items from TRL's columns, and scores each batch once for all the
    component functions that share it (TRL calls every function with the same lists)."""

    def __init__(
        self,
        client: RewardClient,
        problem_type_key: str,
        answer_key: str | None,
        options_key: str,
        problem_key: str,
    ):
        self.client = client
        self.problem_type_key, self.answer_key = problem_type_key, answer_key
        self.options_key, self.problem_key = options_key, problem_key
        self._last: tuple[tuple[Any, ...], list[RewardResult]] | None = None
        self._lock = threading.Lock()

    def _answer_columns(self, columns: Mapping[str, Any]) -> list[str]:
        if self.answer_key is not None:
            if self.answer_key not in columns:
                raise ValueError(
                    f"TRL reward: dataset column {self.answer_key!r} is missing; columns passed: "
                    f"{_names(columns)}"
                )
            return [self.answer_key]
        found = [key for key in ANSWER_COLUMNS if key in columns]
        if not found:
            raise ValueError(
                f"TRL reward: dataset column 'answer' is missing; columns passed: {_names(columns)} "
                "(the answer may also be in 'solution', 'reward_model' or 'ground_truth')"
            )
        return found

    def _item(
        self, i: int, completion: Any, answer_keys: list[str], columns: Mapping[str, Any]
    ) -> dict | ItemError:
        def cell(key: str) -> Any:
            values = columns.get(key)
            return values[i] if values is not None else None

        extra = cell("extra_info")
        extra = extra if isinstance(extra, Mapping) else {}
        answer = None
        for key in answer_keys:  # per row: a data set may mix row formats
            answer = cell(key)
            if key == "reward_model":
                answer = answer.get("ground_truth") if isinstance(answer, Mapping) else None
            if answer is not None:
                break
        try:
            item: dict[str, Any] = {
                "response": completion_text(completion),
                "ground_truth": ground_truth_text(answer),
            }
            problem_type = problem_type_of(extra, cell("data_source"), cell(self.problem_type_key))
            if problem_type is not None:
                item["problem_type"] = problem_type
            options = cell(self.options_key)
            options = options if options is not None else extra.get("options")
            if options is not None:
                item["options"] = plain(options, "options")
            problem = cell(self.problem_key)
            problem = problem if isinstance(problem, str) else extra.get("problem") or extra.get("question")
            if isinstance(problem, str):
                item["problem"] = problem
            data_type = cell("data_type")
            data_type = data_type if data_type is not None else extra.get("data_type")
            if isinstance(data_type, str):
                item["data_type"] = data_type
        except ItemError as exc:
            return exc
        return item

    def results(self, completions: Sequence[Any], columns: Mapping[str, Any]) -> list[RewardResult]:
        answer_keys = self._answer_columns(columns)
        if not ({self.problem_type_key, "extra_info", "data_source"} & set(columns)):
            raise ValueError(
                f"TRL reward: dataset column {self.problem_type_key!r} is missing (nor 'extra_info' or "
                f"'data_source'); columns passed: {_names(columns)}"
            )
        # Identity of the lists TRL passes: the same call of every component function.
        key = (completions, columns.get(self.problem_type_key), *(columns[k] for k in answer_keys))
        with self._lock:
            last = self._last
            if last is not None and len(last[0]) == len(key) and all(a is b for a, b in zip(last[0], key)):
                return last[1]
            items = [self._item(i, c, answer_keys, columns) for i, c in enumerate(completions)]
            results = _score(self.client, items)
            sources, extras = columns.get("data_source"), columns.get("extra_info")
            types = columns.get(self.problem_type_key)
            results = [
                _hint(
                    r,
                    sources[i] if sources is not None else None,
                    (types is not None and types[i] is not None)
                    or _typed(extras[i] if extras is not None else None),
                )
                for i, r in enumerate(results)
            ]
            self._last = (key, results)
        _log_errors(results, "trl")
        log_metric, log_extra = columns.get("log_metric"), columns.get("log_extra")
        if callable(log_metric):  # TRL >= 1.x hands these to reward functions
            log_metric(ERRORS_METRIC, error_fraction(results))
        if callable(log_extra):
            log_extra("reward_error", [r.error or "" for r in results])
        return results


def _names(columns: Mapping[str, Any]) -> str:
    return ", ".join(sorted(k for k in columns if k not in _TRL_KWARGS)) or "none"


class TrlRewardFuncs(list):
    """The reward functions for ``GRPOTrainer(reward_funcs=...)``, one per component.

    ``reward_weights`` (for ``GRPOConfig(reward_weights=...)``) makes TRL's total reward the
    project's overall reward: accuracy_weight * accuracy + format_weight * format."""

    reward_weights: list[float]


def _client_for(url: str | None, config: RewardConfig | None) -> RewardClient:
    url = url if url is not None else os.environ.get(URL_ENV) or None
    return open_reward_client(url, config) if config is not None else _shared_client(url or "inprocess")


def make_trl_reward_funcs(
    url: str | None = None,
    components: Sequence[str] = ("accuracy", "format"),
    *,
    problem_type_key: str = "problem_type",
    answer_key: str | None = None,
    options_key: str = "options",
    problem_key: str = "problem",
    config: RewardConfig | None = None,
    client: RewardClient | None = None,
) -> TrlRewardFuncs:
    """TRL reward functions named ``evr1_<component>``, sharing one scoring call per batch.

    ``answer_key=None`` finds the answer column: ``answer`` (this project's rows),
    ``solution`` (Video-R1), ``reward_model.ground_truth`` or ``ground_truth`` (veRL). The
    problem type comes from ``problem_type_key``, else ``extra_info.problem_type``, else
    ``data_source``. ``url=None`` reads ``EVR1_REWARD_URL``; unset or ``inprocess`` scores
    in this process with ``config``; ``client`` replaces both. Bad items score 0.0 and are counted in the
    ``reward/errors`` metric (TRL's ``log_metric``); they never raise.
    """
    unknown = [c for c in components if c not in COMPONENTS]
    if unknown or not components:
        raise ValueError(
            f"TRL reward components {unknown or list(components)}: choose from {', '.join(COMPONENTS)}"
        )
    client = client if client is not None else _client_for(url, config)
    scorer = _TrlScorer(client, problem_type_key, answer_key, options_key, problem_key)
    weights = config or RewardConfig()
    funcs = TrlRewardFuncs(_component_func(scorer, c) for c in components)
    by_name = {"overall": 1.0, "accuracy": weights.accuracy_weight, "format": weights.format_weight}
    funcs.reward_weights = [by_name[c] for c in components]
    return funcs


def _component_func(scorer: _TrlScorer, component: str) -> Callable[..., list[float]]:
    def reward(
        prompts: Sequence[Any] | None = None, completions: Sequence[Any] = (), **columns: Any
    ) -> list[float]:
        return [getattr(r, component) for r in scorer.results(completions, columns)]

    # TRL logs each reward function under its __name__: rewards/evr1_accuracy/mean, ...
    reward.__name__ = reward.__qualname__ = "evr1_reward" if component == "overall" else f"evr1_{component}"
    return reward


def make_trl_reward_func(
    url: str | None = None,
    problem_type_key: str = "problem_type",
    answer_key: str | None = None,
    *,
    options_key: str = "options",
    problem_key: str = "problem",
    config: RewardConfig | None = None,
    client: RewardClient | None = None,
) -> Callable[..., list[float]]:
    """One TRL reward function, ``evr1_reward``, giving the overall reward; see
    :func:`make_trl_reward_funcs` for the columns it reads and per-component functions."""
    return make_trl_reward_funcs(
        url,
        ("overall",),
        problem_type_key=problem_type_key,
        answer_key=answer_key,
        options_key=options_key,
        problem_key=problem_key,
        config=config,
        client=client,
    )[0]

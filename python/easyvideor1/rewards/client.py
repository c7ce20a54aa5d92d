"""Reward clients: one interface, an in-process and an HTTP implementation, same results.

``RewardClient.score(items)`` takes :class:`ScoreItem` objects or wire-format dicts
(``{"id", "problem_type", "response", "ground_truth", "options"?, "problem"?,
"data_type"?, "extra"?}``) and returns one :class:`RewardResult` per item, in order. A bad
item never raises: it comes back with ``error`` set and a zero score.

Item validation (:func:`prepare_item`) and scoring of a validated item
(:func:`score_prepared`) live here, not in the service, so that the in-process client and
the reward service apply exactly the same rules and give identical results.

>>> client = open_reward_client(None)
>>> client.score([{"problem_type": "boolean", "response": "<answer>yes</answer>", "ground_truth": "yes"}])[0].overall
1.0
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import threading
import time
import weakref
from abc import ABC, abstractmethod
from collections.abc import Collection
from dataclasses import dataclass, fields
from typing import Any

from pydantic import ValidationError

from easyvideor1.config.schema import SCORING_FIELDS, RewardConfig
from easyvideor1.errors import ConfigError, EasyVideoR1Error
from easyvideor1.logging import event, get_logger
from easyvideor1.rewards.pool import RewardPool, payload_of
from easyvideor1.rewards.registry import UnknownProblemType, canonical_problem_type, score, scorer_specs
from easyvideor1.rewards.types import RewardResult, ScoreRequest

# Longest response / ground truth / problem accepted per item; longer is a per-item error
# (a runaway generation, not an answer) so one item cannot stall a scorer for the batch.
DEFAULT_MAX_ITEM_CHARS = 262_144
MAX_EXTRA_DEPTH = 32  # deeper 'extra' objects are refused: they would overflow pickling to a worker
TOKEN_ENV = "EVR1_REWARD_TOKEN"
URL_ENV = "EVR1_REWARD_URL"

_log = get_logger("rewards.client")
_JSON_TYPES = {dict: "object", list: "array", str: "string", int: "integer", float: "number",
               bool: "boolean", type(None): "null"}


class RewardServiceError(EasyVideoR1Error):
    """The reward service refused a request or could not be reached (after retries)."""


@dataclass(frozen=True)
class ScoreItem:
    """One item of a scoring request, in the service's wire format."""

    response: str
    ground_truth: str
    problem_type: str | None = None
    options: tuple[str, ...] | list[str] | None = None
    problem: str | None = None
    data_type: str | None = None
    extra: dict[str, Any] | None = None
    id: str | int | None = None

    def as_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}
        if "options" in out:
            out["options"] = list(out["options"])
        return out


@dataclass(frozen=True, slots=True)
class PreparedItem:
    """A validated item: ``request`` is set (canonical type) or ``error`` says what is wrong."""

    id: str | int | None
    request: ScoreRequest | None
    error: str | None
    problem_type: str | None  # canonical, whenever it could be resolved

    def error_result(self) -> RewardResult:
        return RewardResult(0.0, 0.0, 0.0, {}, self.error, self.problem_type)


def json_type_name(value: Any) -> str:
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _check_text(item: dict, key: str, required: bool, max_chars: int, problems: list[str]) -> str | None:
    if key not in item or (item[key] is None and not required):
        if required:
            problems.append(f"missing field '{key}'")
        return None
    value = item[key]
    if not isinstance(value, str):
        problems.append(f"field '{key}' must be a string, got {json_type_name(value)}")
        return None
    if len(value) > max_chars:
        problems.append(f"field '{key}' is too long: {len(value)} characters > limit {max_chars}")
        return None
    return value


def prepare_item(
    raw: Any,
    config: RewardConfig,
    *,
    route_type: str | None = None,
    max_item_chars: int = DEFAULT_MAX_ITEM_CHARS,
) -> PreparedItem:
    """Validate one wire-format item; every problem found is named, joined by ``; ``.

    ``route_type`` is the canonical type of a per-type route: the item may omit
    ``problem_type`` and, when it gives one, it must resolve to the same type.
    """
    if isinstance(raw, ScoreItem):
        raw = raw.as_dict()
    if not isinstance(raw, dict):
        return PreparedItem(None, None, f"item must be a JSON object, got {json_type_name(raw)}", route_type)
    problems: list[str] = []
    item_id = raw.get("id")
    if item_id is not None and (isinstance(item_id, bool) or not isinstance(item_id, str | int)):
        problems.append(f"field 'id' must be a string or an integer, got {json_type_name(item_id)}")
        item_id = None
    canonical = route_type
    problem_type = raw.get("problem_type")
    if problem_type is not None and not isinstance(problem_type, str):
        problems.append(f"field 'problem_type' must be a string, got {json_type_name(problem_type)}")
    elif problem_type is None and route_type is None:
        if config.default_problem_type is None:
            problems.append("missing field 'problem_type'")
        else:
            canonical = _canonical(config.default_problem_type, None)
    elif problem_type is not None:
        try:
            # On a per-type route an unknown spelling is an error, never the configured default.
            found = _canonical(problem_type, None if route_type else config)
        except UnknownProblemType as exc:
            problems.append(str(exc))
        else:
            if route_type is not None and found != route_type:
                problems.append(f"problem_type {problem_type!r} is {found!r}, but this route scores "
                                f"{route_type!r}")
            canonical = found
    response = _check_text(raw, "response", True, max_item_chars, problems)
    ground_truth = _check_text(raw, "ground_truth", True, max_item_chars, problems)
    problem = _check_text(raw, "problem", False, max_item_chars, problems)
    data_type = _check_text(raw, "data_type", False, 64, problems)
    options = raw.get("options")
    if options is not None:
        if not isinstance(options, list | tuple) or not all(isinstance(o, str) for o in options):
            problems.append("field 'options' must be a list of strings or null")
            options = None
        else:
            options = tuple(options)
    extra = raw.get("extra")
    if extra is not None and not isinstance(extra, dict):
        problems.append(f"field 'extra' must be an object or null, got {json_type_name(extra)}")
    elif extra and _depth(extra) > MAX_EXTRA_DEPTH:
        problems.append(f"field 'extra' is nested more than {MAX_EXTRA_DEPTH} levels deep")
    if problems:
        return PreparedItem(item_id, None, "; ".join(problems), canonical)
    request = ScoreRequest(response=response, ground_truth=ground_truth, problem_type=canonical,
                           options=options, problem=problem, data_type=data_type, extra=extra or {})
    return PreparedItem(item_id, request, None, canonical)


def scoring_config(raw: Any, base: RewardConfig, loaded_modules: Collection[str]) -> RewardConfig:
    """The settings a scoring request carries: ``RewardConfig`` scoring fields over ``base``
    (fields not given keep ``base``'s values). Raises ConfigError naming what is wrong.

    ``url`` and ``workers`` are the scoring side's own settings, not a request's; an
    ``extra_scorer_modules`` entry outside ``loaded_modules`` is refused before validation
    (which would import it into the scoring process)."""
    if not isinstance(raw, dict):
        raise ConfigError(f"'config' must be an object of scoring fields ({', '.join(sorted(SCORING_FIELDS))}), "
                          f"got {json_type_name(raw)}")
    refused = [key for key in ("url", "workers") if key in raw]
    if refused:
        raise ConfigError(f"config field(s) {', '.join(map(repr, refused))} cannot be set per request: "
                          "they are the scoring service's own settings")
    modules = raw.get("extra_scorer_modules")
    if isinstance(modules, list):
        missing = [m for m in modules if isinstance(m, str) and m not in loaded_modules]
        if missing:
            raise ConfigError(f"extra_scorer_modules {', '.join(map(repr, missing))}: not loaded by this service at "
                              "start-up (its worker.reward.extra_scorer_modules lists what it loads)")
    try:
        return RewardConfig.model_validate({**base.scoring_fields(), **raw})
    except ValidationError as exc:
        problems = [f"{'.'.join(map(str, e['loc'])) or 'config'}: {e['msg']}" for e in exc.errors()]
        raise ConfigError("config: " + "; ".join(problems)) from None


_CANONICAL: dict[str, str] = {}


def _canonical(name: str, config: RewardConfig | None) -> str:
    """``canonical_problem_type`` with a cache of resolved spellings (an alias never changes
    owner, so a hit cannot go stale); unknown names are not cached, so the cache stays small."""
    found = _CANONICAL.get(name)
    if found is None:
        try:
            found = canonical_problem_type(name)
        except UnknownProblemType:
            if config is None or config.default_problem_type is None:
                raise
            return canonical_problem_type(config.default_problem_type)
        if len(_CANONICAL) < 4096:
            _CANONICAL[name] = found
    return found


def _depth(value: Any, level: int = 1) -> int:
    if level > MAX_EXTRA_DEPTH:
        return level
    if isinstance(value, dict):
        return max((_depth(v, level + 1) for v in value.values()), default=level)
    if isinstance(value, list | tuple):
        return max((_depth(v, level + 1) for v in value), default=level)
    return level - 1


def jsonable(value: Any, _depth: int = 0) -> Any:
    """``value`` as plain JSON types (str keys, lists, finite floats), so a scorer's details
    can always be serialised and read back unchanged: HTTP and in-process results match."""
    if value is None or type(value) in (str, bool, int):
        return value
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else str(value)
    if _depth > 32:
        return str(value)
    if isinstance(value, dict):
        return {str(k): jsonable(v, _depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v, _depth + 1) for v in value]
    if isinstance(value, bool):  # subclasses (enums) as their plain value
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, str):
        return str(value)
    item = getattr(value, "item", None)  # numpy scalars
    if callable(item):
        try:
            return jsonable(item(), _depth + 1)
        except (TypeError, ValueError):
            pass
    return str(value)


def score_prepared(request: ScoreRequest, config: RewardConfig) -> RewardResult:
    """Score one validated item; never raises, details are JSON-safe."""
    try:
        result = score(request, config)
    except Exception as exc:  # unknown type or dispatcher bug: cost one item, not the batch
        return RewardResult(0.0, 0.0, 0.0, {}, f"{type(exc).__name__}: {exc}", request.problem_type)
    details = result.details
    if details and not _plain(details):
        details = jsonable(details)
    elif details is None:
        details = {}
    return RewardResult(result.overall, result.accuracy, result.format, details, result.error,
                        result.problem_type)


def _plain(value: Any, depth: int = 0) -> bool:
    # Fast path: details that already are plain JSON (most scorers) are returned as they are.
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return True
    if kind is float:
        return math.isfinite(value)
    if depth > 32:
        return False
    if kind is dict:
        return all(type(k) is str and _plain(v, depth + 1) for k, v in value.items())
    if kind is list:
        return all(_plain(v, depth + 1) for v in value)
    return False  # tuples become lists in JSON: convert, so both clients agree


class RewardClient(ABC):
    """Scores items: one :class:`RewardResult` per item, in order, errors per item."""

    @abstractmethod
    def score(self, items: list[ScoreItem | dict], problem_type: str | None = None) -> list[RewardResult]:
        """``problem_type`` scores every item as that type (items may then omit it)."""

    def close(self) -> None:
        """Release connections or worker processes."""
        return None

    def __enter__(self) -> RewardClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class InProcessRewardClient(RewardClient):
    """Scores in worker processes of this machine (:class:`~easyvideor1.rewards.pool.RewardPool`),
    with the reward service's per-item limit: an item past ``config.timeout_s`` gets its worker
    killed and ``timeout after Xs``. ``config.workers`` workers (None: the CPUs this process
    may use), started on the first call and stopped by :meth:`close`."""

    def __init__(self, config: RewardConfig | None = None, max_item_chars: int = DEFAULT_MAX_ITEM_CHARS):
        self.config = config or RewardConfig()
        self.max_item_chars = max_item_chars
        self._pool: RewardPool | None = None
        self._lock = threading.Lock()
        self._finalizer: weakref.finalize | None = None

    def _workers(self) -> RewardPool:
        with self._lock:
            if self._pool is not None and self._pool.workers.owner != os.getpid():
                self._pool = None  # a forked copy of this client: the workers are the parent's
            if self._pool is None:
                pool = RewardPool(self.config.workers, modules=self.config.extra_scorer_modules)
                pool.start()
                # A client dropped without close() still stops its workers (at collection or exit).
                self._finalizer = weakref.finalize(self, pool.close, 1.0)
                self._pool = pool
            return self._pool

    def score(self, items: list[ScoreItem | dict], problem_type: str | None = None) -> list[RewardResult]:
        route = canonical_problem_type(problem_type) if problem_type is not None else None
        prepared = [prepare_item(raw, self.config, route_type=route, max_item_chars=self.max_item_chars)
                    for raw in items]
        out: list[RewardResult | None] = [p.error_result() if p.request is None else None for p in prepared]
        todo = [k for k, p in enumerate(prepared) if p.request is not None]
        if todo:
            specs = scorer_specs()
            payloads = [payload_of(prepared[k].request) for k in todo]
            heavy = [specs[p[2]].heavy if p[2] in specs else False for p in payloads]
            for k, (r, _kind) in zip(todo, self._workers().score(payloads, heavy, self.config)):
                out[k] = RewardResult(*r[:6])
        return out  # type: ignore[return-value]

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
            if self._finalizer is not None:
                self._finalizer.detach()
                self._finalizer = None
        if pool is not None and pool.workers.owner == os.getpid():
            pool.close()


_RETRY_STATUS = frozenset({500, 502, 503, 504})


class HttpRewardClient(RewardClient):
    """Client of the reward service (``evr1 serve reward``).

    Connection errors and 5xx answers are retried ``retries`` times with exponential
    backoff (the service may be restarting); a 4xx is the caller's fault and raised at
    once. Large inputs are sent in batches of ``batch_size`` items. With ``config``, every
    request carries its scoring fields and the service scores with them (else with its own
    ``worker.reward``).
    """

    def __init__(self, base_url: str, token: str | None = None, timeout: float = 300.0, retries: int = 5,
                 backoff_s: float = 0.25, max_backoff_s: float = 8.0, batch_size: int = 1024,
                 config: RewardConfig | None = None):
        import httpx  # lazy: the in-process path must not need an HTTP stack

        self.base_url = base_url.rstrip("/")
        token = token if token is not None else os.environ.get(TOKEN_ENV) or None
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.retries, self.backoff_s, self.max_backoff_s = retries, backoff_s, max_backoff_s
        self.batch_size = batch_size
        self.config = config
        self._scoring = {} if config is None else {"config": config.scoring_fields()}
        self._httpx = httpx
        self._client = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout)

    def score(self, items: list[ScoreItem | dict], problem_type: str | None = None) -> list[RewardResult]:
        path = "/v1/score" if problem_type is None else f"/v1/score/{problem_type}"
        out: list[RewardResult] = []
        for start in range(0, len(items), self.batch_size):
            batch = [i.as_dict() if isinstance(i, ScoreItem) else i for i in items[start:start + self.batch_size]]
            try:  # ASCII-escaped: lone surrogates in a decoded response must not fail the batch
                content = json.dumps({"items": batch, **self._scoring}).encode()
            except (TypeError, ValueError) as exc:
                raise RewardServiceError(f"items for {self.base_url}{path} are not JSON-serialisable: {exc}") from None
            body = self.request("POST", path, content=content, headers={"content-type": "application/json"})
            results = body.get("results") if isinstance(body, dict) else None
            if not isinstance(results, list) or len(results) != len(batch):
                raise RewardServiceError(f"reward service at {self.base_url}{path} answered "
                                         f"{len(results) if isinstance(results, list) else 'no'} results "
                                         f"for {len(batch)} items")
            out.extend(RewardResult(r["overall"], r["accuracy"], r["format"], r.get("details") or {},
                                    r.get("error"), r.get("problem_type")) for r in results)
        return out

    def problem_types(self) -> list[dict[str, Any]]:
        return self.request("GET", "/v1/problem-types")["problem_types"]

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        """One JSON request with retries; returns the decoded body."""
        url = f"{self.base_url}{path}"
        last = "no attempt made"
        for attempt in range(self.retries + 1):
            if attempt:
                delay = min(self.max_backoff_s, self.backoff_s * 2 ** (attempt - 1))
                time.sleep(delay * (0.5 + random.random() / 2))  # jitter: restarted peers don't stampede
            try:
                resp = self._client.request(method, path, **kwargs)
            except self._httpx.TransportError as exc:
                last = f"{type(exc).__name__}: {exc}"
            else:
                if resp.status_code < 400:
                    return resp.json()
                detail = _detail(resp)
                if resp.status_code not in _RETRY_STATUS:
                    raise RewardServiceError(f"reward service at {url} refused the request: "
                                             f"HTTP {resp.status_code}: {detail}")
                last = f"HTTP {resp.status_code}: {detail}"
            event(_log, "reward_request_retry", logging.WARNING, url=url, attempt=attempt + 1, error=last)
        raise RewardServiceError(f"reward service at {url} failed after {self.retries + 1} attempts; "
                                 f"last error: {last}")

    def close(self) -> None:
        self._client.close()


def _detail(resp: Any) -> str:
    try:
        body = resp.json()
    except ValueError:
        return resp.text[:500]
    return str(body.get("detail", body)) if isinstance(body, dict) else str(body)[:500]


def open_reward_client(url: str | None = None, config: RewardConfig | None = None, **http_kwargs: Any) -> RewardClient:
    """``None``, ``""`` or ``"inprocess"`` -> :class:`InProcessRewardClient`;
    ``http(s)://host:port`` -> :class:`HttpRewardClient`; both score with ``config`` when it
    is given (without it, the service uses its own ``worker.reward``)."""
    if url is None or url.strip() in ("", "inprocess"):
        return InProcessRewardClient(config)
    if url.startswith(("http://", "https://")):
        return HttpRewardClient(url, config=config, **http_kwargs)
    raise ConfigError(f"reward URL {url!r}: expected 'inprocess' or an http(s):// URL")

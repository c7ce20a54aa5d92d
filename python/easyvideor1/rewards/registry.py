"""Registry and dispatcher of reward scorers, keyed by canonical ``problem_type``.

A scorer is a pure function ``(ScoreRequest, options: dict) -> Score``. It is registered
under its canonical name (the public datasets' value) and any aliases; lookups are case-,
space-, dash- and underscore-insensitive. Built-in scorers live one per module in this
package (``BUILTIN_MODULES``) and are imported on first use. Third-party scorers register
through the ``easyvideor1.rewards`` entry-point group (each entry point is a module to
import) or by calling :func:`register_scorer` / :func:`load_scorer_modules` from config.
"""

from __future__ import annotations

import importlib
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from easyvideor1.config.schema import RewardConfig
from easyvideor1.errors import EasyVideoR1Error
from easyvideor1.rewards.types import RewardResult, Score, ScoreRequest

ScorerFn = Callable[[ScoreRequest, dict[str, Any]], Score]

BUILTIN_MODULES = (
    "multiple_choice",
    "numerical",
    "regression",
    "boolean",
    "temporal_grounding",
    "spatial_grounding",
    "spatiotemporal_grounding",
    "tracking",
    "open_ended",
    "ocr",
    "math_answer",
    "code_svg",
    "code_html",
    "code_python",
    "preference",
)


class UnknownProblemType(EasyVideoR1Error):
    def __init__(self, problem_type: str, known: Iterable[str]):
        self.problem_type = problem_type
        super().__init__(
            f"unknown problem_type {problem_type!r}; known: {', '.join(sorted(known))} "
            "(the run config's worker.reward.default_problem_type routes unknown types to a scorer)"
        )


@dataclass(frozen=True)
class ScorerSpec:
    name: str
    fn: ScorerFn
    aliases: tuple[str, ...] = ()
    # Heavy scorers (rendering, sandboxed code, remote judge) run in the service's worker pool.
    heavy: bool = False
    description: str = ""
    # This type's own time limit per item (None: the reward timeout alone), applied by the
    # scoring pool; ``scorer_options.<type>.timeout_s`` overrides it. See item_timeout().
    timeout_s: float | None = None


_SCORERS: dict[str, ScorerSpec] = {}
_ALIASES: dict[str, str] = {}
_LOCK = threading.Lock()
_LOAD_LOCK = threading.RLock()
_LOADED = False
_MODULES: set[str] = set()  # every scorer module imported through this registry


def normalize_name(name: str) -> str:
    return re.sub(r"[\s_\-/]+", "", str(name).strip().lower())


def register_scorer(
    name: str, *, aliases: Iterable[str] = (), heavy: bool = False, description: str = "",
    timeout_s: float | None = None,
) -> Callable[[ScorerFn], ScorerFn]:
    """Decorator: register ``fn`` as the scorer of ``name`` (and its aliases); ``timeout_s``:
    the type's own per-item time limit (see :func:`item_timeout`)."""

    def decorate(fn: ScorerFn) -> ScorerFn:
        spec = ScorerSpec(name=name, fn=fn, aliases=tuple(aliases), heavy=heavy,
                          description=description or (fn.__doc__ or "").strip().split("\n")[0],
                          timeout_s=timeout_s)
        with _LOCK:
            for key in (name, *spec.aliases):
                owner = _ALIASES.get(normalize_name(key))
                if owner is not None and owner != name:
                    raise ValueError(f"problem_type alias {key!r} already belongs to {owner!r}")
            _SCORERS[name] = spec
            for key in (name, *spec.aliases):
                _ALIASES[normalize_name(key)] = name
        return fn

    return decorate


def load_scorer_modules(modules: Iterable[str]) -> None:
    """Import modules that register scorers (used for config-provided extensions)."""
    for module in modules:
        if module not in _MODULES:
            importlib.import_module(module)
            _MODULES.add(module)


def scorer_modules() -> frozenset[str]:
    """The modules that registered the scorers of this process: built-ins, entry points, and
    those loaded by :func:`load_scorer_modules`."""
    _ensure_loaded()
    return frozenset(_MODULES)


def _ensure_loaded() -> None:
    global _LOADED
    if _LOADED:
        return
    # One thread imports while others wait (no spurious UnknownProblemType mid-load). The lock is
    # re-entrant because scorer modules may look types up while they are imported. A failed
    # import leaves _LOADED False: the next call retries and raises again, never serving a
    # half-filled registry.
    with _LOAD_LOCK:
        if _LOADED:
            return
        for module in BUILTIN_MODULES:
            importlib.import_module(f"easyvideor1.rewards.{module}")
            _MODULES.add(f"easyvideor1.rewards.{module}")
        for ep in entry_points(group="easyvideor1.rewards"):
            importlib.import_module(ep.value)
            _MODULES.add(ep.value)
        _LOADED = True


def scorer_specs() -> dict[str, ScorerSpec]:
    _ensure_loaded()
    return dict(_SCORERS)


def canonical_problem_type(problem_type: str, config: RewardConfig | None = None) -> str:
    """Map any spelling or alias to the canonical name; unknown -> configured default or error."""
    _ensure_loaded()
    found = _ALIASES.get(normalize_name(problem_type))
    if found is not None:
        return found
    default = config.default_problem_type if config else None
    if default is not None:
        return canonical_problem_type(default)
    raise UnknownProblemType(problem_type, _SCORERS)


def get_scorer(problem_type: str, config: RewardConfig | None = None) -> ScorerSpec:
    return _SCORERS[canonical_problem_type(problem_type, config)]


def item_timeout(problem_type: str, config: RewardConfig) -> float:
    """The time limit of one item of canonical type ``problem_type``: the type's own limit
    (``scorer_options.<type>.timeout_s``, else the scorer's registered ``timeout_s``), capped
    by ``config.timeout_s``, the hard limit of every item. The scoring pool kills the worker
    at this limit, and scorers that budget their own work get it as option ``timeout_s``."""
    own = config.scorer_options.get(problem_type, {}).get("timeout_s")
    if own is None:
        spec = _SCORERS.get(problem_type)
        own = spec.timeout_s if spec is not None else None
    try:
        own = float(own) if own is not None else None
    except (TypeError, ValueError):
        own = None
    if own is None or not own > 0 or own != own:
        return config.timeout_s
    return min(config.timeout_s, own)


def score(request: ScoreRequest, config: RewardConfig | None = None) -> RewardResult:
    """Route ``request`` to its scorer and combine accuracy and format into ``overall``.

    Raises :class:`UnknownProblemType` for an unknown type (unless a default is configured);
    any other scorer failure is reported in ``error`` with a zero score, never raised.
    """
    config = config or RewardConfig()
    spec = get_scorer(request.problem_type, config)
    if request.problem_type != spec.name:
        request = ScoreRequest(
            response=request.response, ground_truth=request.ground_truth, problem_type=spec.name,
            options=request.options, problem=request.problem, data_type=request.data_type,
            extra=request.extra,
        )
    options = {"answer_tag_policy": config.answer_tag_policy, **config.scorer_options.get(spec.name, {}),
               "timeout_s": item_timeout(spec.name, config)}
    try:
        result = spec.fn(request, options)
    except Exception as exc:  # a scorer bug must cost one item, not the batch
        return RewardResult(0.0, 0.0, 0.0, {}, f"{type(exc).__name__}: {exc}", spec.name)
    accuracy = _unit(result.accuracy)
    fmt = _unit(result.format)
    overall = config.accuracy_weight * accuracy + config.format_weight * fmt
    return RewardResult(overall, accuracy, fmt, result.details, None, spec.name)


def _unit(value: float) -> float:
    value = float(value)
    if value != value:  # NaN
        return 0.0
    return min(1.0, max(0.0, value))

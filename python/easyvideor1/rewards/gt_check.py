"""Can a ground truth ever score? Each problem type's own parser, run without a response.

``ground_truth_problem(problem_type, ground_truth, options)`` returns None when the scorer
of ``problem_type`` accepts ``ground_truth``, else the message the scorer would raise on
every item of that row (``malformed tracking ground truth ...: why``). It is what
``evr1 data validate`` runs on every row (docs/data-format.md), so it must stay cheap:

- light scorers (every built-in type but the four below) are called with an empty response:
  each parses its ground truth first and raises :class:`GroundTruthError` when it is
  malformed; with nothing to read in the response the rest is a few comparisons. ``math``
  parses with math_verify (cached, size-guarded as in scoring).
- ``code``: the tests are parsed (JSON, shapes, call expressions compile); nothing runs.
- ``svg-code`` / ``html-code``: the reference must look like SVG / HTML; nothing renders.
- ``preference``: the reference must be non-empty (whether a free-text reference has a
  judge is run configuration, not data).
- other heavy scorers (registered by extensions) are not checked.

An unknown problem type is a problem too: no scorer would ever see the row (unless the run
routes unknown types to ``worker.reward.default_problem_type``: pass its ``RewardConfig``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from easyvideor1.errors import EasyVideoR1Error
from easyvideor1.rewards.code_extract import looks_like
from easyvideor1.rewards.extract import GroundTruthError, strip_answer_tags
from easyvideor1.rewards.registry import UnknownProblemType, get_scorer
from easyvideor1.rewards.types import ScoreRequest

if TYPE_CHECKING:
    from easyvideor1.config.schema import RewardConfig

# Options a light scorer is called with: the defaults of scoring, no judge (nothing remote).
_LIGHT_OPTIONS = {"answer_tag_policy": "last"}


def ground_truth_problem(
    problem_type: str, ground_truth: str, options: Sequence[str] | None = None, config: RewardConfig | None = None
) -> str | None:
    """None when ``ground_truth`` parses for ``problem_type``, else why it never can."""
    try:
        spec = get_scorer(problem_type, config)
    except UnknownProblemType as exc:
        return str(exc)
    try:
        if spec.name == "code":
            from easyvideor1.rewards.code_python import parse_tests

            parse_tests(ground_truth)
        elif spec.name == "svg-code":
            if "<svg" not in strip_answer_tags(ground_truth).lower():
                raise GroundTruthError(spec.name, ground_truth, "the reference is not an SVG document")
        elif spec.name == "html-code":
            if not looks_like(strip_answer_tags(ground_truth), "html"):
                raise GroundTruthError(spec.name, ground_truth, "the reference contains no HTML markup")
        elif spec.name == "preference":
            if not strip_answer_tags(ground_truth):
                raise GroundTruthError(spec.name, ground_truth, "empty ground truth")
        elif not spec.heavy:
            request = ScoreRequest(
                "", ground_truth, spec.name, options=tuple(options) if options is not None else None
            )
            spec.fn(request, dict(_LIGHT_OPTIONS))
    except GroundTruthError as exc:
        return str(exc)
    except (EasyVideoR1Error, ValueError, TypeError) as exc:
        # A scorer refusing the item for another reason still means this row never scores.
        return f"the {spec.name} scorer refuses it: {type(exc).__name__}: {exc}"
    return None


def sample_check(sample, config: RewardConfig | None = None) -> tuple[str, str] | None:
    """The ``check_ground_truth`` of :func:`easyvideor1.data.loader.validate_file`: None when
    the :class:`~easyvideor1.data.schema.Sample`'s ground truth parses, else ``(field,
    message)``, the field being ``problem_type`` for an unknown type, else the row's answer
    field (``answer`` or ``solution``). A run's reward ``config`` (``run_sample_check``)
    scores unknown types with its ``default_problem_type`` when set."""
    message = ground_truth_problem(sample.problem_type, sample.answer, sample.options, config)
    if message is None:
        return None
    try:
        get_scorer(sample.problem_type, config)
    except UnknownProblemType:
        return "problem_type", message
    return sample.answer_field, message


def run_sample_check(config: RewardConfig | None):
    """:func:`sample_check` as a run scoring with ``config`` sees rows: what `evr1 train`,
    `cache build`, `data prepare` and eval's ``jsonl`` benchmark check before any work."""
    return lambda sample: sample_check(sample, config)

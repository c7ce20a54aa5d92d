"""Example items per problem type (a right and a wrong answer each), in the wire format.

Used by the service's tests, the throughput benchmark and the docs' curl examples; each
pair is (item, expected accuracy).
"""

from __future__ import annotations

import itertools
import json
from typing import Any

_STG_GT = {"time": [1.0, 2.0], "boxes": {"1.0": [0, 0, 8, 8], "1.5": [2, 0, 10, 8]}}
_CODE_GT = json.dumps({"tests": [{"input": "1 2\n", "output": "3"}, {"input": "5 7\n", "output": "12"}],
                       "entry": "stdin"})
_MC_OPTIONS = ["A. red", "B. blue", "C. green", "D. yellow"]


def _item(problem_type: str, response: str, ground_truth: str, **extra: Any) -> dict[str, Any]:
    return {"problem_type": problem_type, "response": response, "ground_truth": ground_truth, **extra}


# (item, expected accuracy); responses wrap answers in <answer> tags as the prompts ask.
CHEAP: dict[str, list[tuple[dict[str, Any], float]]] = {
    "multiple choice": [
        (_item("multiple choice", "<think>it is blue</think><answer>B</answer>", "B", options=_MC_OPTIONS), 1.0),
        (_item("multiple choice", "<answer>C. green</answer>", "B", options=_MC_OPTIONS), 0.0),
    ],
    "numerical": [
        (_item("numerical", "<answer>3</answer>", "3"), 1.0),
        (_item("numerical", "<answer>2.5</answer>", "4"), 0.0),
    ],
    "regression": [
        (_item("regression", "<answer>12.7</answer>", "12.7"), 1.0),
        (_item("regression", "<answer>100</answer>", "12.7"), 0.0),
    ],
    "boolean": [
        (_item("boolean", "<answer>yes</answer>", "yes"), 1.0),
        (_item("boolean", "<answer>no</answer>", "yes"), 0.0),
    ],
    "temporal grounding": [
        (_item("temporal grounding", "<answer>[1.5, 3.0]</answer>", "[1.5, 3.0]"), 1.0),
        (_item("temporal grounding", "<answer>[10.0, 12.0]</answer>", "[1.5, 3.0]"), 0.0),
    ],
    "spatial grounding": [
        (_item("spatial grounding", "<answer>[10, 20, 50, 60]</answer>", "[10, 20, 50, 60]"), 1.0),
        (_item("spatial grounding", "<answer>[100, 200, 150, 260]</answer>", "[10, 20, 50, 60]"), 0.0),
    ],
    "spatial-temporal grounding": [
        (_item("spatial-temporal grounding", f"<answer>{json.dumps(_STG_GT)}</answer>", json.dumps(_STG_GT)),
         1.0),
    ],
    "tracking": [
        (_item("tracking", '<answer>{"0.0": [0, 0, 8, 8], "0.5": [4, 0, 12, 8]}</answer>',
               '{"0.0": [0, 0, 8, 8], "0.5": [4, 0, 12, 8]}'), 1.0),
    ],
}
TEXT: dict[str, list[tuple[dict[str, Any], float]]] = {
    "open-ended": [
        (_item("open-ended", "<answer>a red square moves left</answer>", "a red square moves left"), 1.0),
    ],
    "ocr": [
        (_item("ocr", "<answer>HELLO 42</answer>", "HELLO 42"), 1.0),
    ],
    "math": [
        (_item("math", "<answer>\\frac{1}{2}</answer>", "0.5"), 1.0),
        (_item("math", "<answer>\\sqrt{2}</answer>", "2"), 0.0),
    ],
}
CODE_OK = _item("code", "<answer>```python\na, b = map(int, input().split())\nprint(a + b)\n```</answer>", _CODE_GT)
CODE_HANG = _item("code", "<answer>```python\nwhile True:\n    pass\n```</answer>", _CODE_GT)


def mixed_batch(n: int, types: dict[str, list] | None = None) -> list[dict[str, Any]]:
    """``n`` items cycling over every example of ``types`` (default: cheap + text), ids 0..n-1."""
    pool = [item for group in (types or {**CHEAP, **TEXT}).values() for item, _ in group]
    return [{**item, "id": i} for i, item in zip(range(n), itertools.cycle(pool))]

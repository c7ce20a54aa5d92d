"""Imported once by the worker pool's forkserver (only there, see rewards/pool.py): loads
every scorer and runs each cheap one on a trivial item, so the lazy first-call imports
(sympy for math, nltk for ROUGE: ~1 s) happen once and every forked scoring worker,
replacements included, starts warm.
"""

from __future__ import annotations

import logging

from easyvideor1.rewards.registry import score, scorer_specs
from easyvideor1.rewards.types import ScoreRequest


def warm_up() -> None:
    # math_verify warns on every call that its own (signal-based) timeout is off and the
    # caller must bound the time: the pool's per-item kill does exactly that.
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    try:
        specs = scorer_specs()
    except Exception:  # workers import again and report the error through the pool
        return
    for name, spec in specs.items():
        if spec.heavy:  # heavy ones start sandboxes or browsers: not in the forkserver
            continue
        try:
            score(ScoreRequest("<answer>1</answer>", "1", name))
        except Exception:  # warming is best effort; a worker scores (and reports) for real
            pass


warm_up()

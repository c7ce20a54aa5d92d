"""A scorer for the reward tests, loaded through ``extra_scorer_modules`` (by the test process,
its scoring workers and the reward service alike; the service finds it on PYTHONPATH)."""

from __future__ import annotations

import time

from easyvideor1.rewards.registry import register_scorer
from easyvideor1.rewards.types import Score, ScoreRequest

MODULE = __name__
SLEEPY = "test sleepy"


@register_scorer(SLEEPY, description="sleeps extra.sleep_s seconds, then scores the answer 'yes'")
def sleepy(request: ScoreRequest, options: dict) -> Score:
    time.sleep(float(request.extra.get("sleep_s", 0)))
    right = request.response.strip() == request.ground_truth.strip()
    return Score(1.0 if right else 0.0, 1.0, {"slept": request.extra.get("sleep_s", 0)})

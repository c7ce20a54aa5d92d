"""Math scoring cannot be starved (issue 16, item 1): hostile answers against a real reward
service (``evr1 serve reward`` as a child process) and through the in-process client.

The probe's answers (``$10^{10^{8}}$``, ``$(1+x)^{20000}$`` x8, factorial towers) are refused
by the size pre-checks at once; answers that get past them (here: the pre-checks switched off
by a request's ``scorer_options``) are killed at the math limit by the pool, and only one
worker of two ever runs math, so numerical items, a correct math answer and ``/healthz`` keep
their latency during the flood, and the workers are idle (no CPU) after it. Bounds are
generous (a loaded machine) but far below the service's 20 s item timeout.
"""

from __future__ import annotations

import os
import threading
import time

import httpx
import pytest

from easyvideor1.config.schema import RewardConfig
from easyvideor1.rewards.client import InProcessRewardClient
from easyvideor1.rewards.pool import RewardPool, payload_of
from easyvideor1.rewards.types import ScoreRequest
from services.reward.launch import reward_server

ITEM_TIMEOUT = 20
MATH_LIMIT = 1.5  # the math limit of the flood's requests
UNGUARDED = {"math": {"timeout_s": MATH_LIMIT, "max_terms": 10**12, "max_digits": 10**12}}
PROBE = ["$10^{10^{8}}$", *["$(1+x)^{20000}$"] * 8, "$((10!)!)!$", "$10!!$", "$9^{9^{9}}$", "10**10**8"]
CORRECT_MATH = {"problem_type": "math", "response": "<answer>\\frac{1}{2}</answer>", "ground_truth": "0.5"}
NUMERICAL = {"problem_type": "numerical", "response": "<answer>42</answer>", "ground_truth": "42"}


def _math(answer: str) -> dict:
    return {"problem_type": "math", "response": f"<answer>{answer}</answer>", "ground_truth": "7"}


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "EVR1_REWARD_TOKEN"}


def _ticks(pid: int) -> int:
    """utime + stime of a process (all its threads), in clock ticks."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def _idle_ticks(pids: list[int], seconds: float = 2.0) -> int:
    before = {pid: _ticks(pid) for pid in pids}
    time.sleep(seconds)
    return sum(_ticks(pid) - before[pid] for pid in pids)


def _timed(fn):
    began = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - began


@pytest.fixture(scope="module")
def server():
    with reward_server(["--workers", "2", "--timeout-s", str(ITEM_TIMEOUT)], env=_env()) as srv:
        yield srv


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, timeout=120) as client:
        yield client


def _score(http, items, config=None) -> list[dict]:
    body = {"items": items, **({"config": config} if config else {})}
    resp = http.post("/v1/score", json=body)
    assert resp.status_code == 200, resp.text
    return resp.json()["results"]


def _wait_workers(http, n: int = 2, timeout: float = 30.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while True:
        body = http.get("/readyz").json()
        if body["workers"] == n or time.monotonic() > deadline:
            return body["worker_pids"]
        time.sleep(0.1)


def test_probe_answers_are_refused_at_once(http):
    items = [_math(a) for a in PROBE] + [CORRECT_MATH, NUMERICAL]
    results, took = _timed(lambda: _score(http, items))
    assert took < 10, f"the probe batch took {took:.1f}s"  # before: 2 x 20 s timeouts, then zeros
    for answer, result in zip(PROBE, results):
        assert result["accuracy"] == 0.0 and result["error"] is None, (answer, result)
        assert result["details"]["reason"].startswith("expression too large to evaluate: "), (answer, result)
    assert [r["overall"] for r in results[-2:]] == [1.0, 1.0]
    # Nothing was left running: the same correct answer scores again, without "saturated" workers.
    assert _score(http, [CORRECT_MATH])[0]["overall"] == 1.0


def test_legitimate_items_keep_their_latency_during_a_flood(http):
    flood = [_math("(1+x)^{20000}") for _ in range(4)]  # past the pre-checks: killed at the limit
    flood_results: list = []
    flooding = threading.Thread(target=lambda: flood_results.extend(_score(http, flood, {"scorer_options": UNGUARDED})))
    flooding.start()
    time.sleep(0.5)  # the flood holds the math lane
    try:
        health, health_s = _timed(lambda: http.get("/healthz"))
        numerical, numerical_s = _timed(lambda: _score(http, [NUMERICAL]))
        math, math_s = _timed(lambda: _score(http, [CORRECT_MATH]))
    finally:
        flooding.join(120)
    assert health.status_code == 200 and health_s < 2.0
    assert numerical[0]["overall"] == 1.0 and numerical_s < 3.0, numerical_s  # before: waited ~57 s
    # One math item of the flood may finish first (one worker runs math): ~2 math limits at most.
    assert math[0]["overall"] == 1.0 and math_s < 8.0, math_s
    assert len(flood_results) == 4
    for result in flood_results:
        assert result["overall"] == 0.0 and result["error"] == f"timeout after {MATH_LIMIT:g}s", result


def test_math_limit_is_applied_by_the_pool(http):
    results, took = _timed(lambda: _score(http, [_math("(1+x)^{20000}")], {"scorer_options": UNGUARDED}))
    assert results[0]["error"] == f"timeout after {MATH_LIMIT:g}s"
    assert took < ITEM_TIMEOUT / 2, took  # the math limit, not the 20 s item timeout


def test_idle_workers_use_no_cpu_after_a_flood(http):
    flood = [_math("(1+x)^{20000}") for _ in range(2)]
    results = _score(http, flood, {"scorer_options": UNGUARDED})
    assert all(r["error"] for r in results)
    pids = _wait_workers(http)
    assert len(pids) == 2
    ticks = _idle_ticks(pids)
    assert ticks <= 10, f"idle workers used {ticks} clock ticks in 2 s"  # before: a core at 100% (~200)
    assert http.get("/healthz").status_code == 200
    assert _score(http, [CORRECT_MATH, NUMERICAL])[0]["overall"] == 1.0


def test_in_process_client_holds_the_same_way():
    config = RewardConfig(workers=2, timeout_s=ITEM_TIMEOUT, scorer_options=UNGUARDED)
    with InProcessRewardClient(config) as client:
        probe, took = _timed(lambda: client.score([_math(a) for a in PROBE[:3]]))
        assert all(r.error == f"timeout after {MATH_LIMIT:g}s" for r in probe)  # unguarded: killed at the limit
        assert took < 3 * MATH_LIMIT + 8, took
        flood_results: list = []
        flooding = threading.Thread(target=lambda: flood_results.extend(
            client.score([_math("(1+x)^{20000}") for _ in range(4)])))
        flooding.start()
        time.sleep(0.5)
        try:
            numerical, numerical_s = _timed(lambda: client.score([NUMERICAL]))
            math, math_s = _timed(lambda: client.score([CORRECT_MATH]))
        finally:
            flooding.join(120)
        assert numerical[0].overall == 1.0 and numerical_s < 3.0, numerical_s
        assert math[0].overall == 1.0 and math_s < 8.0, math_s
        assert [r.error for r in flood_results] == [f"timeout after {MATH_LIMIT:g}s"] * 4
        ticks = _idle_ticks(client._pool.pids())
        assert ticks <= 10, f"idle workers used {ticks} clock ticks in 2 s"
    with InProcessRewardClient(RewardConfig(workers=2, timeout_s=ITEM_TIMEOUT)) as client:  # pre-checks on
        results, took = _timed(lambda: client.score([_math(a) for a in PROBE] + [CORRECT_MATH]))
        assert took < 10, took
        assert all(r.details["reason"].startswith("expression too large") for r in results[:-1])
        assert results[-1].overall == 1.0


def test_a_full_lane_refuses_with_a_clear_error_and_other_types_are_served():
    config = RewardConfig(workers=2, timeout_s=ITEM_TIMEOUT, scorer_options=UNGUARDED)
    slow = payload_of(ScoreRequest("<answer>(1+x)^{20000}</answer>", "7", "math"))
    cheap = payload_of(ScoreRequest("<answer>42</answer>", "42", "numerical"))
    pool = RewardPool(2, max_queued=2)
    try:
        pool.start()
        assert pool.lane_slots == 1
        results = pool.score([slow] * 4 + [cheap], [False] * 5, config)
        kinds = [kind for _result, kind in results]
        assert kinds == ["timeout", "timeout", "queue_full", "queue_full", None], kinds
        assert results[2][0][4].startswith("reward queue full: 2 math items waiting (limit 2 per lane)")
        assert results[4][0][0] == 1.0
    finally:
        pool.close()

"""The reward service over a real uvicorn server on loopback (``evr1 serve reward``)."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from servers import metric_sum

from easyvideor1.config.schema import RewardConfig
from easyvideor1.rewards.client import InProcessRewardClient
from services.reward.examples import CHEAP, CODE_HANG, CODE_OK, TEXT, mixed_batch
from services.reward.launch import RewardServer, reward_server

ITEM_TIMEOUT = 8
MAX_BATCH = 300
MAX_BODY = 1 << 20


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "EVR1_REWARD_TOKEN"}
    return {**env, **extra}


@pytest.fixture(scope="module")
def server():
    args = ["--workers", "2", "--timeout-s", str(ITEM_TIMEOUT), "--max-batch", str(MAX_BATCH),
            "--max-body-bytes", str(MAX_BODY)]
    with reward_server(args, env=_env()) as srv:
        yield srv


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, timeout=60) as client:
        yield client


def _expected(items, config: RewardConfig | None = None):
    with InProcessRewardClient(config) as client:
        scored = client.score(items)
    return [{"id": item.get("id") if isinstance(item, dict) else None, **r.as_dict(), "problem_type": r.problem_type}
            for item, r in zip(items, scored)]


def test_mixed_batch_scores_in_order_like_in_process(http):
    items = mixed_batch(120)
    assert len({i["problem_type"] for i in items}) >= 10
    resp = http.post("/v1/score", json={"items": items})
    assert resp.status_code == 200
    results = resp.json()["results"]
    assert [r["id"] for r in results] == list(range(120))
    assert results == _expected(items)
    expected_acc = {json.dumps(i, sort_keys=True): acc for g in {**CHEAP, **TEXT}.values() for i, acc in g}
    for item, result in zip(items, results):
        key = json.dumps({k: v for k, v in item.items() if k != "id"}, sort_keys=True)
        assert result["error"] is None
        assert result["accuracy"] == expected_acc[key], (item, result)


def test_bad_items_get_their_own_error_and_the_rest_scores(http):
    good = mixed_batch(4)
    bad = [
        {"id": "unknown", "problem_type": "telepathy", "response": "x", "ground_truth": "y"},
        {"id": "missing", "problem_type": "boolean", "ground_truth": "yes"},
        {"id": "wrongtype", "problem_type": "numerical", "response": 3, "ground_truth": ["3"]},
        {"id": "options", "problem_type": "multiple choice", "response": "B", "ground_truth": "B", "options": "AB"},
        {"id": "huge", "problem_type": "open-ended", "response": "word " * 60_000, "ground_truth": "a"},
        ["not", "an", "object"],
        {"id": {"nested": 1}, "problem_type": "boolean", "response": "yes", "ground_truth": "yes"},
        {"id": "badgt", "problem_type": "temporal grounding", "response": "<answer>[1, 2]</answer>",
         "ground_truth": "not a span"},
        {"id": "deep", "problem_type": "ocr", "response": "a", "ground_truth": "a", "extra": _nested(40)},
    ]
    items = [good[0], *bad[:4], good[1], *bad[4:], good[2], good[3]]
    results = http.post("/v1/score", json={"items": items}).json()["results"]
    assert len(results) == len(items)
    by_id = {r["id"]: r for r in results if isinstance(r["id"], str)}
    assert "unknown problem_type 'telepathy'" in by_id["unknown"]["error"]
    assert by_id["missing"]["error"] == "missing field 'response'"
    assert by_id["wrongtype"]["error"] == ("field 'response' must be a string, got integer; "
                                           "field 'ground_truth' must be a string, got array")
    assert by_id["options"]["error"] == "field 'options' must be a list of strings or null"
    assert "field 'response' is too long: 300000 characters" in by_id["huge"]["error"]
    assert by_id["badgt"]["error"].startswith("GroundTruthError")
    assert by_id["deep"]["error"] == "field 'extra' is nested more than 32 levels deep"
    assert results[7]["error"] == "item must be a JSON object, got array"
    assert results[8]["id"] is None and "field 'id' must be a string or an integer" in results[8]["error"]
    for r in results:
        if r["error"]:
            assert (r["overall"], r["accuracy"], r["format"]) == (0.0, 0.0, 0.0)
    good_results = [results[0], results[5], results[-2], results[-1]]
    assert good_results == _expected(good)


def _nested(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth):
        value = {"k": value}
    return value


def test_unusual_text_is_scored(http):
    items = [{"id": "surrogate", "problem_type": "open-ended", "response": "<answer>a \ud800 b</answer>",
              "ground_truth": "a b"},
             {"id": "unicode", "problem_type": "ocr", "response": "<answer>日本語 ✓</answer>", "ground_truth": "日本語 ✓"},
             {"id": "nul", "problem_type": "math", "response": "<answer>\x00\\frac{</answer>", "ground_truth": "1"}]
    body = json.dumps({"items": items})  # ASCII escapes: httpx's own encoder refuses lone surrogates
    resp = http.post("/v1/score", content=body, headers={"content-type": "application/json"})
    assert resp.status_code == 200
    results = resp.json()["results"]
    assert results[1]["accuracy"] == 1.0
    assert results == _expected(items)


def test_per_type_route(http):
    items = [{"id": 1, "response": "<answer>B</answer>", "ground_truth": "B", "options": ["A. x", "B. y"]},
             {"id": 2, "problem_type": "mcq", "response": "<answer>A</answer>", "ground_truth": "B"},
             {"id": 3, "problem_type": "boolean", "response": "<answer>yes</answer>", "ground_truth": "yes"}]
    for route in ("multiple-choice", "multiple choice", "mc"):
        results = http.post(f"/v1/score/{route}", json={"items": items}).json()["results"]
        assert [r["problem_type"] for r in results] == ["multiple choice", "multiple choice", "boolean"]
        assert results[0]["accuracy"] == 1.0 and results[0]["error"] is None
        assert results[1]["accuracy"] == 0.0 and results[1]["error"] is None
        assert results[2]["error"] == "problem_type 'boolean' is 'boolean', but this route scores 'multiple choice'"
    resp = http.post("/v1/score/telepathy", json={"items": items})
    assert resp.status_code == 404
    body = resp.json()
    assert "unknown problem_type 'telepathy'" in body["detail"]
    assert {"multiple choice", "math", "code", "tracking"} <= set(body["known"])


@pytest.mark.parametrize(("content", "message"), [
    (b"{not json", "request body is not valid JSON"),
    (b"[1, 2]", "request body must be a JSON object with an 'items' list, got array"),
    (b'{"itemz": []}', "request body must have an 'items' list"),
    (b'{"items": {"a": 1}}', "request body must have an 'items' list, got object"),
    (b"\xff\xfe\x00garbage", "request body is not valid JSON"),
    (b'{"items": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "request body is nested too deeply"),
])
def test_malformed_body_is_422_with_reason(http, content, message):
    resp = http.post("/v1/score", content=content, headers={"content-type": "application/json"})
    assert resp.status_code == 422
    assert message in resp.json()["detail"]


def test_request_config_scores_with_the_callers_settings(http):
    items = [{"id": 1, "problem_type": "boolean", "response": "yes", "ground_truth": "yes"},  # no tag: format 0
             {"id": 2, "problem_type": "telepathy", "response": "<answer>a b</answer>", "ground_truth": "a b"}]
    fields = {"accuracy_weight": 0.5, "format_weight": 0.5, "default_problem_type": "ocr"}
    results = http.post("/v1/score", json={"items": items, "config": fields}).json()["results"]
    assert (results[0]["accuracy"], results[0]["overall"]) == (1.0, 0.5)
    assert results[1]["problem_type"] == "ocr" and results[1]["error"] is None  # routed by the request's default
    assert results == _expected(items, RewardConfig(**fields))
    default = http.post("/v1/score", json={"items": items, "config": None}).json()["results"]
    assert default[0] == _expected(items[:1])[0] and default[0]["overall"] == 0.9
    assert default[1]["error"].startswith("unknown problem_type 'telepathy'")  # the service's own: no default
    tagged = [{"response": "<answer>yes</answer>", "ground_truth": "yes"}]
    routed = http.post("/v1/score/boolean", json={"items": tagged, "config": {"format_weight": 1.0}}).json()
    assert routed["results"][0]["overall"] == pytest.approx(1.9)  # 0.9 (the service's) + 1.0 (the request's)


def test_request_config_timeout_applies_per_item(http):
    items = [{**CODE_HANG, "id": "hang"}, *mixed_batch(3)]
    results = http.post("/v1/score", json={"items": items, "config": {"timeout_s": 1.5}}).json()["results"]
    assert results[0]["error"] == "timeout after 1.5s"
    assert results[1:] == _expected(items[1:])


@pytest.mark.parametrize(("config", "message"), [
    ({"workers": 8}, "config field(s) 'workers' cannot be set per request"),
    ({"url": "http://elsewhere"}, "config field(s) 'url' cannot be set per request"),
    ({"extra_scorer_modules": ["os"]}, "extra_scorer_modules 'os': not loaded by this service at start-up"),
    ({"accuracy_weight": -1}, "config: accuracy_weight: Input should be greater than or equal to 0"),
    ({"scorer_options": {"telepathy": {}}}, "unknown problem_type 'telepathy'"),
    ({"nonsense": 1}, "config: nonsense: Extra inputs are not permitted"),
    ([1, 2], "'config' must be an object of scoring fields"),
])
def test_refused_request_config_is_422_naming_it(http, config, message):
    resp = http.post("/v1/score", json={"items": mixed_batch(2), "config": config})
    assert resp.status_code == 422
    assert message in resp.json()["detail"]


def test_empty_batch(http):
    assert http.post("/v1/score", json={"items": []}).json() == {"results": []}


def test_batch_and_body_limits(http):
    resp = http.post("/v1/score", json={"items": mixed_batch(MAX_BATCH + 1)})
    assert resp.status_code == 413
    assert f"batch of {MAX_BATCH + 1} items exceeds the limit of {MAX_BATCH} items" in resp.json()["detail"]
    big = json.dumps({"items": [{"problem_type": "ocr", "response": "x" * 200_000, "ground_truth": "x"}] * 6})
    resp = http.post("/v1/score", content=big, headers={"content-type": "application/json"})
    assert resp.status_code == 413
    assert f"exceeds the limit of {MAX_BODY} bytes" in resp.json()["detail"]

    def chunks():  # no Content-Length: the limit must hold while streaming
        for _ in range(40):
            yield b" " * 65536
    resp = http.post("/v1/score", content=chunks(), headers={"content-type": "application/json"})
    assert resp.status_code == 413
    assert resp.json()["detail"].startswith(f"request body of more than {MAX_BODY} bytes")
    assert http.post("/v1/score", json={"items": mixed_batch(MAX_BATCH)}).status_code == 200


def test_problem_types(http):
    types = {t["name"]: t for t in http.get("/v1/problem-types").json()["problem_types"]}
    assert {"multiple choice", "numerical", "regression", "boolean", "temporal grounding", "spatial grounding",
            "spatial-temporal grounding", "tracking", "open-ended", "ocr", "math", "code"} <= set(types)
    assert types["code"]["heavy"] is True and types["numerical"]["heavy"] is False
    assert "mcq" in types["multiple choice"]["aliases"]
    assert types["multiple choice"]["route"] == "/v1/score/multiple-choice"
    assert all(t["description"] for t in types.values())


def test_health_and_ready(http):
    assert http.get("/healthz").json() == {"status": "ok"}
    ready = http.get("/readyz")
    assert ready.status_code == 200
    body = ready.json()
    assert body["ready"] is True and body["workers"] == 2 and len(body["worker_pids"]) == 2
    assert body["scorers"] >= 12


def _wait_workers(http, n: int, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        body = http.get("/readyz").json()
        if body["workers"] == n:
            return body
        time.sleep(0.1)
    raise AssertionError(f"pool did not return to {n} workers: {body}")


def test_timeout_item_is_isolated_and_its_worker_replaced(http):
    before = _wait_workers(http, 2)
    items = [*mixed_batch(30)[:15], {**CODE_HANG, "id": "hang"}, {**CODE_OK, "id": "code-ok"},
             *mixed_batch(30)[15:]]
    resp = http.post("/v1/score", json={"items": items})
    assert resp.status_code == 200
    results = resp.json()["results"]
    assert [r["id"] for r in results] == [i["id"] for i in items]
    hang = results[15]
    assert hang["error"] == f"timeout after {ITEM_TIMEOUT}s" and hang["overall"] == 0.0
    assert results[16]["error"] is None and results[16]["accuracy"] == 1.0
    others = [r for k, r in enumerate(results) if k not in (15, 16)]
    assert others == _expected([i for k, i in enumerate(items) if k not in (15, 16)])
    after = _wait_workers(http, 2)
    assert set(after["worker_pids"]) != set(before["worker_pids"])  # the hung one was replaced
    assert http.post("/v1/score", json={"items": mixed_batch(10)}).json()["results"] == _expected(mixed_batch(10))
    text = http.get("/metrics").text
    assert metric_sum(text, "evr1_reward_item_timeouts_total", problem_type="code") >= 1
    assert metric_sum(text, "evr1_reward_item_failures_total", problem_type="code", reason="timeout") >= 1
    assert metric_sum(text, "evr1_reward_worker_restarts_total") >= 1


def _has_children(pid: int) -> bool:
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                return True
        except (OSError, IndexError, ValueError):
            continue
    return False


def test_worker_crash_costs_one_item(http):
    pids = _wait_workers(http, 2)["worker_pids"]
    items = [*mixed_batch(6), {**CODE_HANG, "id": "victim"}, *mixed_batch(12)[6:]]
    box: dict = {}
    poster = threading.Thread(target=lambda: box.update(resp=http.post("/v1/score", json={"items": items})))
    poster.start()
    try:
        deadline = time.monotonic() + ITEM_TIMEOUT - 0.5
        busy = None
        while busy is None and time.monotonic() < deadline:  # the worker running the sandbox
            busy = next((pid for pid in pids if _has_children(pid)), None)
            time.sleep(0.02)
        assert busy is not None, "the code item never started"
        os.kill(busy, signal.SIGKILL)  # a descendant of the server this module started
    finally:
        poster.join()
    results = box["resp"].json()["results"]
    assert results[6]["error"] == "worker crashed (exit code -9) while scoring this item"
    others = [r for k, r in enumerate(results) if k != 6]
    assert others == _expected([i for k, i in enumerate(items) if k != 6])
    assert busy not in _wait_workers(http, 2)["worker_pids"]
    text = http.get("/metrics").text
    assert metric_sum(text, "evr1_reward_item_failures_total", problem_type="code", reason="worker_crash") == 1


def test_metrics_after_requests(http):
    before = metric_sum(http.get("/metrics").text, "evr1_reward_items_total", problem_type="boolean")
    items = [{"problem_type": "yes/no", "response": "<answer>yes</answer>", "ground_truth": "yes"}] * 5
    items.append({"problem_type": "telepathy", "response": "x", "ground_truth": "y"})
    http.post("/v1/score", json={"items": items})
    resp = http.get("/metrics")
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/plain")
    text = resp.text
    assert metric_sum(text, "evr1_reward_items_total", problem_type="boolean") == before + 5
    assert metric_sum(text, "evr1_reward_item_failures_total", problem_type="unknown", reason="invalid") >= 1
    assert metric_sum(text, "evr1_reward_item_seconds_count", problem_type="boolean") >= 5
    assert metric_sum(text, "evr1_reward_requests_total", route="/v1/score", status="200") >= 1
    assert metric_sum(text, "evr1_reward_request_seconds_count", route="/v1/score") >= 1
    assert "telepathy" not in text  # user strings never become label values
    assert metric_sum(text, "evr1_reward_inflight_items") == 0
    assert metric_sum(text, "evr1_reward_inflight_requests") == 0
    assert metric_sum(text, "evr1_reward_workers") == 2


def test_openapi_publishes_models(http):
    doc = http.get("/openapi.json").json()
    body = doc["paths"]["/v1/score"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/ScoreBatchRequest"}
    comps = doc["components"]["schemas"]
    assert comps["ScoreBatchRequest"]["properties"]["items"]["maxItems"] == MAX_BATCH
    assert {"response", "ground_truth"} <= set(comps["ScoreItemModel"]["required"])
    ok = doc["paths"]["/v1/score"]["post"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert ok == {"$ref": "#/components/schemas/ScoreResponse"}
    scoring = comps["ScoringConfig"]
    assert set(scoring["properties"]) == {"accuracy_weight", "format_weight", "default_problem_type",
                                          "answer_tag_policy", "scorer_options", "extra_scorer_modules", "timeout_s"}
    assert scoring["additionalProperties"] is False
    assert {"413", "422"} <= set(doc["paths"]["/v1/score"]["post"]["responses"])
    assert "404" in doc["paths"]["/v1/score/{problem_type}"]["post"]["responses"]


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_openapi_conformance(server, mode):
    """Schemathesis against the live schema: no 5xx, documented status codes, content types
    and response bodies. (Its pytest plugin's lazy fixtures do not run on pytest 9: Python API.)"""
    api = schemathesis.openapi.from_url(f"{server.url}/openapi.json")
    operations = [result.ok() for result in api.get_all_operations()]
    assert len(operations) == 6
    checks = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
    if mode == GenerationMode.NEGATIVE:  # GETs without parameters have no invalid form
        operations = [op for op in operations if op.method.upper() == "POST"]
    for operation in operations:
        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def check(case):
            case.call_and_validate(base_url=server.url, checks=checks)

        check()


def test_auth_config_and_graceful_sigterm(tmp_path: Path):
    config = tmp_path / "run.yaml"
    config.write_text("worker:\n  reward:\n    accuracy_weight: 0.5\n    format_weight: 0.5\n")
    srv = RewardServer(["--workers", "1", "--token-env", "MY_REWARD_TOKEN", "--config", str(config)],
                       env=_env(MY_REWARD_TOKEN="s3cret"))
    try:
        srv.start()
        item = {"problem_type": "boolean", "response": "yes", "ground_truth": "yes"}  # no tag: format 0
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            assert c.get("/healthz").status_code == 200 and c.get("/readyz").status_code == 200
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic s3cret"}):
                for method, path in (("POST", "/v1/score"), ("POST", "/v1/score/boolean"),
                                     ("GET", "/v1/problem-types"), ("GET", "/metrics")):
                    resp = c.request(method, path, json={"items": [item]}, headers=headers)
                    assert resp.status_code == 401, (path, headers)
                    assert resp.json() == {"detail": "missing or invalid bearer token"}
            auth = {"Authorization": "Bearer s3cret"}
            result = c.post("/v1/score", json={"items": [item]}, headers=auth).json()["results"][0]
            assert (result["accuracy"], result["format"], result["overall"]) == (1.0, 0.0, 0.5)
            assert c.get("/metrics", headers=auth).status_code == 200
            pids = c.get("/readyz").json()["worker_pids"]
        code = srv.stop(grace=20)
        assert code in (0, -15)  # uvicorn re-raises SIGTERM after its graceful shutdown
        assert "reward_service_stopped" in srv.log_tail()
        for pid in pids:
            deadline = time.monotonic() + 10
            while _running(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not _running(pid), f"worker {pid} outlived the server"
    finally:
        srv.close()


def _running(pid: int) -> bool:
    try:  # a zombie waiting for init to reap it is not running
        return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False


def test_explicit_token_env_must_be_set():
    srv = RewardServer(["--token-env", "EVR1_TEST_UNSET_TOKEN"], env=_env())
    with pytest.raises(RuntimeError, match="EVR1_TEST_UNSET_TOKEN: that environment variable is unset"):
        srv.start(ready_timeout=30)
    assert srv.proc.returncode == 1
    srv.close()

"""LLM judge and the ``preference`` scorer against a REAL local HTTP server.

The server is a small FastAPI app run by uvicorn on 127.0.0.1 (a free port) implementing
``POST /v1/chat/completions`` with scripted replies, injectable HTTP errors and delays. It
stands in for an LLM because no model weights can be downloaded here; everything on the
client side (httpx, retries, timeouts, parsing) is the real code path.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections import deque

import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from easyvideor1.config.schema import RewardConfig
from easyvideor1.errors import ConfigError
from easyvideor1.rewards import ScoreRequest, score
from easyvideor1.rewards.extract import GroundTruthError
from easyvideor1.rewards.judge import JudgeConfig, JudgeUnavailable, judge_open_ended, parse_verdict
from easyvideor1.rewards.preference import score_preference


class ScriptedJudge:
    def __init__(self) -> None:
        self.actions: deque[dict] = deque()
        self.requests: list[dict] = []

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/v1/chat/completions")
        async def chat(request: Request):
            self.requests.append({"body": await request.json(), "auth": request.headers.get("authorization")})
            action = self.actions.popleft() if self.actions else {"content": "Score: 5/10"}
            if "delay" in action:
                await asyncio.sleep(action["delay"])
            if "status" in action:
                return JSONResponse({"error": {"message": "scripted failure"}}, status_code=action["status"])
            if "raw" in action:
                return PlainTextResponse(action["raw"])
            return {"id": "cmpl-1", "object": "chat.completion", "model": request.headers.get("x-model", "judge"),
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": action["content"]}}]}

        return app


@pytest.fixture(scope="module")
def judge_server():
    script = ScriptedJudge()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(script.app(), log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.started
    yield script, f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    server.should_exit = True
    thread.join(timeout=10)
    sock.close()


@pytest.fixture()
def judge(judge_server):
    script, url = judge_server
    script.actions.clear()
    script.requests.clear()
    return script, {"base_url": url, "model": "critic-7b", "retries": 3, "backoff_s": 0.01, "timeout_s": 5.0}


def prefer(response: str, truth: str, options: dict, problem: str = "Which clip shows a dog?"):
    return score_preference(ScoreRequest(response, truth, "preference", problem=problem),
                            {"answer_tag_policy": "last", "timeout_s": 30.0, **options})


@pytest.mark.parametrize("reply, expected", [
    ("The response matches.\nScore: 7/10", 0.7), ("[[8]]", 0.8), ("[[3/5]]", 0.6), ("Rating: 0.7", 0.7),
    ("I'd give it 7 out of 10.", 0.7), ("yes", 1.0), ("No.", 0.0), ("Correct", 1.0),
    ("Incorrect: the colour is wrong.", 0.0), ('Reasoning... {"score": 9}', 0.9), ('{"rating": "6/10"}', 0.6),
    ("Verdict: partially correct", 0.5), ("**Score:** 6", 0.6), ("Score: 85", 0.85),
    ("<think>Score: 1/10?</think>Final. Score: 9/10", 0.9), ("Looks fine to me.\nCORRECT", 1.0),
])
def test_parse_verdict_variants(reply, expected):
    verdict = parse_verdict(reply)
    assert verdict.score == pytest.approx(expected), verdict


@pytest.mark.parametrize("reply", ["", "I like the response a lot", "Score: 15/10", "Score: -3"])
def test_parse_verdict_rejects(reply):
    verdict = parse_verdict(reply)
    assert verdict.score is None and verdict.reason


def test_judge_mode_sends_rubric_and_scores(judge, monkeypatch):
    script, options = judge
    monkeypatch.setenv("EVR1_JUDGE_API_KEY", "sk-test")
    script.actions.append({"content": "The response agrees with the reference.\nScore: 8/10"})
    result = prefer("<answer>The second clip, with the brown dog.</answer>", "Clip 2 shows a brown dog.", options)
    assert (result.accuracy, result.format) == (pytest.approx(0.8), 1.0)
    assert result.details["judge"]["attempts"] == 1 and result.details["mode"] == "judge"
    (request,) = script.requests
    body = request["body"]
    assert request["auth"] == "Bearer sk-test"
    assert body["model"] == "critic-7b" and body["temperature"] == 0.0 and body["max_tokens"] == 512
    prompt = body["messages"][-1]["content"]
    for part in ("Which clip shows a dog?", "Clip 2 shows a brown dog.", "The second clip, with the brown dog.",
                 "Score: N/10"):
        assert part in prompt


def test_retries_5xx_then_succeeds(judge):
    script, options = judge
    script.actions.extend([{"status": 500}, {"status": 503}, {"content": "[[9]]"}])
    result = prefer("<answer>clip 2</answer>", "clip two", options)
    assert result.accuracy == pytest.approx(0.9) and result.details["judge"]["attempts"] == 3
    script.actions.extend([{"status": 429}, {"content": "Score: 4/10"}])  # rate limits are retried too
    assert prefer("<answer>clip 2</answer>", "clip two", options).accuracy == pytest.approx(0.4)


def test_gives_up_after_retries_with_a_clear_error(judge):
    script, options = judge
    script.actions.extend([{"status": 500}] * 3)
    with pytest.raises(JudgeUnavailable, match="after 3 attempt.*HTTP 500"):
        prefer("<answer>clip 2</answer>", "clip two", {**options, "retries": 2})
    assert len(script.requests) == 3
    script.actions.extend([{"status": 502}] * 2)
    result = score(ScoreRequest("<answer>clip 2</answer>", "clip two", "LLM judge"),
                   RewardConfig(scorer_options={"preference": {**options, "retries": 1}}))
    assert result.overall == 0.0 and "JudgeUnavailable" in result.error


def test_4xx_is_not_retried(judge):
    script, options = judge
    script.actions.extend([{"status": 400}, {"content": "Score: 10/10"}])
    with pytest.raises(JudgeUnavailable, match="rejected the request.*HTTP 400"):
        prefer("<answer>clip 2</answer>", "clip two", options)
    assert len(script.requests) == 1


def test_timeout_is_retried_and_bounded(judge):
    script, options = judge
    fast = {**options, "timeout_s": 0.3, "retries": 1}
    script.actions.extend([{"delay": 1.5, "content": "Score: 1/10"}, {"content": "Score: 7/10"}])
    result = prefer("<answer>clip 2</answer>", "clip two", fast)
    assert result.accuracy == pytest.approx(0.7) and result.details["judge"]["attempts"] == 2
    script.actions.extend([{"delay": 1.5, "content": "x"}, {"delay": 1.5, "content": "x"}])
    start = time.monotonic()
    with pytest.raises(JudgeUnavailable, match="timeout"):
        prefer("<answer>clip 2</answer>", "clip two", fast)
    assert time.monotonic() - start < 1.5


def test_connection_refused_is_unavailable():
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    with pytest.raises(JudgeUnavailable, match="connection error"):
        prefer("<answer>x</answer>", "free text", {"base_url": f"http://127.0.0.1:{port}/v1", "retries": 1,
                                                   "backoff_s": 0.01})


def test_unparseable_and_malformed_replies_score_zero_with_reason(judge):
    script, options = judge
    script.actions.append({"content": "What a lovely answer."})
    result = prefer("<answer>clip 2</answer>", "clip two", options)
    assert result.accuracy == 0.0 and "unparseable" in result.details["reason"]
    script.actions.append({"raw": "<html>proxy error</html>"})
    result = prefer("<answer>clip 2</answer>", "clip two", options)
    assert result.accuracy == 0.0 and "malformed" in result.details["reason"]


def test_empty_answer_is_not_sent(judge):
    script, options = judge
    result = prefer("<answer> </answer>", "clip two", options)
    assert (result.accuracy, result.format) == (0.0, 0.5) and script.requests == []


def test_label_mode_without_endpoint():
    assert prefer("<answer>B</answer>", "b", {}).accuracy == 1.0
    wrong = prefer("<answer>Response A is better.</answer>", "B", {})
    assert (wrong.accuracy, wrong.format, wrong.details["pred"]) == (0.0, 1.0, "A")
    assert prefer("<answer>Yes, it does.</answer>", "true", {}).accuracy == 1.0
    assert prefer("<answer>2</answer>", "<answer>2</answer>", {}).accuracy == 1.0
    unclear = prefer("<answer>Response A is worse than response B</answer>", "B", {})
    assert unclear.format == 0.5 and "ambiguous" in unclear.details["reason"]
    assert prefer("B", "B", {}).format == 0.0  # right, but no answer tag


def test_label_mode_forced_with_endpoint_makes_no_request(judge):
    script, options = judge
    assert prefer("<answer>A</answer>", "A", {**options, "mode": "label"}).accuracy == 1.0
    assert script.requests == []
    with pytest.raises(GroundTruthError):
        prefer("<answer>A</answer>", "the left one", {**options, "mode": "label"})


def test_free_text_without_endpoint_is_an_error_not_a_string_match():
    with pytest.raises(ConfigError, match="no judge endpoint"):
        prefer("<answer>the left one</answer>", "the left one", {})
    result = score(ScoreRequest("<answer>the left one</answer>", "the left one", "reward model"))
    assert result.overall == 0.0 and "ConfigError" in result.error
    with pytest.raises(ConfigError):
        prefer("<answer>x</answer>", "A", {"mode": "judge"})
    with pytest.raises(ConfigError):
        prefer("<answer>x</answer>", "A", {"mode": "vibes"})


def test_judge_open_ended_api_and_custom_template(judge, tmp_path):
    script, options = judge
    script.actions.append({"content": "Score: 6/10"})
    result = judge_open_ended("What moves?", "a red car", "a red car drives left", config=options)
    assert result.accuracy == pytest.approx(0.6) and result.format == 1.0
    assert "a red car drives left" in script.requests[-1]["body"]["messages"][-1]["content"]
    template = tmp_path / "mine.j2"
    template.write_text("Q={{ question }} R={{ reference }} A={{ response }} /{{ scale }}")
    script.actions.append({"content": "[[10]]"})
    judged = judge_open_ended("q", "a", "r", config={**options, "template": str(template), "system_prompt": "Be fair."})
    assert judged.accuracy == 1.0
    messages = script.requests[-1]["body"]["messages"]
    assert messages == [{"role": "system", "content": "Be fair."}, {"role": "user", "content": "Q=q R=r A=a /10"}]
    with pytest.raises(ConfigError):
        judge_open_ended("q", "a", "r", config={})
    assert JudgeConfig.from_options({"judge": {"url": "http://127.0.0.1:1/v1"}}).base_url.endswith("/v1")


def test_open_ended_scorer_uses_the_judge(judge):
    """The open-ended scorer (another module) calls judge_open_ended when ``judge`` is set."""
    script, options = judge
    script.actions.append({"content": "Score: 9/10"})
    config = RewardConfig(scorer_options={"open-ended": {"judge": options}})
    result = score(ScoreRequest("<answer>a red car</answer>", "a red car drives left", "open-ended",
                                problem="What moves?"), config)
    assert result.error is None and result.accuracy == pytest.approx(0.9)
    assert len(script.requests) == 1


@pytest.mark.parametrize("text", ["1" * 30_000, "response" + " " * 30_000 + "x", "1" + " " * 30_000 + "/",
                                  "score: " * 4000, '{"score":' * 30_000, "[[1" * 10_000])
def test_hostile_replies_and_answers_parse_quickly(text):
    from easyvideor1.rewards.preference import read_label

    start = time.monotonic()
    parse_verdict(text)
    read_label(text[:9_000])
    assert time.monotonic() - start < 1.0

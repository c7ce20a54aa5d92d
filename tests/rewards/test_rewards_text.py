"""Open-ended (exact match / ROUGE / judge routing) and OCR (1 - WER / CER) scorers."""

from __future__ import annotations

import json
import sys
import threading
import types
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from easyvideor1.rewards.extract import GroundTruthError
from easyvideor1.rewards.ocr import score_ocr
from easyvideor1.rewards.open_ended import rouge_mean, score_open_ended
from easyvideor1.rewards.types import Score, ScoreRequest

OPTS = {"answer_tag_policy": "last"}


def oe(response, truth="a red square moves left", **opts):
    return score_open_ended(ScoreRequest(response, truth, "open-ended", problem="What happens?"),
                            {**OPTS, **opts})


@pytest.mark.parametrize("answer", ["Red.", "red", "  RED!! ", "red,"])
def test_exact_match_shortcut(answer):
    got = oe(f"<answer>{answer}</answer>", truth="red")
    assert (got.accuracy, got.format, got.details["method"]) == (1.0, 1.0, "exact_match")


def test_rouge_partial_overlap():
    got = oe("<answer>the red square is moving to the left</answer>")
    assert got.details["method"] == "rouge"
    assert 0.2 < got.accuracy < 1.0
    expected = (got.details["rouge1"] + got.details["rouge2"] + got.details["rougeL"]) / 3
    assert got.accuracy == pytest.approx(expected)


def test_stemming_counts_inflections():
    assert rouge_mean("squares moving", "square moves")["rouge1"] == 1.0


def test_unrelated_answer_scores_zero():
    assert oe("<answer>blue circle jumps</answer>").accuracy == 0.0


def test_non_latin_text_still_scores():
    values = rouge_mean("猫在桌子上睡觉", "猫在桌子上")
    assert 0.5 < values["rouge"] < 1.0


@pytest.mark.parametrize("response", ["", "<answer></answer>", "<answer>  </answer>"])
def test_empty_answer(response):
    got = oe(response)
    assert got.accuracy == 0.0 and got.details["reason"]


def test_empty_reference_raises():
    with pytest.raises(GroundTruthError, match="open-ended"):
        oe("<answer>x</answer>", truth="  ")


def test_judge_option_routes_to_the_judge(monkeypatch):
    calls = []

    def fake_judge(**kwargs):
        calls.append(kwargs)
        return Score(0.75, 1.0, {"verdict": "mostly right"})

    module = types.ModuleType("easyvideor1.rewards.judge")
    module.judge_open_ended = fake_judge
    monkeypatch.setitem(sys.modules, "easyvideor1.rewards.judge", module)
    judge = {"url": "http://judge.invalid/v1", "model": "m"}
    got = oe("<answer>a square goes left</answer>", judge=judge, timeout_s=5)
    assert got.accuracy == 0.75 and got.details["method"] == "judge"
    assert calls == [{"question": "What happens?", "reference": "a red square moves left",
                      "prediction": "a square goes left", "judge": judge, "timeout_s": 5.0}]


@pytest.fixture()
def fake_judge_server():
    """A loopback OpenAI-compatible endpoint that answers every chat request with 8/10."""
    received: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - the http.server hook name
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            body = json.dumps({"choices": [{"message": {"content": "Score: 8/10"}}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", received
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_judge_option_with_the_real_judge(fake_judge_server):
    url, received = fake_judge_server
    got = oe("<answer>a square goes left</answer>", judge={"url": url, "model": "m", "retries": 0}, timeout_s=5)
    assert (got.accuracy, got.format, got.details["method"]) == (pytest.approx(0.8), 1.0, "judge")
    assert len(received) == 1 and received[0]["model"] == "m"
    assert "a square goes left" in json.dumps(received[0])


def ocr(response, truth="HELLO 42 world", **opts):
    return score_ocr(ScoreRequest(response, truth, "ocr"), {**OPTS, **opts})


def test_ocr_wer():
    assert ocr("<answer>HELLO 42 world</answer>").accuracy == 1.0
    assert ocr("<answer>hello  42\nWORLD</answer>").accuracy == 1.0  # case and spacing ignored
    got = ocr("<answer>HELLO 41 world</answer>")
    assert got.accuracy == pytest.approx(2 / 3) and got.details["wer"] == pytest.approx(1 / 3)


def test_ocr_case_sensitive_option():
    assert ocr("<answer>hello 42 world</answer>", case_sensitive=True).accuracy == pytest.approx(2 / 3)


def test_ocr_cer_option():
    got = ocr("<answer>HELLO 41 world</answer>", metric="cer")
    assert got.accuracy == pytest.approx(1 - 1 / 14) and "cer" in got.details
    with pytest.raises(ValueError, match="metric"):
        ocr("<answer>x</answer>", metric="bleu")


def test_ocr_clipped_and_empty_cases():
    assert ocr("<answer>a b c d e f g h</answer>", truth="x").accuracy == 0.0
    assert (ocr("<answer></answer>").accuracy, ocr("<answer></answer>").format) == (0.0, 1.0)
    assert ocr("<answer></answer>", truth="").accuracy == 1.0
    assert ocr("<answer>text</answer>", truth="<answer></answer>").accuracy == 0.0
    assert (ocr("").accuracy, ocr("").format) == (0.0, 0.0)

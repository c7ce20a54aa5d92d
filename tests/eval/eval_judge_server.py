"""A real OpenAI-compatible HTTP endpoint for the judge tests, served by uvicorn on loopback.

Its "model" grades by word overlap between the REFERENCE and RESPONSE sections of the
rubric prompt (F1 x 10), so verdicts are deterministic; a prompt in a benchmark's own judge
format (``official_reply``) gets a reply in the form that prompt asks for, graded the same
way; everything between the scorer and the verdict (HTTP, JSON, retries, reply parsing) is
the production path.
"""

from __future__ import annotations

import json
import re
import threading
import time

import uvicorn
from fastapi import FastAPI
from servers import free_port


def overlap_f1(reference: str, response: str) -> float:
    ref, res = re.findall(r"\w+", reference.lower()), re.findall(r"\w+", response.lower())
    common = sum(min(ref.count(w), res.count(w)) for w in set(ref))
    if not common:
        return 0.0
    precision, recall = common / len(res), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def tempcompass_reply(prompt: str) -> str | None:
    """TempCompass's official judge prompts (tests/eval/test_official_a.py): "Correct" when the
    prediction overlaps the ground truth (F1 >= 0.5); for a caption, the option of the last
    multi-choice question that overlaps the description most, as "Answer: X. text"."""
    if 'respond "Correct"' in prompt and "Ground-Truth Answer:" in prompt and "Model Prediction:" in prompt:
        truth, prediction = prompt.rsplit("Ground-Truth Answer:", 1)[1].split("Model Prediction:", 1)
        return "Correct" if overlap_f1(truth, prediction) >= 0.5 else "Incorrect"
    if "None of the choices are correct" in prompt and "Video Description:" in prompt:
        description, question = prompt.rsplit("Video Description:", 1)[1].split("Multi-Choice Question:", 1)
        options = [line.strip() for line in question.splitlines() if re.match(r"^\s*[A-D]\. ", line)]
        best = max(options, key=lambda o: overlap_f1(o.split(". ", 1)[1], description), default="")
        return f"Reasoning: word overlap with the description.\nAnswer: {best}"
    return None


def _answer_span(text: str) -> str:
    match = re.search(r"<answer>(.*?)</answer>", text, re.DOTALL)
    return (match.group(1) if match else text).strip()


def _between(text: str, start: str, end: str | None = None) -> str:
    """The text after the last ``start`` (up to the next ``end``)."""
    tail = text.rsplit(start, 1)[1]
    return tail.split(end, 1)[0] if end else tail


def official_reply(system: str, prompt: str) -> str | None:
    """Replies in the formats of the benchmarks' own judge prompts (MMVU, VideoReasonBench,
    VCR-Bench, MLVU), graded by the same word overlap; None for any other prompt."""
    if '"extracted_answer"' in system:  # MMVU: a JSON verdict
        truth = _between(prompt, "Ground Truth Answer: ", "\n\nModel Response to the Question: ")
        answer = _answer_span(_between(prompt, "Model Response to the Question: "))
        correct = overlap_f1(truth, answer) >= 0.5
        return json.dumps({"extracted_answer": answer, "correct": correct})
    if 'Directly output "Correct" or "Incorrect"' in prompt:  # VideoReasonBench
        answer = _between(prompt, "Model Response: ", "\n\nGround-Truth Answer: ")
        truth = _between(prompt, "Ground-Truth Answer: ", "\n\nDirectly output")
        return "Correct" if overlap_f1(truth, answer) >= 0.5 else "Incorrect"
    if "help me to extract an answer" in prompt:  # VCR-Bench extraction: echo the answer
        return _answer_span(_between(prompt, "\nAnswer: ", "\nYour output:"))
    if "judge whether two answers are consistent" in prompt:  # VCR-Bench scoring: 1 or 0
        answer = _between(prompt, "[Model Answer]: ", "\n[Standard Answer]: ")
        truth = _between(prompt, "[Standard Answer]: ", "\nYour output:")
        return "1" if overlap_f1(truth, answer) >= 0.5 else "0"
    for first, second, reference in (
        ("score_accuracy", "score_relevance", "Scoring Points: "),
        ("score_completeness", "score_reliability", "Standard Answer: "),
    ):
        if first in system:  # MLVU generation: two 1-5 scores in a dict
            truth = _between(prompt, reference, "\n")
            answer = _between(prompt, "Respondent's Answer: ")
            score = 1 + round(4 * overlap_f1(truth, answer))
            return (
                f"Graded by overlap.\n{{'{first}': {score}, '{second}': {score}, 'total_score': {2 * score}}}"
            )
    return None


def make_app() -> FastAPI:
    app = FastAPI()
    app.state.requests = 0
    app.state.official_requests = 0  # benchmark-format prompts, counted apart from the rubric's

    @app.post("/v1/chat/completions")
    async def chat(body: dict) -> dict:
        system = next((m["content"] for m in body["messages"] if m["role"] == "system"), "")
        official = official_reply(system, body["messages"][-1]["content"])
        if official is not None:
            app.state.official_requests += 1
            return {"choices": [{"message": {"role": "assistant", "content": official}}]}
        app.state.requests += 1
        prompt = body["messages"][-1]["content"]
        official = tempcompass_reply(prompt)
        if official is not None:
            return {"choices": [{"message": {"role": "assistant", "content": official}}]}
        reference = prompt.split("REFERENCE:", 1)[1].split("RESPONSE:", 1)[0]
        response = prompt.split("RESPONSE:", 1)[1].rsplit("Explain briefly", 1)[0]
        score = round(10 * overlap_f1(reference, response))
        return {
            "choices": [{"message": {"role": "assistant", "content": f"Overlap graded.\nScore: {score}/10"}}]
        }

    return app


class JudgeServer:
    def __init__(self) -> None:
        self.port = free_port()
        self.app = make_app()
        self.server = uvicorn.Server(
            uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> JudgeServer:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline:
                raise TimeoutError("judge server did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)

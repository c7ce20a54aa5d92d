"""A real OpenAI-compatible HTTP endpoint for the judge tests, served by uvicorn on loopback.

Its "model" grades by word overlap between the REFERENCE and RESPONSE sections of the
rubric prompt (F1 x 10), so verdicts are deterministic; everything between the scorer and
the verdict (HTTP, JSON, retries, reply parsing) is the production path.
"""

from __future__ import annotations

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


def make_app() -> FastAPI:
    app = FastAPI()
    app.state.requests = 0

    @app.post("/v1/chat/completions")
    async def chat(body: dict) -> dict:
        app.state.requests += 1
        prompt = body["messages"][-1]["content"]
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

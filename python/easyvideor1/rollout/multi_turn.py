"""Multi-turn rollouts: the policy samples until a tool call or the end, the tool answers, repeat.

Each of a request's ``n`` trajectories has its own tool session (``kit.session(video)``:
calls and frames against the budgets) and its own :class:`TrajectoryBuilder`. Turn 1 samples
the caller's requests as they are (``n`` samples of one prompt, rendered with the kit's tool
declarations); every later turn continues each live trajectory from its full sequence, the
sampled ids exactly as they were (``TrajectoryBuilder.full_inputs``), one engine request per
trajectory. :func:`generate_multi_turn` sends all live trajectories of a turn in one
``engine.generate`` call, so the engine batches them; :func:`agenerate_multi_turn` drives each
trajectory on its own on the streaming vLLM engine, so no trajectory waits for another's turn.

A turn ends at one of the kit's stop strings (the stop text kept in the policy's tokens), at
an end-of-sequence token, or at its token limit (``tools.max_tokens_per_turn``, and never past
what is left of ``max_response_length``, which counts every token after the prompt, tool
turns included). A trajectory ends when a turn makes no call (``"stop"``), or with
``"length"`` when a turn is cut by a limit, a tool turn would not fit the budget, or the policy
keeps calling past the kit's turn limit.

KV reuse: see ``rollout/vllm_common.py`` (vLLM's prefix cache holds the previous turns) and
``rollout/hf_engine.py`` (recomputes the whole sequence per turn).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from easyvideor1.config.schema import ToolsConfig
from easyvideor1.models.inputs import PromptInputs
from easyvideor1.models.trajectory import TrajectoryBuilder
from easyvideor1.rollout.base import (
    Completion,
    RolloutEngine,
    RolloutError,
    RolloutRequest,
    RolloutResult,
    SamplingConfig,
)
from easyvideor1.rollout.tools.base import ToolKit, ToolSession, ToolVideo

__all__ = ["agenerate_multi_turn", "generate_multi_turn"]

_TURN_SEED_STRIDE = 1 << 40  # apart from vLLM's per-request stride (vllm_common.SEED_STRIDE)


@dataclass
class _Live:
    """One trajectory in flight."""

    request: RolloutRequest
    index: int  # among its request's n
    builder: TrajectoryBuilder
    session: ToolSession
    finish: str | None = None
    version: int | None = None  # the oldest policy version that sampled a turn of it

    @property
    def name(self) -> str:
        return f"{self.request.request_id}/{self.index}"


@dataclass(frozen=True)
class _Limits:
    max_response_length: int
    max_tokens_per_turn: int | None
    max_turns: int

    def turn_tokens(self, live: _Live) -> int:
        left = self.max_response_length - len(live.builder)
        return left if self.max_tokens_per_turn is None else min(left, self.max_tokens_per_turn)


def _limits(cfg: ToolsConfig, max_response_length: int) -> _Limits:
    if max_response_length < 1:
        raise RolloutError(f"max_response_length must be >= 1, got {max_response_length}")
    return _Limits(max_response_length, cfg.max_tokens_per_turn, cfg.max_turns)


def _check(requests: Sequence[RolloutRequest], videos: Sequence[ToolVideo]) -> None:
    if len(videos) != len(requests):
        raise RolloutError(f"{len(requests)} request(s) but {len(videos)} tool video(s): give one per request")
    for request in requests:
        if request.messages is None and request.inputs is None:
            raise RolloutError(f"request {request.request_id!r}: a multi-turn rollout needs messages (chat or "
                               "data-format problem), not bare prompt_token_ids")


def _with_tools(request: RolloutRequest, kit: ToolKit) -> RolloutRequest:
    """The request rendered with the kit's declarations unless the caller chose them (or built it):
    ``chat_template_kwargs()`` is ``tools`` plus further template variables (e.g. VideoToolKit's
    call syntax for the tiny models' template)."""
    if request.inputs is not None or request.tools is not None:
        return request
    declared = kit.request_fields()
    return dataclasses.replace(request, tools=declared["tools"] or kit.schemas(),
                               template_kwargs={**(declared["template_kwargs"] or {}), **(request.template_kwargs or {})})


def _turn_sampling(sampling: SamplingConfig, kit: ToolKit, *, max_tokens: int, turn: int,
                   slot: int = 0) -> SamplingConfig:
    stop = tuple(dict.fromkeys((*sampling.stop, *kit.stop_strings)))
    seed = None if sampling.seed is None else (sampling.seed + turn * _TURN_SEED_STRIDE + slot * (1 << 20)) % 2**63
    return dataclasses.replace(sampling, max_tokens=max_tokens, stop=stop, seed=seed)


def _continuation(live: _Live, turn: int, inputs: PromptInputs) -> RolloutRequest:
    # messages is only a label here: engines take ``inputs`` and never render it.
    return RolloutRequest(f"{live.name}@{turn}", messages=f"(turn {turn + 1} of {live.name})", inputs=inputs, n=1)


def _take(live: _Live, completion: Completion, turn_tokens: int, kit: ToolKit, limits: _Limits,
          version: int) -> None:
    """Append one sampled turn (and the tool's answer) to ``live``; set ``finish`` when it ends."""
    builder = live.builder
    live.version = version if live.version is None else min(live.version, version)
    ids = completion.token_ids[:turn_tokens]
    cut = len(ids) < len(completion.token_ids)
    logprobs = None if completion.logprobs is None else completion.logprobs[:turn_tokens]
    text = completion.text
    if cut:
        with builder.builder.lock:
            text = builder.builder.tokenizer.decode(ids, skip_special_tokens=True)
    builder.add_policy(ids, logprobs, text=text)
    if cut or completion.finish_reason != "stop":
        live.finish = "length" if cut else completion.finish_reason
        return
    try:
        outcome = live.session.run(text)
    except Exception as exc:  # the interface promises outcomes; a raise is the kit's bug, named here
        raise RolloutError(f"trajectory {live.name!r}: the tool session raised on turn {builder.turns}: "
                           f"{type(exc).__name__}: {exc}") from exc
    if outcome is None:
        live.finish = "stop"
        return
    if builder.turns > limits.max_turns + 1:
        # The kit refused the call past its limit with a message and the policy called again.
        builder.tool_calls += 1
        live.finish = "length"
        return
    segment = builder.tool_segment(kit.tool_turn_text(outcome), outcome.videos, outcome.images)
    if len(builder) + len(segment.prompt_ids) >= limits.max_response_length:
        # No room for the answer and one more policy token: the budget is spent. The call counts;
        # it was not answered (tool_errors counts calls answered with an error message).
        builder.tool_calls += 1
        live.finish = "length"
        return
    builder.add_tool(segment, refs=outcome.refs, error=outcome.error is not None)


def _result(request: RolloutRequest, prompt: PromptInputs, lives: Sequence[_Live], fallback_version: int) -> RolloutResult:
    completions = []
    for live in lives:
        trajectory = live.builder.trajectory()
        completions.append(Completion(token_ids=list(trajectory.token_ids), text=trajectory.final_text,
                                      logprobs=list(live.builder.logprobs), finish_reason=live.finish or "length",
                                      trajectory=trajectory))
    versions = [live.version for live in lives if live.version is not None]
    return RolloutResult(request_id=request.request_id, prompt_token_ids=list(prompt.prompt_ids),
                         completions=completions, policy_version=min(versions, default=fallback_version),
                         num_visual_tokens=prompt.num_visual_tokens, prompt=prompt)


def _start(engine_builder: Any, request: RolloutRequest, prompt: PromptInputs | None, kit: ToolKit,
           video: ToolVideo) -> tuple[PromptInputs, list[_Live]]:
    if prompt is None:
        raise RolloutError(f"request {request.request_id!r}: no prompt inputs to start a trajectory from")
    lives = [_Live(request, k, TrajectoryBuilder(engine_builder, prompt), kit.session(video)) for k in range(request.n)]
    return prompt, lives


def generate_multi_turn(engine: RolloutEngine, requests: Sequence[RolloutRequest], kit: ToolKit,
                        videos: Sequence[ToolVideo], sampling: SamplingConfig, cfg: ToolsConfig, *,
                        max_response_length: int) -> list[RolloutResult]:
    """``n`` multi-turn trajectories per request (``videos[i]``: what request ``i``'s tools see),
    results in request order; each completion's ``trajectory`` set and its ``token_ids``/
    ``logprobs`` spanning the tool turns (log-prob 0.0 there). One ``generate`` call per turn."""
    _check(requests, videos)
    limits = _limits(cfg, max_response_length)
    requests = [_with_tools(r, kit) for r in requests]
    started = [_start(engine.builder, r, engine.build_inputs(r), kit, v) for r, v in zip(requests, videos)]
    first_tokens = limits.turn_tokens(started[0][1][0]) if started else 1
    first = engine.generate([dataclasses.replace(r, inputs=prompt) for r, (prompt, _) in zip(requests, started)],
                            _turn_sampling(sampling, kit, max_tokens=first_tokens, turn=0))
    for result, (_, lives) in zip(first, started):
        for live, completion in zip(lives, result.completions, strict=True):
            _take(live, completion, first_tokens, kit, limits, result.policy_version)
    turn = 1
    while live_now := [live for _, lives in started for live in lives if live.finish is None]:
        budgets = [limits.turn_tokens(live) for live in live_now]
        turn_requests = [_continuation(live, turn, live.builder.full_inputs()) for live in live_now]
        # One call for the whole turn; each trajectory keeps at most its own budget (cut: "length").
        results = engine.generate(turn_requests, _turn_sampling(sampling, kit, max_tokens=max(budgets), turn=turn))
        for live, result, budget in zip(live_now, results, budgets, strict=True):
            _take(live, result.completions[0], budget, kit, limits, result.policy_version)
        turn += 1
    return [_result(r, prompt, lives, engine.policy_version) for r, (prompt, lives) in zip(requests, started)]


async def agenerate_multi_turn(engine: Any, requests: Sequence[RolloutRequest], kit: ToolKit,
                               videos: Sequence[ToolVideo], sampling: SamplingConfig, cfg: ToolsConfig, *,
                               max_response_length: int) -> list[RolloutResult]:
    """:func:`generate_multi_turn` on ``AsyncVLLMEngine``: each trajectory continues as soon as its
    own tool call is answered. Tool calls and tool-turn processing run off the event loop."""
    _check(requests, videos)
    limits = _limits(cfg, max_response_length)
    requests = [_with_tools(r, kit) for r in requests]

    async def drive(live: _Live, slot: int) -> None:
        turn = 1
        while live.finish is None:
            budget = limits.turn_tokens(live)
            inputs = await asyncio.to_thread(live.builder.full_inputs)
            result = (await engine.generate([_continuation(live, turn, inputs)],
                                            _turn_sampling(sampling, kit, max_tokens=budget, turn=turn, slot=slot)))[0]
            await asyncio.to_thread(_take, live, result.completions[0], budget, kit, limits, result.policy_version)
            turn += 1

    async def one(index: int, request: RolloutRequest) -> RolloutResult:
        prompt = request.inputs
        if prompt is None:
            prompt = await asyncio.to_thread(engine.builder.build, request.messages, request.videos, request.images,
                                             sample_id=request.request_id, tools=request.tools,
                                             template_kwargs=request.template_kwargs)
        prompt, lives = _start(engine.builder, request, prompt, kit, videos[index])
        budget = limits.turn_tokens(lives[0])
        first = (await engine.generate([dataclasses.replace(request, inputs=prompt)],
                                       _turn_sampling(sampling, kit, max_tokens=budget, turn=0, slot=index)))[0]
        for live, completion in zip(lives, first.completions, strict=True):
            await asyncio.to_thread(_take, live, completion, budget, kit, limits, first.policy_version)
        await asyncio.gather(*(drive(live, index * 1024 + live.index) for live in lives))
        return _result(request, prompt, lives, engine.policy_version)

    return list(await asyncio.gather(*(one(i, r) for i, r in enumerate(requests))))

"""Sending a benchmark's own judge prompt through the project's judge client.

Judge-scored benchmarks (MMVU, VCR-Bench, VideoReasonBench, MLVU's generation tasks) define
their official score by a prompt and a rule that reads the judge's reply. The prompt goes out
through :func:`easyvideor1.rewards.judge.chat` (the configured endpoint, model, retries, key),
so only the words and the reading are the benchmark's (a configured ``system_prompt`` gives way
to the benchmark's system message, or to none: the messages go out as the benchmark sends
them). Without a judge (``ctx.judge`` None) the verdict is ``needs_judge``; an endpoint that
fails is reported the same way with the reason (the strict score of the item, which may not
need the judge at all, is kept).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from easyvideor1.eval.benchmarks.official import OfficialVerdict
from easyvideor1.rewards.judge import JudgeConfig, JudgeUnavailable, chat


class NoJudge(Exception):
    """No judge is configured or the endpoint failed: the official verdict needs one."""

    def verdict(self) -> OfficialVerdict:
        return OfficialVerdict(needs_judge=True, note=str(self) or None)


def ask(ctx: Any, prompt: str, *, system: str | None = None, max_tokens: int | None = None) -> str:
    """The judge's reply text to ``prompt`` (``system`` as the system message, as the
    benchmark's script sends it). Raises :class:`NoJudge` without a usable judge."""
    config = JudgeConfig.from_options(getattr(ctx, "judge", None))
    if config is None:
        raise NoJudge()
    config = replace(config, system_prompt=system)
    if max_tokens is not None:
        config = replace(config, max_tokens=max_tokens)
    try:
        reply, _ = chat(config, prompt)
    except JudgeUnavailable as exc:
        raise NoJudge(f"judge unavailable: {exc}") from None
    return reply or ""


def judged(fn: Any) -> Any:
    """Wrap an ``official_item`` so that a missing or failing judge gives ``needs_judge``."""

    def wrapper(self: Any, item: Any, response: str, ctx: Any, metas: Any = ()) -> OfficialVerdict:
        try:
            return fn(self, item, response, ctx, metas)
        except NoJudge as exc:
            return exc.verdict()

    wrapper.__doc__ = fn.__doc__
    wrapper.__name__ = fn.__name__
    return wrapper

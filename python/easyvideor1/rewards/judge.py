"""LLM judge over any OpenAI-compatible endpoint: rubric prompt -> verdict -> score in [0, 1].

A Jinja2 rubric (``rewards/templates/judge_*.j2``, or a file given as ``template``) is sent
as one user message to ``POST {base_url}/chat/completions`` with temperature 0. Transport
failures (timeouts, connection errors, HTTP 5xx and 429) are retried with exponential
backoff ``backoff_s * 2**attempt`` (capped at ``max_backoff_s``); other 4xx are not retried.
When every attempt fails :class:`JudgeUnavailable` is raised: the endpoint, not the
response, is at fault, so the dispatcher reports an error instead of a silent 0.

:func:`parse_verdict` reads the reply (text after the last ``</think>``), the last match
of the first rule that matches wins:

1. JSON object with ``score``/``rating``/``grade`` (number or verdict word);
2. ``[[8]]`` or ``[[8/10]]``;
3. ``x/y`` or ``x out of y`` (e.g. ``Score: 7/10``, ``7 out of 10``) -> ``x / y``;
4. ``Score: x`` / ``Rating = x`` / ``Grade is x`` with no denominator -> a number with a
   decimal point in [0, 1] is a fraction (``Rating: 0.7``), else ``x / scale`` when
   ``x <= scale``, else ``x / 100`` when ``x <= 100`` (a percentage);
5. a verdict word: in ``Verdict:``/``Answer:``/``Judgement:`` form, or opening the reply,
   or alone on its last line: yes/correct/right/true/pass -> 1, partially correct -> 0.5,
   no/incorrect/wrong/false/fail -> 0.

Values outside the range, or no rule matching, give ``score=None`` with the reason; the
callers turn that into accuracy 0 with the reason in the details.

Config keys (a dict; unknown keys are ignored so a scorer's options can be passed whole):
``base_url`` (alias ``url``; the ``/v1`` root), ``model``, ``api_key_env`` (name of the
env var holding the key; default ``EVR1_JUDGE_API_KEY``; unset -> no auth header),
``temperature`` (0), ``max_tokens`` (512), ``timeout_s`` (30), ``retries`` (3),
``backoff_s`` (0.5), ``max_backoff_s`` (8), ``scale`` (10), ``template``,
``system_prompt``, ``max_response_chars`` (8000).
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, fields, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import httpx
import jinja2

from easyvideor1.errors import ConfigError, EasyVideoR1Error
from easyvideor1.rewards.types import Score

TEMPLATES = Path(__file__).with_name("templates")
# Starts only where a digit run starts (not inside one): keeps every search linear.
_NUM = r"(?<![\d.])(-?\d++(?:\.\d++)?)"
_THINK_CLOSE_RE = re.compile(r"<\s*/\s*think\s*>", re.IGNORECASE)
_JSON_OBJECT_RE = re.compile(r"\{[^{}]{0,2000}\}")
_BRACKETS_RE = re.compile(rf"\[\[\s*{_NUM}\s*(?:/\s*{_NUM}\s*)?\]\]")
_FRACTION_RE = re.compile(rf"{_NUM}\s*(?:/|\bout\s+of\b)\s*{_NUM}", re.IGNORECASE)
_LABELLED_RE = re.compile(rf"\b(?:score|rating|grade)\b[\s*]*(?:is|=|:)?[\s*]*{_NUM}", re.IGNORECASE)
_WORDS = r"(partially correct|partly correct|incorrect|not correct|correct|yes|no|right|wrong|true|false|pass|fail)"
_WORD_LABELLED_RE = re.compile(rf"\b(?:verdict|answer|judge?ment|decision|conclusion)\b[\s*]*:[\s*]*{_WORDS}\b",
                               re.IGNORECASE)
_WORD_LEADING_RE = re.compile(rf"^\W*{_WORDS}\b", re.IGNORECASE)
_WORD_VALUES = {"yes": 1.0, "correct": 1.0, "right": 1.0, "true": 1.0, "pass": 1.0,
                "partially correct": 0.5, "partly correct": 0.5,
                "no": 0.0, "incorrect": 0.0, "not correct": 0.0, "wrong": 0.0, "false": 0.0, "fail": 0.0}
MAX_REPLY_CHARS = 20_000


class JudgeUnavailable(EasyVideoR1Error):
    """The judge endpoint could not be used (after retries, or it rejected the request)."""


@dataclass(frozen=True)
class JudgeConfig:
    base_url: str
    model: str = "judge"
    api_key_env: str = "EVR1_JUDGE_API_KEY"
    temperature: float = 0.0
    max_tokens: int = 512
    timeout_s: float = 30.0
    retries: int = 3
    backoff_s: float = 0.5
    max_backoff_s: float = 8.0
    scale: float = 10.0
    template: str | None = None
    system_prompt: str | None = None
    max_response_chars: int = 8000

    @classmethod
    def from_options(cls, options: dict[str, Any] | None) -> JudgeConfig | None:
        """The config in ``options`` (top level or under ``judge``); None without a base_url."""
        options = dict(options or {})
        if isinstance(options.get("judge"), dict):
            options = {**options, **options["judge"]}
        options.setdefault("base_url", options.get("url"))
        if not options.get("base_url"):
            return None
        casts = {"temperature": float, "timeout_s": float, "backoff_s": float, "max_backoff_s": float,
                 "scale": float, "max_tokens": int, "retries": int, "max_response_chars": int}
        known = {f.name for f in fields(cls)}
        try:
            values = {k: casts.get(k, str)(v) for k, v in options.items() if k in known and v is not None}
            config = cls(**values)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"invalid judge config: {exc}") from None
        if config.scale <= 0 or config.retries < 0 or config.timeout_s <= 0:
            raise ConfigError("judge config: scale and timeout_s must be > 0, retries >= 0")
        return config


@dataclass(frozen=True)
class Verdict:
    score: float | None  # in [0, 1]; None when the reply could not be read
    rule: str | None
    reason: str | None = None


def _unit(value: float, denominator: float | None, scale: float, rule: str, text: str) -> Verdict:
    if denominator is None:
        if "." in text and 0.0 <= value <= 1.0:
            return Verdict(value, rule)
        denominator = scale if value <= scale else 100.0
    if denominator <= 0 or value < 0 or value > denominator:
        return Verdict(None, rule, f"score {value:g}/{denominator:g} out of range")
    return Verdict(value / denominator, rule)


def parse_verdict(reply: str, scale: float = 10.0) -> Verdict:
    """Read a judge's reply into a score in [0, 1] (rules in the module docstring)."""
    text = (reply or "")[:MAX_REPLY_CHARS]
    closes = list(_THINK_CLOSE_RE.finditer(text))
    text = (text[closes[-1].end():] if closes else text).strip()
    if not text:
        return Verdict(None, None, "empty judge reply")
    for match in reversed(list(_JSON_OBJECT_RE.finditer(text))):
        try:
            data = json.loads(match.group(0))
        except ValueError:
            continue
        keyed = {str(k).lower(): v for k, v in data.items()} if isinstance(data, dict) else {}
        for key in ("score", "rating", "grade"):
            value = keyed.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                return _unit(float(value), None, scale, "json", json.dumps(value))
            if isinstance(value, str):
                inner = parse_verdict(value, scale)
                if inner.score is not None:
                    return Verdict(inner.score, "json")
    brackets = list(_BRACKETS_RE.finditer(text))
    if brackets:
        value, denominator = brackets[-1].group(1), brackets[-1].group(2)
        return _unit(float(value), float(denominator) if denominator else scale, scale, "brackets", value)
    fractions = list(_FRACTION_RE.finditer(text))
    if fractions:
        return _unit(float(fractions[-1].group(1)), float(fractions[-1].group(2)), scale, "fraction", "")
    labelled = list(_LABELLED_RE.finditer(text))
    if labelled:
        value = labelled[-1].group(1)
        return _unit(float(value), None, scale, "labelled_number", value)
    words = list(_WORD_LABELLED_RE.finditer(text))
    word = words[-1].group(1) if words else None
    if word is None:
        lines = [line for line in text.splitlines() if line.strip()]
        last = re.sub(r"[^\w ]", "", lines[-1]).strip().lower() if lines else ""
        leading = _WORD_LEADING_RE.match(text)
        word = last if last in _WORD_VALUES else (leading.group(1) if leading else None)
    if word is not None:
        return Verdict(_WORD_VALUES[word.lower()], "verdict_word")
    return Verdict(None, None, f"unparseable judge verdict: {text[-200:]!r}")


# ---- prompt and transport ----------------------------------------------------------------


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=False,
                              undefined=jinja2.StrictUndefined, keep_trailing_newline=True)


def render_prompt(template: str, **values: Any) -> str:
    """Render a packaged template by name, or a template file given by path."""
    env = _environment()
    if os.sep in template or not (TEMPLATES / template).exists():
        path = Path(template)
        if not path.is_file():
            raise ConfigError(f"judge template {template!r} not found (packaged: "
                              f"{', '.join(sorted(p.name for p in TEMPLATES.glob('*.j2')))})")
        return env.from_string(path.read_text()).render(**values)
    return env.get_template(template).render(**values)


_CLIENTS: OrderedDict[str, httpx.Client] = OrderedDict()
_CLIENTS_LOCK = threading.Lock()


def _client(base_url: str) -> httpx.Client:
    with _CLIENTS_LOCK:
        client = _CLIENTS.pop(base_url, None) or httpx.Client(trust_env=False, follow_redirects=False)
        _CLIENTS[base_url] = client  # most recent last; keep a handful of pools
        while len(_CLIENTS) > 8:
            _CLIENTS.popitem(last=False)[1].close()
        return client


def chat(config: JudgeConfig, prompt: str) -> tuple[str | None, dict[str, Any]]:
    """One completion: (reply text or None when the body is malformed, call metadata)."""
    url = config.base_url.rstrip("/") + "/chat/completions"
    messages = ([{"role": "system", "content": config.system_prompt}] if config.system_prompt else [])
    messages.append({"role": "user", "content": prompt})
    payload = {"model": config.model, "messages": messages, "temperature": config.temperature,
               "max_tokens": config.max_tokens}
    headers = {}
    key = os.environ.get(config.api_key_env) if config.api_key_env else None
    if key:
        headers["Authorization"] = f"Bearer {key}"
    meta: dict[str, Any] = {"model": config.model, "attempts": 0}
    start = time.monotonic()
    last_error = "no attempt made"
    for attempt in range(config.retries + 1):
        meta["attempts"] = attempt + 1
        try:
            response = _client(config.base_url).post(url, json=payload, headers=headers,
                                                      timeout=config.timeout_s)
        except httpx.TimeoutException:
            last_error = f"timeout after {config.timeout_s:g}s"
        except httpx.TransportError as exc:
            last_error = f"connection error: {type(exc).__name__}: {exc}"
        else:
            if response.status_code < 400:
                meta["latency_s"] = round(time.monotonic() - start, 3)
                return _reply_text(response), meta
            last_error = f"HTTP {response.status_code}: {response.text[:200]}"
            if response.status_code < 500 and response.status_code != 429:
                raise JudgeUnavailable(f"judge endpoint {url} rejected the request ({last_error})")
        if attempt < config.retries:
            time.sleep(min(config.max_backoff_s, config.backoff_s * 2**attempt))
    raise JudgeUnavailable(f"judge endpoint {url} failed after {config.retries + 1} attempt(s): {last_error}")


def _reply_text(response: httpx.Response) -> str | None:
    try:
        content = response.json()["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}]
        content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content if isinstance(content, str) else None


def judge(config: JudgeConfig, template: str, *, question: str, response: str, reference: str) -> tuple[
        Verdict, dict[str, Any]]:
    """Ask the judge; (verdict, details). Raises JudgeUnavailable when the endpoint fails."""
    scale = int(config.scale) if float(config.scale).is_integer() else config.scale
    prompt = render_prompt(config.template or template, question=question or "", reference=reference,
                           response=response[:config.max_response_chars], scale=scale)
    reply, meta = chat(config, prompt)
    if reply is None:
        verdict = Verdict(None, None, "malformed judge response (no choices[0].message.content)")
    else:
        verdict = parse_verdict(reply, config.scale)
    details = {"judge": {**meta, "score": verdict.score, "rule": verdict.rule,
                         "reply": (reply or "")[-500:]}}
    if verdict.reason:
        details["reason"] = verdict.reason
    return verdict, details


def judge_open_ended(question: str, response: str | None = None, reference: str | None = None, *,
                     config: dict[str, Any] | None = None, prediction: str | None = None,
                     judge_config: dict[str, Any] | None = None, timeout_s: float | None = None,
                     **aliases: Any) -> Score:
    """Judge a free-form answer against a reference: ``accuracy`` = the verdict (0 when
    unreadable, with the reason), ``format`` = 1 for a non-empty response. The caller owns
    the format rule (answer tags), so it usually keeps its own format value.

    ``prediction`` is accepted for ``response`` and ``judge`` (in ``aliases``) or
    ``judge_config`` for ``config``; ``timeout_s`` overrides the config's when given.
    """
    response = response if response is not None else prediction
    settings = config if config is not None else judge_config if judge_config is not None else aliases.get("judge")
    if reference is None or response is None:
        raise TypeError("judge_open_ended needs a response and a reference")
    cfg = JudgeConfig.from_options(settings if isinstance(settings, dict) else None)
    if cfg is None:
        raise ConfigError("the LLM judge needs a config with base_url (e.g. {'base_url': 'http://host:8000/v1'})")
    if timeout_s is not None and not (isinstance(settings, dict) and "timeout_s" in settings):
        cfg = replace(cfg, timeout_s=float(timeout_s))
    verdict, details = judge(cfg, "judge_open_ended.j2", question=question, response=response, reference=reference)
    return Score(verdict.score or 0.0, 1.0 if response.strip() else 0.0, details)

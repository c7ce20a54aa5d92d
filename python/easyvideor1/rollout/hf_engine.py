"""``HFEngine``: the rollout interface on transformers, for parity checks and as a fallback.

It does not use ``model.generate``: transformers' own M-RoPE positions are wrong for
Qwen2/2.5-VL after a multi-frame video (Trap 1), so this engine runs its own decode loop
with a KV cache and passes the positions of models/rope.py explicitly at every step. The
``n`` samples of a request run as one batch (the prompt, frames included, repeated ``n``
times). Log-probs are the raw model distribution's, like vLLM's ``raw_logprobs``.

Stop strings end a row where they first appear in its decoded text (skipping special
tokens, as vLLM's detokenizer), the stop text kept. A multi-turn continuation arrives as the
full sequence's prompt inputs (models/trajectory.py): ids, positions and pixel tensors of
the prompt and every turn so far; this engine keeps no cache between calls, so each turn
recomputes the whole sequence (vLLM reuses its prefix cache instead).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from easyvideor1.logging import event, get_logger
from easyvideor1.models.inputs import PromptBuilder, PromptInputs
from easyvideor1.rollout.base import (
    Completion,
    EngineAsleepError,
    RolloutEngine,
    RolloutError,
    RolloutRequest,
    RolloutResult,
    SamplingConfig,
    check_requests,
    vision_token_ids,
)
from easyvideor1.weight_sync.host import load_weights

log = get_logger(__name__)


def eos_token_ids(model: Any, tokenizer: Any) -> list[int]:
    """EOS ids from the generation config, falling back to the tokenizer's EOS."""
    ids = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids = [ids] if isinstance(ids, int) else list(ids or [])
    if tokenizer.eos_token_id is not None:
        ids.append(int(tokenizer.eos_token_id))
    return sorted(set(int(i) for i in ids))


class HFEngine(RolloutEngine):
    """Rollouts with a transformers model (float32 by default) on CPU or one GPU."""

    def __init__(self, model_dir: str | Path, *, dtype: Any = None, device: str = "cpu", model: Any = None):
        import torch
        from transformers import AutoModelForImageTextToText

        self.model_dir = str(model_dir)
        self.builder = PromptBuilder.from_pretrained(self.model_dir)
        self.device = torch.device(device)
        self.model = model if model is not None else AutoModelForImageTextToText.from_pretrained(
            self.model_dir, dtype=dtype or torch.float32)
        self.model.to(self.device).eval()
        self._forbidden = vision_token_ids(self.tokenizer)
        self._eos = eos_token_ids(self.model, self.tokenizer)
        self._asleep = False
        self.policy_version = 0

    def generate(self, requests: Sequence[RolloutRequest], sampling: SamplingConfig) -> list[RolloutResult]:
        if self._asleep:
            raise EngineAsleepError("the HF engine is asleep: call wake_up() before generate()")
        check_requests(requests, sampling)
        results = []
        for index, request in enumerate(requests):
            inputs = self.build_inputs(request)
            if inputs is None:
                inputs = self._text_inputs(request)
            try:
                completions = self._sample(inputs, request.n, sampling, index)
            except RuntimeError as exc:
                raise RolloutError(f"transformers failed on request {request.request_id!r}: {exc}") from exc
            results.append(RolloutResult(
                request_id=request.request_id, prompt_token_ids=list(inputs.prompt_ids), completions=completions,
                policy_version=self.policy_version, num_visual_tokens=inputs.num_visual_tokens,
                prompt=None if request.messages is None else inputs,
            ))
        return results

    def _text_inputs(self, request: RolloutRequest) -> PromptInputs:
        from easyvideor1.models.rope import continue_positions

        ids = [int(t) for t in request.prompt_token_ids]
        return PromptInputs(sample_id=request.request_id, prompt_text="", prompt_ids=ids,
                            mm_token_type_ids=[0] * len(ids), position_ids=continue_positions(0, len(ids)),
                            next_position=len(ids), tensors={}, family=self.family)

    def _sample(self, inputs: PromptInputs, n: int, sampling: SamplingConfig, index: int) -> list[Completion]:
        import torch

        device = self.device
        generator = torch.Generator(device="cpu")
        if sampling.seed is not None:
            generator.manual_seed((sampling.seed + index * (1 << 20)) % 2**63)
        else:
            generator.seed()
        prompt_len = len(inputs.prompt_ids)
        ids = torch.tensor([inputs.prompt_ids] * n, device=device)
        positions = torch.from_numpy(inputs.position_ids).to(device)[:, None, :].expand(3, n, prompt_len)
        visual = _repeat_visual(inputs.tensors, n, device)
        stop_ids = set(self._eos) | set(sampling.stop_token_ids)
        tokens: list[list[int]] = [[] for _ in range(n)]
        logprobs: list[list[float]] = [[] for _ in range(n)]
        finished = [None] * n
        with torch.no_grad():
            out = self.model(input_ids=ids, attention_mask=torch.ones_like(ids), position_ids=positions,
                             mm_token_type_ids=torch.tensor([inputs.mm_token_type_ids] * n, device=device),
                             use_cache=True, logits_to_keep=1, **visual)
            cache = out.past_key_values
            for step in range(sampling.max_tokens):
                logits = out.logits[:, -1, :].float()
                chosen, chosen_logprob = self._pick(logits, sampling, generator)
                for row in range(n):
                    if finished[row] is not None:
                        continue
                    tokens[row].append(int(chosen[row]))
                    logprobs[row].append(float(chosen_logprob[row]))
                    if int(chosen[row]) in stop_ids or _hits_stop(self.tokenizer, tokens[row], sampling.stop):
                        finished[row] = "stop"
                if all(f is not None for f in finished) or step + 1 == sampling.max_tokens:
                    break
                total = prompt_len + step + 1
                step_pos = torch.full((3, n, 1), inputs.next_position + step, dtype=torch.long, device=device)
                out = self.model(input_ids=chosen.view(n, 1).to(device),
                                 attention_mask=torch.ones((n, total), dtype=torch.long, device=device),
                                 position_ids=step_pos, past_key_values=cache, use_cache=True)
                cache = out.past_key_values
        return [Completion(token_ids=t, text=self.tokenizer.decode(t, skip_special_tokens=True), logprobs=lp,
                           finish_reason=f or "length") for t, lp, f in zip(tokens, logprobs, finished)]

    def _pick(self, logits: Any, sampling: SamplingConfig, generator: Any) -> tuple[Any, Any]:
        import torch

        raw = torch.log_softmax(logits, dim=-1)
        scores = logits.clone()
        if sampling.forbid_vision_tokens and self._forbidden:
            scores[:, self._forbidden] = float("-inf")
        if sampling.greedy:
            chosen = scores.argmax(dim=-1)
        else:
            scores = scores / sampling.temperature
            if sampling.top_k > 0:
                kth = torch.topk(scores, min(sampling.top_k, scores.shape[-1]), dim=-1).values[:, -1:]
                scores = scores.masked_fill(scores < kth, float("-inf"))
            probs = torch.softmax(scores, dim=-1)
            if sampling.top_p < 1.0:
                sorted_probs, order = probs.sort(dim=-1, descending=True)
                # Keep the smallest prefix whose mass reaches top_p (the first token always stays).
                drop = sorted_probs.cumsum(-1) - sorted_probs >= sampling.top_p
                sorted_probs = sorted_probs.masked_fill(drop, 0.0)
                probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
            chosen = torch.multinomial(probs.cpu(), 1, generator=generator).squeeze(-1).to(logits.device)
        return chosen, raw.gather(-1, chosen.unsqueeze(-1)).squeeze(-1)

    def update_weights(self, weights: Mapping[str, Any] | str | Path, version: int) -> None:
        started = time.perf_counter()
        state = load_weights(weights)
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        tied = set(getattr(self.model, "_tied_weights_keys", None) or {})
        missing = [k for k in missing if k not in tied]
        if missing or unexpected:
            raise RolloutError(f"weights do not fit the model: missing {missing[:5]}, unexpected {unexpected[:5]}")
        if getattr(self.model.config, "tie_word_embeddings", False):
            self.model.tie_weights()
        self.policy_version = int(version)
        event(log, "hf_weights_updated", version=self.policy_version, tensors=len(state),
              seconds=round(time.perf_counter() - started, 3))

    def sleep(self, level: int = 1) -> bool:
        """On a GPU the model moves to host memory (True); on CPU nothing is released (False).
        Level 2 does the same: the weights a full load then writes are in host memory, not lost."""
        import torch

        if level not in (1, 2):
            raise ValueError(f"sleep level must be 1 or 2, got {level!r}")
        released = False
        if self.device.type == "cuda" and not self._asleep:
            self.model.to("cpu")
            torch.cuda.empty_cache()
            released = True
        self._asleep = True
        return released

    def wake_up(self, tags: Sequence[str] | None = None) -> None:
        """The model has no separate KV cache: it comes back with the weights tag (or all)."""
        if self._asleep and self.device.type == "cuda" and (tags is None or "weights" in tags) \
                and next(self.model.parameters()).device.type == "cpu":
            self.model.to(self.device)
        if tags is None or "kv_cache" in tags:
            self._asleep = False

    def close(self) -> None:
        self.model = None


def _hits_stop(tokenizer: Any, token_ids: list[int], stop: Sequence[str]) -> bool:
    # Checked after every token, so a string found now appeared with this token.
    if not stop:
        return False
    text = tokenizer.decode(token_ids, skip_special_tokens=True)
    return any(s in text for s in stop)


def _repeat_visual(tensors: dict[str, Any], n: int, device: Any) -> dict[str, Any]:
    import torch

    return {key: torch.cat([value] * n, dim=0).to(device) for key, value in tensors.items()}

"""Mix-policy at the rollout layer: an offline trajectory in the last slot of a group of n.

For a prompt that carries an offline (teacher) response, the engine samples only the
responses :func:`~easyvideor1.algos.mix_policy.responses_to_generate` asks for (n - 1 in
unconditional mode) and :func:`~easyvideor1.algos.mix_policy.assemble_group` completes the
group. The offline response has no rollout log-probs (the trainer computes them); it is
marked ``is_offline`` and finishes with ``finish_reason="offline"``.

An offline response may be a multi-turn :class:`~easyvideor1.models.trajectory.Trajectory`
(tools on: rollout/tool_trajectory.py made it from the data format's tool-using text); its
completion then carries it, with the trajectory's ids (loss on its policy turns only) and its
final turn as the text the scorers see. ``generate`` replaces ``engine.generate`` (the
multi-turn driver when tools are on).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from easyvideor1.algos.mix_policy import assemble_group, responses_to_generate
from easyvideor1.config.schema import MixPolicyConfig
from easyvideor1.models.trajectory import Trajectory
from easyvideor1.rollout.base import (
    Completion,
    RolloutEngine,
    RolloutError,
    RolloutRequest,
    RolloutResult,
    SamplingConfig,
)

# Conditional mode needs online accuracies: scorer(request, completions) -> one score per completion.
Scorer = Callable[[RolloutRequest, list[Completion]], Sequence[float]]
Generate = Callable[[Sequence[RolloutRequest], SamplingConfig], list[RolloutResult]]


def generate_groups(engine: RolloutEngine, requests: Sequence[RolloutRequest],
                    offline_texts: Sequence[str | Trajectory | None], sampling: SamplingConfig,
                    config: MixPolicyConfig, *, max_response_length: int | None = None, scorer: Scorer | None = None,
                    generate: Generate | None = None) -> list[RolloutResult]:
    """Groups of ``request.n`` responses each, with offline responses spliced in last.

    ``offline_texts[i]`` is request ``i``'s offline response (``None`` when it has none): a text,
    or a multi-turn trajectory. ``max_response_length`` (default ``sampling.max_tokens``)
    truncates offline texts. ``generate`` (default ``engine.generate``) samples the online ones.
    """
    if len(offline_texts) != len(requests):
        raise RolloutError(f"{len(offline_texts)} offline texts for {len(requests)} requests")
    if config.conditional and scorer is None:
        raise RolloutError("conditional mix-policy needs a scorer for the online responses")
    limit = max_response_length or sampling.max_tokens
    to_generate = [responses_to_generate(r.n, text is not None, config) for r, text in zip(requests, offline_texts)]
    online = (generate or engine.generate)([dataclasses.replace(r, n=k) for r, k in zip(requests, to_generate)],
                                           sampling)
    tokenizer = engine.tokenizer
    eos = int(tokenizer.eos_token_id)

    def encode(text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False)

    results = []
    for request, text, result in zip(requests, offline_texts, online):
        accuracies = None
        if config.conditional and text is not None:
            accuracies = list(scorer(request, result.completions))
        trajectory = text if isinstance(text, Trajectory) else None
        offline_response = trajectory.token_ids if trajectory is not None else text
        group = assemble_group([c.token_ids for c in result.completions], offline_response, n=request.n,
                               config=config, encode=encode, eos_token_id=eos, max_response_length=limit,
                               online_accuracies=accuracies)
        completions = []
        for slot, (token_ids, offline) in enumerate(zip(group.responses, group.is_offline)):
            if offline and trajectory is not None:
                completions.append(Completion(token_ids=list(token_ids), text=trajectory.final_text, logprobs=None,
                                              finish_reason="offline", is_offline=True, trajectory=trajectory))
            elif offline:
                completions.append(Completion(
                    token_ids=list(token_ids), text=tokenizer.decode(list(token_ids), skip_special_tokens=True),
                    logprobs=None, finish_reason="offline", is_offline=True))
            else:
                # assemble_group keeps the online responses first, in generation order.
                completions.append(result.completions[slot])
        results.append(dataclasses.replace(result, completions=completions))
    return results

"""Mix-policy group assembly, offline encoding, padding masks and the offline loss share."""

from __future__ import annotations

import pytest
import torch

from easyvideor1.algos import (
    AlgoInputError,
    assemble_group,
    compute_advantage,
    encode_offline_response,
    mix_policy_metrics,
    offline_loss_share,
    pad_responses,
    policy_loss_per_token,
    responses_to_generate,
)
from easyvideor1.config.schema import MixPolicyConfig

EOS = 2
ON = MixPolicyConfig(enable=True)
CONDITIONAL = MixPolicyConfig(enable=True, mode="conditional", accuracy_threshold=0.5)


def encode(text):
    """A tokenizer stand-in: one id per character, no special tokens."""
    return [100 + ord(character) % 50 for character in text]


def build(generated, offline, *, n=4, config=ON, accuracies=None, max_len=6):
    return assemble_group(
        generated, offline, n=n, config=config, encode=encode, eos_token_id=EOS,
        max_response_length=max_len, online_accuracies=accuracies,
    )


def test_how_many_to_generate():
    assert responses_to_generate(4, has_offline=True, config=ON) == 3
    assert responses_to_generate(4, has_offline=False, config=ON) == 4
    assert responses_to_generate(4, has_offline=True, config=MixPolicyConfig()) == 4
    assert responses_to_generate(4, has_offline=True, config=CONDITIONAL) == 4
    with pytest.raises(AlgoInputError, match="n >= 2"):
        responses_to_generate(1, has_offline=True, config=ON)


def test_offline_response_goes_to_the_last_slot():
    online = [[5, 6, EOS], [7, EOS], [8, 8, 8, 8, 8, 8]]
    group = build(online, "abc")
    assert group.responses[:3] == tuple(tuple(r) for r in online)
    assert group.responses[3] == (*encode("abc"), EOS)
    assert group.is_offline == (False, False, False, True)
    assert group.offline_injected


def test_offline_text_is_truncated_with_eos_appended():
    assert encode_offline_response("abcdefghij", encode, eos_token_id=EOS, max_response_length=4) == (
        *encode("abc"), EOS,
    )
    with_eos = lambda text: [*encode(text), EOS]  # noqa: E731 - a tokenizer that adds EOS itself
    assert encode_offline_response("ab", with_eos, eos_token_id=EOS, max_response_length=8) == (*encode("ab"), EOS)
    with pytest.raises(AlgoInputError, match="offline trajectory is empty"):
        encode_offline_response("  ", encode, eos_token_id=EOS, max_response_length=4)


def test_padded_mask_covers_text_and_eos_only():
    group = build([[5, EOS], [6, EOS], [7, EOS]], "abcdefgh", max_len=5)
    ids, mask = pad_responses(group.responses, max_response_length=5, pad_token_id=0)
    assert ids[3].tolist() == [*encode("abcd"), EOS]
    assert mask.tolist() == [[1, 1, 0, 0, 0]] * 3 + [[1, 1, 1, 1, 1]]
    short = build([[5, EOS], [6, EOS], [7, EOS]], "ab", max_len=5)
    ids, mask = pad_responses(short.responses, max_response_length=5, pad_token_id=0)
    assert ids[3].tolist() == [*encode("ab"), EOS, 0, 0] and mask[3].tolist() == [1, 1, 1, 0, 0]
    with pytest.raises(AlgoInputError, match="response 0 has 6 tokens, more than max_response_length=5"):
        pad_responses([[1] * 6], max_response_length=5, pad_token_id=0)


def test_disabled_or_missing_offline_keeps_online_group():
    online = [[5, EOS]] * 4
    assert build(online, None).is_offline == (False,) * 4
    assert build(online, "abc", config=MixPolicyConfig()).is_offline == (False,) * 4
    with pytest.raises(AlgoInputError, match=r"expected 3 generated response\(s\) for a group of 4, got 4"):
        build(online, "abc")


def test_conditional_mode_injects_only_below_threshold():
    online = [[5, EOS], [6, EOS], [7, EOS], [8, EOS]]
    failing = build(online, "abc", config=CONDITIONAL, accuracies=[0, 0, 1, 0])  # 0.25 < 0.5
    assert failing.is_offline == (False, False, False, True)
    assert failing.responses[:3] == tuple(tuple(r) for r in online[:3])
    passing = build(online, "abc", config=CONDITIONAL, accuracies=[1, 0, 1, 0])  # 0.5 is not below
    assert not passing.offline_injected and passing.responses == tuple(tuple(r) for r in online)
    with pytest.raises(AlgoInputError, match="needs 4 online_accuracies, got None"):
        build(online, "abc", config=CONDITIONAL)
    with pytest.raises(ValueError, match="accuracy_threshold"):
        MixPolicyConfig(enable=True, mode="conditional", accuracy_threshold=0.0)


def test_metrics_count_groups_with_offline():
    groups = [build([[5, EOS]] * 3, "abc"), build([[5, EOS]] * 4, None), build([[5, EOS]] * 3, "d")]
    assert mix_policy_metrics(groups) == {
        "mix_policy/groups": 3.0,
        "mix_policy/groups_with_offline": 2.0,
        "mix_policy/offline_group_fraction": pytest.approx(2 / 3),
    }
    assert mix_policy_metrics([])["mix_policy/offline_group_fraction"] == 0.0


def test_offline_loss_share_by_hand():
    losses = torch.tensor([[1.0, -1.0, float("nan")], [2.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert offline_loss_share(losses, mask, [False, True]).item() == pytest.approx(0.5)
    assert offline_loss_share(losses, mask, torch.tensor([True, False])).item() == pytest.approx(0.5)
    assert offline_loss_share(torch.zeros(2, 3), mask, [True, False]).item() == 0.0
    with pytest.raises(AlgoInputError, match=r"is_offline must have shape \(2,\)"):
        offline_loss_share(losses, mask, [True])


def test_end_to_end_group_through_advantages_and_loss():
    group = build([[5, 6, EOS], [7, EOS], [8, 9, 9, EOS]], "abc")
    ids, mask = pad_responses(group.responses, max_response_length=6, pad_token_id=0)
    rewards = torch.zeros(4, 6, dtype=torch.float64)
    rewards[:, 0] = torch.tensor([0.0, 0.0, 0.0, 1.0])  # only the offline answer is right
    advantages, _ = compute_advantage("grpo", rewards, mask, ["q"] * 4)
    log_probs = torch.full((4, 6), -1.0, dtype=torch.float64)
    per_token, _ = policy_loss_per_token("ppo", log_probs, log_probs, advantages, mask)
    share = offline_loss_share(per_token, mask, group.is_offline)
    # offline: 4 tokens of |A| = 1.5; online: 3 + 2 + 4 tokens of |A| = 0.5
    assert share.item() == pytest.approx(6.0 / (6.0 + 4.5))

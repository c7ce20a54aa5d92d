"""The actor's update with the shared-prefix layout equals the one-sequence-per-response update:
the same old log-probs, loss, KL and every parameter's gradient (float32, CPU, 1e-5 relative),
for every loss aggregation, GSPO's sequence ratios, the KL estimators and the full-vocabulary
KL, the entropy bonus, dual-clip, mix-policy's offline member, several groups and micro-batches
(gradient accumulation), checkpointing with kept activations, and FSDP2 over two gloo ranks
(groups whole on a rank)."""

from __future__ import annotations

import pytest
import torch
from equivalence import max_abs, max_rel, rel_norm, report
from fsdp_worker import launch_world, make_media
from servers import free_port
from shared_prefix_worker import run_update

CASES = {
    "token-mean": [],
    "seq-mean-token-mean": ["algorithm.loss_agg_mode=seq-mean-token-mean"],
    "seq-mean-token-sum": ["algorithm.loss_agg_mode=seq-mean-token-sum"],
    "seq-mean-token-sum-norm": ["algorithm.loss_agg_mode=seq-mean-token-sum-norm"],
    "gspo": ["algorithm.policy_loss=gspo", "algorithm.loss_agg_mode=seq-mean-token-mean"],
    "gspo_token": ["algorithm.policy_loss=gspo_token"],
    "cispo": ["algorithm.policy_loss=cispo"],
    "kl-k1": ["algorithm.kl.enable=true", "algorithm.kl.kind=k1", "algorithm.kl.coef=0.5"],
    "kl-k2": ["algorithm.kl.enable=true", "algorithm.kl.kind=k2", "algorithm.kl.coef=0.5"],
    "kl-k3": ["algorithm.kl.enable=true", "algorithm.kl.kind=k3", "algorithm.kl.coef=0.5"],
    "kl-full": ["algorithm.kl.enable=true", "algorithm.kl.kind=full", "algorithm.kl.coef=0.5"],
    "entropy-dual-clip": ["worker.actor.entropy_coef=0.05", "algorithm.clip_ratio_dual=1.05"],
    "mix-policy": ["algorithm.mix_policy.enable=true", "algorithm.mix_policy.offline_loss=weighted_nll"],
    # A budget below one group: groups cut into chunks, several micro-batches per step.
    "accumulation": ["worker.actor.micro_batch_token_budget=160"],
    "checkpointing-keep": ["worker.actor.gradient_checkpointing=true", "worker.actor.keep_activations_lm=0.5",
                           "worker.actor.keep_activations_vision=0.5", "worker.actor.keep_policy=fixed"],
}


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    return make_media(tmp_path_factory.mktemp("shared_prefix") / "media")


def assert_same_update(shared: dict, unshared: dict, case: str) -> None:
    lps = list(zip(shared["log_probs"], unshared["log_probs"]))
    stats = [k for k in unshared["stats"] if not k.startswith("dp/") and k != "actor/lr"]  # dp/: tokens as laid out
    assert set(shared["grads"]) == set(unshared["grads"])
    grads = {k: (shared["grads"][k], g) for k, g in unshared["grads"].items() if float(g.norm()) > 0}
    worst = max(rel_norm(a, b) for a, b in grads.values())
    stat_rel = {k: abs(shared["stats"][k] - unshared["stats"][k]) / max(abs(unshared["stats"][k]), 1e-12)
                for k in stats}
    worst_stat = max(stat_rel, key=stat_rel.get)
    report("update", case, log_probs_max_abs=max(max_abs(a, b) for a, b in lps),
           log_probs_max_rel=max(max_rel(a, b) for a, b in lps), pg_loss_rel=stat_rel["actor/pg_loss"],
           worst_stat=worst_stat, worst_stat_rel=stat_rel[worst_stat], grad_worst_rel_norm=worst,
           grad_max_abs=max(max_abs(a, b) for a, b in grads.values()))
    for a, b in lps:
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    for key in stats:
        assert shared["stats"][key] == pytest.approx(unshared["stats"][key], rel=1e-5, abs=1e-7), key
    assert worst < 1e-5, worst
    assert any(float(g.norm()) > 0 for k, g in unshared["grads"].items() if "visual" in k)


@pytest.mark.parametrize("case", list(CASES))
def test_shared_update_equals_one_sequence_per_response(tiny_model_dir, media, case):
    from easyvideor1.train.distributed import init_world

    world = init_world("cpu")
    results = {shared: run_update(str(tiny_model_dir), str(media), shared, CASES[case], world)
               for shared in (False, True)}
    assert_same_update(results[True], results[False], case)
    if case == "accumulation":
        assert results[True]["micro_batches"]["micro_batches"] > 1


def test_shared_layout_forwards_fewer_tokens(tiny_model_dir, media):
    from easyvideor1.train.distributed import init_world

    world = init_world("cpu")
    tokens = {shared: run_update(str(tiny_model_dir), str(media), shared, [], world)["micro_batches"]["tokens"]
              for shared in (False, True)}
    assert tokens[True] < tokens[False]


def test_two_fsdp_ranks_shared_equal_one_rank_unshared(tiny_model_dir, media, tmp_path):
    """FSDP2 over two gloo ranks with the shared layout (each group whole on one rank) against
    one process forwarding one sequence per response."""
    from pathlib import Path

    script = str(Path(__file__).resolve().parent / "shared_prefix_worker.py")
    results = {}
    for world_size, shared in ((1, False), (2, True)):
        out = tmp_path / f"world{world_size}.pt"
        launch_world(script, [str(tiny_model_dir), str(media), str(out), "1" if shared else "0"], world_size,
                     free_port(), timeout=300)
        results[shared] = torch.load(out, weights_only=False)
    assert_same_update(results[True], results[False], "fsdp-2-ranks")

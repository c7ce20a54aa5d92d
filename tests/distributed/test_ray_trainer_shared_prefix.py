"""The Ray trainer (services/trainer/ray_actors.py) with the actor's shared-prefix layout: the
driver splits as the in-process actor does (costs as laid out, each group whole on one rank
and in one mini-batch), so two FSDP ranks on Ray actors give one in-process rank's log-probs
and update metrics, and lay each group's prompt out once per step."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "train"))

from fsdp_worker import make_media  # noqa: E402
from shared_prefix_worker import build_group_items  # noqa: E402

from easyvideor1.config import load_config  # noqa: E402
from easyvideor1.train.batching import laid_out_costs  # noqa: E402


def test_ray_ranks_keep_groups_whole_and_match_one_rank(local_ray, tiny_model_dir, tmp_path):
    from easyvideor1.train.actor import Actor
    from easyvideor1.train.distributed import World
    from services.trainer.ray_actors import RayActorGroup

    model = str(tiny_model_dir)
    cfg = load_config(None, [f"worker.actor.model_path={model}", "worker.actor.optim.lr=1e-12",
                             "worker.actor.optim.max_grad_norm=1e9", "worker.actor.gradient_checkpointing=false",
                             "worker.actor.fsdp.mixed_precision=fp32", "worker.actor.fsdp.enable=auto",
                             "worker.actor.mini_batch_size=3", "worker.actor.shared_prefix=true",
                             "algorithm.kl.enable=true", "algorithm.kl.use_as=loss", "algorithm.kl.kind=k3",
                             "algorithm.kl.coef=0.1", "trainer.device=cpu", "distributed.train_ranks=2",
                             "data.max_response_length=8"])
    items = build_group_items(model, str(make_media(tmp_path / "media")))
    group = RayActorGroup(cfg, timeout_s=300)
    try:
        assert group.shared
        torch.manual_seed(0)
        local = Actor(model, cfg.worker.actor, cfg.algorithm, World(0, 1, 0, torch.device("cpu")),
                      total_steps=cfg.trainer.total_steps, pad_token_id=0, max_response_length=8)
        assert local.shared
        generator = torch.Generator().manual_seed(11)
        for reference in (False, True):
            got, want = group.compute_log_probs(items, reference=reference), local.compute_log_probs(
                items, reference=reference)
            for item, a, b in zip(items, got, want):
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=f"{item.uid} (reference={reference})")
            for item, lp in zip(items, want):
                noise = torch.randn(len(lp), generator=generator)
                if reference:
                    item.ref_log_probs = lp - 0.05 * noise
                else:
                    item.old_log_probs = lp + 0.6 * noise
        got, want = group.update(items, seed=3), local.update(items, seed=3)
    finally:
        group.close()
    for key in ("actor/pg_loss", "actor/kl_loss", "actor/pg_clipfrac", "actor/ppo_kl", "actor/grad_norm"):
        assert got[key] == pytest.approx(want[key], rel=1e-5, abs=1e-7), key
    assert got["actor/pg_clipfrac"] > 0
    sequences = [got[f"dp/rank{r}/sequences"] for r in range(2)]
    assert sum(sequences) == len(items) and all(0 < n < len(items) for n in sequences)
    # A group split over the ranks would lay its prompt out on each: the tokens forwarded by the
    # two ranks add up to the batch laid out once per group only when every group stayed whole.
    laid_out = sum(laid_out_costs(items, True))
    assert sum(got[f"dp/rank{r}/tokens"] for r in range(2)) == want["dp/rank0/tokens"] == laid_out
    assert laid_out < sum(it.length for it in items)

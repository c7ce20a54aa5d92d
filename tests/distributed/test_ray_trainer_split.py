"""The Ray trainer (services/trainer/ray_actors.py): two FSDP ranks as Ray actors on a local Ray,
each sent only its shard, give the in-process single-rank actor's log-probs (in batch order)
and update metrics."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "train"))

from dp_worker import overrides, split_items  # noqa: E402
from fsdp_worker import make_media  # noqa: E402

from easyvideor1.config import load_config  # noqa: E402
from easyvideor1.errors import ConfigError  # noqa: E402


def test_ray_ranks_split_the_batch_and_match_one_rank(local_ray, tiny_model_dir, tmp_path):
    from easyvideor1.train.actor import Actor
    from easyvideor1.train.distributed import World
    from services.trainer.ray_actors import RayActorGroup

    cfg = load_config(None, [*overrides(str(tiny_model_dir), "fp32"), "trainer.device=cpu", "distributed.train_ranks=2",
                             "data.max_response_length=8"])
    items = split_items(str(tiny_model_dir), str(make_media(tmp_path / "media")))
    group = RayActorGroup(cfg, timeout_s=300)
    try:
        torch.manual_seed(0)
        local = Actor(str(tiny_model_dir), cfg.worker.actor, cfg.algorithm, World(0, 1, 0, torch.device("cpu")),
                      total_steps=cfg.trainer.total_steps, pad_token_id=0, max_response_length=8)
        for reference in (False, True):
            got, want = group.compute_log_probs(items, reference=reference), local.compute_log_probs(items,
                                                                                                   reference=reference)
            for item, a, b in zip(items, got, want):
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=f"{item.uid} (reference={reference})")
            for item, lp in zip(items, want):
                if reference:
                    item.ref_log_probs = lp - 0.05
                else:
                    item.old_log_probs = lp + 0.4 * torch.sin(torch.arange(len(lp), dtype=torch.float32) + len(lp))
        got, want = group.update(items, seed=3), local.update(items, seed=3)
    finally:
        group.close()
    for key in ("actor/pg_loss", "actor/kl_loss", "actor/pg_clipfrac", "actor/ppo_kl", "actor/entropy",
                "actor/grad_norm", "mix_policy/offline_loss_share"):
        # abs: ppo_kl is a mean of log-prob differences, each known to float32 rounding (~1e-7).
        assert got[key] == pytest.approx(want[key], rel=1e-5, abs=1e-7), key
    assert got["actor/kl_loss"] > 0 and got["actor/pg_clipfrac"] > 0
    sequences = [got[f"dp/rank{r}/sequences"] for r in range(2)]
    assert sum(sequences) == len(items) and all(0 < n < len(items) for n in sequences)
    assert sum(got[f"dp/rank{r}/tokens"] for r in range(2)) == sum(it.length for it in items)
    assert want["dp/rank0/sequences"] == len(items)


def test_several_ranks_without_fsdp_are_refused(local_ray, tiny_model_dir):
    from services.trainer.ray_actors import RayActorGroup

    cfg = load_config(None, [f"worker.actor.model_path={tiny_model_dir}", "distributed.train_ranks=2",
                             'worker.actor.fsdp.enable="off"'])
    with pytest.raises(ConfigError, match="needs FSDP"):
        RayActorGroup(cfg)

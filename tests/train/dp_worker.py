"""One rank of the data-parallel split check (run by test_train_data_parallel.py and
benchmarks/fsdp_equivalence.py).

usage: python dp_worker.py MODEL_DIR MEDIA_DIR OUT_DIR  (env: RANK, WORLD_SIZE, MASTER_ADDR/PORT)

Every rank is handed the same five sequences (two videos, an image, a one-token text answer and
a long text prompt; one video is an offline response) and calls the actor's whole-batch API:
old and reference log-probs, then one ``update`` per case of :data:`CASES` (every aggregation
mode, GSPO with full-vocabulary KL and an entropy bonus, two PPO epochs of three mini-batches
whose last holds one sequence). With two ranks each forwards only its shard. Each rank writes
OUT_DIR/split-world<W>-<precision>-rank<R>.pt: the log-probs, its shard, and per case the update
metrics and (rank 0) the full gradients of the last optimizer step.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

# A token budget (count x longest, padded) that cuts the two ranks' shards into different
# numbers of micro-batches.
BUDGET = 185
CASES: dict[str, list[str]] = {
    "token-mean": ["algorithm.loss_agg_mode=token-mean"],
    "seq-mean-token-mean": ["algorithm.loss_agg_mode=seq-mean-token-mean"],
    "seq-mean-token-sum": ["algorithm.loss_agg_mode=seq-mean-token-sum"],
    "seq-mean-token-sum-norm": ["algorithm.loss_agg_mode=seq-mean-token-sum-norm"],
    "gspo-full-kl-entropy": ["algorithm.policy_loss=gspo", "algorithm.kl.kind=full", "worker.actor.entropy_coef=0.01",
                             "algorithm.loss_agg_mode=seq-mean-token-mean"],
    "two-epochs-three-steps": ["worker.actor.ppo_epochs=2", "worker.actor.mini_batch_size=2"],
}


def overrides(model_dir: str, precision: str) -> list[str]:
    return [f"worker.actor.model_path={model_dir}", "worker.actor.optim.lr=1e-12",
            "worker.actor.optim.max_grad_norm=1e9", "worker.actor.gradient_checkpointing=false",
            f"worker.actor.fsdp.mixed_precision={precision}", "worker.actor.fsdp.enable=auto",
            f"worker.actor.micro_batch_token_budget={BUDGET}",
            "worker.actor.mini_batch_size=16", "algorithm.kl.enable=true", "algorithm.kl.use_as=loss",
            "algorithm.kl.kind=k3", "algorithm.kl.coef=0.1", "algorithm.mix_policy.enable=true",
            # The padded micro-batches this split is built around (the shared layout packs them).
            "worker.actor.shared_prefix=false"]


def split_items(model_dir: str, media_dir: str) -> list:
    """Five sequences of very different shapes (see the module docstring)."""
    from fsdp_worker import build_items

    from easyvideor1.models.inputs import PromptBuilder
    from easyvideor1.train.actor import TrainItem

    items = build_items(model_dir, media_dir)
    items[1].response, items[1].advantages = [11], torch.tensor([0.7])
    items[3].is_offline = True
    question = "Summarise: " + " ".join(f"the square moves {w} frames" for w in range(5))
    long = TrainItem(uid="long", prompt=PromptBuilder.from_pretrained(model_dir).build(question, sample_id="long"),
                     response=[9, 8, 7, 6, 5, 4, 3, 2])
    long.advantages = torch.linspace(-1.0, 1.0, 8)
    return [*items, long]


def perturb_reference(actor, scale: float = 0.05) -> None:
    """Move the reference model off the policy (seeded, the same in every world) so KL terms are
    not 0."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        set_model_state_dict,
    )

    options = StateDictOptions(full_state_dict=True)
    state = get_model_state_dict(actor.ref_model, options=options)
    noise = torch.Generator().manual_seed(5)
    state = {k: v + scale * torch.randn(v.shape, generator=noise).to(v) if v.is_floating_point() else v
             for k, v in sorted(state.items())}
    set_model_state_dict(actor.ref_model, state, options=options)


def run_split_world(world_size: int, model_dir: Path, media: Path, out: Path, *, port: int, precision: str = "fp32",
                    timeout: float = 600) -> list[dict]:
    """Start ``world_size`` ranks of this script; return every rank's saved results (rank order)."""
    from fsdp_worker import launch_world

    launch_world(__file__, [str(model_dir), str(media), str(out)], world_size, port, timeout,
                 EVR1_FSDP_PRECISION=precision)
    return [torch.load(out / f"split-world{world_size}-{precision}-rank{r}.pt", weights_only=False)
            for r in range(world_size)]


def main() -> None:
    model_dir, media_dir, out_dir = sys.argv[1:4]
    from fsdp_worker import full_grads

    from easyvideor1.config import load_config
    from easyvideor1.train.actor import Actor
    from easyvideor1.train.data_parallel import shard_batch
    from easyvideor1.train.distributed import init_world

    world = init_world("auto")
    precision = os.environ.get("EVR1_FSDP_PRECISION", "fp32")
    base = overrides(model_dir, precision)
    cfg = load_config(None, base)
    torch.manual_seed(0)
    actor = Actor(model_dir, cfg.worker.actor, cfg.algorithm, world, total_steps=1, pad_token_id=0,
                  max_response_length=8)
    perturb_reference(actor)
    items = split_items(model_dir, media_dir)
    old = actor.compute_log_probs(items)
    log_prob_shard = dict(actor.last_log_prob_shard)
    ref = actor.compute_log_probs(items, reference=True)
    # Old log-probs off the current ones, so ratios differ from 1 and the clips engage.
    noise = torch.Generator().manual_seed(11)
    for item, lp, ref_lp in zip(items, old, ref):
        item.old_log_probs = lp + 0.3 * torch.randn(len(lp), generator=noise)
        item.ref_log_probs = ref_lp
    shard = shard_batch([it.length for it in items], actor.dp.size)[actor.dp.rank]
    result = {"log_probs": old, "ref_log_probs": ref, "log_prob_shard": log_prob_shard,
              "shard_uids": [items[i].uid for i in shard.indices], "lengths": [it.length for it in items],
              "uids": [it.uid for it in items], "cases": {}}
    for name, extra in CASES.items():
        case = load_config(None, base + extra)
        actor.cfg, actor.algo = case.worker.actor, case.algorithm
        metrics = actor.update(items, seed=3)
        grads = full_grads(actor)
        result["cases"][name] = {"metrics": metrics, "grads": grads if world.rank == 0 else None}
    torch.save(result, Path(out_dir) / f"split-world{world.world_size}-{precision}-rank{world.rank}.pt")
    if world.distributed:
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()

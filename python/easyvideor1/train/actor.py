"""The policy (actor) and the optional reference model: log-probs and the PPO-style update.

With FSDP over several ranks each rank forwards only its shard of the batch (split by tokens,
train/data_parallel.py). Micro-batches are cut by a token budget; every rank runs as many as
the busiest one (the others add zero-weight ones), and every loss term is normalised by the
token/sequence count of the whole mini-batch on all ranks (``global_tokens``/``global_seqs``),
so gradient accumulation and data parallelism give the same update as one big batch.

With ``worker.actor.shared_prefix`` (where :func:`uses_shared_prefix`) the items of a group lay
their prompt out once per micro-batch (models/packing.py ``pack_shared_batch``): groups stay
whole on a rank and in a mini-batch, and every token count that cuts or balances work (micro-
batch budget, shards, ``dp/`` counters) is of tokens as laid out; the loss is unchanged.

A multi-turn item (``TrainItem.trajectory``) is forwarded whole, tool turns and their media
included, so its log-probs (old, reference, current) are those of the full sequence; the loss,
the KL and the entropy, and the token counts that normalise them, cover only its policy tokens.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from easyvideor1.algos import aggregate_loss, compute_kl, compute_policy_loss, kl_full_from_logits
from easyvideor1.algos.policy_loss import policy_loss_per_token
from easyvideor1.cache.refs import MediaRef
from easyvideor1.config.schema import ActorConfig, AlgorithmConfig, RunConfig
from easyvideor1.errors import ConfigError
from easyvideor1.files import share
from easyvideor1.models.checkpointing import make_keep_policy
from easyvideor1.models.forward import ForwardBatch, collate_forward_batch, compute_log_probs, response_logits
from easyvideor1.models.inputs import PromptInputs
from easyvideor1.models.packing import (
    PackedBatch,
    pack_forward_batch,
    pack_shared_batch,
    packed_log_probs,
    packed_response_logits,
)
from easyvideor1.models.response_rows import trajectory_pixels_pending
from easyvideor1.models.trajectory import Trajectory
from easyvideor1.train.actor_group import ActorGroup
from easyvideor1.train.batching import (
    laid_out_costs,
    prompt_keys,
    shared_prefix_microbatches,
    token_budget_microbatches,
)
from easyvideor1.train.data_parallel import DataParallel, RankShard, shard_batch, update_plan
from easyvideor1.train.distributed import World, balanced_vision_calls, should_shard, wrap_fsdp
from easyvideor1.train.schedule import build_scheduler
from easyvideor1.train.vlm import configure_vlm, load_vlm, uses_shared_prefix  # noqa: F401 (configure_vlm: its old home)


@dataclass
class TrainItem:
    """One response of one group, with what the update needs about it."""

    uid: str
    prompt: PromptInputs
    response: list[int]
    # Where the prompt's frames are, for a prompt that travels without pixels (a trainer rank
    # loads them itself, train/media.py PixelSource): videos first, then images, in order.
    media: tuple[MediaRef, ...] = ()
    is_offline: bool = False
    problem_type: str = ""
    advantages: torch.Tensor | None = None  # (len(response),)
    old_log_probs: torch.Tensor | None = None
    ref_log_probs: torch.Tensor | None = None
    # A multi-turn response: ``response`` is then its token_ids (tool turns included).
    trajectory: Trajectory | None = None

    @property
    def length(self) -> int:
        """Tokens forwarded (tool turns included): what micro-batches and shards are cut by."""
        return len(self.prompt.prompt_ids) + len(self.response)

    @property
    def policy_tokens(self) -> int:
        """Response tokens in the loss."""
        return self.trajectory.policy_tokens if self.trajectory is not None else len(self.response)


def _padded(rows: Sequence[torch.Tensor | None], length: int, device: torch.device) -> torch.Tensor:
    out = torch.zeros((len(rows), length), dtype=torch.float32, device=device)
    for i, row in enumerate(rows):
        if row is not None and len(row):
            out[i, : len(row)] = row.to(device=device, dtype=torch.float32)
    return out


class Actor(ActorGroup):
    """The policy (and the reference model when KL is on) in this process, one FSDP rank of ``world``."""

    @classmethod
    def from_config(cls, cfg: RunConfig, world: World, *, pad_token_id: int) -> Actor:
        """The run's actor: the one construction used by the embedded trainer and every Ray rank."""
        actor = cls(cfg.worker.actor.model_path, cfg.worker.actor, cfg.algorithm, world,
                    total_steps=cfg.trainer.total_steps, pad_token_id=pad_token_id,
                    max_response_length=cfg.data.max_response_length)
        actor._pixel_config = cfg
        return actor

    def __init__(self, model_path: str, actor_cfg: ActorConfig, algo_cfg: AlgorithmConfig, world: World, *,
                 total_steps: int, pad_token_id: int, max_response_length: int):
        self.cfg, self.algo, self.world = actor_cfg, algo_cfg, world
        self.pad_token_id = pad_token_id
        self.max_response_length = max_response_length
        self.model = load_vlm(model_path, world.device, trainable=True,
                              gradient_checkpointing=actor_cfg.gradient_checkpointing, cfg=actor_cfg)
        self.shared = uses_shared_prefix(actor_cfg, self.model.config)
        self.sharded = should_shard(actor_cfg.fsdp, world)
        if self.sharded:
            wrap_fsdp(self.model, actor_cfg.fsdp, world)
        # Per micro-batch kept layers from the free memory (None: the fixed keep_activations_* shares).
        self.keep_policy = make_keep_policy(self.model, actor_cfg, world.device)
        # Without FSDP nothing synchronises gradients: every rank then trains on the whole batch.
        rank, size = (world.rank, world.world_size) if self.sharded else (0, 1)
        self.dp = DataParallel(rank, size, world.device)
        self.last_log_prob_shard: dict[str, int] = {}  # what this rank forwarded in the last log-prob call
        if actor_cfg.padding_free and not self.shared and algo_cfg.kl.enable and algo_cfg.kl.kind == "full":
            raise ConfigError("algorithm.kl.kind=full needs padded batches: set worker.actor.padding_free=false")
        self.ref_model = None
        if algo_cfg.kl.enable:
            self.ref_model = load_vlm(model_path, world.device, trainable=False, gradient_checkpointing=False,
                                      cfg=actor_cfg)
            if self.sharded:
                wrap_fsdp(self.ref_model, actor_cfg.fsdp, world)
        optim = actor_cfg.optim
        # Frozen parameters (worker.actor.freeze_vision_tower) get no optimizer state and no decay.
        self.optimizer = torch.optim.AdamW([p for p in self.model.parameters() if p.requires_grad], lr=optim.lr,
                                           betas=tuple(optim.betas), weight_decay=optim.weight_decay)
        self.scheduler = build_scheduler(self.optimizer, warmup_steps=optim.warmup_steps, total_steps=total_steps,
                                         schedule=optim.schedule, min_lr_ratio=optim.min_lr_ratio)

    # ---- forward passes -------------------------------------------------------------------
    _pixel_config: RunConfig | None = None
    _pixels: Any = None

    def _with_pixels(self, items: Sequence[TrainItem]) -> None:
        """Give text-only prompts their pixels (loaded from the frame store by the items' refs),
        and trajectories that travelled without their tool media's pixels theirs (fetched again
        by their media refs); embedded trajectories bring their pixels and pass untouched."""
        if not any(it.prompt.pixels_pending or trajectory_pixels_pending(it.trajectory) for it in items):
            return
        if self._pixels is None:
            if self._pixel_config is None:
                raise ConfigError("a prompt came without pixels, and this actor has no run config to load its "
                                  "frames from (build it with Actor.from_config)")
            from easyvideor1.train.media import PixelSource

            self._pixels = PixelSource.from_config(self._pixel_config)
        for it in items:
            it.prompt = self._pixels.ready(it.prompt, it.media)
            if trajectory_pixels_pending(it.trajectory):
                it.trajectory = self._pixels.ready_trajectory(it.prompt.sample_id, it.trajectory)

    def _collate(self, items: Sequence[TrainItem]) -> ForwardBatch | PackedBatch:
        self._with_pixels(items)
        prompts, responses = [it.prompt for it in items], [it.response for it in items]
        trajectories = [it.trajectory for it in items] if any(it.trajectory is not None for it in items) else None
        if self.shared:
            return pack_shared_batch(prompts, responses, trajectories=trajectories)
        if self.cfg.padding_free:
            return pack_forward_batch(prompts, responses, trajectories=trajectories)
        return collate_forward_batch(prompts, responses, pad_token_id=self.pad_token_id, trajectories=trajectories)

    def _log_probs(self, model: Any, batch: ForwardBatch | PackedBatch, *, with_entropy: bool = True) -> Any:
        if isinstance(batch, PackedBatch):
            return packed_log_probs(model, batch, with_entropy=with_entropy)
        return compute_log_probs(model, batch, with_entropy=with_entropy)

    def _logits(self, model: Any, batch: ForwardBatch | PackedBatch) -> torch.Tensor:
        return packed_response_logits(model, batch) if isinstance(batch, PackedBatch) else response_logits(model, batch)

    def _micro_batches(self, items: Sequence[TrainItem]) -> list[list[int]]:
        if self.shared:
            return shared_prefix_microbatches([len(it.prompt.prompt_ids) for it in items],
                                              [len(it.response) for it in items], prompt_keys(items),
                                              self.cfg.micro_batch_token_budget)
        return token_budget_microbatches([it.length for it in items], self.cfg.micro_batch_token_budget,
                                         packed=self.cfg.padding_free)

    def _costs(self, items: Sequence[TrainItem]) -> list[int]:
        return laid_out_costs(items, self.shared)

    @torch.no_grad()
    def compute_log_probs(self, items: Sequence[TrainItem], *, reference: bool = False) -> list[torch.Tensor]:
        """Per item, the log-probs of its response tokens under the policy (or the reference).

        Every rank passes the whole batch; each forwards its shard and all get every row back,
        in the order of ``items``."""
        if self.dp.size == 1:
            return self.compute_log_probs_shard(items, reference=reference)
        costs, uids = self._costs(items), [it.uid for it in items]
        self.dp.check_same_batch(costs, uids)
        mine = shard_batch(costs, self.dp.size, keys=uids if self.shared else None)[self.dp.rank]
        rows = self.compute_log_probs_shard([items[i] for i in mine.indices], filler=items[mine.filler],
                                            reference=reference)
        return self.dp.share_rows([len(it.response) for it in items], dict(zip(mine.indices, rows)))

    @torch.no_grad()
    def compute_log_probs_shard(self, items: Sequence[TrainItem], *, filler: TrainItem | None = None,
                                reference: bool = False) -> list[torch.Tensor]:
        """Log-probs of this rank's shard. Every rank runs as many forwards as the rank with the
        most micro-batches: the others repeat ``filler`` (default: their shortest item) and drop
        the result, so the FSDP all-gathers stay in step."""
        model = self.ref_model if reference else self.model
        if model is None:
            raise ValueError("no reference model: algorithm.kl.enable is false")
        was_training = model.training
        model.eval()
        groups = self._micro_batches(items)
        total = int(self.dp.gather([len(groups)])[:, 0].max())
        padding = [self._filler(items, filler)] * (total - len(groups)) if total > len(groups) else []
        out: list[torch.Tensor | None] = [None] * len(items)
        for members, indices in [([items[i] for i in g], g) for g in groups] + [([p], None) for p in padding]:
            batch = self._to_device(self._collate(members))
            with self._forward_context(model, batch):
                log_probs, _ = self._log_probs(model, batch, with_entropy=False)
            for row, index in enumerate(indices or []):
                out[index] = log_probs[row, : len(items[index].response)].detach().float().cpu()
        self.last_log_prob_shard = {"sequences": len(items), "tokens": sum(self._costs(items)),
                                    "micro_batches": len(groups), "padding_micro_batches": len(padding)}
        if was_training:
            model.train()
        return out  # type: ignore[return-value]

    def _filler(self, items: Sequence[TrainItem], filler: TrainItem | None) -> TrainItem:
        """The input of a padding micro-batch: a real sequence, with zero advantages so that its
        (zero-weighted) loss stays finite."""
        base = filler if filler is not None else (min(items, key=lambda it: it.length) if items else None)
        if base is None:
            raise ValueError("a rank without sequences needs a filler item for its padding micro-batches")
        return replace(base, advantages=torch.zeros(len(base.response)))

    @contextlib.contextmanager
    def _forward_context(self, model: Any, batch: ForwardBatch | PackedBatch) -> Any:
        """Every forward runs in here. Dummy vision calls first: every rank then makes the same
        sequence of calls (vision, vision, language model), whatever modalities its
        micro-batch holds. An unsharded model on a GPU computes in bf16 under autocast, as
        FSDP's mixed-precision policy makes a sharded one do: without it one GPU ran the
        update in fp32, 7.9x slower than two GPUs in bf16 (benchmarks/gpu_dp_scaling.py)."""
        with contextlib.ExitStack() as stack:
            if not self.sharded and self.world.device.type == "cuda" and self.cfg.fsdp.mixed_precision == "bf16":
                stack.enter_context(torch.autocast("cuda", dtype=torch.bfloat16))
            yield stack.enter_context(balanced_vision_calls(
                model, "pixel_values" in batch.visual, "pixel_values_videos" in batch.visual, enabled=self.sharded))

    def _to_device(self, batch: ForwardBatch | PackedBatch) -> ForwardBatch | PackedBatch:
        device = self.world.device
        if device.type == "cpu":
            return batch
        if isinstance(batch, PackedBatch):
            return batch.to(device)
        batch.input_ids = batch.input_ids.to(device)
        batch.attention_mask = batch.attention_mask.to(device)
        batch.position_ids = batch.position_ids.to(device)
        batch.mm_token_type_ids = batch.mm_token_type_ids.to(device)
        batch.response_mask = batch.response_mask.to(device)
        batch.loss_mask = batch.loss_mask.to(device)
        batch.visual = {k: v.to(device) for k, v in batch.visual.items()}
        return batch

    # ---- the update -----------------------------------------------------------------------
    def update(self, items: Sequence[TrainItem], *, seed: int) -> dict[str, float]:
        """PPO epochs over shuffled mini-batches; one optimizer step per mini-batch. Every rank
        passes the whole batch and trains on its share of each mini-batch (data_parallel.py)."""
        costs, uids = self._costs(items), [it.uid for it in items]
        self.dp.check_same_batch(costs, uids)
        plan = update_plan(costs, uids, seed=seed, ppo_epochs=self.cfg.ppo_epochs,
                           mini_batch_size=self.cfg.mini_batch_size, world_size=self.dp.size,
                           whole_groups=self.shared)
        return self.run_update(items, [step[self.dp.rank] for step in plan])

    def run_update(self, items: Sequence[TrainItem], steps: Sequence[RankShard]) -> dict[str, float]:
        """This rank's part of an :func:`update_plan` (positions into ``items``), then the
        scheduler step. Metrics are over all ranks: optimizer-step means, except the ``dp/``
        counters (sums)."""
        self.model.train()
        sums: dict[str, float] = {}
        counts: dict[str, int] = {}
        skipped = 0
        for step in steps:
            stats = self._optimizer_step([items[i] for i in step.indices], filler=items[step.filler])
            if stats.pop("skipped", 0.0):
                skipped += 1
            for key, value in stats.items():
                sums[key] = sums.get(key, 0.0) + float(value)
                counts[key] = counts.get(key, 0) + 1
        self.scheduler.step()
        metrics = {k: v if k.startswith("dp/") else v / counts[k] for k, v in sums.items()}
        metrics["actor/lr"] = self.scheduler.get_last_lr()[0]
        metrics["actor/skipped_updates"] = float(skipped)
        return metrics

    def _optimizer_step(self, shard: Sequence[TrainItem], *, filler: TrainItem | None = None) -> dict[str, float]:
        """One optimizer step; ``shard`` is this rank's part of the mini-batch.

        Loss terms are normalised by the mini-batch's token/sequence counts over all ranks and
        multiplied by the rank count (FSDP averages gradients), so the gradient equals one rank's
        on the whole mini-batch. Ranks with fewer micro-batches run zero-weight ones."""
        lengths = [it.policy_tokens for it in shard]  # the loss's token count: tool turns excluded
        groups = self._micro_batches(shard)
        rows = self.dp.gather([sum(lengths), sum(1 for n in lengths if n > 0), len(groups), len(shard),
                               sum(self._costs(shard))])
        total = int(rows[:, 2].max())
        agg = {"global_tokens": float(rows[:, 0].sum()), "global_seqs": float(rows[:, 1].sum()),
               "loss_scale_factor": self.max_response_length, "dp_size": self.dp.size}
        self.optimizer.zero_grad(set_to_none=True)
        parts: dict[str, float] = {}
        micro = [([shard[i] for i in g], 1.0) for g in groups]
        if total > len(groups):
            micro += [([self._filler(shard, filler)], 0.0)] * (total - len(groups))
        for members, weight in micro:
            for key, value in self._micro_step(members, agg, weight=weight).items():
                parts[key] = parts.get(key, 0.0) + value
        parts = self.dp.sum(parts)
        tokens = parts.pop("_tokens", 0.0)
        offline_seqs, offline, magnitude = (parts.pop(k, 0.0) for k in ("_offline_seqs", "_offline", "_magnitude"))
        stats = {k: v if k in ("actor/pg_loss", "actor/kl_loss") else v / max(tokens, 1.0) for k, v in parts.items()}
        if offline_seqs:
            stats["mix_policy/offline_loss_share"] = offline / magnitude if magnitude > 0 else 0.0
        for rank, (_, _, n_micro, n_seqs, n_tokens) in enumerate(rows.tolist()):
            stats.update({f"dp/rank{rank}/sequences": n_seqs, f"dp/rank{rank}/tokens": n_tokens,
                          f"dp/rank{rank}/micro_batches": n_micro,
                          f"dp/rank{rank}/padding_micro_batches": total - n_micro})
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.optim.max_grad_norm)
        grad_norm = float(grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm)
        stats["actor/grad_norm"] = grad_norm
        if not math.isfinite(grad_norm) and self.cfg.skip_nonfinite_updates:
            self.optimizer.zero_grad(set_to_none=True)
            stats["skipped"] = 1.0
            return stats
        self.optimizer.step()
        return stats

    def _micro_step(self, members: Sequence[TrainItem], agg: dict[str, Any], *, weight: float) -> dict[str, float]:
        """Forward and backward of one micro-batch; its loss, metric numerators (x tokens) and
        offline-share parts, all x ``weight`` (0 for a padding micro-batch: same collectives,
        no gradient, no metric)."""
        algo, device, dp = self.algo, self.world.device, self.dp.size
        batch = self._to_device(self._collate(members))
        length = batch.response_length
        mask = batch.loss_mask.to(device)  # the policy's tokens: tool turns are out of every loss term
        old = _padded([m.old_log_probs for m in members], length, device)
        adv = _padded([m.advantages for m in members], length, device)
        use_full_kl = algo.kl.enable and algo.kl.use_as == "loss" and algo.kl.kind == "full"
        if self.keep_policy is not None:
            self.keep_policy.before(batch)
        with self._forward_context(self.model, batch) as balance:
            if use_full_kl:
                logits = self._logits(self.model, batch)
                log_softmax = torch.log_softmax(logits, dim=-1)
                log_probs = torch.gather(log_softmax, -1, batch.responses.to(device).unsqueeze(-1)).squeeze(-1)
                entropy = -(log_softmax.exp() * log_softmax).sum(-1)
            else:
                log_probs, entropy = self._log_probs(self.model, batch)
        offline = torch.tensor([m.is_offline for m in members], device=device)
        offline_loss = algo.mix_policy.offline_loss if algo.mix_policy.enable else "policy"
        pg_loss, pg_metrics = compute_policy_loss(
            algo.policy_loss, old, log_probs, adv, mask, loss_agg_mode=algo.loss_agg_mode,
            clip_ratio_low=algo.clip_ratio_low, clip_ratio_high=algo.clip_ratio_high,
            clip_ratio_dual=algo.clip_ratio_dual, entropies=entropy, offline=offline, offline_loss=offline_loss,
            **agg,
        )
        loss = pg_loss
        out: dict[str, float] = {}
        if algo.kl.enable and algo.kl.use_as == "loss":
            if use_full_kl:
                with torch.no_grad(), self._forward_context(self.ref_model, batch):
                    ref_logits = self._logits(self.ref_model, batch)
                kl = kl_full_from_logits(logits, ref_logits)
            else:
                ref = _padded([m.ref_log_probs for m in members], length, device)
                kl = compute_kl(algo.kl.kind, log_probs, ref)
            kl_loss = aggregate_loss(kl, mask, algo.loss_agg_mode, **agg)
            loss = loss + algo.kl.coef * kl_loss
            out["actor/kl_loss"] = float(kl_loss.detach()) / dp * weight if weight else 0.0
        if self.cfg.entropy_coef > 0:
            loss = loss - self.cfg.entropy_coef * aggregate_loss(entropy, mask, algo.loss_agg_mode, **agg)
        for term in balance:
            loss = loss + term
        (loss if weight == 1.0 else loss * weight).backward()
        if self.keep_policy is not None:
            self.keep_policy.after()
        tokens = float(mask.sum()) * weight
        out["_tokens"] = tokens
        out["actor/pg_loss"] = float(pg_loss.detach()) / dp * weight if weight else 0.0
        for key, value in pg_metrics.items():
            out[f"actor/{key}"] = float(value) * tokens if weight else 0.0
        out["_offline_seqs"] = out["_offline"] = out["_magnitude"] = 0.0
        if weight and algo.mix_policy.enable:
            # Loss magnitude per row, summed over all ranks: the offline share of the whole mini-batch.
            with torch.no_grad():
                per_token, _ = policy_loss_per_token(
                    algo.policy_loss, old, log_probs.detach(), adv, mask, clip_ratio_low=algo.clip_ratio_low,
                    clip_ratio_high=algo.clip_ratio_high, clip_ratio_dual=algo.clip_ratio_dual, offline=offline,
                    offline_loss=offline_loss)
                magnitude = torch.where(mask.bool(), per_token.abs(), torch.zeros_like(per_token)).sum(-1)
            offline = offline.to(magnitude.device)
            out["_offline_seqs"] = float(offline.sum())
            out["_offline"], out["_magnitude"] = float(magnitude[offline].sum()), float(magnitude.sum())
        return out

    # ---- weights --------------------------------------------------------------------------
    def full_state_dict(self, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
        """Unsharded CPU weights in Hugging Face names: float32 for checkpoints, or, with ``dtype``
        (the engine's, for a weight push), floating tensors cast on the device before the host copy:
        a bf16 engine's copy crosses PCIe at half the bytes and needs no cast on the CPU.

        Sharded, only rank 0 receives the values (as DCP's ``cpu_offload`` gather does).
        """
        if self.sharded:
            from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

            if dtype is None:
                options = StateDictOptions(full_state_dict=True, cpu_offload=True)
                return get_model_state_dict(self.model, options=options)
            # One full tensor on the device at a time (all ranks gather in the same order).
            sharded = get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=False))
            out = {}
            for name, value in sharded.items():
                full = value.full_tensor() if hasattr(value, "full_tensor") else value
                host = _to_host(full, dtype)
                if self.world.rank == 0:
                    out[name] = host
            return out
        return {k: _to_host(v, dtype) for k, v in self.model.state_dict().items()}

    def load_full_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        if self.sharded:
            from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

            set_model_state_dict(self.model, state, options=StateDictOptions(full_state_dict=True))
        else:
            missing, unexpected = self.model.load_state_dict(state, strict=False)
            real_missing = [k for k in missing if not k.endswith("lm_head.weight")]
            if real_missing or unexpected:
                raise ValueError(f"checkpoint does not fit the model: missing {real_missing[:5]}, "
                                 f"unexpected {unexpected[:5]}")

    def trainer_state(self) -> dict[str, Any]:
        if self.sharded:
            from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

            optim_state = get_optimizer_state_dict(self.model, self.optimizer,
                                                   options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        else:
            optim_state = self.optimizer.state_dict()
        return {"optimizer": optim_state, "scheduler": self.scheduler.state_dict()}

    def load_trainer_state(self, state: dict[str, Any]) -> None:
        # Both layouts list each group's parameters (ids, or names when sharded); the same count on
        # every rank, so all ranks refuse together before any collective.
        saved = sum(len(group["params"]) for group in state["optimizer"]["param_groups"])
        trained = sum(len(group["params"]) for group in self.optimizer.param_groups)
        if saved != trained:
            raise ConfigError(f"the checkpoint's optimizer trains {saved} parameter tensors, this actor {trained}: "
                              "resume with the worker.actor.freeze_vision_tower it was saved with")
        if self.sharded:
            from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

            set_optimizer_state_dict(self.model, self.optimizer, state["optimizer"],
                                     options=StateDictOptions(full_state_dict=True))
        else:
            self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])

    def export_hf(self, out_dir: str | Path, processor: Any) -> Path:
        """A Hugging Face model directory loadable by transformers and vLLM."""
        out = Path(out_dir)
        state = self.full_state_dict()
        if self.world.is_main:
            out.mkdir(parents=True, exist_ok=True)
            unwrapped = self.model
            unwrapped.save_pretrained(out, state_dict={k: v.clone() for k, v in state.items()})
            processor.save_pretrained(out)
            share(out)  # safetensors writes the weights 0600 whatever the umask
        return out


def _to_host(tensor: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    tensor = tensor.detach()
    if dtype is not None and tensor.is_floating_point() and tensor.dtype != dtype:
        tensor = tensor.to(dtype)
    return tensor.to("cpu")

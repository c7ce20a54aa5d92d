"""The policy (actor) and the optional reference model: log-probs and the PPO-style update.

Micro-batches are cut by a token budget; every loss term is normalised by the token/sequence
count of the whole mini-batch on all ranks (``global_tokens``/``global_seqs``), so gradient
accumulation and data parallelism give the same update as one big batch.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from easyvideor1.algos import aggregate_loss, compute_kl, compute_policy_loss, kl_full_from_logits
from easyvideor1.algos.mix_policy import offline_loss_share
from easyvideor1.algos.policy_loss import policy_loss_per_token
from easyvideor1.config.schema import ActorConfig, AlgorithmConfig
from easyvideor1.errors import ConfigError
from easyvideor1.models.checkpointing import keep_activations
from easyvideor1.models.forward import ForwardBatch, collate_forward_batch, compute_log_probs
from easyvideor1.models.inputs import PromptInputs
from easyvideor1.models.packing import PackedBatch, pack_forward_batch, packed_log_probs
from easyvideor1.train.batching import global_count, token_budget_microbatches
from easyvideor1.train.distributed import World, all_reduce_mean, should_shard, vision_call_balance, wrap_fsdp
from easyvideor1.train.schedule import build_scheduler


@dataclass
class TrainItem:
    """One response of one group, with what the update needs about it."""

    uid: str
    prompt: PromptInputs
    response: list[int]
    is_offline: bool = False
    problem_type: str = ""
    advantages: torch.Tensor | None = None  # (len(response),)
    old_log_probs: torch.Tensor | None = None
    ref_log_probs: torch.Tensor | None = None

    @property
    def length(self) -> int:
        return len(self.prompt.prompt_ids) + len(self.response)


def load_vlm(model_path: str, device: torch.device, *, trainable: bool, gradient_checkpointing: bool,
             cfg: ActorConfig | None = None) -> Any:
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(model_path, dtype=torch.float32)
    return configure_vlm(model, cfg or ActorConfig(), device, trainable=trainable,
                         gradient_checkpointing=gradient_checkpointing)


def configure_vlm(model: Any, cfg: ActorConfig, device: torch.device, *, trainable: bool,
                  gradient_checkpointing: bool) -> Any:
    """Attention implementation, (selective) checkpointing and compilation per the actor config."""
    from easyvideor1.models import attention

    if cfg.padding_free and cfg.attention == "sdpa":
        raise ConfigError("worker.actor.padding_free needs the packed attention (attention: auto or packed)")
    if cfg.attention == "packed" or cfg.padding_free or (cfg.attention == "auto" and device.type == "cuda"):
        model.config._attn_implementation = attention.register()
        attention.use_packed_attention(model)
    model.config.use_cache = False
    if trainable and gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        keep_activations(model, lm_fraction=cfg.keep_activations_lm, vision_fraction=cfg.keep_activations_vision)
    if cfg.compile:
        from transformers.modeling_layers import GradientCheckpointingLayer

        for layer in model.modules():
            if isinstance(layer, GradientCheckpointingLayer):
                layer.compile()  # layers of one kind share their compiled graph
    if not trainable:
        model.requires_grad_(False)
        model.eval()
    else:
        model.train()
    return model.to(device)


def _padded(rows: Sequence[torch.Tensor | None], length: int, device: torch.device) -> torch.Tensor:
    out = torch.zeros((len(rows), length), dtype=torch.float32, device=device)
    for i, row in enumerate(rows):
        if row is not None and len(row):
            out[i, : len(row)] = row.to(device=device, dtype=torch.float32)
    return out


def response_logits(model: Any, batch: ForwardBatch) -> torch.Tensor:
    """Float32 logits that predict each response position, ``(B, R, V)`` (for full-vocabulary KL)."""
    resp = batch.response_length
    out = model(**batch.model_kwargs(), use_cache=False, logits_to_keep=resp + 1)
    return out.logits[:, -(resp + 1):-1, :].float()


class Actor:
    def __init__(self, model_path: str, actor_cfg: ActorConfig, algo_cfg: AlgorithmConfig, world: World, *,
                 total_steps: int, pad_token_id: int, max_response_length: int):
        self.cfg, self.algo, self.world = actor_cfg, algo_cfg, world
        self.pad_token_id = pad_token_id
        self.max_response_length = max_response_length
        self.model = load_vlm(model_path, world.device, trainable=True,
                              gradient_checkpointing=actor_cfg.gradient_checkpointing, cfg=actor_cfg)
        self.sharded = should_shard(actor_cfg.fsdp, world)
        if self.sharded:
            wrap_fsdp(self.model, actor_cfg.fsdp, world)
        if actor_cfg.padding_free and algo_cfg.kl.enable and algo_cfg.kl.kind == "full":
            raise ConfigError("algorithm.kl.kind=full needs padded batches: set worker.actor.padding_free=false")
        self.ref_model = None
        if algo_cfg.kl.enable:
            self.ref_model = load_vlm(model_path, world.device, trainable=False, gradient_checkpointing=False,
                                      cfg=actor_cfg)
            if self.sharded:
                wrap_fsdp(self.ref_model, actor_cfg.fsdp, world)
        optim = actor_cfg.optim
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=optim.lr, betas=tuple(optim.betas),
                                           weight_decay=optim.weight_decay)
        self.scheduler = build_scheduler(self.optimizer, warmup_steps=optim.warmup_steps, total_steps=total_steps,
                                         schedule=optim.schedule, min_lr_ratio=optim.min_lr_ratio)

    # ---- forward passes -------------------------------------------------------------------
    def _collate(self, items: Sequence[TrainItem]) -> ForwardBatch | PackedBatch:
        prompts, responses = [it.prompt for it in items], [it.response for it in items]
        if self.cfg.padding_free:
            return pack_forward_batch(prompts, responses)
        return collate_forward_batch(prompts, responses, pad_token_id=self.pad_token_id)

    def _log_probs(self, model: Any, batch: ForwardBatch | PackedBatch, *, with_entropy: bool = True) -> Any:
        if isinstance(batch, PackedBatch):
            return packed_log_probs(model, batch, with_entropy=with_entropy)
        return compute_log_probs(model, batch, with_entropy=with_entropy)

    def _micro_batches(self, items: Sequence[TrainItem]) -> list[list[int]]:
        return token_budget_microbatches([it.length for it in items], self.cfg.micro_batch_token_budget,
                                         packed=self.cfg.padding_free)

    @torch.no_grad()
    def compute_log_probs(self, items: Sequence[TrainItem], *, reference: bool = False) -> list[torch.Tensor]:
        """Per item, the log-probs of its response tokens under the policy (or the reference)."""
        model = self.ref_model if reference else self.model
        if model is None:
            raise ValueError("no reference model: algorithm.kl.enable is false")
        was_training = model.training
        model.eval()
        out: list[torch.Tensor | None] = [None] * len(items)
        for group in self._micro_batches(items):
            batch = self._collate([items[i] for i in group])
            log_probs, _ = self._log_probs(model, self._to_device(batch), with_entropy=False)
            for row, index in enumerate(group):
                out[index] = log_probs[row, : len(items[index].response)].detach().float().cpu()
        if was_training:
            model.train()
        return out  # type: ignore[return-value]

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
        batch.visual = {k: v.to(device) for k, v in batch.visual.items()}
        return batch

    # ---- the update -----------------------------------------------------------------------
    def update(self, items: Sequence[TrainItem], *, seed: int) -> dict[str, float]:
        """PPO epochs over shuffled mini-batches; one optimizer step per mini-batch."""
        cfg = self.cfg
        self.model.train()
        group_size = max(1, len(items) // max(1, len({it.uid for it in items})))
        per_minibatch = cfg.mini_batch_size * group_size
        sums: dict[str, float] = {}
        counts: dict[str, int] = {}

        def add(name: str, value: float) -> None:
            sums[name] = sums.get(name, 0.0) + float(value)
            counts[name] = counts.get(name, 0) + 1

        rng = random.Random(seed)
        skipped = 0
        for _epoch in range(cfg.ppo_epochs):
            order = list(range(len(items)))
            rng.shuffle(order)
            for start in range(0, len(order), per_minibatch):
                mini = [items[i] for i in order[start:start + per_minibatch]]
                stats = self._optimizer_step(mini)
                if stats.pop("skipped", 0.0):
                    skipped += 1
                for key, value in stats.items():
                    add(key, value)
        self.scheduler.step()
        metrics = {k: sums[k] / counts[k] for k in sums}
        metrics = all_reduce_mean(metrics, self.world)
        metrics["actor/lr"] = self.scheduler.get_last_lr()[0]
        metrics["actor/skipped_updates"] = float(skipped)
        return metrics

    def _optimizer_step(self, mini: Sequence[TrainItem]) -> dict[str, float]:
        algo = self.algo
        lengths = [len(it.response) for it in mini]
        local_tokens = sum(lengths)
        local_seqs = sum(1 for n in lengths if n > 0)
        device = self.world.device
        global_tokens = global_count(local_tokens, device)
        global_seqs = global_count(local_seqs, device)
        dp = self.world.world_size if self.sharded else 1
        agg = {"global_tokens": global_tokens, "global_seqs": global_seqs,
               "loss_scale_factor": self.max_response_length, "dp_size": dp}
        self.optimizer.zero_grad(set_to_none=True)
        stats: dict[str, float] = {}
        weight_sum = 0.0
        for group in self._micro_batches(mini):
            members = [mini[i] for i in group]
            batch = self._to_device(self._collate(members))
            length = batch.response_length
            mask = batch.response_mask.to(device)
            old = _padded([m.old_log_probs for m in members], length, device)
            adv = _padded([m.advantages for m in members], length, device)
            # Dummy vision calls first: every rank then makes the same sequence of calls (vision,
            # vision, language model), whatever modalities its micro-batch holds.
            balance = vision_call_balance(self.model, "pixel_values" in batch.visual,
                                          "pixel_values_videos" in batch.visual)
            use_full_kl = algo.kl.enable and algo.kl.use_as == "loss" and algo.kl.kind == "full"
            if use_full_kl:
                logits = response_logits(self.model, batch)
                log_softmax = torch.log_softmax(logits, dim=-1)
                log_probs = torch.gather(log_softmax, -1, batch.responses.to(device).unsqueeze(-1)).squeeze(-1)
                entropy = -(log_softmax.exp() * log_softmax).sum(-1)
            else:
                log_probs, entropy = self._log_probs(self.model, batch)
            pg_loss, pg_metrics = compute_policy_loss(
                algo.policy_loss, old, log_probs, adv, mask, loss_agg_mode=algo.loss_agg_mode,
                clip_ratio_low=algo.clip_ratio_low, clip_ratio_high=algo.clip_ratio_high,
                clip_ratio_dual=algo.clip_ratio_dual, entropies=entropy, **agg,
            )
            loss = pg_loss
            if algo.kl.enable and algo.kl.use_as == "loss":
                if use_full_kl:
                    with torch.no_grad():
                        ref_logits = response_logits(self.ref_model, batch)
                    kl = kl_full_from_logits(logits, ref_logits)
                else:
                    ref = _padded([m.ref_log_probs for m in members], length, device)
                    kl = compute_kl(algo.kl.kind, log_probs, ref)
                kl_loss = aggregate_loss(kl, mask, algo.loss_agg_mode, **agg)
                loss = loss + algo.kl.coef * kl_loss
                stats["actor/kl_loss"] = stats.get("actor/kl_loss", 0.0) + float(kl_loss.detach()) / dp
            if self.cfg.entropy_coef > 0:
                loss = loss - self.cfg.entropy_coef * aggregate_loss(entropy, mask, algo.loss_agg_mode, **agg)
            if balance is not None:
                loss = loss + balance
            loss.backward()
            tokens = float(mask.sum())
            weight_sum += tokens
            stats["actor/pg_loss"] = stats.get("actor/pg_loss", 0.0) + float(pg_loss.detach()) / dp
            for key, value in pg_metrics.items():
                stats[f"actor/{key}"] = stats.get(f"actor/{key}", 0.0) + float(value) * tokens
            if any(m.is_offline for m in members):
                with torch.no_grad():
                    per_token, _ = policy_loss_per_token(
                        algo.policy_loss, old, log_probs.detach(), adv, mask, clip_ratio_low=algo.clip_ratio_low,
                        clip_ratio_high=algo.clip_ratio_high, clip_ratio_dual=algo.clip_ratio_dual)
                    share = offline_loss_share(per_token, mask, [m.is_offline for m in members])
                stats["mix_policy/offline_loss_share"] = float(share)
        for key in list(stats):
            if key.startswith("actor/") and key not in ("actor/pg_loss", "actor/kl_loss"):
                stats[key] /= max(weight_sum, 1.0)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.optim.max_grad_norm)
        grad_norm = float(grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm)
        stats["actor/grad_norm"] = grad_norm
        if not math.isfinite(grad_norm) and self.cfg.skip_nonfinite_updates:
            self.optimizer.zero_grad(set_to_none=True)
            stats["skipped"] = 1.0
            return stats
        self.optimizer.step()
        return stats

    # ---- weights --------------------------------------------------------------------------
    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """Unsharded float32 CPU weights in Hugging Face names (for the engine and checkpoints)."""
        if self.sharded:
            from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

            return get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        return {k: v.detach().to("cpu") for k, v in self.model.state_dict().items()}

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
        return out

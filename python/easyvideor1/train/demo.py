"""``make demo``: a tiny VLM learns synthetic video tasks with GRPO on a CPU in minutes.

Steps: build a tiny random-weight Qwen2.5-VL, generate the demo task set (a big square's
colour as yes/no and as multiple choice; when it is on screen as temporal grounding), build
its frame cache, measure the untrained policy, train with GRPO + mix-policy, measure again,
and print before/after accuracy per task type next to chance, with the curves' PNG path.

The cold-start evidence: before training, the policy never writes a parseable interval, so
every n-sample group on the grounding task scores a constant 0 and GRPO's advantage is 0
everywhere (pure on-policy RL has no gradient to start from). Mix-policy puts one offline
trajectory in each group, which gives the group a non-zero advantage, and the task is learned.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from easyvideor1.config import RunConfig, load_config
from easyvideor1.logging import get_logger

log = get_logger(__name__)

DEMO_TYPES = ("demo_colour", "demo_choice", "demo_when")
# Exact chance of each task's accuracy for a policy that ignores the video.
CHANCE = {"boolean": 0.5, "multiple choice": 1 / 3, "temporal grounding": None}


@dataclass
class DemoSettings:
    out_dir: Path
    family: str = "qwen2_5_vl"
    n_per_type: int = 40
    steps: int = 80
    group_size: int = 8
    batch_questions: int = 8
    lr: float = 1e-3
    ppo_epochs: int = 2
    offline_fraction: float = 1.0
    seed: int = 0
    distributed: bool = False  # rollouts on the `evr1 up` cluster (queue, pool, services)


# A two-layer model cannot read instructions: the demo's prompts are just the question (and
# options), which keeps prompts short and steps fast. Real runs use the shipped templates.
DEMO_TEMPLATES = {
    "boolean.j2": "{{ problem }}",
    "multiple_choice.j2": "{{ problem }}{% for option in labeled_options %}\n{{ option }}{% endfor %}",
    "temporal_grounding.j2": "{{ problem }}",
}


def demo_config(settings: DemoSettings, data_dir: Path, model_dir: Path) -> RunConfig:
    out = settings.out_dir
    overrides = [
        f"data.train_files={data_dir / 'train.jsonl'}", f"data.val_files={data_dir / 'val.jsonl'}",
        "data.max_prompt_length=1024", "data.max_response_length=20",
        f"data.rollout_batch_size={settings.batch_questions}", "data.val_batch_size=64",
        "data.video_fps=4", "data.video_max_frames=8", "data.video_min_frames=4",
        "data.video_min_pixels=3136", "data.video_max_pixels=3136", "data.image_max_pixels=3136",
        "data.image_min_pixels=784",
        "data.frame_cache.workers=2",
        f"data.prompt_template_dir={out / 'prompts'}",
        "algorithm.adv_estimator=grpo", "algorithm.mix_policy.enable=true",
        # Every response weighs the same, so a short offline answer is not outvoted by long samples.
        "algorithm.loss_agg_mode=seq-mean-token-mean",
        f"worker.actor.model_path={model_dir}", f"worker.actor.optim.lr={settings.lr}",
        "worker.actor.optim.weight_decay=0.0", "worker.actor.gradient_checkpointing=false",
        # At lr 1e-3 a constant rate let temporal grounding reach tIoU 0.66 by step 52 and
        # collapse to 0.08 by step 80; decaying it keeps what was learnt.
        "worker.actor.optim.schedule=cosine", "worker.actor.optim.min_lr_ratio=0.1",
        f"worker.actor.mini_batch_size={max(1, settings.batch_questions // 2)}",
        f"worker.actor.ppo_epochs={settings.ppo_epochs}", "worker.actor.micro_batch_token_budget=16384",
        f"worker.rollout.n={settings.group_size}", f"worker.rollout.seed={settings.seed}",
        f"trainer.total_steps={settings.steps}", f"trainer.val_every={max(1, settings.steps // 3)}",
        f"trainer.output_dir={out / 'run'}", "trainer.loggers=[console,jsonl,tensorboard]",
        "trainer.resume=never", f"trainer.seed={settings.seed}",
    ]
    if settings.distributed:
        # The cluster's frame-cache service (from `evr1 up`) is the store, shared with the pool.
        overrides.append("distributed.mode=distributed")
    else:
        overrides.append(f"data.frame_cache.store={out / 'frame-cache'}")
    return load_config(None, overrides)


def cold_start_probe(trainer: Any, problem_type: str) -> dict[str, float]:
    """Sample n responses per question of one task from the current policy (no mix-policy):
    in how many groups do the responses differ in accuracy at all? Only those can teach the
    task to on-policy GRPO (the rest can at most teach the 0.1-weighted answer tag)."""
    from easyvideor1.config.schema import MixPolicyConfig

    samples = [s for s in trainer.train_set if s.problem_type == problem_type]
    result = trainer.stage.run(samples, n=trainer.cfg.worker.rollout.n, sampling=trainer._sampling(),
                               mix=MixPolicyConfig(), uid_prefix="probe")
    informative = sum(1 for g in result.groups if len({round(v, 9) for v in g.values("accuracy")}) > 1)
    return {"groups": len(result.groups), "informative_groups": informative,
            "mean_accuracy": sum(sum(g.values("accuracy")) for g in result.groups)
            / max(1, sum(len(g.rewards) for g in result.groups))}


def run_demo(settings: DemoSettings) -> dict[str, Any]:
    from easyvideor1.data.synth import generate_synthetic
    from easyvideor1.models.tiny import build_tiny_model
    from easyvideor1.train.trainer import RLTrainer

    started = time.perf_counter()
    out = settings.out_dir
    out.mkdir(parents=True, exist_ok=True)
    model_dir = out / f"tiny-{settings.family}"
    if not (model_dir / "config.json").exists():
        build_tiny_model(settings.family, model_dir, seed=settings.seed)
    print(f"[demo] tiny model: {model_dir}", flush=True)
    data_dir = out / "data"
    report = generate_synthetic(data_dir, settings.n_per_type, seed=settings.seed, types=list(DEMO_TYPES),
                                offline_type=list(DEMO_TYPES), offline_fraction=settings.offline_fraction,
                                offline_reasoning=False, val_fraction=0.25, progress=False)
    (out / "prompts").mkdir(exist_ok=True)
    for name, text in DEMO_TEMPLATES.items():
        (out / "prompts" / name).write_text(text)
    print(f"[demo] data: {report.summary()}", flush=True)

    cfg = demo_config(settings, data_dir, model_dir)
    trainer = RLTrainer.from_config(cfg)
    try:
        store = trainer.loader.store
        if store is not None:
            report = store.stats()
            print(f"[demo] frame cache {report.url}: {report.count} blobs, {report.bytes / 2**20:.1f} MiB "
                  f"(every video and image of the train and val sets, decoded once)", flush=True)
        probe = cold_start_probe(trainer, "temporal grounding")
        print(f"[demo] cold start, untrained policy on temporal grounding: {probe['informative_groups']} of "
              f"{probe['groups']} groups of {cfg.worker.rollout.n} samples differ in accuracy (mean accuracy "
              f"{probe['mean_accuracy']:.3f}): pure on-policy GRPO has no accuracy signal to start from",
              flush=True)
        result = trainer.fit()
    finally:
        trainer.close()
    before, after = result["first_validation"], result["last_validation"]
    table = format_table(before, after)
    print(table, flush=True)
    summary = {"before": before.by_type, "after": after.by_type, "before_overall": before.accuracy,
               "after_overall": after.accuracy, "cold_start_probe": probe, "plot": str(result["plot"]),
               "seconds": round(time.perf_counter() - started, 1), "frame_loader": trainer.loader.stats()}
    (out / "demo_summary.json").write_text(json.dumps(summary, indent=2))
    loader = summary["frame_loader"]
    print(f"[demo] frames: {loader['hits']} loads from the cache, {loader['misses']} decoded on the fly", flush=True)
    print(f"[demo] curves: {result['plot']}\n[demo] summary: {out / 'demo_summary.json'} "
          f"({summary['seconds']} s)", flush=True)
    return summary


def format_table(before: Any, after: Any) -> str:
    lines = ["", "held-out accuracy per task type (greedy decoding)",
             f"{'task type':<22}{'n':>4}{'chance':>9}{'before':>9}{'after':>9}",
             "-" * 53]
    for ptype in sorted(after.by_type):
        chance = CHANCE.get(ptype)
        chance_text = f"{chance:.2f}" if chance is not None else "  -"
        lines.append(f"{ptype:<22}{after.counts.get(ptype, 0):>4}{chance_text:>9}"
                     f"{before.by_type.get(ptype, 0.0):>9.2f}{after.by_type[ptype]:>9.2f}")
    lines.append(f"{'all':<22}{sum(after.counts.values()):>4}{'':>9}{before.accuracy:>9.2f}{after.accuracy:>9.2f}")
    lines.append("(temporal grounding accuracy is the mean tIoU, so it has no chance level)")
    return "\n".join(lines)

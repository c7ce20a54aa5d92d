"""``make demo``: a tiny VLM learns synthetic video tasks with GRPO on a CPU in minutes.

Steps: build a tiny random-weight Qwen2.5-VL, generate the demo task set (a big square's
colour as yes/no and as multiple choice; when it is on screen as temporal grounding), build
its frame cache, measure the untrained policy, train with GRPO + mix-policy, measure again,
and print before/after accuracy per task type next to chance, with the curves' PNG path.

The cold-start evidence: before training, the policy never writes a parseable interval, so
every n-sample group on the grounding task scores a constant 0 and GRPO's advantage is 0
everywhere (pure on-policy RL has no gradient to start from). Mix-policy puts one offline
trajectory in each group, which gives the group a non-zero advantage, and the task is learned.

What keeps the result from hanging on the machine (floating-point differences between CPUs
send the sampled rollouts down another path, as another seed does; ``evr1 demo --seeds 3``
shows the spread): 32 held-out questions per task type (with 10, one answer moved a score by
0.1); temporal grounding on the policy's own time grid with a chance level (the best answer
that ignores the video, data/synth_demo_tasks.py); and more questions per step at the same
number of sequences, so every task type and answer appears in every step's batch. Validation
is greedy: deterministic for a given policy, where sampling would add its own noise. On a
CPU the actor and vLLM both compute in float32 (no bf16 path in the demo).

Temporal grounding reads the time from the frames: while the square is on screen, each second
of its videos shows the scene's clock (a backdrop colour per second, data/synth_demo_tasks.py).
Seeds 0-2 ended 0.54, 0.61, 0.52 on the development machine (with the shared-prefix forward)
against the video-blind 0.38, and seed 0 ended 0.33 on CI's machine: off its start of 0 on every
run, near chance, short of LEARNT_SHARE. Without a clock, time reached the two-layer decoder only
through M-RoPE positions, and 80 steps did not teach it position-selective attention (0.33-0.36);
with the clock on every frame, 0.51, 0.34, 0.47 (seed 1 the same 0.34 with four decoder layers);
one-second windows only (chance 0.25): seed 0 ended on a video-blind 0.25.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from easyvideor1.config import RunConfig, load_config
from easyvideor1.data.synth_demo_tasks import DEMO_SAMPLE_FPS, DEMO_VIDEO, demo_when_chance
from easyvideor1.logging import get_logger

log = get_logger(__name__)

DEMO_TYPES = ("demo_colour", "demo_choice", "demo_when")
# Exact chance of each task's accuracy for a policy that ignores the video (temporal
# grounding: the best constant interval's mean tIoU over the task's windows).
CHANCE = {"boolean": 0.5, "multiple choice": 1 / 3, "temporal grounding": demo_when_chance(DEMO_VIDEO)}
# "Learnt" means at least this share of the way from chance to a perfect score, and above the
# untrained policy: for 32 held-out yes/no questions 0.70, 2.3 standard deviations above a coin.
LEARNT_SHARE = 0.4


@dataclass
class DemoSettings:
    out_dir: Path
    family: str = "qwen2_5_vl"
    n_per_type: int = 40  # training questions per task type
    # Held-out questions per task type: with 10, one answer moved a task's score by 0.1.
    n_val_per_type: int = 32
    steps: int = 80
    # 16 questions x 4 responses per step: as many sequences as 8 x 8, but every task type and
    # answer is in every batch (at 8, a step held ~2.7 questions per type, and Adam's early,
    # full-size steps followed whichever answers that batch happened to over-represent).
    group_size: int = 4
    batch_questions: int = 16
    lr: float = 1e-3
    warmup_steps: int = 5
    ppo_epochs: int = 2
    offline_fraction: float = 1.0
    seed: int = 0
    distributed: bool = False  # rollouts on the `evr1 up` cluster (queue, pool, services)
    overrides: tuple[str, ...] = ()  # run-config KEY=VALUE applied last (experiments on the demo)


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
        f"data.video_fps={DEMO_SAMPLE_FPS}", "data.video_max_frames=8", "data.video_min_frames=4",
        "data.video_min_pixels=3136", "data.video_max_pixels=3136", "data.image_max_pixels=3136",
        "data.image_min_pixels=784",
        "data.frame_cache.workers=2",
        f"data.prompt_template_dir={out / 'prompts'}",
        "algorithm.adv_estimator=grpo", "algorithm.mix_policy.enable=true",
        # Every response weighs the same, so a short offline answer is not outvoted by long samples.
        "algorithm.loss_agg_mode=seq-mean-token-mean",
        f"worker.actor.model_path={model_dir}", f"worker.actor.optim.lr={settings.lr}",
        "worker.actor.optim.weight_decay=0.0", "worker.actor.gradient_checkpointing=false",
        # At lr 1e-3 a constant rate let a task collapse late (temporal grounding of the earlier
        # task: tIoU 0.66 by step 52, 0.08 by step 80); decaying it keeps what was learnt.
        "worker.actor.optim.schedule=cosine", "worker.actor.optim.min_lr_ratio=0.1",
        f"worker.actor.optim.warmup_steps={settings.warmup_steps}",
        f"worker.actor.mini_batch_size={max(1, settings.batch_questions // 2)}",
        f"worker.actor.ppo_epochs={settings.ppo_epochs}", "worker.actor.micro_batch_token_budget=16384",
        f"worker.rollout.n={settings.group_size}", f"worker.rollout.seed={settings.seed}",
        f"trainer.total_steps={settings.steps}", f"trainer.val_every={max(1, settings.steps // 3)}",
        # A checkpoint every tenth of the run (a tiny model: milliseconds): a killed demo run
        # again resumes (cli/demo.py keeps an unfinished run of the same settings for it).
        f"trainer.save_every={max(1, settings.steps // 10)}",
        f"trainer.output_dir={out / 'run'}", "trainer.loggers=[console,jsonl,tensorboard]",
        "trainer.resume=auto", f"trainer.seed={settings.seed}",
    ]
    if settings.distributed:
        # The cluster's frame-cache service (from `evr1 up`) is the store, shared with the pool.
        overrides.append("distributed.mode=distributed")
    else:
        overrides.append(f"data.frame_cache.store={out / 'frame-cache'}")
    return load_config(None, [*overrides, *settings.overrides])


# In the run folder: the settings it was started with (a run of other settings is never resumed)
# and the untrained policy's cold-start probe (a resumed run's policy is no longer untrained).
SETTINGS_FILE, PROBE_FILE = "demo_settings.json", "cold_start_probe.json"


def settings_record(settings: DemoSettings) -> dict[str, Any]:
    return json.loads(json.dumps(asdict(settings), default=str))


def unfinished_run(settings: DemoSettings) -> int | None:
    """The checkpoint's step when ``settings.out_dir`` holds an unfinished run of these settings
    (no demo_summary.json yet, a checkpoint in run/), which ``run_demo`` then resumes; else None."""
    from easyvideor1.train.checkpoint import latest_checkpoint, list_checkpoints

    out = settings.out_dir
    saved = out / "run" / SETTINGS_FILE
    if (out / "demo_summary.json").exists() or not saved.is_file() or latest_checkpoint(out / "run") is None:
        return None
    try:
        same = json.loads(saved.read_text()) == settings_record(settings)
    except ValueError:
        return None
    return int(list_checkpoints(out / "run")[-1].name.removeprefix("step_")) if same else None


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
    from easyvideor1.errors import ConfigError
    from easyvideor1.models.tiny import build_tiny_model
    from easyvideor1.train.trainer import RLTrainer

    if settings.n_per_type < 1 or settings.n_val_per_type < 1:
        raise ConfigError(f"demo: --n-per-type and --n-val-per-type must be >= 1, got {settings.n_per_type} "
                          f"and {settings.n_val_per_type}")
    started = time.perf_counter()
    out = settings.out_dir
    out.mkdir(parents=True, exist_ok=True)
    # The seed draws the model's random weights too: another seed, another model folder.
    model_dir = out / (f"tiny-{settings.family}" if settings.seed == 0 else f"tiny-{settings.family}-seed{settings.seed}")
    if not (model_dir / "config.json").exists():
        build_tiny_model(settings.family, model_dir, seed=settings.seed)
    print(f"[demo] tiny model: {model_dir}", flush=True)
    data_dir = out / "data"
    total = settings.n_per_type + settings.n_val_per_type
    report = generate_synthetic(data_dir, total, seed=settings.seed, types=list(DEMO_TYPES), size=DEMO_VIDEO.size,
                                fps=DEMO_VIDEO.fps, seconds=DEMO_VIDEO.seconds,
                                offline_type=list(DEMO_TYPES), offline_fraction=settings.offline_fraction,
                                offline_reasoning=False, val_fraction=settings.n_val_per_type / total,
                                progress=False)
    (out / "prompts").mkdir(exist_ok=True)
    for name, text in DEMO_TEMPLATES.items():
        (out / "prompts" / name).write_text(text)
    print(f"[demo] data: {report.summary()}", flush=True)

    cfg = demo_config(settings, data_dir, model_dir)
    run_dir = Path(cfg.trainer.output_dir)
    trainer = RLTrainer.from_config(cfg)
    try:
        if trainer.step == 0:
            (run_dir / SETTINGS_FILE).write_text(json.dumps(settings_record(settings), indent=2))
        store = trainer.loader.store
        if store is not None:
            report = store.stats()
            print(f"[demo] frame cache {report.url}: {report.count} blobs, {report.bytes / 2**20:.1f} MiB "
                  f"(every video and image of the train and val sets, decoded once)", flush=True)
        if trainer.step == 0 or not (run_dir / PROBE_FILE).is_file():
            probe = cold_start_probe(trainer, "temporal grounding")
            (run_dir / PROBE_FILE).write_text(json.dumps(probe))
        else:
            probe = json.loads((run_dir / PROBE_FILE).read_text())  # measured by the run's first start
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
    summary = {"seed": settings.seed, "before": before.by_type, "after": after.by_type, "counts": after.counts,
               "chance": {k: CHANCE.get(k) for k in after.by_type}, "learnt": learnt(before.by_type, after.by_type),
               "before_overall": before.accuracy,
               "after_overall": after.accuracy, "cold_start_probe": probe, "plot": str(result["plot"]),
               "seconds": round(time.perf_counter() - started, 1), "frame_loader": trainer.loader.stats()}
    (out / "demo_summary.json").write_text(json.dumps(summary, indent=2))
    loader = summary["frame_loader"]
    print(f"[demo] frames: {loader['hits']} loads from the cache, {loader['misses']} decoded on the fly", flush=True)
    print(f"[demo] curves: {result['plot']}\n[demo] summary: {out / 'demo_summary.json'} "
          f"({summary['seconds']} s)", flush=True)
    return summary


def learnt(before: dict[str, float], after: dict[str, float]) -> dict[str, bool]:
    """Per task type: did the policy end above its start and clearly above chance?"""
    out = {}
    for ptype, score in after.items():
        chance = CHANCE.get(ptype) or 0.0
        out[ptype] = score > before.get(ptype, 0.0) and score >= chance + LEARNT_SHARE * (1.0 - chance)
    return out


def format_table(before: Any, after: Any) -> str:
    lines = ["", "held-out accuracy per task type (greedy decoding)",
             f"{'task type':<22}{'n':>4}{'chance':>9}{'before':>9}{'after':>9}{'learnt':>8}",
             "-" * 61]
    verdict = learnt(before.by_type, after.by_type)
    for ptype in sorted(after.by_type):
        chance = CHANCE.get(ptype)
        chance_text = f"{chance:.2f}" if chance is not None else "  -"
        lines.append(f"{ptype:<22}{after.counts.get(ptype, 0):>4}{chance_text:>9}"
                     f"{before.by_type.get(ptype, 0.0):>9.2f}{after.by_type[ptype]:>9.2f}"
                     f"{'yes' if verdict[ptype] else 'no':>8}")
    lines.append(f"{'all':<22}{sum(after.counts.values()):>4}{'':>9}{before.accuracy:>9.2f}{after.accuracy:>9.2f}")
    lines.append("(temporal grounding: mean tIoU; its chance is the best answer that ignores the video; "
                 f"learnt: above the start and {LEARNT_SHARE:.0%} of the way from chance to 1)")
    return "\n".join(lines)


def run_demo_seeds(settings: DemoSettings, seeds: int) -> dict[str, Any]:
    """The demo once per seed (settings.seed, +1, ...), each in OUT/seed-K, then the mean and
    spread per task type: what a reader should expect on another machine, where floating-point
    differences send the sampled rollouts down another path as another seed does."""
    runs = []
    for seed in range(settings.seed, settings.seed + seeds):
        print(f"[demo] seed {seed} ({seed - settings.seed + 1} of {seeds})", flush=True)
        runs.append(run_demo(replace(settings, seed=seed, out_dir=settings.out_dir / f"seed-{seed}")))
    summary = {"seeds": [r["seed"] for r in runs], "runs": runs, "by_type": seed_statistics(runs)}
    settings.out_dir.mkdir(parents=True, exist_ok=True)
    (settings.out_dir / "demo_seeds.json").write_text(json.dumps(summary, indent=2))
    print(format_seed_table(summary), flush=True)
    print(f"[demo] per-seed summaries: {settings.out_dir / 'demo_seeds.json'}", flush=True)
    return summary


def seed_statistics(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    stats = {}
    for ptype in sorted(runs[0]["after"]):
        after = [r["after"][ptype] for r in runs]
        before = [r["before"][ptype] for r in runs]
        stats[ptype] = {"chance": CHANCE.get(ptype), "before_mean": statistics.fmean(before),
                        "after_mean": statistics.fmean(after),
                        "after_std": statistics.stdev(after) if len(after) > 1 else 0.0,
                        "after_min": min(after), "after_max": max(after), "after": after,
                        "learnt_in": sum(r["learnt"][ptype] for r in runs)}
    return stats


def format_seed_table(summary: dict[str, Any]) -> str:
    seeds = summary["seeds"]
    lines = ["", f"held-out accuracy per task type over seeds {', '.join(map(str, seeds))} (greedy decoding)",
             f"{'task type':<22}{'chance':>8}{'before':>8}{'after mean':>12}{'std':>7}{'min':>7}{'max':>7}"
             f"{'learnt':>9}", "-" * 80]
    for ptype, st in summary["by_type"].items():
        chance = st["chance"]
        lines.append(f"{ptype:<22}{(f'{chance:.2f}' if chance is not None else '-'):>8}{st['before_mean']:>8.2f}"
                     f"{st['after_mean']:>12.2f}{st['after_std']:>7.2f}{st['after_min']:>7.2f}{st['after_max']:>7.2f}"
                     f"{st['learnt_in']:>5} of {len(seeds)}")
    return "\n".join(lines)

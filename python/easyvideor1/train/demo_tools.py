"""``evr1 demo --tools``: a tiny VLM learns to call ``get_frames`` for what its frames do not show.

The task (data/synth_tool_tasks.py): a square flashes in one of three colours for half a second,
on source frames that lie strictly between the frames the prompt samples at 2 fps. The prompt's
video therefore shows nothing, and a policy without tools is at chance (1/3: the held-out set is
balanced, so a constant answer scores exactly that). A ``get_frames`` call over the video at
4 fps returns frames inside every gap, so a policy that calls the tool can read the colour.

Three runs, each GRPO + mix-policy with the offline responses under ``weighted_nll``
(algos/policy_loss.py: a demonstration no policy sampled is learnt without the PPO clip):

* **sight** (``base_steps``): the random tiny model learns, on the same question with the square
  on every frame (tools off), to name the colour its frames show: the skill a pretrained VLM
  brings to RL. Its policy is exported to ``OUT/sight-model``.
* **without tools**, from the sight model: the offline response is the answer alone; the policy
  sees no flash in its prompt and stays at chance.
* **with tools**, from the sight model (``worker.rollout.tools.enabled``): the offline response
  is a tool-using trajectory (the call, then the answer; the kit runs the call again, so its tool
  turn holds the real frames). The sight policy never writes a valid call, so pure on-policy RL
  has nothing to start from; the offline trajectory in every group is how it learns the call,
  and what it learnt to see is how it reads the tool's frames.

Both tool-task runs keep the vision encoder frozen (``worker.actor.freeze_vision_tower``), as RL
on a pretrained VLM often does: unfrozen, the first steps' noisy rollouts took the sight model's
colours away. The table gives held-out accuracy (greedy) before and after each run, with the tool
calls per trajectory before and after, and says whether the tools run ended above the other.
Measured (docs/performance.md): with tools 1.00, without 0.33, on seeds 0, 1 and 2.

The demo's tiny model has the call's pieces as single added tokens (``TOOL_CALL_TOKENS``:
``<tool_call>``, ``</tool_call>``, ``{"name": "get_frames", "arguments": ``, ``{"start_s": ``,
``"end_s": ``, ``}}``): the call, on one line, is 10 tokens instead of ~70. Every other tiny model
is unchanged. ``demo_tools_summary.json`` keeps a few final answers of each run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from easyvideor1.config import RunConfig
from easyvideor1.data.synth_tool_tasks import (
    DEFAULT_FRAMES_PER_CALL,
    TOOL_PIXELS,
    TOOL_SAMPLE_FPS,
    flash_gaps,
    tool_call_fps,
)
from easyvideor1.logging import get_logger
from easyvideor1.train.demo import DEMO_TEMPLATES, DemoSettings, demo_config

log = get_logger(__name__)

CHANCE = 1 / 3
RUNS = ("no tools", "with tools")


@dataclass
class ToolDemoSettings(DemoSettings):
    """``evr1 demo``'s settings with the tools demo's defaults. One task, so ``n_per_type`` and
    ``n_val_per_type`` are its train and held-out questions (of the sight task too); ``steps`` is
    each tool-task run's length; ``distributed`` is refused."""

    n_per_type: int = 24
    # A multiple of 9 (3 colours x 3 gaps): every colour in every gap equally often.
    n_val_per_type: int = 18
    steps: int = 40
    # The sight run: the random model learns to name the colour it sees (visible-square task).
    base_steps: int = 30
    # 1 online response + the offline trajectory per question: the offline trajectory (the only
    # source of a valid call at first) weighs as much as the policy's own response.
    group_size: int = 2
    batch_questions: int = 8
    warmup_steps: int = 3


# The demo model's chat template: the tiny one's, with the tools declared by name in one line.
# The full JSON schemas are ~830 tokens of the tiny tokenizer that a two-layer model cannot read
# (as for DEMO_TEMPLATES); they would make every prompt ~1.2k tokens and every step ~8x longer.
# The call syntax is learnt from the offline trajectories.
_CONTENT = ("{%- macro render(content) -%}{%- if content is string -%}{{- content -}}{%- else -%}"
            "{%- for item in content -%}{%- if item['type'] == 'image' or 'image' in item -%}"
            "{{- '<|vision_start|><|image_pad|><|vision_end|>' -}}"
            "{%- elif item['type'] == 'video' or 'video' in item -%}{{- '<|vision_start|><|video_pad|><|vision_end|>' -}}"
            "{%- elif 'text' in item -%}{{- item['text'] -}}{%- endif -%}{%- endfor -%}{%- endif -%}{%- endmacro -%}")
DEMO_CHAT_TEMPLATE = (
    _CONTENT
    + "{{- '<|im_start|>system\\nYou are a helpful assistant.' -}}"
    "{%- if tools -%}{{- ' Tools: ' -}}{%- for tool in tools -%}"
    "{{- (tool['function']['name'] if tool['function'] is defined else tool['name']) + ('' if loop.last else ', ') -}}"
    "{%- endfor -%}{{- '.' -}}{%- endif -%}{{- '<|im_end|>\\n' -}}"
    "{%- for message in messages if message['role'] != 'system' -%}"
    "{%- if message['role'] == 'tool' -%}"
    "{{- '<|im_start|>user\\n<tool_response>\\n' + render(message['content']) + '\\n</tool_response><|im_end|>\\n' -}}"
    "{%- else -%}{{- '<|im_start|>' + message['role'] + '\\n' + render(message['content']) + '<|im_end|>\\n' -}}"
    "{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)

# Token budgets: a call is 11 tokens of the demo's tokenizer, a get_frames result ~180 tokens of
# text plus its frames' vision tokens, the answer ~5.
TURN_TOKENS = 32
TOOLS_RESPONSE_TOKENS = 320
PLAIN_RESPONSE_TOKENS = 20


def _task_overrides(settings: ToolDemoSettings) -> list[str]:
    """What every run of the demo shares: the frames (the prompt's and the store), the prompt
    templates, the offline responses' loss, the loggers."""
    return [f"data.video_fps={TOOL_SAMPLE_FPS}", f"data.video_min_pixels={TOOL_PIXELS}",
            f"data.video_max_pixels={TOOL_PIXELS}", f"data.image_max_pixels={TOOL_PIXELS}",
            f"data.frame_cache.store={settings.out_dir / 'frame-cache'}",
            f"data.prompt_template_dir={settings.out_dir / 'prompts'}", "trainer.loggers=[console,jsonl]",
            # The offline response is a demonstration no policy sampled: learnt without the clip
            # (a 10-token call the random policy writes with probability ~1e-26).
            "algorithm.mix_policy.offline_loss=weighted_nll"]


def sight_config(settings: ToolDemoSettings, data_dir: Path, model_dir: Path) -> RunConfig:
    """The first run: the random tiny model learns, on the visible-square task (tools off), to
    name the colour its prompt's frames show: the skill a pretrained VLM brings."""
    own = [*_task_overrides(settings), f"data.train_files={data_dir / 'train.jsonl'}",
           f"data.val_files={data_dir / 'val.jsonl'}", f"data.max_response_length={PLAIN_RESPONSE_TOKENS}",
           f"trainer.total_steps={settings.base_steps}", f"trainer.val_every={settings.base_steps}"]
    run = dataclasses.replace(settings, out_dir=settings.out_dir / "sight", overrides=(*own, *settings.overrides))
    return demo_config(run, data_dir, model_dir)


def tool_demo_config(settings: ToolDemoSettings, data_dir: Path, model_dir: Path, *, tools: bool) -> RunConfig:
    """``evr1 demo``'s run config (train/demo.py ``demo_config``) with this task's data, budgets and,
    for the tools run, the video tools; both runs share the frame store and the prompt templates
    and start from the sight run's model (``model_dir``) with its vision encoder frozen."""
    own = [
        *_task_overrides(settings),
        f"data.train_files={data_dir / ('train_tools.jsonl' if tools else 'train.jsonl')}",
        # The one-line tool declaration, the call and the tool's reply (text and frames).
        "data.max_prompt_length=2048",
        f"data.max_response_length={TOOLS_RESPONSE_TOKENS if tools else PLAIN_RESPONSE_TOKENS}",
        # The sight run's vision encoder sees the colours; RL on this task's noisy early
        # rollouts would move it (unfrozen, it lost them within 3 steps; docs/performance.md).
        "worker.actor.freeze_vision_tower=true",
    ]
    if tools:
        # One call, then the answer: the frame budget of one trajectory is one call's.
        # The offline call leaves fps out: the kit samples at max_fps, 8 frames over the 2 s video.
        own += ["worker.rollout.tools.enabled=true", "worker.rollout.tools.max_turns=1",
                f"worker.rollout.tools.max_fps={tool_call_fps()}",
                f"worker.rollout.tools.frames_per_call={DEFAULT_FRAMES_PER_CALL}",
                f"worker.rollout.tools.frames_per_trajectory={DEFAULT_FRAMES_PER_CALL}",
                f"worker.rollout.tools.max_tokens_per_turn={TURN_TOKENS}"]
    run = dataclasses.replace(settings, out_dir=settings.out_dir / ("with-tools" if tools else "no-tools"),
                              overrides=(*own, *settings.overrides))
    return demo_config(run, data_dir, model_dir)


@dataclass
class RunOutcome:
    name: str
    before: float
    after: float
    calls_before: float
    calls_after: float
    n: int
    tools_before: dict[str, float]
    tools_after: dict[str, float]
    seconds: float
    plot: str | None
    responses_after: list[dict[str, Any]]  # a few held-out answers at the end (the final turn's text)
    start: dict[str, Any]  # where it started and what it trained: model_path, freeze_vision_tower, offline_loss


def _calls(report: Any) -> float:
    return float(report.tools.get("calls_per_trajectory", 0.0)) if report.tools else 0.0


def train_run(cfg: RunConfig, name: str, *, export_to: Path | None = None) -> RunOutcome:
    """Train one run; with ``export_to``, write its final policy there as a model directory."""
    from easyvideor1.train.trainer import RLTrainer

    started = time.perf_counter()
    print(f"[demo --tools] run {name!r}: {cfg.trainer.total_steps} steps", flush=True)
    trainer = RLTrainer.from_config(cfg)
    try:
        result = trainer.fit()
        if export_to is not None:
            trainer.export(export_to)
    finally:
        trainer.close()
    before, after = result["first_validation"], result["last_validation"]
    return RunOutcome(name=name, before=before.accuracy, after=after.accuracy, calls_before=_calls(before),
                      calls_after=_calls(after), n=sum(after.counts.values()), tools_before=dict(before.tools),
                      tools_after=dict(after.tools), seconds=round(time.perf_counter() - started, 1),
                      plot=str(result["plot"]) if result["plot"] else None, responses_after=after.responses[:6],
                      start={"model_path": cfg.worker.actor.model_path,
                             "freeze_vision_tower": cfg.worker.actor.freeze_vision_tower,
                             "offline_loss": cfg.algorithm.mix_policy.offline_loss})


def tiny_tools_model_dir(out: Path, family: str, seed: int) -> Path:
    """The demo's random model folder, named by its added tokens: a folder built with other
    tokens (an older demo's) is never reused."""
    from easyvideor1.models.tiny_tokenizer import TOOL_CALL_TOKENS

    tokens = hashlib.sha256("\x00".join(TOOL_CALL_TOKENS).encode()).hexdigest()[:8]
    return out / f"tiny-{family}-tools-{tokens}-seed{seed}"


def run_tool_demo(settings: ToolDemoSettings) -> dict[str, Any]:
    from easyvideor1.data.synth_tool_tasks import generate_tool_tasks, generate_visible_tasks
    from easyvideor1.errors import ConfigError
    from easyvideor1.models.tiny import build_tiny_model
    from easyvideor1.models.tiny_tokenizer import TOOL_CALL_TOKENS

    if min(settings.n_per_type, settings.n_val_per_type, settings.steps, settings.base_steps) < 1:
        raise ConfigError(f"demo --tools: --n-per-type, --n-val-per-type, --steps and --base-steps must be >= 1, "
                          f"got {settings.n_per_type}, {settings.n_val_per_type}, {settings.steps} and "
                          f"{settings.base_steps}")
    if settings.distributed:
        raise ConfigError("demo --tools runs embedded: leave out --distributed")
    started = time.perf_counter()
    out = settings.out_dir
    out.mkdir(parents=True, exist_ok=True)
    # Its own folder: the chat template differs from `evr1 demo`'s tiny model (DEMO_CHAT_TEMPLATE).
    # The call's pieces are single tokens (TOOL_CALL_TOKENS): 10 tokens to copy instead of ~70.
    model_dir = tiny_tools_model_dir(out, settings.family, settings.seed)
    if not (model_dir / "config.json").exists():
        build_tiny_model(settings.family, model_dir, seed=settings.seed, extra_tokens=TOOL_CALL_TOKENS)
    (model_dir / "chat_template.jinja").write_text(DEMO_CHAT_TEMPLATE)
    print(f"[demo --tools] tiny model: {model_dir}", flush=True)
    data_dir, sight_dir = out / "data", out / "data-visible"
    # The call on one line: every token of it then has one successor (data/synth_tool_tasks.py).
    report = generate_tool_tasks(data_dir, settings.n_per_type, settings.n_val_per_type, kind="colour",
                                 seed=settings.seed, offline_fraction=settings.offline_fraction, compact_calls=True)
    balanced = settings.n_val_per_type % (3 * len(flash_gaps())) == 0
    print(f"[demo --tools] data: {report.summary()}; the flash lies between the prompt's {TOOL_SAMPLE_FPS:g} fps "
          f"frames{'' if balanced else ' (held-out set not a multiple of 9: chance is not exactly 1/3)'}",
          flush=True)
    sight = generate_visible_tasks(sight_dir, settings.n_per_type, settings.n_val_per_type, kind="colour",
                                   seed=settings.seed, offline_fraction=settings.offline_fraction)
    print(f"[demo --tools] sight data (the square on every frame): {sight.summary()}", flush=True)
    (out / "prompts").mkdir(exist_ok=True)
    for name, text in DEMO_TEMPLATES.items():
        (out / "prompts" / name).write_text(text)

    base_dir = out / "sight-model"
    base = train_run(sight_config(settings, sight_dir, model_dir), "sight", export_to=base_dir)
    (base_dir / "chat_template.jinja").write_text(DEMO_CHAT_TEMPLATE)
    print(f"[demo --tools] sight run: held-out accuracy on the visible-square task {base.before:.2f} -> "
          f"{base.after:.2f} ({base.seconds} s); both runs below start from {base_dir}", flush=True)
    outcomes = [train_run(tool_demo_config(settings, data_dir, base_dir, tools=tools), name)
                for name, tools in zip(RUNS, (False, True))]
    table = format_tool_table(outcomes, base)
    print(table, flush=True)
    plain, with_tools = outcomes
    summary = {"seed": settings.seed, "steps": settings.steps, "base_steps": settings.base_steps, "chance": CHANCE,
               "sight": base.__dict__, "runs": {o.name: o.__dict__ for o in outcomes},
               "tools_above_no_tools": with_tools.after > plain.after,
               "seconds": round(time.perf_counter() - started, 1)}
    (out / "demo_tools_summary.json").write_text(json.dumps(summary, indent=2))
    print(f"[demo --tools] summary: {out / 'demo_tools_summary.json'} ({summary['seconds']} s)", flush=True)
    return summary


def format_tool_table(outcomes: list[RunOutcome], sight: RunOutcome | None = None) -> str:
    lines = [""]
    if sight is not None:
        lines.append(f"sight run (the square on every frame, {sight.n} held-out): {sight.before:.2f} -> "
                     f"{sight.after:.2f}; the runs below start from its policy")
    lines += [f"held-out accuracy on the brief-flash task (greedy decoding; chance {CHANCE:.2f})",
              f"{'run':<14}{'n':>4}{'before':>9}{'after':>9}{'calls/traj before':>20}{'after':>8}",
              "-" * 64]
    for o in outcomes:
        lines.append(f"{o.name:<14}{o.n:>4}{o.before:>9.2f}{o.after:>9.2f}{o.calls_before:>20.2f}{o.calls_after:>8.2f}")
    by_name = {o.name: o for o in outcomes}
    if len(by_name) == len(RUNS):
        plain, tools = by_name[RUNS[0]], by_name[RUNS[1]]
        verdict = "above" if tools.after > plain.after else "not above"
        extra = ""
        if "accuracy_with_call" in tools.tools_after:
            extra = f"; after, trajectories with a call: {tools.tools_after['accuracy_with_call']:.2f} accuracy"
        lines.append(f"with tools ends {verdict} the run without ({tools.after:.2f} vs {plain.after:.2f}){extra}")
    lines.append("(the flash is in no frame the prompt samples; get_frames at 4 fps sees it)")
    return "\n".join(lines)

"""A synthetic task that needs the video tools: a brief flash between the prompt's sampled frames.

Each video is blank except for a flash (a big coloured square, or a big digit) on the source
frames that lie strictly between two frames the prompt samples at ``TOOL_SAMPLE_FPS``. The
flash is therefore in no frame of the prompt: a policy that only looks at the prompt's video
is at chance. ``get_frames`` over the video at a higher rate returns frames inside the gap,
so a policy that calls the tool can read the answer. Ground truth is exact: the flash's
content, frames and times are decided first and drawn from those decisions.

The gap and the flash's content cycle with the sample index (content fastest), so every
answer and every gap appear equally often in any run of ``3 * len(gaps)`` samples: a
video-blind constant answer scores exactly chance on a balanced held-out set.

Train rows can carry an offline response for mix-policy: the answer alone (``train.jsonl``, for
a run without tools) or a tool-using trajectory (``train_tools.jsonl``): one ``get_frames``
call over the whole video at the rate the per-call frame budget allows, then the answer.

The same questions with the square (or digit) on screen for the whole clip (``shown="steady"``,
:func:`generate_visible_tasks`) need no tool: every frame the prompt samples shows the answer.
They teach a policy to name what it sees, the skill the tool task then needs in its tool turn.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from easyvideor1.data.loader import write_samples
from easyvideor1.data.schema import Sample, parse_row
from easyvideor1.data.synth_common import SynthConfig
from easyvideor1.data.synth_render import BACKGROUND, PALETTE, TextItem, place_text, render_frames, save_video
from easyvideor1.errors import ConfigError, DataError
from easyvideor1.video.metadata import VideoParams
from easyvideor1.video.sampling import sample_frame_indices

# 16 frames of 2 s; the prompt samples 4 of them (0, 5, 10, 15) at 2 fps.
TOOL_VIDEO = SynthConfig(size=64, fps=8.0, seconds=2.0)
TOOL_SAMPLE_FPS = 2.0
TOOL_PIXELS = 3136  # 56 x 56 per frame for the prompt and the tool alike: tiny and fast on a CPU
TOOL_COLOURS = ("red", "green", "blue")
TOOL_DIGITS = tuple(str(d) for d in range(10))
DIGIT_FONT_SIZE = 44  # about 28 x 33 pixels of ink on a 64 x 64 frame
KINDS = ("colour", "digit")
# flash: between the prompt's samples only (the tool task); steady: on every frame (no tool needed).
SHOWN = ("flash", "steady")
TASK_NAMES = {("colour", "flash"): "tool_flash_colour", ("digit", "flash"): "tool_flash_digit",
              ("colour", "steady"): "tool_visible_colour", ("digit", "steady"): "tool_visible_digit"}
_QUESTIONS = {("colour", "flash"): "A square flashes for half a second. Which colour is it?",
              ("digit", "flash"): "A digit flashes for half a second. Which digit is it?",
              ("colour", "steady"): "A square is on screen. Which colour is it?",
              ("digit", "steady"): "A digit is on screen. Which digit is it?"}
# Positions a train row may draw before its video must differ from every held-out one.
MAX_REDRAWS = 100
# Most frames one tool call returns in the demo (worker.rollout.tools.frames_per_call).
DEFAULT_FRAMES_PER_CALL = 8
# The call tags of the Qwen chat templates (rollout/tools/calls.py; data/ may not import rollout/).
TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"


def prompt_video_params(factor: int = 28, temporal_patch_size: int = 2) -> VideoParams:
    """How the rollout samples the task's videos for the prompt (data.video_* of the tools demo)."""
    return VideoParams(fps=TOOL_SAMPLE_FPS, min_frames=4, max_frames=8, min_pixels=TOOL_PIXELS,
                       max_pixels=TOOL_PIXELS, factor=factor, temporal_patch_size=temporal_patch_size)


def sampled_frames(cfg: SynthConfig = TOOL_VIDEO, params: VideoParams | None = None) -> list[int]:
    """Source indices of the frames the prompt holds: the decoder's own sampling arithmetic."""
    return sorted(set(sample_frame_indices(cfg.n_frames, cfg.fps, params or prompt_video_params())))


def flash_gaps(cfg: SynthConfig = TOOL_VIDEO, params: VideoParams | None = None) -> list[tuple[int, int]]:
    """``(first, last)`` runs of source frames strictly between two sampled frames (inclusive)."""
    kept = sampled_frames(cfg, params)
    gaps = [(a + 1, b - 1) for a, b in zip(kept, kept[1:]) if b - a >= 2]
    if not gaps:
        raise ConfigError(f"tool task: a {cfg.seconds} s video at {cfg.fps} fps sampled at frames {kept} leaves "
                          "no source frame between two samples; use a higher source fps")
    return gaps


@dataclass(frozen=True)
class ToolTask:
    """One question: frames, ground truth and where the flash is."""

    kind: str
    shown: str  # "flash" (between the prompt's samples) or "steady" (every frame)
    problem_type: str
    problem: str
    answer: str
    options: tuple[str, ...] | None
    frames: np.ndarray  # (T, H, W, 3) uint8
    first: int  # first and last source frame of the flash (inclusive)
    last: int
    content: str  # the colour name or the digit
    fps: float
    xy: tuple[int, int]  # top-left corner of the square / of the digit's ink

    @property
    def start_s(self) -> float:
        return self.first / self.fps

    @property
    def end_s(self) -> float:
        return (self.last + 1) / self.fps  # frame i is on screen from i/fps to (i+1)/fps


def _check_variant(kind: str, shown: str) -> None:
    if kind not in KINDS:
        raise ConfigError(f"tool task kind must be one of {KINDS}, got {kind!r}")
    if shown not in SHOWN:
        raise ConfigError(f"tool task shown must be one of {SHOWN}, got {shown!r}")


def make_tool_task(kind: str, index: int, seed: int = 0, cfg: SynthConfig = TOOL_VIDEO,
                   params: VideoParams | None = None, *, shown: str = "flash", redraw: int = 0) -> ToolTask:
    """Sample ``index`` of the task: content and gap cycle with the index, position is random.
    ``shown="steady"`` keeps the square or digit on screen from the first frame to the last;
    ``redraw`` > 0 draws another position for the same index."""
    _check_variant(kind, shown)
    contents = TOOL_COLOURS if kind == "colour" else TOOL_DIGITS
    content = contents[index % len(contents)]
    if shown == "flash":
        gaps = flash_gaps(cfg, params)
        first, last = gaps[(index // len(contents)) % len(gaps)]
    else:
        first, last = 0, cfg.n_frames - 1
    # Each variant draws its own positions: a steady video is not a flash video lit throughout.
    stream = [seed, KINDS.index(kind), index] + ([] if shown == "flash" else [SHOWN.index(shown)])
    # Past SHOWN's indices: a flash row's redraw never reuses a steady row's stream.
    stream += [MAX_REDRAWS + redraw] if redraw else []
    rng = np.random.default_rng(stream)
    problem = _QUESTIONS[kind, shown]
    if kind == "colour":
        side = int(cfg.size * 0.75)  # most of the frame: a strong signal in few vision tokens
        x, y = (int(v) for v in rng.integers(0, cfg.size - side + 1, size=2))
        frames = render_frames(cfg.size, cfg.size, cfg.n_frames)
        frames[first:last + 1, y:y + side, x:x + side] = PALETTE[content]
        letter = "ABC"[TOOL_COLOURS.index(content)]
        options = tuple(f"{label}. {name}" for label, name in zip("ABC", TOOL_COLOURS))
        return ToolTask(kind, shown, "multiple choice", problem, letter, options, frames, first, last, content,
                        cfg.fps, (x, y))
    xy = place_text(content, DIGIT_FONT_SIZE, cfg.size, cfg.size, rng)
    frames = render_frames(cfg.size, cfg.size, cfg.n_frames,
                           texts=[TextItem(content, xy, DIGIT_FONT_SIZE, "white", first, last)])
    return ToolTask(kind, shown, "numerical", problem, content, None, frames, first, last, content, cfg.fps, xy)


def tool_call_fps(cfg: SynthConfig = TOOL_VIDEO, frames_per_call: int = DEFAULT_FRAMES_PER_CALL) -> float:
    """The highest rate at which one call's frame budget covers the whole video (4 fps: 8 frames
    of 2 s, at least one inside every gap)."""
    return min(cfg.fps, frames_per_call / cfg.seconds)


def tool_call_arguments(cfg: SynthConfig = TOOL_VIDEO) -> dict[str, int | float]:
    """The offline trajectories' call: the whole video (the policy cannot know where the flash is,
    so it asks for all of it). ``fps`` is left out, so the kit samples at ``tools.max_fps``, which
    a run on this task sets to :func:`tool_call_fps`; whole seconds are written as integers. Both
    keep the call short: ~70 tokens of the tiny tokenizer, 13 with the tools demo's added call tokens (11 on one line)."""
    return {name: int(v) if float(v).is_integer() else float(v)
            for name, v in (("start_s", 0.0), ("end_s", float(cfg.seconds)))}


def tool_trajectory_text(answer: str, cfg: SynthConfig = TOOL_VIDEO, *, compact: bool = False) -> str:
    """An offline tool-using trajectory in the data format's ``offline_output`` form (docs/data-format.md):
    the policy's turns with the call inline, one ``get_frames`` call then the answer. The call is
    written in the JSON form (Qwen2-VL/2.5-VL/3-VL; the Qwen3.5 parser reads it too); the tool's
    reply is not stored: the kit runs the call again, so its frames are the ones the tool returns.

    The Qwen templates put the JSON on a line of its own; ``compact`` leaves the two newlines out
    (the parsers read both). For the tools demo's two-layer model that matters: with them ``\n``
    is followed once by the JSON and once by ``</tool_call>``, and the model, which mostly learns
    which token follows which, wrote runs of newlines and call pieces out of order (20 steps,
    no valid call); without them only the closing ``}`` is ambiguous (``}}``: two tokens of the
    tiny tokenizer), and the call was learnt (valid in every held-out answer by step 15 of 20, seed 0)."""
    call = json.dumps({"name": "get_frames", "arguments": tool_call_arguments(cfg)})
    newline = "" if compact else "\n"
    return f"{TOOL_CALL_OPEN}{newline}{call}{newline}{TOOL_CALL_CLOSE}<answer>{answer}</answer>"


@dataclass
class ToolTaskReport:
    out_dir: Path
    train_path: Path  # offline responses are the answer only (for a run without tools)
    train_tools_path: Path | None  # the same rows, offline responses are tool-using trajectories (flash only)
    val_path: Path
    n_train: int
    n_val: int
    n_offline: int

    def summary(self) -> str:
        offline = "offline tool trajectories" if self.train_tools_path is not None else "offline answers"
        return f"wrote {self.n_train} train + {self.n_val} val rows ({self.n_offline} with {offline}) to {self.out_dir}"


def _check_counts(n_train: int, n_val: int, offline_fraction: float) -> None:
    if n_train < 1 or n_val < 0:
        raise ConfigError(f"tool task: need n_train >= 1 and n_val >= 0, got {n_train} and {n_val}")
    if not 0 <= offline_fraction <= 1:
        raise ConfigError(f"tool task: offline_fraction must be in [0, 1], got {offline_fraction}")


def _generate(out_dir: str | os.PathLike, n_train: int, n_val: int, kind: str, shown: str, seed: int,
              offline_fraction: float, compact_calls: bool) -> ToolTaskReport:
    _check_variant(kind, shown)
    _check_counts(n_train, n_val, offline_fraction)
    out = Path(out_dir).resolve()
    name = TASK_NAMES[kind, shown]
    n_offline = int(round(n_train * offline_fraction))
    train: list[Sample] = []
    train_tools: list[Sample] = []
    val: list[Sample] = []
    held_out: set[tuple] = set()
    for index in range(n_val + n_train):
        is_val = index < n_val
        offline = not is_val and index - n_val < n_offline
        task = make_tool_task(kind, index, seed, shown=shown)
        if is_val:
            held_out.add(_video_key(task))
        else:
            task = _unlike_held_out(task, held_out, index, seed)
        plain, with_tools = _make_samples(out, name, task, index, seed, offline, compact_calls)
        if is_val:
            val.append(plain)
        else:
            train.append(plain)
            train_tools.append(with_tools)
    tools_path = write_samples(out / "train_tools.jsonl", train_tools) if shown == "flash" else None
    return ToolTaskReport(out, write_samples(out / "train.jsonl", train), tools_path,
                          write_samples(out / "val.jsonl", val), len(train), len(val),
                          sum(1 for s in train if s.has_offline_trajectory))


def generate_tool_tasks(out_dir: str | os.PathLike, n_train: int, n_val: int, *, kind: str = "colour",
                        seed: int = 0, offline_fraction: float = 1.0, compact_calls: bool = False) -> ToolTaskReport:
    """Write ``media/<task>/NNNN.mp4``, ``val.jsonl`` and two train files of the same rows, the first
    ``offline_fraction`` of them with an offline response: ``train.jsonl`` (the answer only, for a
    run without tools) and ``train_tools.jsonl`` (a tool-using trajectory, :func:`tool_trajectory_text`,
    its call on one line with ``compact_calls``).
    Held-out rows come first in the index sequence, so a validation set of a multiple of
    ``3 * len(gaps)`` rows is balanced."""
    return _generate(out_dir, n_train, n_val, kind, "flash", seed, offline_fraction, compact_calls)


def generate_visible_tasks(out_dir: str | os.PathLike, n_train: int, n_val: int, *, kind: str = "colour",
                           seed: int = 0, offline_fraction: float = 1.0) -> ToolTaskReport:
    """The same questions with the answer on every frame (``shown="steady"``): ``train.jsonl``
    (offline responses: the answer) and ``val.jsonl`` under ``out_dir``. A policy that looks at
    its prompt's frames can answer them; a held-out set of a multiple of 3 rows is balanced."""
    return _generate(out_dir, n_train, n_val, kind, "steady", seed, offline_fraction, False)


def _video_key(task: ToolTask) -> tuple:
    """What makes the video: two tasks with the same key have the same frames."""
    return task.content, task.first, task.last, tuple(task.xy)


def _unlike_held_out(task: ToolTask, held_out: set[tuple], index: int, seed: int) -> ToolTask:
    """``task``, or a redraw of its position if a held-out row has the same video: a held-out
    question is never one the policy trained on. Rows that differ keep their first draw."""
    redraw = 0
    while _video_key(task) in held_out:
        redraw += 1
        if redraw > MAX_REDRAWS:
            raise ConfigError(f"tool task: train row {index} ({task.content!r}) has no position left that no "
                              "held-out row uses: ask for fewer held-out rows")
        task = make_tool_task(task.kind, index, seed, shown=task.shown, redraw=redraw)
    return task


def _make_samples(out: Path, name: str, task: ToolTask, index: int, seed: int, offline: bool,
                  compact_calls: bool) -> tuple[Sample, Sample]:
    """The row without and with a tool-using offline trajectory (the same row when it has none)."""
    video = save_video(out / "media" / name / f"{index:04d}.mp4", task.frames, task.fps)
    row: dict[str, Any] = {"problem_id": f"synth-{name}-{index:04d}", "problem": task.problem,
                           "answer": task.answer, "problem_type": task.problem_type, "videos": [str(video)]}
    if task.options is not None:
        row["options"] = list(task.options)
    row["synth"] = {"task": name, "seed": seed, "shown": task.shown, "content": task.content,
                    "flash_first": task.first, "flash_last": task.last, "flash_start_s": task.start_s,
                    "flash_end_s": task.end_s, "xy": list(task.xy), "sampled_frames": sampled_frames()}
    rows = [row, row]
    if offline:
        rows = [{**row, "has_offline_trajectory": True, "offline_output": f"<answer>{task.answer}</answer>"},
                {**row, "has_offline_trajectory": True,
                 "offline_output": tool_trajectory_text(task.answer, TOOL_VIDEO, compact=compact_calls)}]
    samples = []
    for data in rows:
        sample, problems = parse_row(data, path=f"<synth {name}>", line=index + 1, base_dir=str(out),
                                     default_id=data["problem_id"])
        if sample is None:
            raise DataError(problems)
        samples.append(sample)
    return samples[0], samples[1]


__all__ = ["BACKGROUND", "KINDS", "SHOWN", "TOOL_COLOURS", "TOOL_DIGITS", "TOOL_SAMPLE_FPS", "TOOL_VIDEO", "ToolTask",
           "ToolTaskReport", "flash_gaps", "generate_tool_tasks", "generate_visible_tasks", "make_tool_task",
           "prompt_video_params", "sampled_frames", "tool_call_arguments", "tool_call_fps", "tool_trajectory_text"]

"""The tool task: its flash is in no frame the prompt samples, is at its true time in the source,
and the answers are exact (checked from decoded pixels, not from the generator's bookkeeping)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from easyvideor1.cache import FrameLoader
from easyvideor1.cache.refs import media_refs
from easyvideor1.data import load_samples
from easyvideor1.data.synth_render import PALETTE, TextItem, render_frames
from easyvideor1.data.synth_tool_tasks import (
    DIGIT_FONT_SIZE,
    TOOL_COLOURS,
    TOOL_VIDEO,
    flash_gaps,
    generate_tool_tasks,
    generate_visible_tasks,
    make_tool_task,
    prompt_video_params,
    sampled_frames,
    tool_call_arguments,
    tool_call_fps,
    tool_trajectory_text,
)
from easyvideor1.errors import ConfigError
from easyvideor1.models.families import get_family
from easyvideor1.video.metadata import VideoParams

BACKGROUND_MAX = 40  # background is (16, 16, 16); coded noise stays far below a flash


def _lit_pixels(frame: np.ndarray) -> int:
    """Pixels clearly brighter than the background in any channel."""
    return int((frame.max(axis=-1) > 90).sum())


def _colour_of(frame: np.ndarray) -> str:
    lit = frame[frame.max(axis=-1) > 90].astype(float)
    mean = lit.mean(axis=0)
    return min(TOOL_COLOURS, key=lambda c: float(np.abs(mean - np.array(PALETTE[c])).sum()))


def _digit_of(frame: np.ndarray, xy: tuple[int, int]) -> str:
    """The digit whose drawing at the flash's position is nearest to the decoded frame."""
    def distance(digit: str) -> float:
        drawn = render_frames(64, 64, 1, texts=[TextItem(digit, xy, DIGIT_FONT_SIZE, "white", 0, 0)])[0]
        return float(np.abs(drawn.astype(float) - frame.astype(float)).mean())

    return min("0123456789", key=distance)


@pytest.fixture(scope="module")
def colour_set(tmp_path_factory):
    out = tmp_path_factory.mktemp("tool-colour")
    report = generate_tool_tasks(out, n_train=6, n_val=9, kind="colour", seed=3)
    return report, load_samples(report.train_tools_path), load_samples(report.val_path)


def test_gaps_lie_strictly_between_the_prompts_samples():
    kept = sampled_frames()
    assert kept == [0, 5, 10, 15]
    gaps = flash_gaps()
    assert gaps == [(1, 4), (6, 9), (11, 14)]
    for first, last in gaps:
        assert not set(range(first, last + 1)) & set(kept)
    # A 2 s video at 2 fps source frames has nothing between its samples: refused, with the reason.
    from easyvideor1.data.synth_common import SynthConfig

    with pytest.raises(ConfigError, match="no source frame between two samples"):
        flash_gaps(SynthConfig(size=64, fps=2.0, seconds=4.0))


@pytest.mark.parametrize("family_name", ["qwen2_5_vl", "qwen3_vl"])
def test_flash_is_in_no_prompt_frame_and_at_its_time_in_the_source(colour_set, family_name):
    _, train, val = colour_set
    family = get_family(family_name)
    # The prompt's frames, loaded the way the rollout stage loads them (media_refs -> FrameLoader).
    prompt_loader = FrameLoader(None, prompt_video_params(family.factor, family.temporal_patch_size))
    every_frame = FrameLoader(None, VideoParams(fps=TOOL_VIDEO.fps, min_frames=4, max_frames=64,
                                                min_pixels=64 * 64, max_pixels=64 * 64, factor=family.factor,
                                                temporal_patch_size=family.temporal_patch_size))
    for sample in [*train, *val]:
        (ref,) = media_refs(sample, family.name)
        frames, meta = ref.load(prompt_loader, sample_id=sample.problem_id)
        assert sorted(set(meta.frame_indices)) == sampled_frames()
        assert max(_lit_pixels(f) for f in frames) == 0, sample.problem_id
        assert int(frames.max()) < BACKGROUND_MAX
        synth = sample.extra["synth"]
        full, full_meta = ref.load(every_frame, sample_id=sample.problem_id)
        assert len(full_meta.frame_indices) == TOOL_VIDEO.n_frames
        for i, (frame, t) in enumerate(zip(full, full_meta.timestamps)):
            on = synth["flash_start_s"] - 1e-6 <= t < synth["flash_end_s"] - 1e-6
            assert on == (synth["flash_first"] <= i <= synth["flash_last"]), (sample.problem_id, i)
            if on:
                assert _lit_pixels(frame) > 300
                letter = "ABC"[TOOL_COLOURS.index(_colour_of(frame))]
                assert letter == sample.answer, (sample.problem_id, i)
            else:
                assert _lit_pixels(frame) == 0, (sample.problem_id, i)


def test_the_tool_call_of_the_offline_trajectory_sees_the_flash(colour_set):
    """get_frames over the offline call's window and rate lands inside every gap."""
    _, train, _ = colour_set
    args = tool_call_arguments()
    assert args == {"start_s": 0, "end_s": 2} and tool_call_fps() == 4.0
    params = VideoParams(fps=tool_call_fps(), min_frames=1, max_frames=8, min_pixels=3136, max_pixels=3136, factor=28)
    loader = FrameLoader(None, params)
    for sample in train:
        frames, _ = loader.load_video(sample.videos[0])
        assert len(frames) == 8
        lit = [f for f in frames if _lit_pixels(f) > 100]
        assert lit, sample.problem_id
        assert "ABC"[TOOL_COLOURS.index(_colour_of(lit[0]))] == sample.answer
        assert sample.has_offline_trajectory
        assert sample.offline_output == tool_trajectory_text(sample.answer)
        assert sample.offline_output.endswith(f"</tool_call><answer>{sample.answer}</answer>")


def test_train_files_share_rows_and_differ_only_in_the_offline_response(colour_set):
    report, with_tools, _ = colour_set
    plain = load_samples(report.train_path)
    assert [s.problem_id for s in plain] == [s.problem_id for s in with_tools]
    for a, b in zip(plain, with_tools):
        assert a.videos == b.videos and a.answer == b.answer and a.extra == b.extra
        assert a.offline_output == f"<answer>{a.answer}</answer>"
        assert b.offline_output != a.offline_output


def test_held_out_set_is_balanced_so_a_blind_answer_scores_chance(colour_set):
    report, _, val = colour_set
    assert (report.n_train, report.n_val, report.n_offline) == (6, 9, 6)
    assert Counter(s.answer for s in val) == {"A": 3, "B": 3, "C": 3}
    gaps = Counter((s.extra["synth"]["flash_first"], s.answer) for s in val)
    assert len(gaps) == 9  # every gap with every answer once
    assert all(not s.has_offline_trajectory for s in val)
    assert val[0].options == ("A. red", "B. green", "C. blue")


def test_digit_flash_is_exact(tmp_path):
    report = generate_tool_tasks(tmp_path, n_train=1, n_val=10, kind="digit", seed=1, offline_fraction=0.0)
    val = load_samples(report.val_path)
    assert sorted(s.answer for s in val) == list("0123456789")
    # Factor 32 keeps the 64 x 64 source size: the frames are compared with drawings pixel for pixel.
    loader = FrameLoader(None, VideoParams(fps=8.0, min_frames=4, max_frames=64, min_pixels=64 * 64,
                                           max_pixels=64 * 64, factor=32))
    prompt_loader = FrameLoader(None, prompt_video_params())
    for sample in val:
        assert sample.problem_type == "numerical"
        prompt_frames, _ = prompt_loader.load_video(sample.videos[0])
        assert _lit_pixels(prompt_frames.max(axis=0)) == 0
        frames, _ = loader.load_video(sample.videos[0])
        synth = sample.extra["synth"]
        assert frames.shape[1:3] == (64, 64)
        for i in range(synth["flash_first"], synth["flash_last"] + 1):
            assert _digit_of(frames[i], tuple(synth["xy"])) == sample.answer, (sample.problem_id, i)
    assert not load_samples(report.train_path)[0].has_offline_trajectory


def test_visible_tasks_show_the_answer_in_every_prompt_frame(tmp_path):
    """The sight task: the square is on every frame, so the prompt's 2 fps frames show it; the
    answers are exact (read from the decoded frames) and a held-out set of 3k rows is balanced."""
    report = generate_visible_tasks(tmp_path, n_train=3, n_val=6, kind="colour", seed=3)
    assert report.train_tools_path is None and "offline answers" in report.summary()
    val, train = load_samples(report.val_path), load_samples(report.train_path)
    assert Counter(s.answer for s in val) == {"A": 2, "B": 2, "C": 2}
    assert all(s.offline_output == f"<answer>{s.answer}</answer>" for s in train)
    assert not (tmp_path / "train_tools.jsonl").exists()
    loader = FrameLoader(None, prompt_video_params())
    flash = make_tool_task("colour", 0, seed=3)
    for sample in [*train, *val]:
        assert sample.problem.endswith("A square is on screen. Which colour is it?")
        assert sample.extra["synth"]["shown"] == "steady"
        frames, meta = loader.load_video(sample.videos[0])
        assert sorted(set(meta.frame_indices)) == sampled_frames()
        for frame in frames:
            assert _lit_pixels(frame) > 300
            assert "ABC"[TOOL_COLOURS.index(_colour_of(frame))] == sample.answer, sample.problem_id
    # Its own positions: a visible video is not a flash video lit from start to end.
    steady = make_tool_task("colour", 0, seed=3, shown="steady")
    assert (steady.first, steady.last) == (0, TOOL_VIDEO.n_frames - 1)
    assert steady.xy != flash.xy or steady.problem != flash.problem


def test_bad_arguments_are_refused_with_the_field():
    with pytest.raises(ConfigError, match="kind"):
        make_tool_task("shape", 0)
    with pytest.raises(ConfigError, match="shown"):
        make_tool_task("colour", 0, shown="always")
    with pytest.raises(ConfigError, match="n_train"):
        generate_visible_tasks("/tmp/never-written", n_train=0, n_val=1)
    with pytest.raises(ConfigError, match="n_train"):
        generate_tool_tasks("/tmp/never-written", n_train=0, n_val=1)
    with pytest.raises(ConfigError, match="offline_fraction"):
        generate_tool_tasks("/tmp/never-written", n_train=1, n_val=1, offline_fraction=2.0)


@pytest.mark.parametrize("compact", [False, True])
@pytest.mark.parametrize("family_name", ["qwen2_5_vl", "qwen3_5"])
def test_offline_call_is_read_by_every_familys_tool_parser(family_name, compact):
    """The data layer writes the call itself (it may not import rollout/): the kit must read it,
    on a line of its own as the Qwen templates write it and on one line (the tools demo's form)."""
    from easyvideor1.rollout.tools.calls import STOP_STRINGS, call_syntax, find_tool_call
    from easyvideor1.rollout.tools.specs import check_arguments

    text = tool_trajectory_text("B", compact=compact)
    assert ("\n" in text) is not compact
    first_turn = text[: text.index(STOP_STRINGS[0]) + len(STOP_STRINGS[0])]
    call = find_tool_call(first_turn, call_syntax(family_name))
    assert call.name == "get_frames" and check_arguments(call) == {"start_s": 0.0, "end_s": 2.0}


def test_compact_calls_write_the_call_on_one_line_in_the_tools_file_only(tmp_path):
    report = generate_tool_tasks(tmp_path, n_train=3, n_val=0, kind="colour", seed=0, compact_calls=True)
    for sample in load_samples(report.train_tools_path):
        assert sample.offline_output == tool_trajectory_text(sample.answer, compact=True)
        assert sample.offline_output.startswith('<tool_call>{"name": "get_frames"')
    assert all(s.offline_output == f"<answer>{s.answer}</answer>" for s in load_samples(report.train_path))


def test_no_train_video_is_a_held_out_one(tmp_path):
    """Positions are random, so a train row can draw a held-out row's colour, gap and position
    (seed 1 of the sight task at the demo's 24 + 18 rows did): such a row is redrawn, every other
    row keeps its first draw."""
    import hashlib

    report = generate_visible_tasks(tmp_path, n_train=24, n_val=18, kind="colour", seed=1)

    def digests(path):
        return [hashlib.sha256(Path(s.videos[0]).read_bytes()).hexdigest() for s in load_samples(path)]

    assert not set(digests(report.val_path)) & set(digests(report.train_path))
    train = load_samples(report.train_path)
    first_draws = [make_tool_task("colour", 18 + i, seed=1, shown="steady").xy for i in range(24)]
    redrawn = [i for i, s in enumerate(train) if tuple(s.extra["synth"]["xy"]) != tuple(first_draws[i])]
    assert len(redrawn) == 1, redrawn
    # The first draw of that row was a held-out video, so without the redraw the check above fails.
    val_keys = {(s.extra["synth"]["content"], tuple(s.extra["synth"]["xy"])) for s in load_samples(report.val_path)}
    assert (train[redrawn[0]].extra["synth"]["content"], tuple(first_draws[redrawn[0]])) in val_keys

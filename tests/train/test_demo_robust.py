"""`evr1 demo` learns every task type, and the same seed gives the same table (train/demo.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from demo_env import plain_env

from easyvideor1.cli.main import main
from easyvideor1.data.synth_common import SynthConfig
from easyvideor1.data.synth_demo_tasks import (
    DEMO_VIDEO,
    WHEN_CLOCK,
    clock_backdrop,
    demo_colour,
    demo_when,
    demo_when_chance,
    when_windows,
)
from easyvideor1.data.synth_render import BACKGROUND, PALETTE
from easyvideor1.rewards import ScoreRequest, score
from easyvideor1.train.demo import (
    CHANCE,
    DemoSettings,
    format_seed_table,
    learnt,
    run_demo,
    run_demo_seeds,
    seed_statistics,
)


def test_when_windows_sit_on_the_policys_time_grid():
    windows = when_windows(DEMO_VIDEO)
    # 4 s at 4 fps, whole seconds: 4 windows of one second, 3 of two.
    assert windows == [(0, 3), (4, 7), (8, 11), (12, 15), (0, 7), (4, 11), (8, 15)]
    rng = np.random.default_rng(3)
    answers = [demo_when(rng, DEMO_VIDEO).answer for _ in range(210)]
    assert set(answers) == {"[0, 1]", "[1, 2]", "[2, 3]", "[3, 4]", "[0, 2]", "[1, 3]", "[2, 4]"}
    assert all(15 <= answers.count(a) <= 45 for a in set(answers)), answers  # equally likely
    with pytest.raises(ValueError, match="whole frames"):
        when_windows(SynthConfig(fps=8.0, seconds=2.5))  # 20 frames: 2.5 steps of 8


def test_when_clock_shows_the_second_while_the_square_is_there():
    """On the window's frames every non-square pixel of second k is the clock's colour k and the
    square is green; every other frame is the plain backdrop, so two videos agree wherever neither
    shows the square; the colour tasks keep the plain backdrop."""
    rng = np.random.default_rng(7)
    tasks = [demo_when(rng, DEMO_VIDEO) for _ in range(6)]
    green = np.array(PALETTE["green"])
    for task in tasks:
        frames = task.frames.astype(int)
        for i, frame in enumerate(frames):
            square = np.all(frame == green, axis=-1)
            shown = task.info["first"] <= i <= task.info["last"]
            assert square.any() == shown, (task.answer, i)
            assert np.all(frame[~square] == (WHEN_CLOCK[i // 4] if shown else BACKGROUND)), i
    a = tasks[0]
    b = next(t for t in tasks[1:] if (t.info["first"], t.info["last"]) != (a.info["first"], a.info["last"]))
    for i in range(DEMO_VIDEO.n_frames):
        if not any(t.info["first"] <= i <= t.info["last"] for t in (a, b)):
            assert np.array_equal(a.frames[i], b.frames[i]), i
    colour = demo_colour(rng, DEMO_VIDEO)
    square = np.array(PALETTE[colour.info["colour"]])
    pixels = colour.frames.reshape(-1, 3).astype(int)
    assert np.all(np.all(pixels == BACKGROUND, axis=-1) | np.all(pixels == square, axis=-1))
    with pytest.raises(ValueError, match="clock has 4 colours"):
        clock_backdrop(np.zeros((32, 64, 64, 3), np.uint8), SynthConfig(fps=4.0, seconds=8.0))
    blank = np.broadcast_to(np.array(BACKGROUND, np.uint8), (16, 32, 32, 3)).copy()
    lit = clock_backdrop(blank, SynthConfig(size=32, fps=4.0, seconds=4.0), 4, 11)  # seconds 1 and 2
    assert [tuple(int(c) for c in f[0, 0]) for f in lit[::4]] == [tuple(BACKGROUND), WHEN_CLOCK[1], WHEN_CLOCK[2],
                                                                  tuple(BACKGROUND)]


def test_temporal_grounding_chance_is_the_best_blind_answer():
    """The best video-blind interval, searched on the quarter-second grid and scored by the
    project's scorer, is [1, 3]: one of the seven windows, half of two and a third of two more."""
    chance = demo_when_chance(DEMO_VIDEO)
    assert chance == pytest.approx(8 / 21)
    assert CHANCE["temporal grounding"] == chance
    windows = [f"[{a // 4}, {(b + 1) // 4}]" for a, b in when_windows(DEMO_VIDEO)]
    grid = [q / 4 for q in range(17)]
    best = max(np.mean([_tiou(f"[{lo}, {hi}]", gt) for gt in windows])
               for lo in grid for hi in grid if hi > lo)
    assert best == pytest.approx(chance)
    assert np.mean([_tiou("[1, 3]", gt) for gt in windows]) == pytest.approx(chance)


def _tiou(answer: str, truth: str) -> float:
    return score(ScoreRequest(f"<answer>{answer}</answer>", truth, "temporal grounding")).accuracy


def test_learnt_needs_a_margin_over_chance_and_the_start():
    before = {"boolean": 0.0, "multiple choice": 0.0, "temporal grounding": 0.0}
    assert learnt(before, {"boolean": 0.81, "multiple choice": 0.34, "temporal grounding": 0.70}) == {
        "boolean": True, "multiple choice": False, "temporal grounding": True}
    assert learnt({"boolean": 0.9}, {"boolean": 0.9}) == {"boolean": False}  # no better than the start
    runs = [{"seed": s, "before": before, "after": {"boolean": a}, "learnt": {"boolean": a > 0.7}}
            for s, a in ((0, 1.0), (1, 0.6), (2, 0.8))]
    stats = seed_statistics(runs)["boolean"]
    assert (stats["after_mean"], stats["after_min"], stats["after_max"], stats["learnt_in"]) == (
        pytest.approx(0.8), 0.6, 1.0, 2)
    assert stats["after_std"] == pytest.approx(0.2)
    table = format_seed_table({"seeds": [0, 1, 2], "by_type": seed_statistics(runs)})
    assert "2 of 3" in table and "0.80" in table


def test_cli_refuses_no_seeds(capsys, tmp_path):
    assert main(["demo", "--out", str(tmp_path), "--seeds", "0"]) == 1
    assert "--seeds must be >= 1" in capsys.readouterr().err


def test_cli_refuses_bad_flags_before_writing(capsys, tmp_path):
    out = tmp_path / "never"
    assert main(["demo", "--out", str(out), "--base-steps", "3"]) == 1
    assert "--base-steps is the sight run" in capsys.readouterr().err
    assert not out.exists()
    a_file = tmp_path / "a-file"
    a_file.write_text("kept")
    for tools in ([], ["--tools"]):
        assert main(["demo", "--out", str(a_file), *tools]) == 1
        assert f"--out {a_file} is a file" in capsys.readouterr().err
    assert a_file.read_text() == "kept"


@pytest.mark.timeout(1200)  # three short demos: about 2 minutes on 2 idle cores, 10 when shared
def test_seeds_mode_and_same_seed_same_table(tmp_path, capsys):
    """`--seeds 2` runs seeds 5 and 6 in OUT/seed-K with the spread per task; seed 5 run again on
    this machine gives the same held-out results (short runs: 2 steps, 4 questions per type)."""
    small = {"steps": 2, "n_per_type": 4, "n_val_per_type": 4}
    summary = run_demo_seeds(DemoSettings(out_dir=tmp_path / "seeds", seed=5, **small), 2)
    assert summary["seeds"] == [5, 6]
    assert json.loads((tmp_path / "seeds" / "demo_seeds.json").read_text())["seeds"] == [5, 6]
    assert (tmp_path / "seeds" / "seed-6" / "demo_summary.json").is_file()
    stats = summary["by_type"]["boolean"]
    assert stats["after"] == [run["after"]["boolean"] for run in summary["runs"]]
    assert "over seeds 5, 6" in capsys.readouterr().out
    again = run_demo(DemoSettings(out_dir=tmp_path / "again", seed=5, **small))
    first = summary["runs"][0]
    assert (again["before"], again["after"], again["counts"]) == (first["before"], first["after"], first["counts"])
    assert again["counts"] == {"boolean": 4, "multiple choice": 4, "temporal grounding": 4}


@pytest.mark.slow
@pytest.mark.timeout(1800)  # about 3 minutes on 2 idle cores
def test_default_demo_learns_the_colour_tasks(tmp_path):
    """The default run (seed 0), as `make demo` runs it: its own process from a plain shell, so
    no state another test left in this one (threads, RNGs, logging) steers the numerics. On 32
    held-out questions per task type both colour tasks end clearly above their start and chance
    (train/demo.py: LEARNT_SHARE). Temporal grounding starts at 0 (no parseable interval, so no
    on-policy signal) and ends above it through mix-policy's offline answers; where it ends
    relative to its video-blind chance depends on the CPU's float order (0.33 on CI's machine,
    0.54 on the development machine, same seed), so the lift off 0 is what is asserted."""
    out = tmp_path / "demo_out"
    proc = subprocess.run([str(Path(sys.executable).parent / "evr1"), "demo", "--out", str(out)],
                          capture_output=True, text=True, timeout=1800, env=plain_env())
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    summary = json.loads((out / "demo_summary.json").read_text())
    assert summary["counts"] == {"boolean": 32, "multiple choice": 32, "temporal grounding": 32}
    assert summary["learnt"]["boolean"] and summary["learnt"]["multiple choice"], summary
    assert summary["after"]["temporal grounding"] > summary["before"]["temporal grounding"], summary


def test_cli_help_states_the_demos_defaults(capsys):
    """The flags default to DemoSettings' fields; their help names those values."""
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    defaults = DemoSettings(out_dir=Path("x"))
    for flag, value in (("--steps", defaults.steps), ("--n-per-type", defaults.n_per_type),
                        ("--n-val-per-type", defaults.n_val_per_type), ("--n", defaults.group_size),
                        ("--seed", defaults.seed), ("--family", defaults.family)):
        after = text.split(f" {flag} ", 1)[1]
        assert f"({value})" in after.split(" --", 1)[0], (flag, value)

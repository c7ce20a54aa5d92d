"""Where the demos write (#29 item 6): `make demo-distributed` has its own folder, and `evr1 demo`
says which earlier results in --out it replaces before it replaces them; a killed demo run again
resumes from its last checkpoint (#33 item 4)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from demo_env import plain_env

from easyvideor1.train.checkpoint import latest_checkpoint, list_checkpoints

ROOT = Path(__file__).resolve().parents[2]


def _demo_outs(target: str) -> list[str]:
    """The --out of every `evr1 demo` (and `model tiny`) line `make TARGET` would run."""
    dry = subprocess.run(["make", "-n", target, "DEMO_ARGS="], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert dry.returncode == 0, dry.stderr
    return re.findall(r"evr1 (?:demo|model tiny)\b.*?--out (\S+)", dry.stdout)


def test_make_demo_distributed_does_not_write_into_make_demos_folder():
    plain, distributed = _demo_outs("demo"), _demo_outs("demo-distributed")
    assert plain == ["demo_out"], plain
    assert len(distributed) == 2 and all(Path(out).parts[0] == "demo_out_distributed" for out in distributed), distributed


@pytest.mark.slow
def test_demo_names_the_earlier_results_it_replaces(tmp_path):
    """A second run into the same --out: without the replacement its metrics would follow the
    first run's in run/metrics.jsonl (the curves mixing both runs)."""
    out = tmp_path / "demo_out"
    (out / "run").mkdir(parents=True)
    (out / "run" / "metrics.jsonl").write_text(json.dumps({"step": 99, "reward/mean": 0.5}) + "\n")
    (out / "demo_summary.json").write_text(json.dumps({"seed": 0, "seconds": -1}))
    line = "evr1 demo --out demo_out --steps 1 --n-per-type 1 --n-val-per-type 1 --n 2"
    proc = subprocess.run(line.split(), cwd=tmp_path, env=plain_env(), capture_output=True, text=True,
                          timeout=1500)
    console = proc.stdout + proc.stderr
    assert proc.returncode == 0, console[-4000:]
    first = console.splitlines()[0]
    assert first.startswith(f"[demo] {out} holds an earlier run's results (demo_summary.json, run/): "
                            "this run replaces them"), console[:2000]
    steps = [json.loads(row).get("step") for row in (out / "run" / "metrics.jsonl").read_text().splitlines()]
    assert steps and 99 not in steps, steps
    assert json.loads((out / "demo_summary.json").read_text())["seconds"] > 0


def _rows(path: Path) -> list[dict | None]:
    """metrics.jsonl's rows; None for a line that is not JSON (a kill mid-write)."""
    if not path.is_file():
        return []
    rows: list[dict | None] = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            rows.append(None)
    return rows


def _step(path: Path | None) -> int | None:
    return int(path.name.removeprefix("step_")) if path is not None else None


@pytest.mark.slow
@pytest.mark.timeout(2400)  # two short demos: about 3 minutes on 2 idle cores
def test_killed_demo_resumes_from_its_last_checkpoint(tmp_path):
    """The demo SIGKILLed once metrics.jsonl shows a step past a checkpoint, then the same
    command again: it says it resumes, continues from the last checkpoint in the same run folder,
    and metrics.jsonl ends with each step once (the killed run's rows after the checkpoint dropped)."""
    out = tmp_path / "demo_out"
    run = out / "run"
    line = "evr1 demo --out demo_out --steps 4 --n-per-type 3 --n-val-per-type 2 --n 4"
    with open(tmp_path / "first.txt", "w") as first:
        proc = subprocess.Popen(line.split(), cwd=tmp_path, env=plain_env(), stdout=first,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 1500  # a budget, not a timing assertion
        while True:
            saved = _step(latest_checkpoint(run))
            trained = [r["step"] for r in _rows(run / "metrics.jsonl") if r and "actor/pg_loss" in r]
            if saved is not None and trained and max(trained) > saved:
                break
            assert proc.poll() is None, (tmp_path / "first.txt").read_text()[-4000:]
            assert time.monotonic() < deadline, "no step past a checkpoint within the budget"
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the demo and anything it started (its own session)
        proc.wait()
    assert not (out / "demo_summary.json").exists()
    saved = _step(latest_checkpoint(run))
    assert saved is not None and saved < 4
    left = _rows(run / "metrics.jsonl")
    dropped = sum(1 for r in left if r is None or r["step"] > saved)
    assert dropped >= 1

    again = subprocess.run(line.split(), cwd=tmp_path, env=plain_env(), capture_output=True, text=True,
                           timeout=1500)
    console = again.stdout + again.stderr
    assert again.returncode == 0, console[-4000:]
    assert console.splitlines()[0] == (f"[demo] {out} holds an unfinished run of these settings (checkpoint at "
                                       f"step {saved} of 4): this run resumes it (give another --out to start "
                                       "over)"), console[:2000]
    resumed = [ln for ln in console.splitlines() if " run_resumed " in ln]
    assert len(resumed) == 1 and f"run_resumed step={saved} total_steps=4 " in resumed[0], console[:4000]
    assert resumed[0].endswith(f"metrics_rows_dropped={dropped}"), resumed
    assert "run_started" not in console
    rows = _rows(run / "metrics.jsonl")
    assert None not in rows
    assert [r["step"] for r in rows if "actor/pg_loss" in r] == [1, 2, 3, 4]
    assert [r["step"] for r in rows if "val/accuracy" in r] == [0, 1, 2, 3, 4]  # val_every is 1 at 4 steps
    assert rows[:len(left) - dropped] == left[:len(left) - dropped], "the first start's rows are kept as written"
    # The same run folder: nothing set aside, the checkpoints continue (the newest two kept).
    assert not list(run.glob("earlier-*"))
    assert [p.name for p in list_checkpoints(run)] == ["step_3", "step_4"]
    summary = json.loads((out / "demo_summary.json").read_text())
    start = next(r for r in rows if r["step"] == 0 and "val/accuracy" in r)
    assert summary["before"] == {k.removeprefix("val/accuracy/"): v for k, v in start.items()
                                 if k.startswith("val/accuracy/")}
    assert summary["cold_start_probe"] == json.loads((run / "cold_start_probe.json").read_text())

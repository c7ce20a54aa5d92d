"""Progress is whole lines when stderr is not a terminal: a log file or a pipe gets no carriage
returns from `evr1 data synth` or `evr1 cache build` (#29)."""

from __future__ import annotations

import re
import subprocess

from demo_env import plain_env

# Console.Progress's plain line: "DESC N/TOTAL (P%) | ... | elapsed ...".
LINE = re.compile(r"^(synth|hash media|build cache) \d+/\d+ \(\d+%\) \| .*elapsed ", re.M)


def evr1(*args: str) -> subprocess.CompletedProcess:
    # stdout and stderr are pipes, as under CI or `2> log`: no terminal anywhere.
    return subprocess.run(["evr1", *args], capture_output=True, text=True, timeout=600, env=plain_env())


def test_synth_and_cache_build_print_whole_progress_lines_to_a_pipe(tmp_path):
    data = tmp_path / "data"
    synth = evr1("data", "synth", "--out", str(data), "--n-per-type", "1", "--seed", "0")
    assert synth.returncode == 0, synth.stderr
    assert "\r" not in synth.stderr
    assert re.search(r"^synth \d+/\d+ \(100%\)", synth.stderr, re.M), synth.stderr

    build = evr1("cache", "build", str(data / "train.jsonl"), "--store", str(tmp_path / "store"), "--workers", "1")
    assert build.returncode == 0, build.stdout + build.stderr
    assert "\r" not in build.stderr
    shown = {m.group(1) for m in LINE.finditer(build.stderr)}
    assert {"hash media", "build cache"} <= shown, build.stderr
    assert re.search(r"^build cache (\d+)/\1 \(100%\) .*built=\d+ failed=0", build.stderr, re.M), build.stderr

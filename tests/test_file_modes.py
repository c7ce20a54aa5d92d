"""Outputs others can read: every file a command writes gets the mode the umask allows (#29).

``tempfile.mkstemp`` and safetensors' ``save_file`` create files 0600 whatever the umask; pods
of another uid share outputs through volumes. The commands run as a user types them, in a
plain shell under ``umask 022``, and every file they leave must be readable by others.
"""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest
import torch
from demo_env import plain_env

from easyvideor1.files import atomic_path, atomic_write, current_umask, share
from easyvideor1.train.checkpoint import save_checkpoint


def _run(line: str, cwd: Path, umask: str = "022") -> str:
    done = subprocess.run(["bash", "-c", f"umask {umask} && {line}"], cwd=cwd, env=plain_env(),
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def _unreadable(root: Path) -> list[str]:
    """Files others cannot read, and folders others cannot enter, under ``root``."""
    bad = []
    for path in [root, *root.rglob("*")]:
        mode = path.stat().st_mode
        need = 0o055 if stat.S_ISDIR(mode) else 0o044
        if mode & need != need:
            bad.append(f"{path.relative_to(root)} {oct(mode & 0o777)}")
    return bad


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> Path:
    """The README's data and model commands, as typed, in one folder."""
    root = tmp_path_factory.mktemp("modes")
    for line in (
        "evr1 data synth --out data/synth --n-per-type 8 --seed 0",
        "evr1 data export --to verl data/synth/train.jsonl --out train.parquet",
        "evr1 data export --to trl data/synth/train.jsonl --out trl.jsonl",
        "evr1 data convert --from verl train.parquet --out data/train.jsonl",
        "evr1 model tiny --family qwen2_5_vl --out models/tiny",
        # A small set keeps the decode short; the manifest and report are what is checked.
        "evr1 data synth --out data/small --n-per-type 1 --seed 1",
        "evr1 data prepare data/small/train.jsonl --store ./frame-cache --model models/tiny --out prepared.jsonl",
    ):
        _run(line, root)
    return root


@pytest.mark.parametrize("name", ["data/synth", "train.parquet", "trl.jsonl", "data/train.jsonl", "models/tiny",
                                  "prepared.jsonl", "prepared.report.jsonl", "frame-cache"])
def test_command_outputs_are_readable_by_others_under_umask_022(outputs, name):
    assert (outputs / name).exists(), f"{name} was not written: {sorted(p.name for p in outputs.iterdir())}"
    assert _unreadable(outputs / name) == []


def test_a_private_umask_is_honoured(tmp_path):
    """The mode follows the umask, in both directions: 077 gives 0600."""
    _run("evr1 data synth --out synth --n-per-type 1 --seed 0", tmp_path, umask="077")
    modes = {oct(p.stat().st_mode & 0o777) for p in (tmp_path / "synth").glob("*.jsonl")}
    assert modes == {"0o600"}


def test_atomic_write_gives_the_umask_mode_and_leaves_nothing_on_error(tmp_path):
    old = os.umask(0o027)
    try:
        assert current_umask() == 0o027
        target = tmp_path / "out.jsonl"
        with atomic_write(target) as handle:
            handle.write("a\n")
        assert target.read_text() == "a\n" and target.stat().st_mode & 0o777 == 0o640
        with pytest.raises(RuntimeError), atomic_write(target) as handle:
            handle.write("half")
            raise RuntimeError("writer failed")
        assert target.read_text() == "a\n"  # the old content stays, no temporary file is left
        assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl"]
        with atomic_path(tmp_path / "sub" / "x.bin") as tmp:
            tmp.write_bytes(b"x")
        assert (tmp_path / "sub" / "x.bin").stat().st_mode & 0o777 == 0o640
    finally:
        os.umask(old)


def test_share_keeps_executable_bits(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh\n")
    os.chmod(script, 0o700)
    old = os.umask(0o022)
    try:
        share(tmp_path)
    finally:
        os.umask(old)
    assert script.stat().st_mode & 0o777 == 0o755


def test_checkpoints_are_readable_by_others(tmp_path):
    """save_checkpoint assembles in a mkdtemp folder (0700) with safetensors (0600)."""
    old = os.umask(0o022)
    try:
        final = save_checkpoint(tmp_path, 3, {"w": torch.zeros(2)}, {"step": 3})
    finally:
        os.umask(old)
    assert final.name == "step_3" and _unreadable(final) == []

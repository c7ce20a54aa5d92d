"""veRL and TRL come from a folder outside the venv (`make interop`, requirements/interop.txt),
so they never change the project's pinned stack. Only these tests see it, and only in the
child processes they start (verl_run.py, trl_run.py put it on sys.path): importing veRL/TRL (and with them accelerate, datasets, pandas)
into the pytest process would change what every later test finds importable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INTEROP_DIR = Path(os.environ.get("EVR1_INTEROP_DIR", ROOT / ".venv" / "interop"))


@pytest.fixture(scope="session")
def interop_env() -> dict[str, str]:
    if not (INTEROP_DIR / ".installed").exists():
        raise RuntimeError(
            f"veRL/TRL are not installed in {INTEROP_DIR}: run `make interop` (make test does it)"
        )
    env = {k: v for k, v in os.environ.items() if k not in ("EVR1_REWARD_URL", "EVR1_REWARD_TOKEN")}
    # The scripts append it to sys.path, after the venv's site-packages (PYTHONPATH would go
    # before them): a package in both comes from the venv, so the pinned stack always wins.
    env["EVR1_INTEROP_DIR"] = str(INTEROP_DIR)
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        WANDB_MODE="disabled",
        PYTHONWARNINGS="ignore",
    )
    return env


@pytest.fixture(scope="session")
def run_interop(interop_env):
    """``run(script, workdir, *args)``: run a script of this folder in a child process with
    the interop folder on its path, as ``script WORKDIR WORKDIR/out.json ARGS``; returns
    that JSON."""

    def run(script: str, workdir: Path, *args: str, timeout: float = 300) -> dict:
        out = workdir / "out.json"
        proc = subprocess.run(
            [sys.executable, str(Path(__file__).parent / script), str(workdir), str(out), *args],
            env=interop_env,
            cwd=workdir,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if proc.returncode != 0:
            raise AssertionError(
                f"{script} exited {proc.returncode}:\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}"
            )
        return json.loads(out.read_text())

    return run

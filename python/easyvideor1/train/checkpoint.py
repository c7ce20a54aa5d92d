"""Checkpoints: model weights (safetensors), optimizer/scheduler/sampler/RNG state, atomically.

Layout of ``<output_dir>/checkpoints/step_<N>/``: ``model.safetensors``, ``trainer_state.pt``
(tensors and plain containers only, loaded with ``weights_only=True``: never arbitrary
pickle), ``meta.json``. A checkpoint is written into a temporary folder and renamed into
place, so a crash mid-save never leaves a half checkpoint that resume would pick up.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from easyvideor1.errors import EasyVideoR1Error
from easyvideor1.files import share

_STEP_DIR = re.compile(r"^step_(\d+)$")


class CheckpointError(EasyVideoR1Error):
    pass


def rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state(), "python": repr(random.getstate()),
             "numpy": json.dumps(_numpy_state())}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    import ast

    torch.set_rng_state(state["torch"])
    random.setstate(ast.literal_eval(state["python"]))
    kind, keys, pos, has_gauss, cached = json.loads(state["numpy"])
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _numpy_state() -> list:
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return [kind, keys.tolist(), int(pos), int(has_gauss), float(cached)]


def save_checkpoint(output_dir: str | Path, step: int, model_state: dict[str, torch.Tensor],
                    trainer_state: dict[str, Any], meta: dict[str, Any] | None = None, keep: int = 2) -> Path:
    root = Path(output_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step}"
    tmp = Path(tempfile.mkdtemp(prefix=f".step_{step}.", dir=root))
    try:
        # safetensors refuses shared storage (tied embeddings): store independent copies.
        save_file({k: v.detach().to("cpu").contiguous().clone() for k, v in model_state.items()},
                  str(tmp / "model.safetensors"))
        torch.save(trainer_state, tmp / "trainer_state.pt")
        (tmp / "meta.json").write_text(json.dumps({"step": step, **(meta or {})}, indent=2))
        share(tmp)  # mkdtemp's 0700 and safetensors' 0600: others of the umask read checkpoints too
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    for old in list_checkpoints(output_dir)[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    return final


def list_checkpoints(output_dir: str | Path) -> list[Path]:
    root = Path(output_dir) / "checkpoints"
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := _STEP_DIR.match(p.name))]
    return [p for _, p in sorted(found)]


def latest_checkpoint(output_dir: str | Path) -> Path | None:
    found = list_checkpoints(output_dir)
    return found[-1] if found else None


def load_checkpoint(path: str | Path) -> tuple[int, dict[str, torch.Tensor], dict[str, Any]]:
    path = Path(path)
    try:
        meta = json.loads((path / "meta.json").read_text())
        model_state = load_file(str(path / "model.safetensors"))
        trainer_state = torch.load(path / "trainer_state.pt", weights_only=True)
    except (OSError, ValueError, RuntimeError) as exc:
        raise CheckpointError(f"{path}: unreadable checkpoint: {exc}") from exc
    return int(meta["step"]), model_state, trainer_state

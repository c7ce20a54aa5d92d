"""FSDP2 on CPU (gloo): two ranks with different modalities per rank give the same loss and
gradients as one process on the whole batch, and never hang."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from servers import free_port

from easyvideor1.video.encode import write_video

WORKER = Path(__file__).with_name("fsdp_worker.py")


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    root = tmp_path_factory.mktemp("fsdp_media")
    frames = np.zeros((8, 64, 64, 3), dtype=np.uint8)
    for t in range(8):
        frames[t, 10:40, 4 + 3 * t:34 + 3 * t] = (230, 30, 30)
    write_video(root / "clip.mp4", frames, fps=4)
    still = np.zeros((56, 56, 3), dtype=np.uint8)
    still[8:30, 8:30] = (40, 80, 240)
    Image.fromarray(still).save(root / "still.png")
    return root


def _run(world_size: int, model_dir: Path, media: Path, out: Path, timeout: float = 300) -> dict:
    port = free_port()
    procs = []
    for rank in range(world_size):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, str(WORKER), str(model_dir), str(media), str(out)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = []
    for proc in procs:
        try:
            outputs.append(proc.communicate(timeout=timeout)[0])
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            pytest.fail(f"FSDP world of {world_size} hung (killed after {timeout}s)")
    for proc, text in zip(procs, outputs):
        assert proc.returncode == 0, text[-4000:]
    return torch.load(out / f"world{world_size}.pt", weights_only=True)


def test_two_ranks_match_one(tiny_model_dir, media, tmp_path):
    single = _run(1, tiny_model_dir, media, tmp_path)
    sharded = _run(2, tiny_model_dir, media, tmp_path)
    assert sharded["loss"] == pytest.approx(single["loss"], rel=1e-5, abs=1e-7)
    assert set(sharded["grads"]) == set(single["grads"])
    vision = [n for n in single["grads"] if "visual" in n]
    assert vision and any(float(single["grads"][n].abs().sum()) > 0 for n in vision)
    for name, grad in single["grads"].items():
        torch.testing.assert_close(sharded["grads"][name], grad, rtol=1e-4, atol=1e-6, msg=name)

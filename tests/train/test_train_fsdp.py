"""FSDP2 on CPU (gloo): two ranks with different modalities per rank give the same loss and
gradients as one process on the whole batch, and never hang."""

import pytest
import torch
from fsdp_worker import make_media, run_world
from servers import free_port


@pytest.mark.parametrize("mixed", [False, True], ids=["one-modality-per-rank", "both-modalities-on-one-rank"])
def test_two_ranks_match_one(tiny_model_dir, tmp_path, mixed):
    media = make_media(tmp_path / "media")
    try:
        single = run_world(1, tiny_model_dir, media, tmp_path, port=free_port(), mixed=mixed)
        sharded = run_world(2, tiny_model_dir, media, tmp_path, port=free_port(), mixed=mixed)
    except TimeoutError as exc:
        pytest.fail(str(exc))
    assert sharded["loss"] == pytest.approx(single["loss"], rel=1e-5, abs=1e-7)
    assert set(sharded["grads"]) == set(single["grads"])
    vision = [n for n in single["grads"] if "visual" in n]
    assert vision and any(float(single["grads"][n].abs().sum()) > 0 for n in vision)
    for name, grad in single["grads"].items():
        torch.testing.assert_close(sharded["grads"][name], grad, rtol=1e-4, atol=1e-6, msg=name)

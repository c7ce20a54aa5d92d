"""Sampler, schedule, micro-batching and checkpoint units of the trainer."""

import json
import math

import pytest
import torch

from easyvideor1.algos import aggregate_loss
from easyvideor1.train.batching import token_budget_microbatches
from easyvideor1.train.checkpoint import latest_checkpoint, list_checkpoints, load_checkpoint, save_checkpoint
from easyvideor1.train.run_dir import keep_rows_through, set_aside_earlier_run
from easyvideor1.train.sampler import ResumableSampler
from easyvideor1.train.schedule import lr_factor


def test_sampler_resumes_exactly():
    a = ResumableSampler(10, 4, seed=3)
    first = [a.next_batch() for _ in range(2)]
    state = a.state_dict()
    rest = [a.next_batch() for _ in range(5)]
    b = ResumableSampler(10, 4, seed=3)
    b.load_state_dict(state)
    assert [b.next_batch() for _ in range(5)] == rest
    flat = [i for batch in first + rest[:1] for i in batch][:10]
    assert sorted(flat) == list(range(10)), "an epoch visits every item once"


def test_sampler_refuses_other_dataset():
    a = ResumableSampler(10, 4)
    with pytest.raises(ValueError, match="different data order"):
        ResumableSampler(11, 4).load_state_dict(a.state_dict())


@pytest.mark.parametrize("schedule", ["constant", "cosine", "linear"])
def test_lr_schedule_warmup_and_end(schedule):
    kw = {"warmup_steps": 4, "total_steps": 20, "schedule": schedule, "min_lr_ratio": 0.1}
    assert lr_factor(0, **kw) == pytest.approx(0.25)
    assert lr_factor(3, **kw) == pytest.approx(1.0)
    end = lr_factor(20, **kw)
    assert end == pytest.approx(1.0 if schedule == "constant" else 0.1)


def test_microbatches_respect_budget_and_cover_everything():
    lengths = [5, 100, 30, 30, 7, 64, 1, 99]
    groups = token_budget_microbatches(lengths, 128)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    for g in groups:
        assert len(g) == 1 or max(lengths[i] for i in g) * len(g) <= 128
    assert token_budget_microbatches([500], 128) == [[0]], "an over-budget sequence is kept, alone"


def test_micro_batch_losses_sum_to_the_full_batch_token_mean():
    torch.manual_seed(0)
    values = torch.randn(6, 9)
    mask = (torch.rand(6, 9) > 0.3).float()
    full = aggregate_loss(values, mask, "token-mean")
    total = mask.sum()
    parts = [aggregate_loss(values[g], mask[g], "token-mean", global_tokens=total)
             for g in token_budget_microbatches([int(m.sum()) for m in mask], 12)]
    assert math.isclose(float(sum(parts)), float(full), rel_tol=1e-6)


def test_checkpoints_are_atomic_and_pruned(tmp_path):
    for step in (1, 2, 3):
        save_checkpoint(tmp_path, step, {"w": torch.full((2,), float(step))}, {"sampler": {"epoch": step}}, keep=2)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step_2", "step_3"]
    step, model, state = load_checkpoint(latest_checkpoint(tmp_path))
    assert step == 3 and torch.equal(model["w"], torch.full((2,), 3.0)) and state["sampler"]["epoch"] == 3
    (tmp_path / "checkpoints" / ".step_9.tmp").mkdir()
    assert latest_checkpoint(tmp_path).name == "step_3", "a half-written checkpoint is never picked"


def test_resumed_metrics_keep_each_step_once(tmp_path):
    """Resumed from step 2: the killed run's rows of steps 3-4 (and its torn last line) go, the
    validation row of step 2 (logged before the checkpoint) stays."""
    path = tmp_path / "metrics.jsonl"
    rows = [{"step": 0, "val/accuracy": 0.1}, *({"step": k, "reward/overall": k} for k in (1, 2)),
            {"step": 2, "val/accuracy": 0.5}, *({"step": k, "reward/overall": k} for k in (3, 4))]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 5, "rew')
    assert keep_rows_through(path, 2) == 3
    assert [json.loads(line) for line in path.read_text().splitlines()] == rows[:4]
    assert keep_rows_through(path, 2) == 0 and keep_rows_through(tmp_path / "missing.jsonl", 2) == 0


def test_a_new_run_sets_the_earlier_run_aside(tmp_path):
    """resume=never (or no checkpoint): the earlier run's metrics, checkpoints, curves and
    TensorBoard files move to earlier-N/, the next free N; the log file stays."""
    assert set_aside_earlier_run(tmp_path / "fresh") is None
    for n in (1, 2):
        (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": n}) + "\n")
        save_checkpoint(tmp_path, n, {"w": torch.zeros(1)}, {})
        (tmp_path / "evr1.log").write_text("log\n")
        moved = set_aside_earlier_run(tmp_path)
        assert moved == tmp_path / f"earlier-{n}"
        assert sorted(p.name for p in moved.iterdir()) == ["checkpoints", "metrics.jsonl"]
        assert json.loads((moved / "metrics.jsonl").read_text()) == {"step": n}
        assert latest_checkpoint(tmp_path) is None and (tmp_path / "evr1.log").is_file()
    assert set_aside_earlier_run(tmp_path) is None


def test_actor_model_options_apply(tiny_model_dir):
    """attention=packed routes the vision tower through the packed path; keep_activations turns
    checkpointing off for the requested share of layers."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    from easyvideor1.config.schema import ActorConfig
    from easyvideor1.models.attention import VISION_NAME
    from easyvideor1.train.actor import load_vlm

    cfg = ActorConfig(attention="packed", keep_activations_lm=1.0, keep_activations_vision=0.5)
    model = load_vlm(str(tiny_model_dir), torch.device("cpu"), trainable=True, gradient_checkpointing=True, cfg=cfg)
    assert model.config.vision_config._attn_implementation == VISION_NAME
    layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
    vision = [m for m in layers if type(m).__name__.endswith("VisionBlock")]
    text = [m for m in layers if m not in vision]
    assert not any(m.gradient_checkpointing for m in text)
    assert sum(m.gradient_checkpointing for m in vision) == len(vision) - len(vision) // 2

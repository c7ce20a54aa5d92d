"""The embedded RL loop end to end on a tiny model with real vLLM (CPU), and checkpoint/resume."""

import json

import pytest
import torch

from easyvideor1.config import load_config
from easyvideor1.data.synth import generate_synthetic
from easyvideor1.train.checkpoint import latest_checkpoint

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def demo_data(tmp_path_factory):
    out = tmp_path_factory.mktemp("loop_data")
    generate_synthetic(out, 6, seed=1, types=["demo_colour", "demo_choice", "image_boolean", "text_math"],
                       offline_type=["demo_choice"], offline_fraction=1.0, val_fraction=0.34, progress=False)
    return out


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    from easyvideor1.rollout.vllm_engine import VLLMEngine

    eng = VLLMEngine(tiny_model_dir, max_model_len=1024, seed=0)
    yield eng
    eng.close()


def _config(tmp_path, data, model_dir, *extra):
    return load_config(None, [
        f"data.train_files={data / 'train.jsonl'}", f"data.val_files={data / 'val.jsonl'}",
        "data.max_prompt_length=1000", "data.max_response_length=8", "data.rollout_batch_size=4",
        "data.video_fps=4", "data.video_max_frames=4", "data.video_min_frames=4",
        "data.video_min_pixels=3136", "data.video_max_pixels=3136", "data.image_min_pixels=784",
        "data.image_max_pixels=3136", f"data.frame_cache.store={tmp_path / 'cache'}",
        f"worker.actor.model_path={model_dir}", "worker.actor.optim.lr=1e-3", "worker.actor.mini_batch_size=2",
        "worker.actor.gradient_checkpointing=false", "worker.rollout.n=3", "algorithm.mix_policy.enable=true",
        f"trainer.output_dir={tmp_path / 'run'}", "trainer.loggers=[jsonl]", "trainer.val_every=0",
        "trainer.val_before_train=false", *extra])


def test_loop_trains_logs_checkpoints_and_exports(tmp_path, demo_data, tiny_model_dir, engine):
    from transformers import AutoModelForImageTextToText

    from easyvideor1.train.trainer import RLTrainer

    cfg = _config(tmp_path, demo_data, tiny_model_dir, "trainer.total_steps=2", "trainer.save_every=1")
    trainer = RLTrainer.from_config(cfg, engine=engine)
    before = {k: v.clone() for k, v in trainer.actor.full_state_dict().items()}
    result = trainer.fit()
    assert result["steps"] == 2
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "actor/pg_loss" in r]
    assert [r["step"] for r in steps] == [1, 2]
    for key in ("reward/overall", "reward/accuracy", "reward/format", "response/length_mean", "actor/grad_norm",
                "actor/entropy", "actor/pg_clipfrac", "time/rollout_s", "time/reward_s", "time/log_prob_s",
                "time/update_s", "perf/tokens_per_s", "cache/hit_rate", "mix_policy/groups_with_offline"):
        assert key in steps[0], key
    assert steps[0]["cache/hit_rate"] == 1.0, "frames come from the prebuilt cache"
    assert any(r["mix_policy/groups_with_offline"] > 0 for r in steps)
    assert result["last_validation"] is not None and 0.0 <= result["last_validation"].accuracy <= 1.0
    after = trainer.actor.full_state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before), "the update changed the policy"
    assert engine.policy_version == 2
    assert (tmp_path / "run" / "checkpoints" / "step_2").is_dir()
    assert (tmp_path / "run" / "curves.png").stat().st_size > 0
    exported = trainer.export(tmp_path / "export")
    trainer.close()
    model = AutoModelForImageTextToText.from_pretrained(exported)
    for name, value in model.state_dict().items():
        if name in after:
            torch.testing.assert_close(value, after[name], msg=name)


def test_resume_restores_exact_state(tmp_path, demo_data, tiny_model_dir, engine):
    from easyvideor1.train.trainer import RLTrainer

    cfg = _config(tmp_path, demo_data, tiny_model_dir, "trainer.total_steps=1", "trainer.resume=never")
    first = RLTrainer.from_config(cfg, engine=engine)
    first.fit()
    weights = first.actor.full_state_dict()
    optim = first.actor.optimizer.state_dict()
    lr = first.actor.scheduler.get_last_lr()
    upcoming = first.sampler.next_batch()
    first.close()

    resumed = RLTrainer.from_config(_config(tmp_path, demo_data, tiny_model_dir, "trainer.total_steps=2",
                                "trainer.resume=auto"), engine=engine)
    assert resumed.step == 1
    for name, value in resumed.actor.full_state_dict().items():
        assert torch.equal(value, weights[name]), name
    state = resumed.actor.optimizer.state_dict()["state"]
    for index, slots in optim["state"].items():
        for slot, tensor in slots.items():
            assert torch.equal(torch.as_tensor(state[index][slot]), torch.as_tensor(tensor)), (index, slot)
    assert resumed.actor.scheduler.get_last_lr() == lr
    assert resumed.sampler.next_batch() == upcoming, "the data loader continues where it stopped"
    assert engine.policy_version == 1
    resumed.fit()
    assert resumed.step == 2
    resumed.close()
    run = tmp_path / "run"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "actor/pg_loss" in r] == [1, 2], "one file, each step once"

    # Not resumed: the earlier run's files move aside, so its checkpoints and metrics never mix in.
    fresh = RLTrainer.from_config(_config(tmp_path, demo_data, tiny_model_dir, "trainer.total_steps=2",
                                          "trainer.resume=never"), engine=engine)
    try:
        assert fresh.step == 0 and latest_checkpoint(run) is None
        assert (run / "earlier-1" / "checkpoints" / "step_2").is_dir()
        assert (run / "earlier-1" / "metrics.jsonl").read_text().splitlines() == [json.dumps(r) for r in rows]
        assert (run / "metrics.jsonl").read_text() == ""
    finally:
        fresh.close()


def test_strict_check_names_the_sample(tiny_model_dir, demo_data):
    """Dropping one video placeholder token must fail before any forward, naming the sample."""
    from easyvideor1.cache import FrameLoader
    from easyvideor1.models.forward import collate_forward_batch, compute_log_probs
    from easyvideor1.models.inputs import PlaceholderMismatchError, PromptBuilder, VideoInput
    from easyvideor1.train.actor import load_vlm
    from easyvideor1.video.metadata import VideoParams

    builder = PromptBuilder.from_pretrained(str(tiny_model_dir))
    rows = [json.loads(line) for line in (demo_data / "train.jsonl").read_text().splitlines()]
    video = next(r for r in rows if r.get("videos"))
    loader = FrameLoader(None, VideoParams(fps=4, max_frames=4, min_frames=4, min_pixels=3136, max_pixels=3136))
    frames, meta = loader.load_video(demo_data / video["videos"][0])
    prompt = builder.build(video["problem"], [VideoInput(frames, meta)], sample_id="broken-sample")
    pad = builder.processor.video_token_id
    at = prompt.prompt_ids.index(pad)
    prompt.prompt_ids = prompt.prompt_ids[:at] + prompt.prompt_ids[at + 1:]
    prompt.mm_token_type_ids = prompt.mm_token_type_ids[:at] + prompt.mm_token_type_ids[at + 1:]
    prompt.position_ids = prompt.position_ids[:, :-1]
    batch = collate_forward_batch([prompt], [[1, 2]], pad_token_id=0)
    model = load_vlm(str(tiny_model_dir), torch.device("cpu"), trainable=False, gradient_checkpointing=False)
    with pytest.raises(PlaceholderMismatchError, match="broken-sample"):
        compute_log_probs(model, batch)


def test_engine_log_probs_serve_as_old_log_probs(tmp_path, demo_data, tiny_model_dir, engine):
    """Without recompute, vLLM's log-probs are the old policy's: the first mini-batch's ratio is
    1 up to the engine/trainer parity (1e-4 per token), so the measured PPO KL is ~0."""
    from easyvideor1.train.trainer import RLTrainer

    cfg = _config(tmp_path, demo_data, tiny_model_dir, "trainer.total_steps=1",
                  "worker.actor.recompute_old_log_probs=false", "algorithm.mix_policy.enable=false",
                  "worker.actor.ppo_epochs=1", "worker.actor.mini_batch_size=4")
    trainer = RLTrainer.from_config(cfg, engine=engine)
    metrics = trainer.train_step()
    trainer.close()
    assert abs(metrics["actor/ppo_kl"]) < 1e-3
    assert metrics["actor/pg_clipfrac"] == 0.0


def test_adaptive_kl_coefficient_moves_once_per_step_by_the_batch_kl(tmp_path, demo_data, tiny_model_dir, engine):
    """KL as a reward penalty with the adaptive controller: one update per step, from the batch KL
    that the penalty measured (n_steps = sequences), as in Ziegler et al. A second update with a
    statistic that does not exist (read as 0) pushed the coefficient down every step."""
    from easyvideor1.train.trainer import RLTrainer

    cfg = _config(tmp_path, demo_data, tiny_model_dir, "trainer.total_steps=2", "algorithm.kl.enable=true",
                  "algorithm.kl.use_as=reward", "algorithm.kl.adaptive=true", "algorithm.kl.coef=0.05",
                  "algorithm.kl.target=1e-4", "algorithm.kl.horizon=40")
    trainer = RLTrainer.from_config(cfg, engine=engine)
    try:
        for _ in range(2):
            before = trainer.kl_ctrl.value
            metrics = trainer.train_step()
            kl = metrics["kl/reward_kl_penalty"]
            sequences = (4 - metrics["data/filtered_samples"]) * cfg.worker.rollout.n
            assert metrics["kl/reward_kl_penalty_coeff"] == before
            error = min(max(kl / cfg.algorithm.kl.target - 1.0, -0.2), 0.2)
            assert trainer.kl_ctrl.value == pytest.approx(before * (1 + error * sequences / 40), rel=1e-12)
    finally:
        trainer.close()


def test_difficulty_filter_accounts_for_every_question(tmp_path, demo_data, tiny_model_dir, engine):
    import json as _json

    from easyvideor1.cache import FrameLoader
    from easyvideor1.data import load_samples
    from easyvideor1.models.families import frame_params
    from easyvideor1.prompts.renderer import PromptRenderer
    from easyvideor1.rewards.client import open_reward_client
    from easyvideor1.rollout.stage import EngineRolloutStage
    from easyvideor1.train.difficulty import filter_by_pass_rate

    cfg = _config(tmp_path, demo_data, tiny_model_dir)
    video, image = frame_params(cfg, engine.family)
    stage = EngineRolloutStage(engine, FrameLoader(None, video, image), PromptRenderer(), open_reward_client(None),
                         max_prompt_length=1000, max_response_length=8)
    out = tmp_path / "kept.jsonl"
    report = filter_by_pass_rate(stage, demo_data / "train.jsonl", out, k=3, max_tokens=8)
    total = len(load_samples(demo_data / "train.jsonl"))
    assert report.total == total == report.kept + report.too_easy + report.too_hard + len(report.failed)
    assert len(report.pass_rates) == total - len(report.failed)
    kept_ids = [_json.loads(line)["problem_id"] for line in out.read_text().splitlines()]
    assert kept_ids == [pid for pid, rate in report.pass_rates.items() if 0.0 < rate < 1.0]
    assert _json.loads((tmp_path / "kept.jsonl.report.json").read_text())["total"] == total


def test_trainer_refuses_a_torchrun_world(tmp_path, demo_data, tiny_model_dir, monkeypatch):
    """Each torchrun rank would roll out its own batch, but the actor splits one shared batch:
    the trainer says how to run on several GPUs instead of failing at the first update."""
    from easyvideor1.errors import ConfigError
    from easyvideor1.train.trainer import RLTrainer

    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ConfigError, match=r"WORLD_SIZE=2.*distributed\.train_ranks"):
        RLTrainer.from_config(_config(tmp_path, demo_data, tiny_model_dir, "trainer.total_steps=1"))

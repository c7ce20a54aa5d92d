"""Training on multi-turn trajectories: offline tool-using trajectories parsed and run again by
the real tool kit, the loss mask (tool tokens out of the loss, log-probs over the whole
sequence), the actor's update on batches mixing single- and multi-turn items (padded and
packed, pixels re-fetched by ref), the engine's log-probs equal to the trainer's on policy
tokens, the per-call cost and the tool metrics, on a tiny Qwen2.5-VL over a real video."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from fsdp_worker import make_media

from easyvideor1.config import load_config
from easyvideor1.models.inputs import PromptBuilder, VideoInput
from easyvideor1.rollout.base import RolloutError
from easyvideor1.rollout.tool_trajectory import offline_tool_trajectory, split_policy_turns
from easyvideor1.rollout.tools.base import ToolVideo
from easyvideor1.train.actor import TrainItem

CALL_FRAMES = '<tool_call>\n{"name": "get_frames", "arguments": {"start_s": 0.0, "end_s": 1.0, "fps": 2}}\n</tool_call>'
CALL_ZOOM = '<tool_call>\n{"name": "zoom", "arguments": {"t_s": 0.5, "box": [0, 0, 32, 32]}}\n</tool_call>'
ANSWER = "<answer>1</answer>"
OFFLINE = f"<think>look</think>{CALL_FRAMES}{CALL_ZOOM}{ANSWER}"


def _config(model_dir, tmp, *extra):
    return load_config(None, [
        f"worker.actor.model_path={model_dir}", "worker.actor.optim.lr=1e-12",
        "worker.actor.gradient_checkpointing=false", "data.max_prompt_length=4000",
        "data.max_response_length=700", "data.video_fps=4", "data.video_max_frames=4", "data.video_min_frames=4",
        "data.video_min_pixels=3136", "data.video_max_pixels=3136", "data.image_min_pixels=784",
        "data.image_max_pixels=3136", "worker.rollout.tools.enabled=true", "worker.rollout.tools.frames_per_call=2",
        "worker.rollout.tools.frames_per_trajectory=4", "worker.rollout.tools.window_max_pixels=3136",
        "worker.rollout.tools.zoom_max_pixels=3136", "worker.rollout.tools.call_cost=0.125",
        f"trainer.output_dir={tmp / 'run'}", "trainer.loggers=[jsonl]", *extra])


@pytest.fixture(scope="module")
def world(tiny_model_dir, tmp_path_factory):
    """Config, prompt builder, tool kit, the video as the tools see it, and a tools-on prompt."""
    from easyvideor1.rollout.tools.kit import make_tool_kit
    from easyvideor1.train.media import store_loader

    tmp = tmp_path_factory.mktemp("trajectory_training")
    media = make_media(tmp / "media")
    cfg = _config(tiny_model_dir, tmp)
    builder = PromptBuilder.from_pretrained(str(tiny_model_dir))
    kit = make_tool_kit(cfg, builder.family)
    loader = store_loader(cfg, builder.family)
    frames, meta = loader.load_video(media / "clip.mp4")
    video = ToolVideo(path=str(media / "clip.mp4"), key=None, duration_s=float(meta.duration))
    prompt = builder.build("<video>\nHow many squares are there?", [VideoInput(frames, meta)], sample_id="q",
                           tools=kit.schemas())
    plain = builder.build("<video>\nDoes it move?", [VideoInput(frames, meta)], sample_id="plain")
    found = {"cfg": cfg, "builder": builder, "kit": kit, "video": video, "prompt": prompt, "plain": plain,
             "media": media, "tmp": tmp}
    found["trajectory"] = _offline(found)  # built once: the tests below copy it
    yield found
    kit.close()


def _offline(world, text=OFFLINE, limit=700):
    return offline_tool_trajectory(text, world["prompt"], world["builder"], world["kit"], world["video"],
                                   eos_token_id=world["builder"].tokenizer.eos_token_id, max_response_length=limit)


def _runs(mask):
    runs = []
    for value in mask:
        if not runs or runs[-1][0] != value:
            runs.append([value, 0])
        runs[-1][1] += 1
    return [value for value, _ in runs]


def test_offline_tool_trajectory_is_split_run_again_and_masked(world):
    builder, kit = world["builder"], world["kit"]
    assert split_policy_turns(OFFLINE, kit.stop_strings) == [f"<think>look</think>{CALL_FRAMES}", CALL_ZOOM, ANSWER]
    trajectory = world["trajectory"]
    assert (trajectory.turns, trajectory.tool_calls, trajectory.tool_errors) == (3, 2, 0)
    assert trajectory.frames_fetched == 2 + 1 and len(trajectory.videos) == 1 and len(trajectory.images) == 1
    assert trajectory.final_text == ANSWER
    # Loss 1 on the three assistant turns, 0 on the two tool turns between them.
    assert _runs(trajectory.loss_mask) == [1, 0, 1, 0, 1]
    ids = torch.tensor(trajectory.token_ids)
    policy = torch.tensor(trajectory.loss_mask, dtype=torch.bool)
    eos = builder.tokenizer.eos_token_id
    assert builder.tokenizer.decode(ids[policy].tolist()[:-1]) == OFFLINE and ids[-1] == eos and policy[-1]
    vision = {builder.processor.video_token_id, builder.processor.image_token_id}
    assert set(ids[~policy].tolist()) >= vision and not set(ids[policy].tolist()) & vision
    # The tool media are real: the frames the kit fetches again by the trajectory's refs.
    again = kit.refetch(trajectory.media_refs[0])
    assert again.frames.shape[0] == 2 and (again.frames == trajectory.videos[0].frames).all()
    assert "pixel_values_videos" in trajectory.tensors and "pixel_values" in trajectory.tensors

    assert _offline(world, f"<think>no tools</think>{ANSWER}") is None  # the single-turn offline path
    with pytest.raises(RolloutError, match="ends with a tool call"):
        _offline(world, f"<think>x</think>{CALL_FRAMES}")
    with pytest.raises(RolloutError, match="leaves no room"):
        _offline(world, limit=40)
    refused = _offline(world, CALL_FRAMES.replace('"end_s": 1.0', '"end_s": 99.0') + ANSWER)
    assert (refused.tool_calls, refused.tool_errors, refused.frames_fetched, len(refused.videos)) == (1, 1, 0, 0)
    assert refused.tensors == {}


def _items(world):
    """A multi-turn item, a single-turn video item and a single-turn text item, with advantages."""
    builder, trajectory = world["builder"], dataclasses.replace(world["trajectory"])
    text_prompt = builder.build("What is two plus two?", sample_id="text")
    generator = torch.Generator().manual_seed(3)
    items = [TrainItem(uid="q", prompt=world["prompt"], response=list(trajectory.token_ids), trajectory=trajectory),
             TrainItem(uid="plain", prompt=world["plain"], response=[5, 9, 17, 3]),
             TrainItem(uid="text", prompt=text_prompt, response=[11, 4, 8])]
    for item in items:
        item.advantages = torch.randn(len(item.response), generator=generator)
    return items


def _actor(world, *extra):
    from easyvideor1.train.actor import Actor
    from easyvideor1.train.distributed import init_world

    cfg = _config(world["cfg"].worker.actor.model_path, world["tmp"], *extra)
    torch.manual_seed(0)
    return Actor.from_config(cfg, init_world("cpu"), pad_token_id=0)


def test_loss_covers_policy_tokens_only(world):
    actor = _actor(world)
    items = _items(world)
    for item, lp in zip(items, actor.compute_log_probs(items)):
        item.old_log_probs = lp
    trajectory = items[0].trajectory
    tool_at = trajectory.loss_mask.index(0)
    policy_at = len(trajectory.loss_mask) - 2  # in the answer turn
    assert trajectory.loss_mask[policy_at] == 1
    # Log-probs of the whole sequence: tool tokens have theirs too (the engine's are 0.0 there).
    assert len(items[0].old_log_probs) == len(trajectory.token_ids) and items[0].old_log_probs[tool_at] != 0
    agg = {"global_tokens": float(sum(it.policy_tokens for it in items)), "global_seqs": 3.0,
           "loss_scale_factor": 700, "dp_size": 1}

    def loss(changed_items):
        out = actor._micro_step(changed_items, agg, weight=1.0)
        actor.optimizer.zero_grad(set_to_none=True)
        return out["actor/pg_loss"], out["_tokens"]

    base, tokens = loss(items)
    assert tokens == trajectory.policy_tokens + 4 + 3
    tool = ~torch.tensor(trajectory.loss_mask, dtype=torch.bool)

    def changed(where: torch.Tensor) -> list[TrainItem]:
        first = items[0]
        return [dataclasses.replace(first, old_log_probs=first.old_log_probs + 0.5 * where,
                                    advantages=first.advantages + 2.0 * where), *items[1:]]

    # Old log-probs and advantages changed on every tool token: the loss is the same, bit for bit.
    assert loss(changed(tool.float()))[0] == base
    one_policy_token = torch.zeros(len(tool))
    one_policy_token[policy_at] = 1.0
    assert loss(changed(one_policy_token))[0] != base


def test_update_mixes_single_and_multi_turn_items_padded_and_packed(world):
    stats, log_probs = {}, {}
    for packed in (False, True):
        actor = _actor(world, f"worker.actor.padding_free={str(packed).lower()}", "worker.actor.mini_batch_size=3")
        embedded = actor.compute_log_probs(_items(world))
        items = _items(world)
        # The trajectory travels without its tool media's pixels (as over the wire): the actor
        # fetches them again by its media refs, through the run's tool kit.
        items[0].trajectory = dataclasses.replace(items[0].trajectory, tensors={})
        log_probs[packed] = actor.compute_log_probs(items)
        assert items[0].trajectory.tensors, "the tool media's pixels were fetched again"
        for a, b in zip(log_probs[packed], embedded):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
        for item, lp in zip(items, log_probs[packed]):
            item.old_log_probs = lp
        stats[packed] = actor._optimizer_step(items)
        update = actor.update(items, seed=0)
        assert update["actor/grad_norm"] > 0 and all(torch.isfinite(torch.tensor(v)) for v in update.values())
    for a, b in zip(log_probs[False], log_probs[True]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert stats[True]["actor/pg_loss"] == pytest.approx(stats[False]["actor/pg_loss"], rel=1e-4, abs=1e-6)
    assert stats[True]["actor/grad_norm"] == pytest.approx(stats[False]["actor/grad_norm"], rel=1e-4)


def test_engine_log_probs_equal_the_trainers_on_policy_tokens(world, tiny_model_dir):
    """Two policy turns sampled by the HF engine around a real tool turn: its log-probs equal
    the trainer's forward of the whole trajectory, padded and packed, at every policy token."""
    from easyvideor1.models import attention
    from easyvideor1.models.forward import collate_forward_batch, compute_log_probs
    from easyvideor1.models.packing import pack_forward_batch, packed_log_probs
    from easyvideor1.models.trajectory import TrajectoryBuilder
    from easyvideor1.rollout.base import RolloutRequest, SamplingConfig
    from easyvideor1.rollout.hf_engine import HFEngine

    engine = HFEngine(tiny_model_dir)
    attention.use_packed_attention(engine.model)
    engine.model.config._attn_implementation = attention.register()
    kit, prompt = world["kit"], world["prompt"]
    sampling = SamplingConfig(max_tokens=6, temperature=1.0, seed=0, forbid_vision_tokens=True)
    out = TrajectoryBuilder(engine.builder, prompt)
    first = engine.generate([RolloutRequest("t0", messages="turn", inputs=prompt)], sampling)[0].completions[0]
    out.add_policy(first.token_ids, first.logprobs, text=first.text)
    outcome = kit.session(world["video"]).run(CALL_ZOOM)
    out.add_tool(out.tool_segment(kit.tool_turn_text(outcome), outcome.videos, outcome.images), refs=outcome.refs)
    second = engine.generate([RolloutRequest("t1", messages="turn", inputs=out.full_inputs())],
                             sampling)[0].completions[0]
    out.add_policy(second.token_ids, second.logprobs, text=second.text)
    trajectory, engine_lp = out.trajectory(), torch.tensor(out.logprobs)
    policy = torch.tensor(trajectory.loss_mask, dtype=torch.bool)
    assert policy.sum() == len(first.token_ids) + len(second.token_ids) and (~policy).sum() > 0
    with torch.no_grad():
        padded, _ = compute_log_probs(engine.model, collate_forward_batch(
            [prompt], [trajectory.token_ids], pad_token_id=0, trajectories=[trajectory]))
        packed, _ = packed_log_probs(engine.model, pack_forward_batch(
            [prompt], [trajectory.token_ids], trajectories=[trajectory]))
    for trainer_lp in (padded[0], packed[0]):
        torch.testing.assert_close(trainer_lp[policy], engine_lp[policy], rtol=1e-4, atol=1e-4)
    engine.close()


def _write_data(world):
    path = world["tmp"] / "tools.jsonl"
    rows = [
        {"problem_id": "multi", "problem": "<video>\nHow many squares?", "answer": "1", "problem_type": "numerical",
         "videos": [str(world["media"] / "clip.mp4")], "has_offline_trajectory": True, "offline_output": OFFLINE},
        {"problem_id": "single", "problem": "<video>\nHow many squares?", "answer": "1",
         "problem_type": "numerical", "videos": [str(world["media"] / "clip.mp4")], "has_offline_trajectory": True,
         "offline_output": f"<think>one</think>{ANSWER}"},
        {"problem_id": "bad", "problem": "<video>\nHow many squares?", "answer": "1", "problem_type": "numerical",
         "videos": [str(world["media"] / "clip.mp4")], "has_offline_trajectory": True,
         "offline_output": f"<think>x</think>{CALL_FRAMES}"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_train_step_with_tools_costs_calls_and_reports_tool_metrics(world, tiny_model_dir):
    """One RL step with tools on (HF engine, multi-turn driver, mix-policy): the multi-turn
    offline trajectory pays the call cost, a bad one is filtered, the update runs on single- and
    multi-turn responses, and the step's metrics show the tool use."""
    from easyvideor1.rollout.hf_engine import HFEngine
    from easyvideor1.rollout.stage import EngineRolloutStage
    from easyvideor1.train.metrics import read_metrics
    from easyvideor1.train.trainer import RLTrainer

    data = _write_data(world)
    cfg = _config(tiny_model_dir, world["tmp"], f"data.train_files={data}", "data.rollout_batch_size=3",
                  "data.shuffle=false", "worker.rollout.n=2", "algorithm.mix_policy.enable=true",
                  "trainer.total_steps=1", "trainer.val_before_train=false", "trainer.val_every=0",
                  "worker.rollout.tools.max_tokens_per_turn=12", "worker.actor.mini_batch_size=4")
    engine = HFEngine(tiny_model_dir)
    trainer = RLTrainer.from_config(cfg, engine=engine)
    try:
        assert isinstance(trainer.stage, EngineRolloutStage) and trainer.stage.kit is not None
        seen: dict = {}
        run = trainer.stage.run

        def recording_run(*args, **kwargs):  # keep the round's groups to check them below
            result = run(*args, **kwargs)
            seen["result"] = result
            return result

        trainer.stage.run = recording_run
        metrics = trainer.train_step()
        trainer.metrics.log(trainer.step, metrics)
    finally:
        trainer.close()
        engine.close()
    result = seen["result"]
    assert [pid for pid, _ in result.filtered] == ["bad"]
    assert "ends with a tool call" in result.filtered[0][1]
    groups = {g.sample.problem_id: g for g in result.groups}
    multi, single = groups["multi"], groups["single"]
    assert multi.is_offline == [False, True] and single.is_offline == [False, True]
    offline = multi.trajectory(1)
    assert offline is not None and offline.tool_calls == 2 and multi.texts[1] == ANSWER
    assert single.trajectory(1) is None  # a plain offline text stays single-turn
    for group in (multi, single):  # online responses come from the multi-turn driver
        assert group.trajectory(0) is not None and group.responses[0] == group.trajectory(0).token_ids
    from easyvideor1.rewards.client import ScoreItem, open_reward_client

    with open_reward_client(None, cfg.worker.reward) as client:
        plain = client.score([ScoreItem(id="x", problem_type="numerical", response=ANSWER, ground_truth="1")])[0]
    assert multi.rewards[1].overall == pytest.approx(plain.overall - 2 * 0.125)
    assert single.rewards[1].overall == pytest.approx(plain.overall)  # no call, no cost
    online_calls = [g.trajectory(0).tool_calls for g in (multi, single)]
    assert metrics["tools/calls_per_trajectory"] == pytest.approx(sum(online_calls) / 2)
    for key in ("tools/frames_fetched", "tools/turns", "tools/error_rate", "tools/call_share",
                "response/policy_tokens_mean", "actor/pg_loss", "actor/grad_norm"):
        assert key in metrics, key
    assert metrics["tools/turns"] >= 1
    logged = read_metrics(world["tmp"] / "run" / "metrics.jsonl")[-1]
    assert logged["tools/calls_per_trajectory"] == metrics["tools/calls_per_trajectory"]


def test_tool_metrics_count_online_trajectories():
    from easyvideor1.train.metrics import ToolUse, tool_metrics

    uses = [ToolUse(calls=2, frames=5, turns=3, errors=1, accuracy=1.0),
            ToolUse(calls=1, frames=2, turns=2, errors=0, accuracy=0.0),
            ToolUse(calls=0, frames=0, turns=1, errors=0, accuracy=0.5),
            ToolUse(calls=0, frames=0, turns=1, errors=0, accuracy=None)]
    assert tool_metrics(uses) == {
        "tools/calls_per_trajectory": 0.75, "tools/frames_fetched": 1.75, "tools/turns": 1.75,
        "tools/call_share": 0.5, "tools/error_rate": 1 / 3, "tools/accuracy_with_call": 0.5,
        "tools/accuracy_without_call": 0.5}
    no_calls = tool_metrics(uses[2:], prefix="")
    assert no_calls["error_rate"] == 0.0 and "accuracy_with_call" not in no_calls
    assert tool_metrics([]) == {}


@pytest.mark.parametrize("estimator", ["reinforce_plus_plus", "grpo"])
def test_advantages_skip_tool_turns(estimator):
    """A trajectory's earlier policy turns get the advantage the same tokens would get side by
    side: the tool turn between them neither resets the return nor enters the whitening."""
    from easyvideor1.algos import compute_advantage
    from easyvideor1.train.trainer import policy_token_advantages

    holes = torch.tensor([[1, 1, 0, 0, 1, 1], [1, 1, 1, 0, 0, 0], [1, 0, 0, 1, 0, 0]], dtype=torch.float32)
    side_by_side = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 0, 0]], dtype=torch.float32)
    rewards = torch.zeros_like(holes)
    rewards[0, 5], rewards[1, 2], rewards[2, 3] = 1.0, 0.0, 0.5
    compact_rewards = torch.zeros_like(side_by_side)
    compact_rewards[0, 3], compact_rewards[1, 2], compact_rewards[2, 1] = 1.0, 0.0, 0.5
    uids = ["a", "a", "a"]
    advantages, _ = policy_token_advantages(estimator, rewards, holes, uids, gamma=0.9)
    expected, _ = compute_advantage(estimator, compact_rewards, side_by_side, uids, gamma=0.9)
    assert (advantages[holes == 0] == 0).all()
    for row in range(3):
        torch.testing.assert_close(advantages[row][holes[row].bool()], expected[row][side_by_side[row].bool()])
    assert advantages[0, 0] != 0  # the first turn still sees the final reward

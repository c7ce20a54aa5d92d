"""The remote rollout stage against real rollout worker processes (vLLM on the tiny model), a
private Redis, the frame-cache service and the reward service, and what happens when parts fail.

Two workers serve one namespace for the whole module; every test builds its own stage (a new
run, so a new version board: the workers follow it, resetting to the base model first).
The worker-kill test runs last: it ends one of the two workers.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis as redis_client
import torch
from dist_helpers import log_tail, make_config, make_data, read_status, start_worker, wait_for
from safetensors.torch import load_file
from servers import redis_server, stop_process

from easyvideor1.cache.builder import build_cache
from easyvideor1.config.schema import MixPolicyConfig
from easyvideor1.data import load_samples
from easyvideor1.models.families import frame_params
from easyvideor1.models.inputs import PromptBuilder
from easyvideor1.queue import key_prefix
from easyvideor1.rollout.base import SamplingConfig
from easyvideor1.rollout.remote_stage import QueueOutageError, RemoteRolloutTimeout
from easyvideor1.train.parts import remote_rollout_parts
from services.frame_cache.launch import FrameCacheServer
from services.reward.launch import RewardServer

NAMESPACE = "faults"
SAMPLING = SamplingConfig(max_tokens=16, temperature=1.0)
MIX = MixPolicyConfig(enable=True)


@dataclass
class Infra:
    work: Path
    data: Path
    model: Path
    redis: object
    frame_cache: FrameCacheServer
    reward: RewardServer
    workers: list
    builder: PromptBuilder
    samples: list

    @property
    def weights(self) -> str:
        return str(self.work / "weights")


@pytest.fixture(scope="module")
def infra(tmp_path_factory, tiny_model_dir):
    work = tmp_path_factory.mktemp("dist-faults")
    data = make_data(work / "data")
    builder = PromptBuilder.from_pretrained(tiny_model_dir)
    video, image = frame_params(make_config(data, tiny_model_dir, work / "probe"), builder.family)
    for name in ("train.jsonl", "val.jsonl"):  # what the frame-cache service serves
        build_cache(data / name, str(work / "frames"), video_params=video, image_params=image, workers=1,
                    progress=False)
    frame_cache = FrameCacheServer(str(work / "frames"))
    reward = RewardServer(["--workers", "1"])
    with redis_server() as redis:
        frame_cache.start()
        reward.start()
        workers = [start_worker(tiny_model_dir, redis.url, NAMESPACE, work, f"w{i}", reward_url=reward.url,
                                frame_store=frame_cache.url, weights_store=str(work / "weights"), batch_size=2)
                   for i in range(2)]
        try:
            for (proc, status), name in zip(workers, ("w0", "w1")):
                def ready(proc=proc, status=status, name=name):
                    if proc.poll() is not None:
                        raise RuntimeError(f"worker {name} exited:\n{log_tail(work / f'{name}.log')}")
                    return read_status(status).get("state") == "ready"
                wait_for(ready, 180, f"worker {name} ready")
            samples = load_samples(data / "train.jsonl") + load_samples(data / "val.jsonl")
            yield Infra(work, data, Path(tiny_model_dir), redis, frame_cache, reward, workers, builder, samples)
        finally:
            for proc, _ in workers:  # SIGTERM all first: they wind down in parallel
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            for proc, _ in workers:
                stop_process(proc, grace=20)
            reward.close()
            frame_cache.close()


def make_stage(infra: Infra, name: str, **extra):
    settings = {"distributed__queue_url": infra.redis.url, "distributed__namespace": NAMESPACE,
                "distributed__weights_store": infra.weights, "distributed__result_timeout_s": 180,
                "data__frame_cache__store": infra.frame_cache.url, **extra}
    cfg = make_config(infra.data, infra.model, infra.work / f"run-{name}", **settings)
    _builder, loader, stage, sync = remote_rollout_parts(cfg, [])
    stage.sweep_s = 2.0
    return stage, sync, loader


def policy(infra: Infra, seed: int) -> dict[str, torch.Tensor]:
    """The tiny model's weights with small noise: a distinct policy version."""
    g = torch.Generator().manual_seed(seed)
    state = load_file(str(infra.model / "model.safetensors"))
    return {k: v + 0.01 * torch.randn(v.shape, generator=g) if v.is_floating_point() else v for k, v in state.items()}


def ids(result) -> list[str]:
    return [g.sample.problem_id for g in result.groups]


def held_by_run(infra: Infra, stage) -> tuple[list[str], list[str]]:
    """(ids with a result in the queue, ids marked collected) of this stage's run."""
    client = redis_client.Redis.from_url(infra.redis.url, decode_responses=True)
    try:
        base = f"{key_prefix(NAMESPACE)}tasks"
        mine = f"{stage.identity.run_id}/"
        return ([t for t in client.hkeys(f"{base}:results") if t.startswith(mine)],
                [t for t in client.zrange(f"{base}:collected", 0, -1) if t.startswith(mine)])
    finally:
        client.close()


def test_round_trip_versions_and_staleness(infra, monkeypatch):
    stage, sync, _ = make_stage(infra, "roundtrip")
    samples = infra.samples[:4]
    try:
        first = stage.run(samples, n=2, sampling=SAMPLING, mix=MIX, uid_prefix="a")
        assert ids(first) == [s.problem_id for s in samples] and not first.filtered
        # The step released what it collected: no result of this run is left in Redis.
        assert first.timings["distributed/released"] == 4
        results, collected = held_by_run(infra, stage)
        assert results == [] and sorted(collected) == sorted(stage.task_id(g.uid) for g in first.groups)
        for group in first.groups:
            assert len(group.responses) == len(group.texts) == len(group.rewards) == len(group.finish_reasons) == 2
            assert group.policy_version == 0 and group.uid.startswith("a-")
            assert sum(group.is_offline) == int(group.sample.has_offline_trajectory)
        assert first.mix_groups == sum(s.has_offline_trajectory for s in samples)
        # Every worker prompt matched the trainer's own (a mismatch would filter the sample).
        assert first.timings.get("distributed/prompt_mismatch", 0) == 0
        assert first.timings["distributed/worker_frame_hits"] == 4
        assert first.timings["distributed/worker_frame_decodes"] == 0

        # Rounds "b" are run again below as a resumed trainer re-runs a step: with the results of a
        # trainer that died before releasing them still in the queue.
        monkeypatch.setattr(stage.queue, "release", lambda task_ids: 0)
        sync.push(policy(infra, 1), 1)
        second = stage.run(samples, n=2, sampling=SAMPLING, mix=MIX, uid_prefix="b")
        assert {g.policy_version for g in second.groups} == {1} and len(second.groups) == 4
        followed = [read_status(s) for _, s in infra.workers]
        assert any(st.get("engine_version") == 1 and st.get("board") == stage.identity.board for st in followed)

        # Bound 0: the version-1 results of round "b" are stale at version 2, discarded and re-put.
        sync.push(policy(infra, 2), 2)
        third = stage.run(samples, n=2, sampling=SAMPLING, mix=MIX, uid_prefix="b")
        assert third.timings["distributed/reused_results"] == 4
        assert third.timings["distributed/stale_discarded"] == 4
        assert {g.policy_version for g in third.groups} == {2} and ids(third) == ids(first)

        # Bound 1 at version 3: version 1 is still too old, the version-2 re-puts are accepted as they are.
        sync.push(policy(infra, 3), 3)
        stage.staleness = 1
        monkeypatch.undo()  # this one releases: the "b" results and their "~r1" re-puts it read
        fourth = stage.run(samples, n=2, sampling=SAMPLING, mix=MIX, uid_prefix="b")
        assert fourth.timings["distributed/stale_discarded"] == 4
        assert fourth.timings["distributed/reused_results"] == 8
        assert {g.policy_version for g in fourth.groups} == {2}
        assert fourth.timings["distributed/released"] == 8
        results, collected = held_by_run(infra, stage)
        b_ids = {stage.task_id(f"b-{k}-{s.problem_id}", r) for k, s in enumerate(samples) for r in (0, 1)}
        assert results == [] and b_ids <= set(collected)

        # Released ids cannot be reused (their results are gone): "b" is generated again under new ids.
        fifth = stage.run(samples, n=2, sampling=SAMPLING, mix=MIX, uid_prefix="b")
        assert fifth.timings["distributed/reput_after_release"] == 4
        assert fifth.timings.get("distributed/reused_results", 0) == 0
        assert {g.policy_version for g in fifth.groups} == {3} and ids(fifth) == ids(first)
        assert held_by_run(infra, stage)[0] == []
    finally:
        sync.close()


@pytest.mark.restarts_fixture_services
def test_frame_cache_down_decodes_on_the_fly(infra):
    stage, sync, loader = make_stage(infra, "nocache")
    infra.frame_cache.stop()
    try:
        result = stage.run(infra.samples[:4], n=2, sampling=SAMPLING, mix=MIX, uid_prefix="c")
    finally:
        infra.frame_cache.start()
        sync.close()
    assert len(result.groups) == 4 and not result.filtered
    assert result.timings["distributed/worker_frame_store_errors"] == 4
    assert result.timings["distributed/worker_frame_decodes"] == 4
    assert result.timings["distributed/worker_frame_hits"] == 0
    assert loader.stats()["fallbacks_store_error"] == 4  # the trainer's own prompts were decoded too


def test_poison_task_is_dead_lettered_and_the_round_goes_on(infra):
    stage, sync, _ = make_stage(infra, "poison")
    good = infra.samples[1:3]
    bad = dataclasses.replace(infra.samples[0], problem_id="poison-0", answer="")
    try:
        result = stage.run([good[0], bad, good[1]], n=2, sampling=SAMPLING, mix=MIX, uid_prefix="p")
        dead = [d for d in stage.queue.dead_letters() if d.task_id == stage.task_id("p-1-poison-0")]
    finally:
        sync.close()
    assert ids(result) == [s.problem_id for s in good]
    assert len(result.filtered) == 1 and result.filtered[0][0] == "poison-0"
    assert "dead-lettered" in result.filtered[0][1] and "answer" in result.filtered[0][1]
    assert len(dead) == 1 and dead[0].attempts == 3 and "non-empty ground truth" in dead[0].reason


@pytest.mark.restarts_fixture_services
def test_redis_restart_mid_round_is_recovered(infra):
    stage, sync, _ = make_stage(infra, "restart", distributed__queue_patience_s=60)
    sync.push(policy(infra, 7), 1)  # tasks want version >= 1: the board must come back after the restart
    samples = infra.samples[:6]  # more than the two workers lease (2 x 2): some are queued, not leased
    outcome: dict = {}
    infra.reward.stop()  # workers hold their leases while scoring is retried
    thread = threading.Thread(target=lambda: outcome.update(result=stage.run(
        samples, n=2, sampling=SAMPLING, mix=MIX, uid_prefix="r")), daemon=True)
    thread.start()
    try:
        wait_for(lambda: sum(len(read_status(s).get("holding", [])) for _, s in infra.workers) == 4, 60,
                 "both workers holding leases")
        infra.redis.restart()  # no persistence: tasks, results and the version board are gone
    finally:
        infra.reward.start()
    thread.join(timeout=150)
    assert not thread.is_alive(), "the round did not finish after the Redis restart"
    result = outcome["result"]
    assert ids(result) == [s.problem_id for s in samples] and not result.filtered
    assert {g.policy_version for g in result.groups} == {1}
    assert result.timings["distributed/queue_recovered"] >= 2  # at least the never-leased tasks were re-put
    sync.close()


@pytest.mark.restarts_fixture_services
def test_redis_down_is_a_clear_error_then_recovered(infra):
    stage, sync, _ = make_stage(infra, "down", distributed__queue_patience_s=2)
    samples = infra.samples[:3]
    infra.redis.stop()
    try:
        with pytest.raises(QueueOutageError) as info:
            stage.run(samples, n=2, sampling=SAMPLING, mix=MIX, uid_prefix="d")
    finally:
        infra.redis.restart()
    message = str(info.value)
    assert "unavailable for 2s" in message and "stage.recover()" in message and "queue.recover" in message
    assert f"127.0.0.1:{infra.redis.port}" in message
    requeued = stage.recover()  # the documented recovery: re-put what the queue lost, then run again
    assert sorted(requeued) == sorted(stage.task_id(f"d-{k}-{s.problem_id}") for k, s in enumerate(samples))
    result = stage.run(samples, n=2, sampling=SAMPLING, mix=MIX, uid_prefix="d")
    assert ids(result) == [s.problem_id for s in samples]
    assert result.timings["distributed/already_queued"] == 3
    sync.close()


def test_missing_results_time_out_naming_the_tasks(infra):
    stage, sync, _ = make_stage(infra, "timeout", distributed__namespace="nobody-listens",
                                distributed__result_timeout_s=2)
    try:
        with pytest.raises(RemoteRolloutTimeout) as info:
            stage.run(infra.samples[:2], n=2, sampling=SAMPLING, mix=MIX, uid_prefix="t")
    finally:
        sync.close()
    message = str(info.value)
    assert "2 rollout result(s) missing after 2s" in message and "'nobody-listens'" in message
    for k, sample in enumerate(infra.samples[:2]):
        assert stage.task_id(f"t-{k}-{sample.problem_id}") in message
    assert "2 queued, 0 leased" in message


@pytest.mark.restarts_fixture_services
def test_killed_worker_tasks_are_redelivered_and_reward_restart_retried(infra):
    stage, sync, _ = make_stage(infra, "kill")
    samples = infra.samples[:4]
    outcome: dict = {}
    logs = [infra.work / f"w{i}.log" for i in range(2)]
    retries = [log_tail(path, 10**8).count("reward_request_retry") for path in logs]
    infra.reward.stop()
    thread = threading.Thread(target=lambda: outcome.update(result=stage.run(
        samples, n=2, sampling=SAMPLING, mix=MIX, uid_prefix="k")), daemon=True)
    thread.start()
    try:
        held = wait_for(lambda: (lambda h: h if sum(map(len, h)) == 4 else None)(
            [read_status(s).get("holding", []) for _, s in infra.workers]), 60, "all four tasks leased")
        # Both workers have generated and are retrying the scoring: mid-task, nothing stored or acked.
        wait_for(lambda: all(log_tail(path, 10**8).count("reward_request_retry") > before
                             for path, before in zip(logs, retries)), 60, "both workers retrying the scoring")
        victim = max(range(2), key=lambda i: len(held[i]))
        os.kill(infra.workers[victim][0].pid, signal.SIGKILL)  # mid-task: generated, not scored, not acked
        infra.workers[victim][0].wait(timeout=30)
    finally:
        infra.reward.start()
    thread.join(timeout=150)
    assert not thread.is_alive(), "the round did not finish after the worker was killed"
    result = outcome["result"]
    assert ids(result) == [s.problem_id for s in samples] and not result.filtered  # none lost, none twice
    assert result.timings["distributed/redelivered"] == len(held[victim])
    assert stage.queue.stats().duplicates_dropped == 0
    sync.close()

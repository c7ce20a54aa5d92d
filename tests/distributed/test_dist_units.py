"""Pieces of the distributed mode that need no server: the task wire format, store URLs, the
rollout pool's arguments and autoscaling policy, cluster.json defaults, run identities and the
policy sync's version rules (over the in-process queue and a local weights store)."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from dist_helpers import make_config, make_data
from ray.serve._private.common import DeploymentID, ReplicaID
from ray.serve.config import AutoscalingContext

from easyvideor1.config.cluster import apply_cluster_defaults
from easyvideor1.config.schema import MixPolicyConfig, RewardConfig
from easyvideor1.data import load_samples
from easyvideor1.errors import ConfigError
from easyvideor1.queue import open_queue
from easyvideor1.rollout.base import SamplingConfig
from easyvideor1.rollout.remote_run import RUN_FILE, RunIdentity
from easyvideor1.rollout.remote_stage import RemoteRolloutStage
from easyvideor1.rollout.wire import WeightsRef, parse_task, task_payload
from easyvideor1.train.checkpoint import save_checkpoint
from easyvideor1.video.metadata import ImageParams, VideoParams
from easyvideor1.weight_sync.remote import RemotePolicySync
from easyvideor1.weight_sync.store import join_store
from services.rollout.deployment import BacklogPolicy, pool_config


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_data(tmp_path_factory.mktemp("units-data"), n_per_type=1)


def _payload(sample, **changes):
    args = dict(sample=sample, uid="s0t1-0-x", prompt_text="<video>\nIs it red?", n=3,
                sampling=SamplingConfig(max_tokens=16, temperature=0.7, top_p=0.9, stop_token_ids=(5, 7)),
                mix=MixPolicyConfig(enable=True, mode="conditional", accuracy_threshold=0.5), max_prompt_length=900,
                max_response_length=16, video_params=VideoParams(fps=4, max_frames=8), image_params=ImageParams(),
                weights=WeightsRef("weights-run-g0", "run/g0", 2), reward=RewardConfig(accuracy_weight=1.0))
    args.update(changes)
    return task_payload(**args)


def test_task_round_trip_and_batch_keys(data):
    sample = load_samples(data / "train.jsonl")[0]
    payload = json.loads(json.dumps(_payload(sample)))  # what Redis hands back
    task = parse_task("run/s0t1-0-x", payload)
    assert task.sample == dataclasses.replace(sample, source=task.sample.source)
    assert task.sampling.stop_token_ids == (5, 7) and task.sampling.temperature == 0.7 and task.n == 3
    assert task.mix.conditional and task.mix.accuracy_threshold == 0.5
    assert task.video_params == VideoParams(fps=4, max_frames=8) and task.weights.min_version == 2
    same = parse_task("other", json.loads(json.dumps(_payload(sample))))
    other = parse_task("n4", json.loads(json.dumps(_payload(sample, n=4))))
    assert task.batch_key() == same.batch_key() != other.batch_key()


@pytest.mark.parametrize("mutate, message", [
    (lambda p: p.update(v=99), "wire version 99"),
    (lambda p: p.pop("limits"), "malformed payload: KeyError: 'limits'"),
    (lambda p: p["row"].update(answer=""), "field 'answer': expected a non-empty ground truth"),
    (lambda p: p["sampling"].update(top_p=0), "top_p must be in (0, 1]"),
    (lambda p: p.update(prompt_text=""), "empty prompt text"),
])
def test_malformed_tasks_are_refused_with_the_reason(data, mutate, message):
    from easyvideor1.rollout.wire import TaskError

    payload = json.loads(json.dumps(_payload(load_samples(data / "train.jsonl")[0])))
    mutate(payload)
    with pytest.raises(TaskError) as info:
        parse_task("run/t", payload)
    assert message in str(info.value) and "'run/t'" in str(info.value)


def test_join_store():
    assert join_store("/data/weights/", "run/g0") == "/data/weights/run/g0"
    assert join_store("file:///data/w", "/run/g1/") == "file:///data/w/run/g1"
    assert join_store("s3://bucket", "run/g0") == "s3://bucket/run/g0"
    assert join_store("s3://b/p?endpoint=http://h:1", "r/g0") == "s3://b/p/r/g0?endpoint=http://h:1"


def _context(reports: dict[str, float] | None, target: int = 2) -> AutoscalingContext:
    deployment = DeploymentID(name="RolloutEngine", app_name="rollout")
    replicas = [ReplicaID(unique_id=name, deployment_id=deployment) for name in (reports or {})]
    metrics = None if reports is None else {"backlog": dict(zip(replicas, reports.values()))}
    return AutoscalingContext(deployment_id=deployment, deployment_name="RolloutEngine", app_name="rollout",
                              current_num_replicas=target, target_num_replicas=target, running_replicas=replicas,
                              total_num_requests=0.0, total_queued_requests=0.0, aggregated_metrics=metrics,
                              raw_metrics=None, capacity_adjusted_min_replicas=1, capacity_adjusted_max_replicas=8,
                              policy_state={"k": 1}, last_scale_up_time=None, last_scale_down_time=None,
                              current_time=0.0, config=None)


def test_backlog_policy():
    policy = BacklogPolicy(tasks_per_replica=16)
    assert policy(_context({"a": 40.0, "b": 31.0})) == (3, {"k": 1})  # the newest view: 40 tasks
    assert policy(_context({"a": 0.0}))[0] == 0  # Serve clamps to min_replicas
    assert policy(_context(None, target=2))[0] == 2  # nothing reported yet: stay
    with pytest.raises(ConfigError):
        BacklogPolicy(0)


def test_pool_reads_the_run_config(tmp_path):
    run = tmp_path / "run.yaml"
    run.write_text("serve:\n  rollout: {replicas: 3, num_cpus: 0.5}\nworker:\n  reward: {accuracy_weight: 1.0}\n")
    cfg = pool_config({"config": str(run), "overrides": ["serve.rollout.batch_size=2"]})
    assert cfg.serve.rollout.replicas == 3 and cfg.serve.rollout.num_cpus == 0.5 and cfg.serve.rollout.batch_size == 2
    assert cfg.worker.reward.accuracy_weight == 1.0
    inline = pool_config({"run_config": cfg.model_dump(mode="json")})
    assert inline == cfg
    with pytest.raises(ConfigError, match=r"unknown argument\(s\) \['replicas'\]"):
        pool_config({"config": str(run), "replicas": 2})
    with pytest.raises(ConfigError, match="missing argument 'config'"):
        pool_config({})
    with pytest.raises(ConfigError, match="min_replicas"):
        pool_config({"config": str(run), "overrides": ["serve.rollout.min_replicas=3"]})


def test_cluster_defaults_fill_only_what_is_unset(tmp_path, data):
    cluster = tmp_path / "cluster.json"
    defaults = {"queue_url": "redis://127.0.0.1:7/0", "namespace": "lab", "weights_store": "s3://evr1-weights",
                "frame_cache_url": "http://127.0.0.1:8", "ray_address": "127.0.0.1:9"}
    s3 = {"endpoint": "http://127.0.0.1:10", "access_key": "a", "secret_key": "b"}
    cluster.write_text(json.dumps({"state": "up", "defaults": defaults, "s3": s3}))
    cfg = make_config(data, tmp_path, tmp_path / "run", distributed__cluster_file=cluster,
                      distributed__queue_url="redis://elsewhere:1/0")
    filled, options = apply_cluster_defaults(cfg)
    assert filled.distributed.queue_url == "redis://elsewhere:1/0"  # given: kept
    assert filled.distributed.weights_store == "s3://evr1-weights" and filled.distributed.namespace == "lab"
    assert filled.data.frame_cache.store == "http://127.0.0.1:8" and filled.distributed.ray_address == "127.0.0.1:9"
    assert options == s3
    cluster.write_text(json.dumps({"state": "down", "defaults": defaults}))
    with pytest.raises(ConfigError, match="not up"):
        apply_cluster_defaults(cfg)
    with pytest.raises(ConfigError, match="not found"):
        apply_cluster_defaults(make_config(data, tmp_path, tmp_path / "run", distributed__cluster_file=tmp_path / "no"))


def test_a_stopped_cluster_found_in_the_working_directory_is_ignored(tmp_path, data, monkeypatch):
    """`evr1 down` leaves .evr1/cluster.json behind; a run in that folder that names no cluster
    file must not fail on it (one that names it explicitly still does)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("EVR1_CLUSTER_FILE", raising=False)
    (tmp_path / ".evr1").mkdir()
    (tmp_path / ".evr1" / "cluster.json").write_text(json.dumps({"state": "down", "defaults": {}}))
    cfg = make_config(data, tmp_path, tmp_path / "run")
    assert apply_cluster_defaults(cfg) == (cfg, {})
    explicit = make_config(data, tmp_path, tmp_path / "run", distributed__cluster_file=tmp_path / ".evr1" / "cluster.json")
    with pytest.raises(ConfigError, match="not up"):
        apply_cluster_defaults(explicit)


def test_run_identity_is_new_per_run_and_kept_on_resume(tmp_path, data):
    out = tmp_path / "run"
    fresh = make_config(data, tmp_path, out, distributed__namespace="ns")
    first, second = RunIdentity.for_run(fresh, resuming=False), RunIdentity.for_run(fresh, resuming=False)
    assert first.run_id != second.run_id and first.board == f"weights-{first.run_id}-g0"
    save_checkpoint(out, 3, {"w": torch.zeros(1)}, {"x": 1})
    resuming = make_config(data, tmp_path, out, distributed__namespace="ns", trainer__resume="auto")
    assert RunIdentity.for_run(resuming, resuming=True) == second  # the file the last run wrote
    other_namespace = make_config(data, tmp_path, out, distributed__namespace="ns2", trainer__resume="auto")
    assert RunIdentity.for_run(other_namespace, resuming=True).run_id != second.run_id


def test_policy_sync_versions_resume_and_rotation(tmp_path, data):
    cfg = make_config(data, tmp_path, tmp_path / "run", distributed__queue_url="memory://units",
                      distributed__namespace="sync", distributed__weights_store=str(tmp_path / "weights"))
    identity = RunIdentity.for_run(cfg, resuming=False)
    stage = RemoteRolloutStage(open_queue("memory://units", "sync"), None, None, None, identity,
                               max_prompt_length=10, max_response_length=4)
    sync = RemotePolicySync(cfg, stage, identity, {})
    state = {"w": torch.arange(4.0)}
    sync.push(state, 1)
    sync.push(state, 2)
    assert stage.version == 2 and sync.board.latest().version == 2
    sync.push(state, 2)  # a resumed run re-pushing its checkpoint's version: nothing published twice
    assert sync.board.latest().version == 2
    sync.push(state, 1)  # resumed behind its board: a new board generation, announced in the run file
    assert identity.generation == 1 and sync.board.latest().version == 1 and stage.version == 1
    assert json.loads((tmp_path / "run" / RUN_FILE).read_text())["generation"] == 1
    assert (tmp_path / "weights" / identity.run_id / "g1" / "v00000001" / "manifest.json").is_file()
    sync.close()


def test_build_app_takes_the_charts_arguments(tmp_path):
    from services.rollout.deployment import build_app

    run = tmp_path / "run.yaml"  # what the chart's ConfigMap mounts
    run.write_text("worker:\n  actor: {model_path: /models/qwen}\ndistributed: {queue_url: 'redis://redis:6379/0'}\n"
                   "serve:\n  rollout: {batch_size: 16, min_replicas: 1, max_replicas: 4, tasks_per_replica: 8,"
                   " num_gpus: 1, num_cpus: 4}\n")
    deployment = build_app({"config": str(run)})._bound_deployment
    assert deployment.name == "RolloutEngine"
    assert deployment.ray_actor_options == {"num_cpus": 4.0, "num_gpus": 1.0}
    scaling = deployment._deployment_config.autoscaling_config
    assert (scaling.min_replicas, scaling.max_replicas) == (1, 4)
    assert scaling.policy.policy_kwargs == {"tasks_per_replica": 8}
    fixed = build_app({"config": str(run), "overrides": ["serve.rollout.replicas=2"]})._bound_deployment
    assert fixed.num_replicas == 2

"""The chart renders with the Helm v4 engine, lints clean in strict mode, and each values
switch produces the objects it promises."""

from __future__ import annotations

import pytest
import yaml
from helm_python.chart import lint
from helm_python.errors import HelmError
from k8s_corpus import chart_cases
from k8s_support import CHART, RECOMMENDED_LABELS, RELEASE, by_kind, chart, ident, notes, render_objects

from easyvideor1.config import validate_config

TRAINER = {"trainer": {"enabled": True}}
RUN_YAML = "/etc/easyvideor1/run.yaml"


def run_config(objects):
    """The release's run config (the one ConfigMap every component mounts), validated."""
    config_map = named(objects, "ConfigMap", "-run-config")
    return validate_config(yaml.safe_load(config_map["data"]["run.yaml"]), "chart run.yaml")


def kinds(objects):
    return sorted((obj["kind"], obj["metadata"]["name"]) for obj in objects)


def named(objects, kind, suffix):
    matches = [o for o in by_kind(objects, kind) if o["metadata"]["name"].endswith(suffix)]
    assert len(matches) == 1, f"{kind} *{suffix}: {[o['metadata']['name'] for o in by_kind(objects, kind)]}"
    return matches[0]


def env_of(container):
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


@pytest.mark.parametrize("case", sorted(chart_cases()))
def test_strict_lint_is_clean(case):
    report = lint(CHART, chart_cases()[case] or None, strict=True, kube_version="v1.31.0", namespace="easyvideor1")
    serious = [m for m in report["messages"] if m["severity"] >= 2]
    assert report["errors"] == [] and serious == []


def test_chart_identity():
    meta = chart().metadata
    assert meta["name"] == "easyvideor1" and meta["apiVersion"] == "v2" and meta["type"] == "application"
    assert [c["name"] for c in chart().crds] == ["crds/easyvideor1.io_videorljobs.yaml"]


def test_default_objects():
    objects = render_objects()
    assert kinds(objects) == [
        ("ConfigMap", "easyvideor1-run-config"),
        ("Deployment", "easyvideor1-frame-cache"), ("Deployment", "easyvideor1-reward"),
        ("HorizontalPodAutoscaler", "easyvideor1-frame-cache"), ("HorizontalPodAutoscaler", "easyvideor1-reward"),
        ("NetworkPolicy", "easyvideor1-minio"), ("NetworkPolicy", "easyvideor1-redis"),
        ("NetworkPolicy", "easyvideor1-reward"),
        ("PodDisruptionBudget", "easyvideor1-frame-cache"), ("PodDisruptionBudget", "easyvideor1-reward"),
        ("RayService", "easyvideor1-rollout"), ("Secret", "easyvideor1-s3"),
        ("Service", "easyvideor1-frame-cache"), ("Service", "easyvideor1-minio"),
        ("Service", "easyvideor1-minio-headless"), ("Service", "easyvideor1-redis"),
        ("Service", "easyvideor1-redis-headless"), ("Service", "easyvideor1-reward"),
        ("ServiceAccount", "easyvideor1"), ("StatefulSet", "easyvideor1-minio"), ("StatefulSet", "easyvideor1-redis"),
    ]


@pytest.mark.parametrize("case", sorted(chart_cases()))
def test_every_object_has_the_recommended_labels(case):
    for obj in render_objects(chart_cases()[case]):
        labels = obj["metadata"].get("labels", {})
        assert all(label in labels for label in RECOMMENDED_LABELS), ident(obj)
        assert labels["app.kubernetes.io/part-of"] == "easyvideor1"
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["app.kubernetes.io/instance"] == RELEASE


@pytest.mark.parametrize("case", sorted(chart_cases()))
def test_selectors_and_ports_meet_their_pods(case):
    objects = render_objects(chart_cases()[case])
    workloads = by_kind(objects, "Deployment") + by_kind(objects, "StatefulSet")
    for workload in workloads:
        pod_labels = workload["spec"]["template"]["metadata"]["labels"]
        assert workload["spec"]["selector"]["matchLabels"].items() <= pod_labels.items(), ident(workload)
    for service in by_kind(objects, "Service"):
        pods = [w for w in workloads if service["spec"]["selector"].items()
                <= w["spec"]["template"]["metadata"]["labels"].items()]
        assert len(pods) == 1, f"{ident(service)} selects {len(pods)} workloads"
        ports = {p["name"] for c in pods[0]["spec"]["template"]["spec"]["containers"] for p in c.get("ports", [])}
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= ports, ident(service)
    for kind in ("HorizontalPodAutoscaler", "PodDisruptionBudget", "NetworkPolicy"):
        for obj in by_kind(objects, kind):
            if kind == "HorizontalPodAutoscaler":
                target = obj["spec"]["scaleTargetRef"]
                assert any(ident(w) == f"{target['kind']}/{target['name']}" for w in workloads), ident(obj)
                continue
            selector = obj["spec"]["podSelector" if kind == "NetworkPolicy" else "selector"]["matchLabels"]
            assert any(selector.items() <= w["spec"]["template"]["metadata"]["labels"].items()
                       for w in workloads), ident(obj)


@pytest.mark.parametrize("case", sorted(chart_cases()))
def test_every_service_container_is_probed_and_restarted(case):
    """The chart's counterpart of `evr1 up`'s supervisor: the kubelet restarts a service container
    that exits or stops answering its liveness probe, and takes it out of its Service while not ready."""
    objects = render_objects(chart_cases()[case])
    workloads = by_kind(objects, "Deployment") + by_kind(objects, "StatefulSet")
    if case == "default":  # the others leave out what runs elsewhere (external Redis, S3, ...)
        names = {w["metadata"]["name"] for w in workloads}
        assert {f"{RELEASE}-{n}" for n in ("reward", "frame-cache", "redis", "minio")} <= names, names
    for workload in workloads:
        pod = workload["spec"]["template"]["spec"]
        assert pod.get("restartPolicy") == "Always", ident(workload)
        for container in pod["containers"]:
            for probe in ("livenessProbe", "readinessProbe"):
                assert probe in container, f"{ident(workload)} container {container['name']}: no {probe}"
                assert {"httpGet", "tcpSocket", "exec", "grpc"} & set(container[probe]), (ident(workload), probe)


def test_reward_egress_is_denied():
    objects = render_objects()
    policy = named(objects, "NetworkPolicy", "-reward")
    assert policy["spec"]["policyTypes"] == ["Egress"] and policy["spec"]["egress"] == []
    reward = named(objects, "Deployment", "-reward")
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= reward["spec"]["template"]["metadata"][
        "labels"].items()
    rule = {"to": [{"ipBlock": {"cidr": "10.0.0.0/8"}}], "ports": [{"port": 443, "protocol": "TCP"}]}
    opened = named(render_objects({"reward": {"networkPolicy": {"extraEgress": [rule]}}}), "NetworkPolicy", "-reward")
    assert opened["spec"]["egress"] == [rule]
    closed = by_kind(render_objects({"reward": {"networkPolicy": {"enabled": False}}}), "NetworkPolicy")
    assert [o for o in closed if o["metadata"]["name"].endswith("-reward")] == []


def test_autoscaling_owns_the_replica_count():
    scaled = named(render_objects(), "Deployment", "-reward")
    assert "replicas" not in scaled["spec"]
    fixed = named(render_objects({"reward": {"autoscaling": {"enabled": False}, "replicaCount": 3}}),
                  "Deployment", "-reward")
    assert fixed["spec"]["replicas"] == 3
    assert all(not o["metadata"]["name"].endswith("-reward") for o in by_kind(
        render_objects({"reward": {"autoscaling": {"enabled": False}}}), "HorizontalPodAutoscaler"))


def test_switches_add_and_remove_objects():
    base = set(kinds(render_objects()))
    operator = set(kinds(render_objects({"operator": {"enabled": True}}))) - base
    assert operator == {("Deployment", "easyvideor1-operator"), ("ServiceAccount", "easyvideor1-operator"),
                        ("ClusterRole", "easyvideor1-operator"), ("ClusterRoleBinding", "easyvideor1-operator")}
    trainer = set(kinds(render_objects(TRAINER))) - base
    assert trainer == {("RayJob", "easyvideor1-trainer")}  # it mounts the release's run config
    monitors = set(kinds(render_objects({"monitoring": {"serviceMonitor": {"enabled": True}}}))) - base
    assert monitors == {("ServiceMonitor", "easyvideor1-reward"), ("ServiceMonitor", "easyvideor1-frame-cache")}
    no_rollout = base - set(kinds(render_objects({"rollout": {"enabled": False}})))
    assert no_rollout == {("RayService", "easyvideor1-rollout")}


def test_external_redis_and_s3_replace_the_statefulsets():
    values = chart_cases()["values-external-services"]
    objects = render_objects(values)
    assert by_kind(objects, "StatefulSet") == [] and by_kind(objects, "Secret") == []
    container = named(objects, "Deployment", "-frame-cache")["spec"]["template"]["spec"]["containers"][0]
    env = env_of(container)
    assert env["EVR1_S3_ENDPOINT"] == values["store"]["external"]["endpoint"]
    assert env["AWS_ACCESS_KEY_ID"]["secretKeyRef"] == {"name": "easyvideor1-s3", "key": "AWS_ACCESS_KEY_ID"}
    config = run_config(objects)
    assert config.data.frame_cache.store == "s3://ml-video-frames/easyvideor1/frames"
    assert config.distributed.weights_store == "s3://ml-video-frames/easyvideor1/weights"
    assert config.serve.frame_cache.queue_url == config.distributed.queue_url == values["redis"]["external"]["url"]
    assert config.distributed.namespace == "prod"


def test_in_release_services_are_wired_together():
    objects = render_objects()
    secret = by_kind(objects, "Secret")[0]
    assert set(secret["data"]) == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
    minio_env = env_of(named(objects, "StatefulSet", "-minio")["spec"]["template"]["spec"]["containers"][0])
    assert minio_env["MINIO_ROOT_USER"]["secretKeyRef"]["name"] == secret["metadata"]["name"]
    fc_env = env_of(named(objects, "Deployment", "-frame-cache")["spec"]["template"]["spec"]["containers"][0])
    assert fc_env["EVR1_S3_ENDPOINT"] == "http://easyvideor1-minio:9000"
    config = run_config(objects)
    assert config.distributed.queue_url == config.serve.frame_cache.queue_url == "redis://easyvideor1-redis:6379/0"
    assert config.distributed.namespace == "default"
    assert config.worker.reward.url == "http://easyvideor1-reward:8000"
    assert config.distributed.frame_cache_url == "http://easyvideor1-frame-cache:8001"
    assert config.distributed.weights_store == "s3://easyvideor1/weights"
    assert config.data.frame_cache.store == "s3://easyvideor1/frames"
    assert config.worker.actor.model_path == "Qwen/Qwen2.5-VL-7B-Instruct"
    # The pool gets the file, nothing else: every setting it uses is in it.
    app = yaml.safe_load(by_kind(objects, "RayService")[0]["spec"]["serveConfigV2"])["applications"][0]
    assert app["args"] == {"config": RUN_YAML}


def test_disabled_services_are_not_in_the_run_config():
    config = run_config(render_objects(chart_cases()["values-reward-only"]))
    assert config.distributed.frame_cache_url is None  # no frame-cache service in this release
    assert config.worker.reward.url == "http://easyvideor1-reward:8000"
    alone = run_config(render_objects({"reward": {"enabled": False}}))
    assert alone.worker.reward.url is None  # scores in-process


def test_rollout_pool_sizes_and_autoscaling():
    values = chart_cases()["values-gpu-large"]
    objects = render_objects(values)
    service = by_kind(objects, "RayService")[0]
    cluster = service["spec"]["rayClusterConfig"]
    assert cluster["enableInTreeAutoscaling"] is True
    group = cluster["workerGroupSpecs"][0]
    assert (group["minReplicas"], group["maxReplicas"]) == (1, 4)
    limits = group["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "8" and limits["memory"] == "900Gi"
    serve = yaml.safe_load(service["spec"]["serveConfigV2"])
    app = serve["applications"][0]
    assert "deployments" not in app  # build_app sets its own backlog-based autoscaling policy
    pool = run_config(objects).serve.rollout
    assert (pool.num_gpus, pool.num_cpus, pool.min_replicas, pool.max_replicas, pool.tasks_per_replica) == (
        4, 16, 2, 8, 32)
    assert (app["name"], app["route_prefix"]) == (pool.app_name, pool.route_prefix)
    assert serve["http_options"] == {"host": "0.0.0.0", "port": pool.http_port}
    with pytest.raises(HelmError, match="rollout.workers.gpus"):
        render_objects({"runConfig": {"serve": {"rollout": {"num_gpus": 2}}}, "rollout": {"workers": {"gpus": 1}}})
    with pytest.raises(HelmError, match="runConfig.serve.rollout.min_replicas"):
        render_objects({"runConfig": {"serve": {"rollout": {"min_replicas": 5, "max_replicas": 2}}}})
    with pytest.raises(HelmError, match="rollout.workers.minReplicas"):
        render_objects({"rollout": {"workers": {"minReplicas": 5, "maxReplicas": 2}}})


@pytest.mark.parametrize("case", ["values-gpu-large", "values-single-node-trainer"])
def test_trainer_job_and_its_run_config(case):
    values = chart_cases()[case]
    objects = render_objects(values)
    job = by_kind(objects, "RayJob")[0]
    spec, t = job["spec"], values["trainer"]
    assert spec["entrypoint"] == f"python -m services.trainer.entrypoint {RUN_YAML} distributed.mode=distributed"
    assert spec["shutdownAfterJobFinishes"] is True
    assert spec["ttlSecondsAfterFinished"] == t.get("ttlSecondsAfterFinished", 3600)
    head = spec["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    assert {"name": "run-config", "configMap": {"name": "easyvideor1-run-config"}} in head["volumes"]
    workers = spec["rayClusterSpec"].get("workerGroupSpecs", [])
    if t["numWorkers"]:
        assert workers[0]["replicas"] == t["numWorkers"]
        limits = workers[0]["template"]["spec"]["containers"][0]["resources"]["limits"]
        assert limits["nvidia.com/gpu"] == str(t["gpusPerWorker"]) and limits["memory"] == t["memoryPerWorker"]
    else:
        assert workers == []
        assert head["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == str(t["gpusPerWorker"])
    config = run_config(objects)
    assert config.distributed.mode == "distributed"
    assert config.distributed.queue_url == "redis://easyvideor1-redis:6379/0"
    assert config.worker.reward.url == "http://easyvideor1-reward:8000"
    assert config.data.frame_cache.store == "s3://easyvideor1/frames"
    assert config.kubernetes.num_workers == t["numWorkers"] and config.kubernetes.namespace == "easyvideor1"
    assert config.worker.actor.model_path == values["runConfig"]["worker"]["actor"]["model_path"]
    assert config.trainer.experiment_name == values["runConfig"]["trainer"]["experiment_name"]


def test_user_run_config_wins_over_release_defaults():
    values = {"trainer": {"enabled": True}, "runConfig": {
        "data": {"train_files": "/d.jsonl", "frame_cache": {"store": "s3://other/frames"}},
        "worker": {"actor": {"model_path": "m"}}, "distributed": {"queue_url": "redis://elsewhere:6379/1"},
        "serve": {"reward": {"host": "127.0.0.1", "max_batch": 64}},
        "kubernetes": {"num_workers": 99, "service_account": "nobody"}}}
    objects = render_objects(values)
    config = run_config(objects)
    assert config.distributed.queue_url == "redis://elsewhere:6379/1"
    assert config.data.frame_cache.store == "s3://other/frames"
    assert config.distributed.frame_cache_url == "http://easyvideor1-frame-cache:8001"
    assert config.serve.reward.max_batch == 64
    # What the release's objects need wins: servers in pods listen on every address ...
    assert config.serve.reward.host == config.serve.frame_cache.host == config.serve.rollout.http_host == "0.0.0.0"
    # ... and kubernetes.* describes the RayJob actually rendered, whatever the run config said.
    job = by_kind(objects, "RayJob")[0]
    assert config.kubernetes.num_workers == job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"] == 1
    assert config.kubernetes.service_account is None
    assert "serviceAccountName" not in job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]


def test_service_monitors_use_the_bearer_tokens():
    objects = render_objects(chart_cases()["values-monitoring"])
    reward = named(objects, "ServiceMonitor", "-reward")
    assert reward["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    endpoint = reward["spec"]["endpoints"][0]
    assert endpoint["port"] == "http" and endpoint["path"] == "/metrics" and endpoint["interval"] == "15s"
    assert endpoint["authorization"]["credentials"] == {"name": "easyvideor1-reward-token", "key": "token"}
    assert "authorization" not in named(objects, "ServiceMonitor", "-frame-cache")["spec"]["endpoints"][0]


def test_tokens_reach_services_and_their_clients():
    objects = render_objects(chart_cases()["values-operator"])
    config = run_config(objects)
    assert config.serve.reward.token_env == "EVR1_REWARD_TOKEN"
    assert config.serve.frame_cache.token_env == "EVR1_FRAME_CACHE_TOKEN"
    reward = named(objects, "Deployment", "-reward")["spec"]["template"]["spec"]["containers"][0]
    assert env_of(reward)["EVR1_REWARD_TOKEN"]["secretKeyRef"]["name"] == "easyvideor1-reward-token"
    frame_cache = named(objects, "Deployment", "-frame-cache")["spec"]["template"]["spec"]["containers"][0]
    assert env_of(frame_cache)["EVR1_FRAME_CACHE_TOKEN"]["secretKeyRef"]["name"] == "easyvideor1-frame-cache-token"
    worker = by_kind(objects, "RayService")[0]["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]
    env = env_of(worker["template"]["spec"]["containers"][0])
    assert {"EVR1_REWARD_TOKEN", "EVR1_FRAME_CACHE_TOKEN"} <= set(env)
    open_config = run_config(render_objects())
    assert open_config.serve.reward.token_env is None and open_config.serve.frame_cache.token_env is None


def test_long_release_names_stay_within_kubernetes_limits():
    objects = [o for o in _render_as("a-very-long-release-name-for-the-easyvideor1-chart-x")]
    for obj in objects:
        assert len(obj["metadata"]["name"]) <= 63, ident(obj)
        if obj["kind"] == "StatefulSet":  # "<name>-<revision hash>" is a label value
            assert len(obj["metadata"]["name"]) <= 52, ident(obj)
        if obj["kind"] in ("RayJob", "RayService"):
            assert len(obj["metadata"]["name"]) <= 40, ident(obj)


def _render_as(release):
    rendered = chart().render({"trainer": {"enabled": True}, "operator": {"enabled": True}}, name=release,
                              namespace="ns")
    return [doc for path, text in rendered.items() if not path.endswith(".txt")
            for doc in yaml.safe_load_all(text) if doc]


def test_notes_tell_how_to_use_the_release():
    text = notes()
    assert "KubeRay" in text and "http://easyvideor1-reward:8000" in text
    assert "evr1 k8s render-job" in text and "/v1/score" in text
    assert "VideoRLJob" in notes({"operator": {"enabled": True}})

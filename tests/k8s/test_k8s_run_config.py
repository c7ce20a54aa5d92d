"""One run config for every component: the chart's ConfigMap <release>-run-config (key
run.yaml) is mounted at /etc/easyvideor1 into every pod that runs the project's code, every
command reads it, pods restart when it changes, and it validates as a RunConfig. `evr1 k8s
render-job` renders its RayJob the same way."""

from __future__ import annotations

import hashlib
import shlex

import pytest
import yaml
from helm_python.errors import HelmError
from k8s_corpus import chart_cases, corpus, corpus_ids
from k8s_support import by_kind, config_maps, ident, mounted_files, pod_specs, render_objects

from easyvideor1.config import load_config
from easyvideor1.k8s import (
    CONFIG_CHECKSUM_ANNOTATION,
    CONFIG_VOLUME,
    RUN_CONFIG_DIR,
    RUN_CONFIG_KEY,
    RUN_CONFIG_PATH,
    TRAIN_ENTRYPOINT,
    render_job,
    s3_env,
)

CHART_CONFIG_MAP = "easyvideor1-run-config"
SERVICES = {"reward", "frame-cache"}  # the chart's Deployments that run `evr1 serve <component>`


def component(obj):
    return obj["metadata"].get("labels", {}).get("app.kubernetes.io/component")


def run_config_pods(obj):
    """(where, pod metadata, pod) of every pod of ``obj`` that runs the project's code with the
    run config: the services' pods, every Ray head and worker (not KubeRay's job submitter)."""
    if obj["kind"] == "Deployment" and component(obj) in SERVICES or obj["kind"] in ("RayService", "RayJob"):
        for where, meta, pod, _ in pod_specs(obj):
            if not where.endswith(" submitter"):
                yield where, meta, pod


def the_run_yaml(objects, name):
    return config_maps(objects)[name]["data"][RUN_CONFIG_KEY]


def config_map_of(pod):
    volume = next((v for v in pod.get("volumes", []) if v["name"] == CONFIG_VOLUME), None)
    assert volume is not None and "configMap" in volume, f"no {CONFIG_VOLUME} ConfigMap volume"
    return volume["configMap"]["name"]


@pytest.mark.parametrize("source", corpus_ids())
def test_every_component_mounts_and_uses_the_run_config(source):
    objects = corpus()[source]
    maps = config_maps(objects)
    checked = set()
    for obj in objects:
        pods = list(run_config_pods(obj))
        for where, meta, pod in pods:
            name = config_map_of(pod)
            assert name in maps, f"{where}: mounts ConfigMap {name}, which is not rendered with it"
            if source.startswith("chart:"):
                assert name == CHART_CONFIG_MAP, where  # one ConfigMap for the whole release
            text = maps[name]["data"][RUN_CONFIG_KEY]
            for container in pod["containers"]:
                mount = next(m for m in container["volumeMounts"] if m["name"] == CONFIG_VOLUME)
                assert (mount["mountPath"], mount.get("readOnly")) == (RUN_CONFIG_DIR, True), where
                assert mounted_files(pod, container, maps)[RUN_CONFIG_PATH] == text, where
            # Pods restart when the config changes: the annotation is the file's SHA-256.
            assert meta["annotations"][CONFIG_CHECKSUM_ANNOTATION] == hashlib.sha256(text.encode()).hexdigest(), where
        if not pods:
            continue
        checked.add(obj["kind"])
        if obj["kind"] == "Deployment":
            (container,) = pods[0][2]["containers"]
            # Every setting comes from the file: no flags beside it.
            assert container["command"] == ["evr1"], ident(obj)
            assert container["args"] == ["serve", component(obj), "--config", RUN_CONFIG_PATH], ident(obj)
        elif obj["kind"] == "RayService":
            serve = yaml.safe_load(obj["spec"]["serveConfigV2"])
            assert [app["args"] for app in serve["applications"]] == [{"config": RUN_CONFIG_PATH}], ident(obj)
        else:
            assert obj["spec"]["entrypoint"] == TRAIN_ENTRYPOINT, ident(obj)
            assert shlex.split(obj["spec"]["entrypoint"])[3] == RUN_CONFIG_PATH
            assert yaml.safe_load(obj["spec"]["runtimeEnvYAML"])["env_vars"]["EVR1_RUN_CONFIG"] == RUN_CONFIG_PATH
    if source == "chart:default":
        assert checked == {"Deployment", "RayService"}
    elif source in ("chart:values-gpu-large", "chart:values-single-node-trainer"):
        assert "RayJob" in checked
    elif not source.startswith("chart:"):
        assert "RayJob" in checked


@pytest.mark.parametrize("case", sorted(chart_cases()))
def test_the_chart_run_config_is_a_valid_run_config(case, tmp_path):
    objects = render_objects(chart_cases()[case])
    assert sorted(o["metadata"]["name"] for o in by_kind(objects, "ConfigMap")) == [CHART_CONFIG_MAP]
    path = tmp_path / RUN_CONFIG_KEY
    path.write_text(the_run_yaml(objects, CHART_CONFIG_MAP))
    config = load_config(path)  # what every component does with the mounted file
    assert config.distributed.mode == "distributed"
    assert config.serve.reward.host == config.serve.frame_cache.host == "0.0.0.0"
    assert config.worker.actor.model_path


def test_a_reward_setting_reaches_every_component(tmp_path):
    """Non-default scoring settings in values: one file carries them to the reward service,
    the rollout pool and the trainer alike, and all their pods roll."""
    reward = {"accuracy_weight": 1.0, "format_weight": 0.0, "answer_tag_policy": "only",
              "scorer_options": {"numerical": {"rel_tol": 0.01}}}
    base_values = {"trainer": {"enabled": True}}
    values = {**base_values, "runConfig": {"worker": {"reward": reward}}}
    objects, base = render_objects(values), render_objects(base_values)
    text = the_run_yaml(objects, CHART_CONFIG_MAP)
    assert yaml.safe_load(text)["worker"]["reward"]["accuracy_weight"] == 1.0
    path = tmp_path / RUN_CONFIG_KEY
    path.write_text(text)
    scoring = load_config(path).worker.reward
    assert (scoring.accuracy_weight, scoring.format_weight, scoring.answer_tag_policy) == (1.0, 0.0, "only")
    assert scoring.scorer_options == {"numerical": {"rel_tol": 0.01}}
    assert (scoring.workers, scoring.timeout_s) == (2, 60)  # the chart's defaults stay beside them

    def checksums(objs):
        return {where: meta["annotations"][CONFIG_CHECKSUM_ANNOTATION]
                for obj in objs for where, meta, _ in run_config_pods(obj)}

    before, after = checksums(base), checksums(objects)
    assert set(before) == set(after) and len(after) == 6  # reward, frame-cache, rollout x2, trainer x2
    assert all(before[where] != after[where] for where in after)


def test_chart_values_that_were_config_fields_are_written_into_it():
    objects = render_objects()
    reward = next(o for o in by_kind(objects, "Deployment") if component(o) == "reward")
    pod = reward["spec"]["template"]["spec"]
    config = load_config_text(the_run_yaml(objects, CHART_CONFIG_MAP))
    assert config.worker.reward.workers == 2 and config.worker.reward.timeout_s == 60
    assert pod["terminationGracePeriodSeconds"] == 60 + 15  # in-flight items finish after SIGTERM
    assert config.serve.rollout.num_gpus == 1 and config.serve.rollout.max_replicas == 4
    # Ports: the pods listen on serve.*.port; the Services keep their own port (a Kubernetes concern).
    moved = render_objects({"runConfig": {"serve": {"reward": {"port": 9000}, "frame_cache": {"port": 9001},
                                                    "rollout": {"http_port": 8100}}}})
    config = load_config_text(the_run_yaml(moved, CHART_CONFIG_MAP))
    for name, port in (("reward", 9000), ("frame-cache", 9001)):
        deployment = next(o for o in by_kind(moved, "Deployment") if component(o) == name)
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        assert container["ports"] == [{"name": "http", "containerPort": port, "protocol": "TCP"}]
        service = next(o for o in by_kind(moved, "Service") if o["metadata"]["name"] == f"easyvideor1-{name}")
        assert [(p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [(8000 if name == "reward"
                                                                                    else 8001, "http")]
    assert config.worker.reward.url == "http://easyvideor1-reward:8000"
    assert config.distributed.frame_cache_url == "http://easyvideor1-frame-cache:8001"
    rollout = by_kind(moved, "RayService")[0]
    assert yaml.safe_load(rollout["spec"]["serveConfigV2"])["http_options"]["port"] == 8100
    for where, _, pod in run_config_pods(rollout):
        assert {"name": "serve", "containerPort": 8100} in pod["containers"][0]["ports"], where


def load_config_text(text):
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as handle:
        handle.write(text)
        handle.flush()
        return load_config(handle.name)


REMOVED = [
    ({"trainer": {"runConfig": {"data": {"train_files": "/d.jsonl"}}}}, "trainer.runConfig", "runConfig (top level"),
    ({"runNamespace": "prod"}, "runNamespace", "runConfig.distributed.namespace"),
    ({"reward": {"workers": 4}}, "reward.workers", "runConfig.worker.reward.workers"),
    ({"reward": {"itemTimeoutSeconds": 60}}, "reward.itemTimeoutSeconds", "runConfig.worker.reward.timeout_s"),
    ({"reward": {"maxBatch": 64}}, "reward.maxBatch", "runConfig.serve.reward.max_batch"),
    ({"frameCache": {"queueNamespace": "fc"}}, "frameCache.queueNamespace", "runConfig.serve.frame_cache.namespace"),
    ({"rollout": {"modelPath": "m"}}, "rollout.modelPath", "runConfig.worker.actor.model_path"),
    ({"rollout": {"maxModelLen": 8192}}, "rollout.maxModelLen", "runConfig.data.max_prompt_length"),
    ({"rollout": {"batchSize": 4}}, "rollout.batchSize", "runConfig.serve.rollout.batch_size"),
    ({"rollout": {"gpusPerReplica": 2}}, "rollout.gpusPerReplica", "runConfig.serve.rollout.num_gpus"),
    ({"rollout": {"cpusPerReplica": 2}}, "rollout.cpusPerReplica", "runConfig.serve.rollout.num_cpus"),
    ({"rollout": {"autoscaling": {"minReplicas": 1}}}, "rollout.autoscaling", "runConfig.serve.rollout.min_replicas"),
    ({"rollout": {"deploymentName": "X"}}, "rollout.deploymentName", "names its Serve deployment"),
]


@pytest.mark.parametrize("values, old, new", REMOVED, ids=[old for _, old, _ in REMOVED])
def test_removed_values_fail_with_where_they_went(values, old, new):
    with pytest.raises(HelmError) as info:
        render_objects(values)
    assert f"{old} was removed" in str(info.value) and new in str(info.value)


def test_the_frame_cache_deployment_must_serve_http():
    with pytest.raises(HelmError, match="worker_only"):
        render_objects({"runConfig": {"serve": {"frame_cache": {"worker_only": True}}}})


@pytest.mark.parametrize("case", ["values-gpu-large", "values-single-node-trainer"])
def test_chart_trainer_job_is_the_render_job_of_its_run_config(case):
    """`evr1 k8s render-job` on the release's run.yaml gives the RayJob the chart renders:
    kubernetes.* there describes it, and both mount and use the run config the same way."""
    objects = render_objects(chart_cases()[case])
    chart_job = by_kind(objects, "RayJob")[0]
    text = the_run_yaml(objects, CHART_CONFIG_MAP)
    config_map, job = render_job(load_config_text(text), name=chart_job["metadata"]["name"],
                                 env=s3_env("http://easyvideor1-minio:9000", "easyvideor1-s3"))
    # The same config (render-job writes it resolved, every default spelled out) ...
    assert load_config_text(config_map["data"][RUN_CONFIG_KEY]) == load_config_text(text)
    for key in ("entrypoint", "shutdownAfterJobFinishes", "ttlSecondsAfterFinished", "submissionMode"):
        assert job["spec"][key] == chart_job["spec"][key], key
    assert yaml.safe_load(job["spec"]["runtimeEnvYAML"]) == yaml.safe_load(chart_job["spec"]["runtimeEnvYAML"])
    ours, theirs = job["spec"]["rayClusterSpec"], chart_job["spec"]["rayClusterSpec"]
    assert ours["rayVersion"] == theirs["rayVersion"]
    groups = lambda cluster: [cluster["headGroupSpec"], *cluster.get("workerGroupSpecs", [])]  # noqa: E731
    assert len(groups(ours)) == len(groups(theirs))
    for mine, chart_group in zip(groups(ours), groups(theirs), strict=True):
        assert mine["rayStartParams"] == chart_group["rayStartParams"]
        assert {k: mine.get(k) for k in ("replicas", "minReplicas", "maxReplicas")} == {
            k: chart_group.get(k) for k in ("replicas", "minReplicas", "maxReplicas")}
        pod, chart_pod = mine["template"], chart_group["template"]
        (container,), (chart_container,) = pod["spec"]["containers"], chart_pod["spec"]["containers"]
        assert container["image"] == chart_container["image"]
        assert container["resources"] == chart_container["resources"]
        mount = [m for m in container["volumeMounts"] if m["name"] == CONFIG_VOLUME]
        assert mount == [m for m in chart_container["volumeMounts"] if m["name"] == CONFIG_VOLUME]
        # ... in a ConfigMap of its own (the chart's is the release's), under the same annotation.
        assert config_map_of(pod["spec"]) == config_map["metadata"]["name"]
        assert config_map_of(chart_pod["spec"]) == CHART_CONFIG_MAP
        assert set(pod["metadata"]["annotations"]) == set(chart_pod["metadata"]["annotations"])


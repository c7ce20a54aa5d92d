"""Schema validation of every object in the corpus (chart, render-job, operator).

Built-in kinds: kubernetes-validate --strict for the oldest and newest supported Kubernetes.
RayJob/RayService: the KubeRay v1.7.0 CRD schemas, closed (unknown fields fail), plus the
strings they carry: serveConfigV2 against Ray Serve's own schema, runtimeEnvYAML against
Ray's RuntimeEnv, rayStartParams against `ray start`. ServiceMonitor: the fields the chart
uses, closed.
"""

from __future__ import annotations

import copy
import subprocess
import sys

import jsonschema
import pytest
import yaml
from k8s_commands import resolve_ray
from k8s_corpus import corpus, corpus_ids
from k8s_support import (
    KUBE_VERSIONS,
    SERVICE_MONITOR_SCHEMA,
    by_kind,
    ident,
    is_builtin,
    kuberay_errors,
    render,
    render_objects,
    validate_builtin,
)


@pytest.mark.parametrize("source", corpus_ids())
def test_every_object_validates_against_its_schema(source):
    objects = corpus()[source]
    assert objects
    problems = []
    for obj in objects:
        if is_builtin(obj):
            for version in KUBE_VERSIONS:
                try:
                    validate_builtin(obj, version)
                except Exception as exc:  # kubernetes-validate raises its own error types
                    path = ".".join(map(str, getattr(exc, "path", [])))
                    problems.append(f"{ident(obj)} @ {version}: {path}: {getattr(exc, 'message', exc)}")
        elif obj["kind"] in ("RayJob", "RayService"):
            problems += kuberay_errors(obj)
        elif obj["kind"] == "ServiceMonitor":
            problems += [f"{ident(obj)}: {e.message}"
                         for e in jsonschema.Draft7Validator(SERVICE_MONITOR_SCHEMA).iter_errors(obj)]
        else:
            problems.append(f"{ident(obj)}: no schema known for {obj['apiVersion']} {obj['kind']}")
    assert problems == []


def test_kubernetes_validate_cli_passes_the_default_chart(tmp_path):
    manifest = tmp_path / "chart.yaml"
    manifest.write_text("---\n".join(text for path, text in render().items() if not path.endswith(".txt")))
    result = subprocess.run([sys.executable, "-m", "kubernetes_validate", "--strict", "-k", KUBE_VERSIONS[0],
                             str(manifest)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ERROR" not in result.stdout
    assert result.stdout.count("INFO") >= 15


def test_strict_validation_rejects_a_misspelled_builtin_field():
    deployment = copy.deepcopy(by_kind(render_objects(), "Deployment")[0])
    deployment["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    with pytest.raises(Exception, match="imagePullPolicyy"):
        validate_builtin(deployment, KUBE_VERSIONS[-1])


def _rayjob():
    return copy.deepcopy(corpus()["render-job:example"][1])


def _rayservice():
    return copy.deepcopy(by_kind(render_objects(), "RayService")[0])


@pytest.mark.parametrize("mutate, where", [
    (lambda o: o["spec"].update(shutdownAfterJobFinish=True), "shutdownAfterJobFinish"),
    (lambda o: o["spec"]["rayClusterSpec"]["headGroupSpec"].update(rayStartParam={}), "rayStartParam"),
    (lambda o: o["spec"]["rayClusterSpec"]["workerGroupSpecs"][0].update(maxReplica=2), "maxReplica"),
    (lambda o: o["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
     .update(volumeMount=[]), "volumeMount"),
    (lambda o: o["spec"].update(ttlSecondsAfterFinished="1h"), "ttlSecondsAfterFinished"),
    (lambda o: o["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
     ["resources"]["limits"].update(memory="lots"), "memory"),
])
def test_kuberay_schema_rejects_typos_in_a_rayjob(mutate, where):
    rayjob = _rayjob()
    assert kuberay_errors(rayjob) == []
    mutate(rayjob)
    errors = kuberay_errors(rayjob)
    assert errors and where in " ".join(errors)


def test_kuberay_schema_rejects_typos_in_a_rayservice():
    rayservice = _rayservice()
    assert kuberay_errors(rayservice) == []
    rayservice["spec"]["rayClusterConfig"]["autoscalerOptions"]["idleTimeoutSecond"] = 60
    assert any("idleTimeoutSecond" in e for e in kuberay_errors(rayservice))


def _ray_objects():
    for source, objects in corpus().items():
        for obj in objects:
            if obj["kind"] in ("RayJob", "RayService"):
                yield source, obj


def serve_errors(serve_config_text: str) -> str | None:
    """Ray Serve's own schema checks types; it ignores unknown keys, so those are checked here."""
    from pydantic import ValidationError as PydanticError
    from ray.serve.config import AutoscalingConfig
    from ray.serve.schema import (
        DeploymentSchema,
        RayActorOptionsSchema,
        ServeApplicationSchema,
        ServeDeploySchema,
    )

    config = yaml.safe_load(serve_config_text)
    try:
        ServeDeploySchema.model_validate(config)
    except PydanticError as exc:
        return str(exc)
    unknown = set(config) - set(ServeDeploySchema.model_fields)
    for app in config["applications"]:
        unknown |= set(app) - set(ServeApplicationSchema.model_fields)
        for deployment in app.get("deployments", []):
            unknown |= set(deployment) - set(DeploymentSchema.model_fields)
            unknown |= set(deployment.get("autoscaling_config", {})) - set(AutoscalingConfig.model_fields)
            unknown |= set(deployment.get("ray_actor_options", {})) - set(RayActorOptionsSchema.model_fields)
    return f"unknown Serve config keys: {sorted(unknown)}" if unknown else None


def test_serve_config_is_a_valid_ray_serve_config():
    services = [obj for _, obj in _ray_objects() if obj["kind"] == "RayService"]
    assert services
    for service in services:
        assert serve_errors(service["spec"]["serveConfigV2"]) is None, ident(service)
    broken = yaml.safe_load(services[0]["spec"]["serveConfigV2"])
    broken["applications"][0]["route_prefx"] = "/"
    assert "route_prefx" in serve_errors(yaml.safe_dump(broken))
    broken = yaml.safe_load(services[0]["spec"]["serveConfigV2"])
    broken["applications"][0]["deployments"] = [{"name": "RolloutEngine", "autoscaling_config": {"max_replica": 3}}]
    assert "max_replica" in serve_errors(yaml.safe_dump(broken))


def test_runtime_env_is_accepted_by_ray():
    from ray.runtime_env import RuntimeEnv

    jobs = [obj for _, obj in _ray_objects() if obj["kind"] == "RayJob"]
    assert jobs
    for job in jobs:
        env = yaml.safe_load(job["spec"]["runtimeEnvYAML"])
        assert set(env) <= set(RuntimeEnv.known_fields), ident(job)
        RuntimeEnv(**env)


def test_ray_start_params_are_ray_start_options():
    # KubeRay turns each rayStartParams entry into `--key=value` of `ray start`.
    checked = 0
    for source, obj in _ray_objects():
        cluster = obj["spec"].get("rayClusterSpec") or obj["spec"]["rayClusterConfig"]
        groups = [("head", cluster["headGroupSpec"])] + [("worker", g) for g in cluster.get("workerGroupSpecs", [])]
        for role, group in groups:
            base = ["start", "--head"] if role == "head" else ["start", "--address=ray-head:6379"]
            params = resolve_ray(base + [f"--{key}={value}" for key, value in group["rayStartParams"].items()])
            gpus = group["rayStartParams"].get("num-gpus")
            assert gpus is not None, f"{source} {ident(obj)} {role}: num-gpus must be explicit"
            limit = group["template"]["spec"]["containers"][0]["resources"]["limits"].get("nvidia.com/gpu", "0")
            assert int(params["num_gpus"]) == int(limit), f"{source} {ident(obj)} {role}: GPUs vs limits"
            checked += 1
    assert checked >= 10
    with pytest.raises(AssertionError, match="dashbord-host"):
        resolve_ray(["start", "--head", "--dashbord-host=0.0.0.0"])

"""Shared helpers of the Kubernetes tests: render the chart, load schemas, walk pod specs.

Schemas: built-in kinds through kubernetes-validate (strict), KubeRay kinds through the
v1.7.0 CRDs in ../shared/testdata (closed: unknown fields fail), VideoRLJob through the
chart's own CRD (closed the same way).
"""

from __future__ import annotations

import copy
import functools
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml
from helm_python.chart import Chart, values_from_yaml

REPO = Path(__file__).resolve().parents[2]


def _real_services_package() -> None:
    """pytest puts tests/ on sys.path, and tests/services (no __init__.py) then makes
    ``services`` a namespace package that hides the real one, because the editable
    install's finder runs after the path finder: ``evr1 serve`` would find no services.
    With the repository root on sys.path the regular package wins; a namespace already
    imported gets the real directory on its path (its modules stay the same objects)."""
    if str(REPO) not in sys.path:
        sys.path.append(str(REPO))
    module = sys.modules.get("services")
    if module is not None and getattr(module, "__file__", None) is None:
        real = str(REPO / "services")
        if real not in list(module.__path__):
            module.__path__ = [real, *module.__path__]


_real_services_package()
CHART = REPO / "charts"
KUBERAY_CRDS = REPO.parent / "shared" / "testdata" / "kuberay-crds-v1.7.0"
VRJ_CRD = CHART / "crds" / "easyvideor1.io_videorljobs.yaml"
VALUES_FILES = sorted((REPO / "examples" / "helm").glob("*.yaml"))
# Oldest (Chart.yaml kubeVersion) and newest Kubernetes version the chart is checked against.
KUBE_VERSIONS = ("1.31.0", "1.37.0")
RELEASE, NAMESPACE = "easyvideor1", "easyvideor1"
RECOMMENDED_LABELS = ("app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/version",
                      "app.kubernetes.io/component", "app.kubernetes.io/part-of", "app.kubernetes.io/managed-by")
KUBERAY_KINDS = {"RayJob": "ray.io_rayjobs.yaml", "RayService": "ray.io_rayservices.yaml",
                 "RayCluster": "ray.io_rayclusters.yaml"}


# ---- chart ---------------------------------------------------------------------------

@functools.cache
def chart() -> Chart:
    return Chart.load(CHART)


def load_values(path: Path) -> dict[str, Any]:
    """A values file as `helm install -f` reads it (YAML 1.1: a bare key ``n`` is ``false``)."""
    return values_from_yaml(path.read_text()) or {}


@functools.cache
def _render(values_json: str) -> tuple[tuple[str, str], ...]:
    rendered = chart().render(json.loads(values_json) or None, name=RELEASE, namespace=NAMESPACE, is_install=True)
    return tuple(sorted(rendered.items()))


def render(values: dict[str, Any] | None = None) -> dict[str, str]:
    """Template path -> rendered text (cached: every test of one values set shares it)."""
    return dict(_render(json.dumps(values or {}, sort_keys=True)))


def render_objects(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    objects = []
    for path, text in render(values).items():
        if path.endswith(".txt"):
            continue
        objects += [doc for doc in yaml.safe_load_all(text) if doc]
    return [copy.deepcopy(obj) for obj in objects]


def notes(values: dict[str, Any] | None = None) -> str:
    return render(values)[f"{chart().name}/templates/NOTES.txt"]


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [obj for obj in objects if obj["kind"] == kind]


def ident(obj: dict[str, Any]) -> str:
    return f"{obj['kind']}/{obj['metadata']['name']}"


# ---- schemas -------------------------------------------------------------------------

def validate_builtin(obj: dict[str, Any], version: str) -> None:
    """kubernetes-validate in strict mode (unknown fields fail); raises for kinds it lacks."""
    kubernetes_validate.validate(obj, version, strict=True)


def is_builtin(obj: dict[str, Any]) -> bool:
    group = obj["apiVersion"].rpartition("/")[0]
    return group == "" or group.endswith(".k8s.io") or group in {"apps", "batch", "policy", "autoscaling"}


def close_schema(node: Any) -> Any:
    """Set ``additionalProperties: false`` on every object schema with ``properties`` that
    does not preserve unknown fields, so a misspelled field is an error."""
    if isinstance(node, dict):
        if ("properties" in node and node.get("type") == "object" and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")):
            node["additionalProperties"] = False
        for key, value in node.items():
            if key == "properties":
                for sub in value.values():
                    close_schema(sub)
            else:
                close_schema(value)
    elif isinstance(node, list):
        for item in node:
            close_schema(item)
    return node


def crd_schema(crd: dict[str, Any], version: str) -> dict[str, Any]:
    for entry in crd["spec"]["versions"]:
        if entry["name"] == version:
            return entry["schema"]["openAPIV3Schema"]
    raise KeyError(f"{crd['metadata']['name']} has no version {version}")


@functools.cache
def kuberay_validator(kind: str) -> jsonschema.Draft7Validator:
    crd = yaml.load((KUBERAY_CRDS / KUBERAY_KINDS[kind]).read_text(), Loader=yaml.CSafeLoader)
    schema = close_schema(crd_schema(crd, "v1"))
    return jsonschema.Draft7Validator(schema)


def kuberay_errors(obj: dict[str, Any]) -> list[str]:
    assert obj["apiVersion"] == "ray.io/v1", f"{ident(obj)}: apiVersion {obj['apiVersion']}"
    return [f"{ident(obj)}: {'.'.join(map(str, e.absolute_path))}: {e.message}"
            for e in kuberay_validator(obj["kind"]).iter_errors(obj)]


@functools.cache
def vrj_crd() -> dict[str, Any]:
    return yaml.safe_load(VRJ_CRD.read_text())


@functools.cache
def vrj_validator() -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(close_schema(copy.deepcopy(crd_schema(vrj_crd(), "v1alpha1"))),
                                      format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER)


def vrj_errors(obj: dict[str, Any]) -> list[str]:
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in vrj_validator().iter_errors(obj)]


# The ServiceMonitor fields the chart uses (monitoring.coreos.com/v1), closed, so a typo fails.
SERVICE_MONITOR_SCHEMA = {
    "type": "object", "additionalProperties": False, "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"}, "kind": {"const": "ServiceMonitor"},
        "metadata": {"type": "object"},
        "spec": {"type": "object", "additionalProperties": False, "required": ["selector", "endpoints"], "properties": {
            "selector": {"type": "object", "additionalProperties": False,
                         "properties": {"matchLabels": {"type": "object",
                                                        "additionalProperties": {"type": "string"}}}},
            "endpoints": {"type": "array", "minItems": 1, "items": {
                "type": "object", "additionalProperties": False, "required": ["port"], "properties": {
                    "port": {"type": "string"}, "path": {"type": "string"},
                    "interval": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"},
                    "scrapeTimeout": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"},
                    "authorization": {"type": "object", "additionalProperties": False, "properties": {
                        "type": {"type": "string"},
                        "credentials": {"type": "object", "additionalProperties": False,
                                        "required": ["name", "key"],
                                        "properties": {"name": {"type": "string"}, "key": {"type": "string"}}}}}}}}}}},
}


# ---- pod specs -----------------------------------------------------------------------

def pod_specs(obj: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any], dict[str, Any], bool]]:
    """(where, pod template metadata, pod spec, long_running) of every pod ``obj`` makes.

    Batch pods (Jobs, the RayJob submitter) are not long-running: they need no probes."""
    kind, spec = obj["kind"], obj.get("spec", {})
    name = ident(obj)
    if kind in ("Deployment", "StatefulSet", "DaemonSet"):
        yield name, spec["template"].get("metadata", {}), spec["template"]["spec"], True
    elif kind == "Job":
        yield name, spec["template"].get("metadata", {}), spec["template"]["spec"], False
    elif kind in ("RayJob", "RayService"):
        cluster = spec["rayClusterSpec"] if kind == "RayJob" else spec["rayClusterConfig"]
        head = cluster["headGroupSpec"]["template"]
        yield f"{name} head", head.get("metadata", {}), head["spec"], True
        for group in cluster.get("workerGroupSpecs", []):
            template = group["template"]
            yield f"{name} workers {group['groupName']}", template.get("metadata", {}), template["spec"], True
        if kind == "RayJob" and spec.get("submissionMode", "K8sJobMode") == "K8sJobMode":
            submitter = spec.get("submitterPodTemplate")
            assert submitter, f"{name}: K8sJobMode without submitterPodTemplate gets KubeRay's default pod"
            yield f"{name} submitter", submitter.get("metadata", {}), submitter["spec"], False


def containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod.get("initContainers", []), *pod["containers"]]


def images(objects: list[dict[str, Any]]) -> set[str]:
    found = set()
    for obj in objects:
        for _, _, pod, _ in pod_specs(obj):
            found |= {c["image"] for c in containers(pod)}
    return found


def split_image(image: str) -> tuple[str, str]:
    repository, _, tag = image.rpartition(":")
    assert repository and "/" not in tag, f"image {image!r} has no tag"
    return repository, tag


# ---- the run config in ConfigMaps ----------------------------------------------------

def config_maps(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {obj["metadata"]["name"]: obj for obj in objects if obj["kind"] == "ConfigMap"}


def mounted_files(pod: dict[str, Any], container: dict[str, Any],
                  maps: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Path -> text of every ConfigMap key ``container`` sees through its volume mounts (the
    ConfigMaps being ``maps``); a ConfigMap that is not among them contributes nothing."""
    refs = {v["name"]: v["configMap"] for v in pod.get("volumes", []) if "configMap" in v}
    files = {}
    for mount in container.get("volumeMounts", []):
        ref = refs.get(mount["name"])
        if ref is None or ref["name"] not in maps:
            continue
        data = maps[ref["name"]].get("data", {})
        items = ref.get("items") or [{"key": key, "path": key} for key in data]
        for item in items:
            path = f"{mount['mountPath'].rstrip('/')}/{item['path']}"
            if "subPath" in mount:
                if mount["subPath"] != item["path"]:
                    continue
                path = mount["mountPath"]
            files[path] = data[item["key"]]
    return files


def load_yaml_docs(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc]

"""values.schema.json: strict (closed objects), accepts the shipped values, rejects bad
ones at install time; the README documents every value."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from helm_python.chart import values_from_yaml
from helm_python.errors import HelmValuesError
from k8s_corpus import chart_cases
from k8s_support import CHART, VALUES_FILES, chart, render

FREE_FORM = {"affinity"}  # passed through; validated by Kubernetes


@pytest.mark.parametrize("case", sorted(chart_cases()))
def test_shipped_values_are_valid(case):
    chart().validate_schema(chart_cases()[case])


BAD_VALUES = [
    ({"reward": {"replicaCount": -1}}, "/reward/replicaCount"),
    ({"rewrd": {"enabled": True}}, "rewrd"),
    ({"reward": {"replicas": 2}}, "replicas"),
    ({"reward": {"autoscaling": {"minReplicas": 0}}}, "minReplicas"),
    ({"reward": {"image": {"tag": "latest"}}}, "/reward/image/tag"),
    ({"redis": {"image": {"tag": ""}}}, "/redis/image"),
    ({"reward": {"seccompProfile": {"type": "Unconfined"}}}, "seccompProfile"),
    ({"reward": {"seccompProfile": {"type": "Localhost"}}}, "localhostProfile"),
    ({"minio": {"enabled": False}}, "/store/external"),
    ({"redis": {"enabled": False}}, "/redis/external/url"),
    ({"redis": {"external": {"url": "http://redis:6379"}}}, "/redis/external/url"),
    ({"reward": {"resources": {"requests": {"memory": None}}}}, "memory"),  # null deletes a default
    ({"frameCache": {"resources": {"requests": {"cpu": "1", "memory": "1Gi", "gpu": 1},
                                   "limits": {"cpu": "1", "memory": "1Gi"}}}}, "gpu"),
    ({"trainer": {"numWorkers": -2}}, "/trainer/numWorkers"),
    ({"trainer": {"memoryPerWorker": "lots"}}, "/trainer/memoryPerWorker"),
    ({"runConfig": {"workers": {"reward": {}}}}, "workers"),  # a section the run config does not have
    ({"runConfig": {"serve": {"rewards": {}}}}, "rewards"),
    ({"runConfig": {"serve": {"reward": {"port": "http"}}}}, "/runConfig/serve/reward/port"),
    ({"runConfig": {"serve": {"rollout": {"num_gpus": -1}}}}, "/runConfig/serve/rollout/num_gpus"),
    ({"runConfig": {"worker": "none"}}, "/runConfig/worker"),
    ({"monitoring": {"serviceMonitor": {"interval": "soon"}}}, "interval"),
    ({"reward": {"networkPolicy": {"extraEgress": [{"too": []}]}}}, "too"),
    ({"reward": {"tolerations": [{"key": "gpu", "operator": "Equals"}]}}, "operator"),
    ({"store": {"bucket": "Not_A_Bucket"}}, "/store/bucket"),
    ({"imagePullSecrets": ["ghcr"]}, "/imagePullSecrets/0"),
    ({"operator": {"enabled": "yes"}}, "/operator/enabled"),
]


@pytest.mark.parametrize("values, where", BAD_VALUES, ids=[w for _, w in BAD_VALUES])
def test_bad_values_are_rejected(values, where):
    with pytest.raises(HelmValuesError) as info:
        chart().validate_schema(values)
    assert where in str(info.value)
    with pytest.raises(HelmValuesError):  # an install renders through the same check
        render(values)


def _object_schemas(node, path="$"):
    if isinstance(node, dict):
        if node.get("type") == "object" or "properties" in node:
            yield path, node
        for key, value in node.items():
            yield from _object_schemas(value, f"{path}.{key}")
    elif isinstance(node, list):
        for index, item in enumerate(node):
            yield from _object_schemas(item, f"{path}[{index}]")


def test_schema_is_closed():
    schema = json.loads((CHART / "values.schema.json").read_text())
    open_objects = []
    for path, node in _object_schemas(schema):
        overlay = ".allOf[" in path or path.startswith("$.allOf") or path.split(".")[-1] in ("if", "then", "else")
        if "properties" in node and not overlay and "additionalProperties" not in node:
            open_objects.append(path)
        if "properties" not in node and "additionalProperties" not in node and node.get("type") == "object":
            if path.rsplit(".", 1)[-1] not in FREE_FORM and not path.endswith(".items"):
                open_objects.append(path)
    assert open_objects == []


def _documented_keys(values, prefix=""):
    whole = {"resources", "runConfig", "seccompProfile"}
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and key not in whole:
            yield from _documented_keys(value, f"{path}.")
        else:
            yield path


def _readme_section(title):
    readme = (CHART / "README.md").read_text()
    start = readme.index(f"\n## {title}\n")
    end = readme.find("\n## ", start + 1)
    return readme[start:end if end != -1 else None]


def test_readme_documents_every_value():
    table = set(re.findall(r"^\| `([^`]+)` \|", _readme_section("Values"), re.MULTILINE))
    expected = set(_documented_keys(chart().values))
    assert expected - table == set(), "values missing from charts/README.md"
    assert table - expected == set(), "README documents values that do not exist"


def test_readme_maps_every_removed_value_to_its_config_field():
    """The values that became run-config fields: the schema keeps them only to fail with a hint,
    and the README's table says where each one went."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    removed = set()

    def walk(node, path):
        for key, sub in node.get("properties", {}).items():
            if sub.get("description", "").startswith("Removed:"):
                removed.add(f"{path}{key}")
            walk(sub, f"{path}{key}.")

    walk(schema, "")
    mapped = set(re.findall(r"^\| `([^`]+)` \| ", _readme_section("The run config"), re.MULTILINE))
    assert removed and removed <= mapped


@pytest.mark.parametrize("path", VALUES_FILES, ids=lambda p: p.name)
def test_values_files_mean_the_same_to_helm(path):
    """Helm reads values as YAML 1.1: a bare key such as `n` (worker.rollout.n) turns into
    `false`. The shipped files must mean what they say."""
    assert values_from_yaml(path.read_text()) == (yaml.safe_load(path.read_text()) or {})

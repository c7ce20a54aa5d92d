"""values.schema.json: strict (closed objects), accepts the shipped values, rejects bad
ones at install time; the README documents every value."""

from __future__ import annotations

import json
import re

import pytest
from helm_python.errors import HelmValuesError
from k8s_corpus import chart_cases
from k8s_support import CHART, chart, render

FREE_FORM = {"affinity", "runConfig"}  # passed through; validated by Kubernetes / by evr1 at start


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
    ({"rollout": {"gpusPerReplica": 0}}, "/rollout/gpusPerReplica"),
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


def test_readme_documents_every_value():
    readme = (CHART / "README.md").read_text()
    table = set(re.findall(r"^\| `([^`]+)` \|", readme, re.MULTILINE))
    expected = set(_documented_keys(chart().values))
    assert expected - table == set(), "values missing from charts/README.md"
    assert table - expected == set(), "README documents values that do not exist"

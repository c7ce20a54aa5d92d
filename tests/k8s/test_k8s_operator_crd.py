"""The VideoRLJob CRD: a valid built-in object, and its schema accepts the examples and the
statuses the operator writes while rejecting typos."""

from __future__ import annotations

import copy

import pytest
from k8s_corpus import VRJ_EXAMPLES, example_vrj
from k8s_support import (
    KUBE_VERSIONS,
    REPO,
    VRJ_CRD,
    chart,
    load_yaml_docs,
    validate_builtin,
    vrj_crd,
    vrj_errors,
)

from operators.videorljob import GROUP, KIND, PLURAL, VERSION


@pytest.mark.parametrize("version", KUBE_VERSIONS)
def test_crd_is_a_valid_object(version):
    validate_builtin(vrj_crd(), version)


def test_crd_names_match_the_operator():
    crd = vrj_crd()
    assert crd["metadata"]["name"] == f"{PLURAL}.{GROUP}"
    assert (crd["spec"]["group"], crd["spec"]["names"]["kind"], crd["spec"]["names"]["plural"]) == (GROUP, KIND, PLURAL)
    versions = {v["name"]: v for v in crd["spec"]["versions"]}
    assert versions[VERSION]["storage"] and versions[VERSION]["served"]
    assert "status" in versions[VERSION]["subresources"]
    assert chart().crds[0]["data"].strip() == VRJ_CRD.read_text().strip()


def _structural(node, path="root"):
    """Every schema node says its type (a structural schema), except preserve-unknown ones."""
    if node.get("x-kubernetes-preserve-unknown-fields") or node.get("x-kubernetes-int-or-string"):
        return []
    missing = [] if "type" in node else [path]
    for name, sub in node.get("properties", {}).items():
        missing += _structural(sub, f"{path}.{name}")
    if "items" in node:
        missing += _structural(node["items"], f"{path}[]")
    return missing


def test_schema_is_structural():
    for version in vrj_crd()["spec"]["versions"]:
        assert _structural(version["schema"]["openAPIV3Schema"]) == []


@pytest.mark.parametrize("path", VRJ_EXAMPLES, ids=lambda p: p.name)
def test_examples_validate(path):
    (vrj,) = load_yaml_docs(path.read_text())
    assert vrj_errors(vrj) == []


def _example():
    return example_vrj(REPO / "examples" / "k8s" / "videorljob.yaml")


@pytest.mark.parametrize("mutate, where", [
    (lambda v: v["spec"]["dataset"].update(pth="/x"), "pth"),
    (lambda v: v["spec"].update(resourcess={}), "resourcess"),
    (lambda v: v["spec"]["cache"].update(family="qwen4"), "family"),
    (lambda v: v["spec"]["cache"].update(workers=0), "workers"),
    (lambda v: v["spec"]["resources"].update(memoryPerWorker="a lot"), "memoryPerWorker"),
    (lambda v: v["spec"].update(overrides=["not an override"]), "overrides"),
    (lambda v: v["spec"].pop("dataset"), "dataset"),
    (lambda v: v["spec"]["dataset"]["volume"].pop("claimName"), "claimName"),
    (lambda v: v.update(status={"phase": "Done"}), "phase"),
    (lambda v: v.update(status={"conditions": [{"type": "Ready", "status": "True"}]}), "conditions"),
])
def test_schema_rejects_mistakes(mutate, where):
    vrj = copy.deepcopy(_example())
    mutate(vrj)
    errors = vrj_errors(vrj)
    assert errors and where in " ".join(errors), errors


def test_inline_run_config_is_free_form():
    vrj = copy.deepcopy(_example())
    vrj["spec"]["runConfig"]["anything"] = {"goes": [1, 2]}  # checked by the operator, not the API server
    assert vrj_errors(vrj) == []

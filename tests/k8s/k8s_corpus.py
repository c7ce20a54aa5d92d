"""Every object the project can put on a cluster, grouped by where it comes from:

- the chart, for its default values and each values file of examples/helm/,
- ``evr1 k8s render-job`` (the library renderer) for several run configs,
- the operator's children of the example VideoRLJobs.

The validation, policy and command tests all run over this one corpus.
"""

from __future__ import annotations

import functools
from typing import Any

import yaml
from k8s_support import REPO, VALUES_FILES, load_values, render_objects

from easyvideor1.config import load_config
from easyvideor1.k8s import render_job, s3_env
from operators.videorljob.manifests import OperatorDefaults
from operators.videorljob.reconcile import Observed, plan

EXAMPLE_RUN = REPO / "examples" / "k8s" / "run.yaml"
VRJ_EXAMPLES = sorted((REPO / "examples" / "k8s").glob("videorljob*.yaml"))
JOB_CASES: dict[str, list[str]] = {
    "example": [],
    "head-only": ["kubernetes.num_workers=0", "kubernetes.gpus_per_worker=1"],
    "service-account": ["kubernetes.service_account=trainer", "kubernetes.num_workers=8"],
}
OPERATOR_DEFAULTS = OperatorDefaults(trainer_image="ghcr.io/easyvideor1/trainer:0.1.0",
                                     frames_store="s3://easyvideor1/frames",
                                     s3_endpoint="http://easyvideor1-minio.easyvideor1:9000",
                                     s3_secret="easyvideor1-s3")
NOW = "2025-06-01T12:00:00Z"


def chart_cases() -> dict[str, dict[str, Any]]:
    return {"default": {}, **{path.stem: load_values(path) for path in VALUES_FILES}}


def job_objects(case: str) -> list[dict[str, Any]]:
    config = load_config(EXAMPLE_RUN, JOB_CASES[case])
    return render_job(config, env=s3_env("http://easyvideor1-minio:9000", "easyvideor1-s3"))


def example_vrj(path, *, uid: str = "0b5c7a1e-1111-4222-8333-944455556666", generation: int = 1) -> dict[str, Any]:
    vrj = yaml.safe_load(path.read_text())
    vrj["metadata"].update(namespace="ml-team", uid=uid, generation=generation)
    return vrj


def config_source_for(vrj: dict[str, Any]) -> dict[str, Any] | None:
    """The ConfigMap a runConfigRef example points at, holding examples/k8s/run.yaml."""
    ref = vrj["spec"].get("runConfigRef")
    if not ref:
        return None
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": ref["name"], "namespace": "ml-team"},
            "data": {ref.get("key", "run.yaml"): EXAMPLE_RUN.read_text()}}


def operator_objects(path) -> list[dict[str, Any]]:
    vrj = example_vrj(path)
    result = plan(vrj, Observed(config_source=config_source_for(vrj)), OPERATOR_DEFAULTS, NOW)
    created = [action.body for action in result.actions if action.verb == "create"]
    assert created, f"{path.name}: the operator created nothing: {result.status.get('message')}"
    return created


@functools.cache
def _corpus() -> dict[str, list[dict[str, Any]]]:
    corpus = {f"chart:{name}": render_objects(values) for name, values in chart_cases().items()}
    corpus |= {f"render-job:{case}": job_objects(case) for case in JOB_CASES}
    corpus |= {f"operator:{path.stem}": operator_objects(path) for path in VRJ_EXAMPLES}
    return corpus


def corpus() -> dict[str, list[dict[str, Any]]]:
    import copy

    return copy.deepcopy(_corpus())


def corpus_ids() -> list[str]:
    return [f"chart:{name}" for name in chart_cases()] + [f"render-job:{case}" for case in JOB_CASES] \
        + [f"operator:{path.stem}" for path in VRJ_EXAMPLES]

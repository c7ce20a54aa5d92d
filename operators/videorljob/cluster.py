"""The few API calls the operator makes, over the official Kubernetes client.

Objects go in and come out as plain dicts in API field names (camelCase), which is what
``reconcile`` reads and writes. "Already exists" on create and "not found" on delete are
not errors: the next reconcile sees the real state either way.
"""

from __future__ import annotations

from typing import Any, Protocol

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from operators.videorljob.reconcile import Action, Observed

RAY_GROUP, RAY_VERSION, RAY_JOBS = "ray.io", "v1", "rayjobs"


class Cluster(Protocol):
    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None: ...
    def create(self, kind: str, namespace: str, body: dict[str, Any]) -> None: ...
    def patch(self, kind: str, namespace: str, name: str, body: dict[str, Any]) -> None: ...
    def delete(self, kind: str, namespace: str, name: str) -> None: ...


class KubeCluster:
    """``Cluster`` over the Kubernetes API (config loaded by the caller)."""

    def __init__(self, api_client: client.ApiClient | None = None):
        self._api = api_client or client.ApiClient()
        self._core = client.CoreV1Api(self._api)
        self._batch = client.BatchV1Api(self._api)
        self._custom = client.CustomObjectsApi(self._api)

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            if kind == "ConfigMap":
                obj = self._core.read_namespaced_config_map(name, namespace)
            elif kind == "Job":
                obj = self._batch.read_namespaced_job(name, namespace)
            else:
                return self._custom.get_namespaced_custom_object(RAY_GROUP, RAY_VERSION, namespace, RAY_JOBS,
                                                                 _ray(kind, name))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return self._api.sanitize_for_serialization(obj)

    def create(self, kind: str, namespace: str, body: dict[str, Any]) -> None:
        try:
            if kind == "ConfigMap":
                self._core.create_namespaced_config_map(namespace, body)
            elif kind == "Job":
                self._batch.create_namespaced_job(namespace, body)
            else:
                self._custom.create_namespaced_custom_object(RAY_GROUP, RAY_VERSION, namespace, RAY_JOBS,
                                                             _ray(kind, body))
        except ApiException as exc:
            if exc.status != 409:
                raise

    def patch(self, kind: str, namespace: str, name: str, body: dict[str, Any]) -> None:
        # Only RayJobs are ever patched (released from suspension).
        self._custom.patch_namespaced_custom_object(RAY_GROUP, RAY_VERSION, namespace, RAY_JOBS,
                                                    _ray(kind, name), body)

    def delete(self, kind: str, namespace: str, name: str) -> None:
        # Background: the owner goes at once, the Job's pods follow through garbage collection.
        options = client.V1DeleteOptions(propagation_policy="Background")
        try:
            if kind == "ConfigMap":
                self._core.delete_namespaced_config_map(name, namespace, body=options)
            elif kind == "Job":
                self._batch.delete_namespaced_job(name, namespace, body=options)
            else:
                self._custom.delete_namespaced_custom_object(RAY_GROUP, RAY_VERSION, namespace, RAY_JOBS,
                                                             _ray(kind, name), body=options)
        except ApiException as exc:
            if exc.status != 404:
                raise


def _ray(kind: str, value: Any) -> Any:
    if kind != "RayJob":
        raise ValueError(f"the operator does not manage {kind} objects")
    return value


def observe(cluster: Cluster, vrj: dict[str, Any], names, source_ref: tuple[str, str] | None) -> Observed:
    namespace = vrj["metadata"]["namespace"]
    return Observed(
        config_source=cluster.get("ConfigMap", namespace, source_ref[0]) if source_ref else None,
        config_map=cluster.get("ConfigMap", namespace, names.config_map),
        cache_job=cluster.get("Job", namespace, names.cache_job),
        ray_job=cluster.get("RayJob", namespace, names.ray_job),
    )


def execute(cluster: Cluster, namespace: str, actions: list[Action]) -> None:
    for action in actions:
        if action.verb == "create":
            cluster.create(action.kind, namespace, action.body or {})
        elif action.verb == "patch":
            cluster.patch(action.kind, namespace, action.name, action.body or {})
        elif action.verb == "delete":
            cluster.delete(action.kind, namespace, action.name)
        else:
            raise ValueError(f"unknown action {action.verb!r}")

"""kopf handlers of VideoRLJob: observe, ``reconcile.plan``, execute, write status.

Run: ``kopf run --standalone --all-namespaces -m operators.videorljob.handlers``.
A timer drives the state machine (child Jobs and RayJobs change without touching the
VideoRLJob, so there is no event to react to); the delete handler holds kopf's finalizer
until the children are gone.
"""

from __future__ import annotations

import datetime
from typing import Any

import kopf
import kubernetes

from operators.videorljob import GROUP, PLURAL, VERSION
from operators.videorljob.cluster import Cluster, KubeCluster, execute, observe
from operators.videorljob.manifests import OperatorDefaults, child_names, config_source_ref, plain
from operators.videorljob.reconcile import plan, plan_cleanup, should_reconcile

RECONCILE_INTERVAL_S = 10.0
_STATE: dict[str, Any] = {}


def reconcile_once(body: Any, cluster: Cluster, defaults: OperatorDefaults, now: str) -> dict[str, Any]:
    """One pass over one VideoRLJob: the status patch to write (keys that went away are None)."""
    vrj = plain(body)
    observed = observe(cluster, vrj, child_names(vrj), config_source_ref(vrj))
    result = plan(vrj, observed, defaults, now)
    execute(cluster, vrj["metadata"]["namespace"], result.actions)
    old = vrj.get("status") or {}
    if result.status == old:
        return {}
    return {**{key: None for key in old if key not in result.status}, **result.status}


def cleanup_once(body: Any, cluster: Cluster) -> int:
    vrj = plain(body)
    observed = observe(cluster, vrj, child_names(vrj), None)
    actions = plan_cleanup(vrj, observed)
    execute(cluster, vrj["metadata"]["namespace"], actions)
    return len(actions)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    # Progress in annotations: status belongs to the VideoRLJob schema, which has no room for kopf's.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=GROUP)
    try:
        kubernetes.config.load_incluster_config()
    except kubernetes.config.ConfigException:
        kubernetes.config.load_kube_config()
    _STATE["cluster"] = KubeCluster()
    _STATE["defaults"] = OperatorDefaults.from_env()


@kopf.timer(GROUP, VERSION, PLURAL, interval=RECONCILE_INTERVAL_S, initial_delay=0.0,
            when=lambda body, **_: should_reconcile(dict(body.get("status") or {}), body["metadata"].get("generation")))
def reconcile(body: kopf.Body, patch: kopf.Patch, logger: Any, **_: Any) -> None:
    changes = reconcile_once(body, _STATE["cluster"], _STATE["defaults"], _now())
    if changes:
        patch.status.update(changes)
        if "phase" in changes:
            logger.info(f"phase {changes['phase']}: {changes.get('message', '')}")


@kopf.on.delete(GROUP, VERSION, PLURAL)
def cleanup(body: kopf.Body, logger: Any, **_: Any) -> None:
    deleted = cleanup_once(body, _STATE["cluster"])
    logger.info(f"deleted {deleted} child object(s)")

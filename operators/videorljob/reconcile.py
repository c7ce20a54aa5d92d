"""Reconcile one VideoRLJob: desired state from observed state -> actions and a new status.

Plain functions over dicts (the objects as the API returns them), so the whole state
machine is tested without a cluster:

    Pending -> CacheWarming (Job running; RayJob created with spec.suspend: true)
            -> Training     (Job succeeded; RayJob released: spec.suspend: false)
            -> Succeeded | Failed

A spec that cannot work fails at once with reason InvalidSpec; nothing is created for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from easyvideor1.errors import ConfigError
from operators.videorljob.manifests import (
    ChildNames,
    Desired,
    OperatorDefaults,
    build_desired,
    child_names,
    config_source_ref,
)

CONDITION_TYPES = ("CacheWarming", "CacheReady", "Training", "Succeeded", "Failed")
TERMINAL_PHASES = ("Succeeded", "Failed")
# RayJob status.jobDeploymentStatus values that end a job (KubeRay v1).
_RAY_DONE_OK = "Complete"
_RAY_FAILED = ("Failed", "ValidationFailed")


@dataclass(frozen=True)
class Action:
    """``verb``: create (``body`` is the object), patch (``body`` is a merge patch) or delete."""

    verb: str
    kind: str
    name: str
    body: dict[str, Any] | None = None


@dataclass(frozen=True)
class Observed:
    """What exists now. ``config_source`` is the ConfigMap named by spec.runConfigRef."""

    config_source: dict[str, Any] | None = None
    config_map: dict[str, Any] | None = None
    cache_job: dict[str, Any] | None = None
    ray_job: dict[str, Any] | None = None


@dataclass
class Plan:
    actions: list[Action] = field(default_factory=list)
    status: dict[str, Any] = field(default_factory=dict)


def job_state(job: dict[str, Any] | None) -> tuple[str, str]:
    """(``missing|running|succeeded|failed``, message) of a batch/v1 Job."""
    if job is None:
        return "missing", ""
    status = job.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("status") != "True":
            continue
        if condition.get("type") == "Complete":
            return "succeeded", condition.get("message") or ""
        if condition.get("type") == "Failed":
            return "failed", condition.get("message") or condition.get("reason") or "the Job failed"
    return "running", ""


def ray_job_state(ray_job: dict[str, Any] | None) -> tuple[str, str]:
    """(``missing|suspended|running|succeeded|failed``, message) of a KubeRay RayJob."""
    if ray_job is None:
        return "missing", ""
    status = ray_job.get("status") or {}
    deployment = status.get("jobDeploymentStatus") or ""
    message = status.get("message") or ""
    if deployment == _RAY_DONE_OK:
        if status.get("jobStatus") == "SUCCEEDED":
            return "succeeded", message
        return "failed", message or f"the Ray job ended {status.get('jobStatus') or 'without success'}"
    if deployment in _RAY_FAILED:
        return "failed", message or status.get("reason") or f"RayJob {deployment}"
    if (ray_job.get("spec") or {}).get("suspend"):
        return "suspended", message
    return "running", message


def plan(vrj: dict[str, Any], observed: Observed, defaults: OperatorDefaults, now: str) -> Plan:
    """The actions that move ``vrj`` toward its goal, and its status afterwards."""
    meta = vrj["metadata"]
    old = dict(vrj.get("status") or {})
    names = child_names(vrj)
    status = _Status(old, now, meta.get("generation"))
    status.fields.update(configMapName=names.config_map, rayJobName=names.ray_job)
    if old.get("phase") in TERMINAL_PHASES:
        if not _spec_fixed(old, meta.get("generation")):
            return Plan([], old)  # a finished run is never restarted: create a new VideoRLJob
        status = _Status({}, now, meta.get("generation"))  # an invalid spec was edited: start over
        status.fields.update(configMapName=names.config_map, rayJobName=names.ray_job)
    ref = config_source_ref(vrj)
    if ref is not None and observed.config_source is None:
        status.phase("Pending", f"waiting for ConfigMap {ref[0]} (spec.runConfigRef)")
        return Plan([], status.result())
    try:
        desired = build_desired(vrj, observed.config_source, defaults)
    except ConfigError as exc:
        status.fail("InvalidSpec", str(exc))
        return Plan([], status.result())
    return _advance(desired, observed, status, names)


def should_reconcile(status: dict[str, Any], generation: int | None) -> bool:
    """False for a finished run, unless its spec was rejected and has been edited since."""
    return status.get("phase") not in TERMINAL_PHASES or _spec_fixed(status, generation)


def _spec_fixed(old: dict[str, Any], generation: int | None) -> bool:
    """Only a rejected spec may be retried, and only once it has changed."""
    failed = next((c for c in old.get("conditions") or [] if c.get("type") == "Failed"), {})
    return failed.get("reason") == "InvalidSpec" and generation is not None \
        and generation != old.get("observedGeneration")


def _advance(desired: Desired, observed: Observed, status: _Status, names: ChildNames) -> Plan:
    actions: list[Action] = []
    if observed.config_map is None:
        actions.append(Action("create", "ConfigMap", names.config_map, desired.config_map))

    if desired.cache_job is None:
        cache, cache_message = "succeeded", ""
        status.set("CacheWarming", False, "CacheDisabled", "spec.cache.enabled is false")
        status.set("CacheReady", True, "CacheDisabled", "the frame store is used as it is")
    else:
        status.fields["cacheJobName"] = names.cache_job
        cache, cache_message = job_state(observed.cache_job)
        if cache == "missing":
            actions.append(Action("create", "Job", names.cache_job, desired.cache_job))
            status.set("CacheWarming", True, "CacheJobCreated", f"Job {names.cache_job} builds the frame cache")
            status.set("CacheReady", False, "CacheWarming", "waiting for the cache build")
        elif cache == "running":
            status.set("CacheWarming", True, "CacheJobRunning", f"Job {names.cache_job} builds the frame cache")
            status.set("CacheReady", False, "CacheWarming", "waiting for the cache build")
        elif cache == "succeeded":
            status.set("CacheWarming", False, "CacheJobSucceeded", f"Job {names.cache_job} finished")
            status.set("CacheReady", True, "CacheJobSucceeded", "every entry of the dataset is in the store")
        else:
            status.set("CacheWarming", False, "CacheJobFailed", cache_message)
            status.set("CacheReady", False, "CacheJobFailed", cache_message)
            status.set("Training", False, "CacheJobFailed", "training never started")
            status.fail("CacheJobFailed", f"cache build failed: {cache_message}")
            return Plan(actions, status.result())

    ready = cache == "succeeded"
    ray, ray_message = ray_job_state(observed.ray_job)
    if ray == "missing":
        body = _with_suspend(desired.ray_job, not ready)
        actions.append(Action("create", "RayJob", names.ray_job, body))
        ray = "running" if ready else "suspended"
    elif ray == "suspended" and ready:
        actions.append(Action("patch", "RayJob", names.ray_job, {"spec": {"suspend": False}}))
        ray = "running"
    if observed.ray_job is not None:
        status.fields["rayJob"] = _ray_status(observed.ray_job)

    if ray == "suspended":
        status.set("Training", False, "WaitingForCache", f"RayJob {names.ray_job} is suspended until the cache is ready")
        status.phase("CacheWarming", "warming the frame cache")
    elif ray == "running":
        status.set("Training", True, "RayJobReleased", f"RayJob {names.ray_job} is running")
        status.started()
        status.phase("Training", f"RayJob {names.ray_job} is training")
    elif ray == "succeeded":
        status.set("Training", False, "RayJobSucceeded", ray_message or "the Ray job finished")
        status.set("Succeeded", True, "RayJobSucceeded", ray_message or "training finished")
        status.finished()
        status.phase("Succeeded", "training finished")
    else:
        status.set("Training", False, "RayJobFailed", ray_message)
        status.fail("RayJobFailed", f"training failed: {ray_message}")
    return Plan(actions, status.result())


def plan_cleanup(vrj: dict[str, Any], observed: Observed) -> list[Action]:
    """Deletes for the children this VideoRLJob owns, the RayJob first (it holds the GPUs).

    Owner references would collect them too; doing it in the finalizer makes the GPUs free
    before the VideoRLJob disappears, and keeps objects someone else created alone."""
    uid = vrj["metadata"]["uid"]
    children = (("RayJob", observed.ray_job), ("Job", observed.cache_job), ("ConfigMap", observed.config_map))
    return [Action("delete", kind, obj["metadata"]["name"]) for kind, obj in children
            if obj is not None and _owned_by(obj, uid)]


def _owned_by(obj: dict[str, Any], uid: str) -> bool:
    return any(ref.get("uid") == uid for ref in obj["metadata"].get("ownerReferences") or [])


def _with_suspend(ray_job: dict[str, Any], suspend: bool) -> dict[str, Any]:
    return {**ray_job, "spec": {**ray_job["spec"], "suspend": suspend}}


def _ray_status(ray_job: dict[str, Any]) -> dict[str, str]:
    status = ray_job.get("status") or {}
    return {key: status[key] for key in ("jobDeploymentStatus", "jobStatus", "dashboardURL") if status.get(key)}


class _Status:
    """The next status: conditions keep their lastTransitionTime while their status holds."""

    def __init__(self, old: dict[str, Any], now: str, generation: int | None):
        self.now = now
        self.generation = generation
        self.fields: dict[str, Any] = {k: v for k, v in old.items() if k != "conditions"}
        self.conditions = {c["type"]: dict(c) for c in old.get("conditions") or []}
        self.fields.setdefault("phase", "Pending")
        if generation is not None:
            self.fields["observedGeneration"] = generation

    def set(self, kind: str, value: bool, reason: str, message: str) -> None:
        text = "True" if value else "False"
        previous = self.conditions.get(kind)
        since = previous["lastTransitionTime"] if previous and previous.get("status") == text else self.now
        condition = {"type": kind, "status": text, "reason": reason, "message": message, "lastTransitionTime": since}
        if self.generation is not None:
            condition["observedGeneration"] = self.generation
        self.conditions[kind] = condition

    def phase(self, phase: str, message: str) -> None:
        self.fields["phase"], self.fields["message"] = phase, message

    def started(self) -> None:
        self.fields.setdefault("startTime", self.now)

    def finished(self) -> None:
        self.fields.setdefault("completionTime", self.now)

    def fail(self, reason: str, message: str) -> None:
        self.set("Failed", True, reason, message)
        self.finished()
        self.phase("Failed", message)

    def result(self) -> dict[str, Any]:
        for kind in ("Succeeded", "Failed"):
            if kind not in self.conditions:
                self.set(kind, False, "InProgress", "the run has not finished")
        ordered = [self.conditions[kind] for kind in CONDITION_TYPES if kind in self.conditions]
        return {**self.fields, "conditions": ordered}

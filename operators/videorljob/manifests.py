"""The objects one VideoRLJob owns, built from its spec: pure functions, no cluster.

- ``<name>-config``: ConfigMap with the resolved run config (via ``easyvideor1.k8s``),
- ``<name>-cache``: Job running ``evr1 cache build`` over the dataset,
- ``<name>``: the RayJob (``easyvideor1.k8s.render_job``) whose entrypoint is the Ray trainer,
  ``python -m services.trainer.entrypoint`` on the mounted run config in distributed mode
  (``k8s/rayjob.TRAIN_ENTRYPOINT``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import yaml

from easyvideor1.config import RunConfig, apply_override, validate_config
from easyvideor1.errors import ConfigError
from easyvideor1.k8s import render_job, s3_env
from easyvideor1.k8s.naming import MAX_RAYJOB_NAME, check_dns_label, labels
from easyvideor1.k8s.security import (
    WRITABLE_HOME_ENV,
    container_security_context,
    env_list,
    pod_security_context,
    scratch_mounts,
    scratch_volumes,
)
from operators.videorljob import API_VERSION, KIND

MANAGED_BY = "easyvideor1-operator"
OWNER_LABEL = "easyvideor1.io/videorljob"
CACHE_CONTAINER = "cache-build"
# `evr1 cache build` exits 1 when it cannot run (bad arguments, unreadable data) and 3 when
# rows or media failed: running it again gives the same answer.
CACHE_PERMANENT_EXIT_CODES = (1, 3)
DATA_VOLUME = "dataset"
_SIZE_KEYS = {"numWorkers": "num_workers", "gpusPerWorker": "gpus_per_worker", "cpusPerWorker": "cpus_per_worker",
              "memoryPerWorker": "memory_per_worker", "headCpus": "head_cpus", "headMemory": "head_memory"}


@dataclass(frozen=True)
class OperatorDefaults:
    """What a VideoRLJob may leave out; the chart sets these on the operator Deployment."""

    trainer_image: str = "ghcr.io/easyvideor1/trainer:0.1.0"
    frames_store: str | None = None
    s3_endpoint: str | None = None
    s3_secret: str | None = None

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> OperatorDefaults:
        env = os.environ if environ is None else environ
        return cls(trainer_image=env.get("EVR1_OPERATOR_TRAINER_IMAGE") or cls.trainer_image,
                   frames_store=env.get("EVR1_OPERATOR_FRAMES_STORE") or None,
                   s3_endpoint=env.get("EVR1_OPERATOR_S3_ENDPOINT") or None,
                   s3_secret=env.get("EVR1_OPERATOR_S3_SECRET") or None)


@dataclass(frozen=True)
class ChildNames:
    config_map: str
    cache_job: str
    ray_job: str


@dataclass(frozen=True)
class Desired:
    """Every child of one VideoRLJob; ``ray_job`` is built unsuspended (the plan decides)."""

    config: RunConfig
    config_map: dict[str, Any]
    ray_job: dict[str, Any]
    cache_job: dict[str, Any] | None


def child_names(vrj: dict[str, Any]) -> ChildNames:
    name = vrj["metadata"]["name"]
    return ChildNames(config_map=f"{name}-config", cache_job=f"{name}-cache", ray_job=name)


def owner_reference(vrj: dict[str, Any]) -> dict[str, Any]:
    meta = vrj["metadata"]
    return {"apiVersion": API_VERSION, "kind": KIND, "name": meta["name"], "uid": meta["uid"],
            "controller": True, "blockOwnerDeletion": True}


def config_source_ref(vrj: dict[str, Any]) -> tuple[str, str] | None:
    """(ConfigMap name, key) when the run config comes from a ConfigMap."""
    ref = vrj.get("spec", {}).get("runConfigRef")
    if not ref:
        return None
    return ref["name"], ref.get("key") or "run.yaml"


def resolve_config(vrj: dict[str, Any], source: dict[str, Any] | None, defaults: OperatorDefaults) -> RunConfig:
    """The run config the RayJob gets: inline or from ``source`` (the referenced ConfigMap),
    then ``spec.overrides``, then what the spec itself fixes (data, image, sizes)."""
    meta, spec = vrj["metadata"], vrj.get("spec", {})
    where = f"VideoRLJob {meta['namespace']}/{meta['name']}"
    ref = config_source_ref(vrj)
    if ("runConfig" in spec) == (ref is not None):
        raise ConfigError(f"{where}: set exactly one of spec.runConfig and spec.runConfigRef")
    if ref is None:
        raw = plain(spec["runConfig"])
    else:
        text = ((source or {}).get("data") or {}).get(ref[1])
        if text is None:
            raise ConfigError(f"{where}: ConfigMap {ref[0]} has no key {ref[1]!r}")
        try:
            raw = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{where}: ConfigMap {ref[0]} key {ref[1]}: invalid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: the run config must be a mapping")
    for item in spec.get("overrides", []):
        apply_override(raw, item)
    dataset, cache = spec["dataset"], spec.get("cache", {})
    data = raw.setdefault("data", {})
    data["train_files"] = dataset["path"]
    if dataset.get("mediaRoot"):
        data["media_root"] = dataset["mediaRoot"]
    store = cache.get("store") or (data.get("frame_cache") or {}).get("store") or defaults.frames_store
    if store:
        data.setdefault("frame_cache", {})["store"] = store
    k8s = raw.setdefault("kubernetes", {})
    k8s["namespace"] = meta["namespace"]
    k8s["image"] = spec.get("image") or defaults.trainer_image
    for spec_key, config_key in _SIZE_KEYS.items():
        if spec_key in spec.get("resources", {}):
            k8s[config_key] = spec["resources"][spec_key]
    if "ttlSecondsAfterFinished" in spec:
        k8s["ttl_seconds_after_finished"] = spec["ttlSecondsAfterFinished"]
    if spec.get("serviceAccountName"):
        k8s["service_account"] = spec["serviceAccountName"]
    return validate_config(raw, where)


def build_desired(vrj: dict[str, Any], source: dict[str, Any] | None, defaults: OperatorDefaults) -> Desired:
    """All children; raises ConfigError when the spec (or its run config) is unusable."""
    meta, spec = vrj["metadata"], vrj.get("spec", {})
    check_dns_label(meta["name"], "VideoRLJob name", MAX_RAYJOB_NAME)
    config = resolve_config(vrj, source, defaults)
    names = child_names(vrj)
    owner = [owner_reference(vrj)]
    volumes = _dataset_volumes(spec["dataset"])
    s3 = s3_env(*_s3_settings(spec, defaults))
    config_map, ray_job = render_job(config, name=names.ray_job, managed_by=MANAGED_BY, owner_references=owner,
                                     extra_labels={OWNER_LABEL: meta["name"]}, env=s3, volumes=volumes)
    cache_job = None
    if spec.get("cache", {}).get("enabled", True):
        cache_job = _cache_job(vrj, config, names.cache_job, owner, volumes, s3)
    return Desired(config=config, config_map=config_map, ray_job=ray_job, cache_job=cache_job)


def _s3_settings(spec: dict[str, Any], defaults: OperatorDefaults) -> tuple[str | None, str | None]:
    s3 = spec.get("cache", {}).get("s3", {})
    return s3.get("endpoint") or defaults.s3_endpoint, s3.get("credentialsSecret") or defaults.s3_secret


def _dataset_volumes(dataset: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    volume = dataset.get("volume")
    if not volume:
        return []
    read_only = volume.get("readOnly", True)
    return [({"name": DATA_VOLUME, "persistentVolumeClaim": {"claimName": volume["claimName"], "readOnly": read_only}},
             {"name": DATA_VOLUME, "mountPath": volume.get("mountPath", "/data"), "readOnly": read_only})]


def cache_build_args(vrj: dict[str, Any], config: RunConfig) -> list[str]:
    """``evr1 cache build`` arguments whose cache keys match what the trainer will look up."""
    cache, d = vrj["spec"]["cache"], config.data
    store = d.frame_cache.store
    if not store:
        raise ConfigError(f"VideoRLJob {vrj['metadata']['name']}: no frame store: set spec.cache.store or "
                          "data.frame_cache.store (or run the operator with a default store)")
    if not cache.get("family"):
        raise ConfigError(f"VideoRLJob {vrj['metadata']['name']}: spec.cache.family is required for the warm-up")
    args = ["cache", "build", vrj["spec"]["dataset"]["path"], "--store", store,
            "--workers", str(cache.get("workers", 4)), "--family", cache["family"],
            "--fps", str(d.video_fps), "--max-frames", str(d.video_max_frames),
            "--min-frames", str(d.video_min_frames), "--max-pixels", str(d.video_max_pixels),
            "--min-pixels", str(d.video_min_pixels), "--image-max-pixels", str(d.image_max_pixels),
            "--image-min-pixels", str(d.image_min_pixels), "--no-progress"]
    if d.media_root:
        args += ["--media-root", d.media_root]
    return args


def _cache_job(vrj: dict[str, Any], config: RunConfig, name: str, owner: list[dict[str, Any]],
               volumes: list[tuple[dict[str, Any], dict[str, Any]]], s3: list[dict[str, Any]]) -> dict[str, Any]:
    meta, spec = vrj["metadata"], vrj["spec"]
    cache = spec["cache"]
    job_labels = {**labels(name="easyvideor1", instance=meta["name"], component="cache-warm", managed_by=MANAGED_BY),
                  OWNER_LABEL: meta["name"]}
    cpu, memory = str(cache.get("cpu", "4")), str(cache.get("memory", "8Gi"))
    container = {
        "name": CACHE_CONTAINER,
        "image": config.kubernetes.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["evr1"],
        "args": cache_build_args(vrj, config),
        "env": [*env_list(WRITABLE_HOME_ENV), *s3],
        "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": {"cpu": cpu, "memory": memory}},
        "securityContext": container_security_context(),
        "volumeMounts": [*scratch_mounts(), *(mount for _, mount in volumes)],
    }
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "securityContext": pod_security_context(),
        "containers": [container],
        "volumes": [*scratch_volumes(), *(volume for volume, _ in volumes)],
    }
    if spec.get("serviceAccountName"):
        pod_spec["serviceAccountName"] = spec["serviceAccountName"]
    job_spec: dict[str, Any] = {
        "backoffLimit": cache.get("backoffLimit", 2),
        # Bad data fails the Job at once; an evicted or preempted pod is retried for free.
        "podFailurePolicy": {"rules": [
            {"action": "FailJob", "onExitCodes": {"containerName": CACHE_CONTAINER, "operator": "In",
                                                  "values": list(CACHE_PERMANENT_EXIT_CODES)}},
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
        ]},
        "template": {"metadata": {"labels": dict(job_labels)}, "spec": pod_spec},
    }
    if "activeDeadlineSeconds" in cache:
        job_spec["activeDeadlineSeconds"] = cache["activeDeadlineSeconds"]
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": meta["namespace"], "labels": job_labels,
                         "ownerReferences": [dict(ref) for ref in owner]},
            "spec": job_spec}


def plain(value: Any) -> Any:
    """A deep copy in plain dicts and lists (kopf hands objects over as read-only mappings)."""
    if isinstance(value, dict) or hasattr(value, "items"):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value

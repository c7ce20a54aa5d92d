"""Render the trainer of a run config as a KubeRay ``RayJob`` plus the ``ConfigMap`` it mounts.

The run config is written whole into the ConfigMap (key ``run.yaml``) and mounted read-only at
``/etc/easyvideor1`` into the head and every worker; the job runs the trainer entrypoint on
``/etc/easyvideor1/run.yaml`` in distributed mode, and each pod template carries the file's
SHA-256 (``checksum/run-config``). Pod sizes come from the config's ``kubernetes`` section.
The Helm chart's trainer RayJob has the same shape: the same volume, mount, key, entrypoint
and annotation, mounting the release's ``<release>-run-config`` instead of ``<job>-config``.
Used by ``evr1 k8s render-job`` and by the VideoRLJob operator, so both create the same objects.
"""

from __future__ import annotations

import hashlib
import shlex
from dataclasses import dataclass
from typing import Any

import yaml

from easyvideor1.config import RunConfig, dump_config
from easyvideor1.errors import ConfigError
from easyvideor1.k8s.naming import MAX_RAYJOB_NAME, check_dns_label, dns_label, labels
from easyvideor1.k8s.security import (
    WRITABLE_HOME_ENV,
    container_security_context,
    env_list,
    pod_security_context,
    scratch_mounts,
    scratch_volumes,
)

# The Ray version installed in docker/trainer.Dockerfile; KubeRay needs it to match.
RAY_VERSION = "2.60.0"
GPU_RESOURCE = "nvidia.com/gpu"
RUN_CONFIG_DIR = "/etc/easyvideor1"
RUN_CONFIG_KEY = "run.yaml"
RUN_CONFIG_PATH = f"{RUN_CONFIG_DIR}/{RUN_CONFIG_KEY}"
# The Ray job driver: RLTrainer with FSDP ranks as Ray actors in a placement group (services/trainer).
TRAIN_ENTRYPOINT = f"python -m services.trainer.entrypoint {shlex.quote(RUN_CONFIG_PATH)} distributed.mode=distributed"
COMPONENT = "trainer"
CONFIG_VOLUME = "run-config"
# Pod template annotation with the SHA-256 of run.yaml (the chart sets the same one).
CONFIG_CHECKSUM_ANNOTATION = "checksum/run-config"
# Ray ports (the KubeRay port names, so its Services pick them up).
HEAD_PORTS = (("gcs-server", 6379), ("dashboard", 8265), ("client", 10001), ("metrics", 8080))
DASHBOARD_AGENT_PORT = 52365


def job_name(config: RunConfig) -> str:
    return dns_label(config.trainer.experiment_name, MAX_RAYJOB_NAME)


def check_trainable(config: RunConfig) -> None:
    """Refuse configs that cannot run as a multi-pod job, before anything is created."""
    problems = []
    if not config.data.train_files:
        problems.append("data.train_files is empty")
    if not config.worker.actor.model_path:
        problems.append("worker.actor.model_path is empty")
    queue = config.distributed.queue_url or ""
    if not queue.startswith(("redis://", "rediss://")):
        problems.append(f"distributed.queue_url must be a redis:// URL that every pod reaches, got {queue or None!r}")
    if problems:
        raise ConfigError("config cannot run as a RayJob: " + "; ".join(problems))


def render_job(config: RunConfig, *, name: str | None = None, suspend: bool = False, managed_by: str = "evr1",
               owner_references: list[dict[str, Any]] | None = None, extra_labels: dict[str, str] | None = None,
               env: list[dict[str, Any]] | None = None,
               volumes: list[tuple[dict[str, Any], dict[str, Any]]] | None = None) -> list[dict[str, Any]]:
    """``[ConfigMap, RayJob]`` for ``config``; ``suspend`` creates the RayJob held back
    (``spec.suspend``) until someone sets it to false. ``env`` (EnvVar objects, e.g. S3
    credentials from a Secret) and ``volumes`` ((volume, mount) pairs, e.g. the dataset's
    claim) go into every Ray pod."""
    check_trainable(config)
    run_yaml = dump_config(config)
    extras = _PodExtras(env=list(env or []), volumes=list(volumes or []), checksum=run_config_checksum(run_yaml))
    name = check_dns_label(name or job_name(config), "RayJob name", MAX_RAYJOB_NAME)
    namespace = check_dns_label(config.kubernetes.namespace, "kubernetes.namespace")
    common = labels(name="easyvideor1", instance=name, component=COMPONENT, managed_by=managed_by)
    common.update(extra_labels or {})
    config_map_name = f"{name}-config"

    def metadata(object_name: str) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": object_name, "namespace": namespace, "labels": dict(common)}
        if owner_references:
            meta["ownerReferences"] = [dict(ref) for ref in owner_references]
        return meta

    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata(config_map_name),
                  "data": {RUN_CONFIG_KEY: run_yaml}}
    ray_job = {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": metadata(name),
        "spec": {
            "entrypoint": TRAIN_ENTRYPOINT,
            "runtimeEnvYAML": _runtime_env(),
            "shutdownAfterJobFinishes": True,
            "ttlSecondsAfterFinished": config.kubernetes.ttl_seconds_after_finished,
            "suspend": suspend,
            "submissionMode": "K8sJobMode",
            "submitterPodTemplate": _submitter_template(config, common),
            "rayClusterSpec": _cluster_spec(config, common, config_map_name, extras),
        },
    }
    return [config_map, ray_job]


def run_config_checksum(run_yaml: str) -> str:
    """The ``checksum/run-config`` annotation value: SHA-256 of the run.yaml text."""
    return hashlib.sha256(run_yaml.encode()).hexdigest()


def s3_env(endpoint: str | None, secret: str | None) -> list[dict[str, Any]]:
    """EnvVars for the S3 store client: the endpoint, and the keys from a Secret holding
    AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY."""
    env: list[dict[str, Any]] = []
    if endpoint:
        env.append({"name": "EVR1_S3_ENDPOINT", "value": endpoint})
    if secret:
        check_dns_label(secret.split(".")[0], "S3 credentials Secret")
        env += [secret_env(key, secret, key) for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")]
    return env


def secret_env(variable: str, secret: str, key: str) -> dict[str, Any]:
    return {"name": variable, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}


def _runtime_env() -> str:
    env = {"env_vars": {"EVR1_RUN_CONFIG": RUN_CONFIG_PATH, "PYTHONUNBUFFERED": "1",
                        "TOKENIZERS_PARALLELISM": "false", "RAY_USAGE_STATS_ENABLED": "0"}}
    return yaml.safe_dump(env, sort_keys=True)


@dataclass(frozen=True)
class _PodExtras:
    env: list[dict[str, Any]]
    volumes: list[tuple[dict[str, Any], dict[str, Any]]]
    checksum: str


def _cluster_spec(config: RunConfig, common: dict[str, str], config_map_name: str,
                  extras: _PodExtras) -> dict[str, Any]:
    k8s = config.kubernetes
    # With no worker pods the head runs the whole job, so it gets the GPUs.
    head_gpus = k8s.gpus_per_worker if k8s.num_workers == 0 else 0
    head = _ray_pod(config, common, config_map_name, extras, role="head", cpus=k8s.head_cpus,
                    memory=k8s.head_memory, gpus=head_gpus)
    spec: dict[str, Any] = {
        "rayVersion": RAY_VERSION,
        "enableInTreeAutoscaling": False,
        "headGroupSpec": {
            # Explicit GPU count: CUDA images expose every GPU of the node when no GPU is requested.
            "rayStartParams": {"dashboard-host": "0.0.0.0", "num-gpus": str(head_gpus),
                               "metrics-export-port": "8080"},
            "template": head,
        },
    }
    if k8s.num_workers > 0:
        worker = _ray_pod(config, common, config_map_name, extras, role="worker", cpus=k8s.cpus_per_worker,
                          memory=k8s.memory_per_worker, gpus=k8s.gpus_per_worker)
        spec["workerGroupSpecs"] = [{
            "groupName": "gpu-workers",
            "replicas": k8s.num_workers,
            "minReplicas": k8s.num_workers,
            "maxReplicas": k8s.num_workers,
            "rayStartParams": {"num-gpus": str(k8s.gpus_per_worker), "metrics-export-port": "8080"},
            "template": worker,
        }]
    return spec


def _resources(cpus: int, memory: str, gpus: int) -> dict[str, Any]:
    amounts: dict[str, Any] = {"cpu": str(cpus), "memory": memory}
    if gpus:
        amounts[GPU_RESOURCE] = str(gpus)
    return {"requests": dict(amounts), "limits": dict(amounts)}


def _ray_pod(config: RunConfig, common: dict[str, str], config_map_name: str, extras: _PodExtras, *,
             role: str, cpus: int, memory: str, gpus: int) -> dict[str, Any]:
    raylet = {"httpGet": {"path": "/api/local_raylet_healthz", "port": DASHBOARD_AGENT_PORT}}
    if role == "head":
        readiness = {"httpGet": {"path": "/api/gcs_healthz", "port": 8265}}
        ports = [{"name": port_name, "containerPort": number} for port_name, number in HEAD_PORTS]
    else:
        readiness = raylet
        ports = [{"name": "metrics", "containerPort": 8080}]
    container = {
        "name": f"ray-{role}",
        "image": config.kubernetes.image,
        "imagePullPolicy": "IfNotPresent",
        "env": [*env_list(WRITABLE_HOME_ENV), *(dict(item) for item in extras.env)],
        "ports": ports,
        "resources": _resources(cpus, memory, gpus),
        "securityContext": container_security_context(),
        # Ray takes a while to start its GCS and raylet; fail slowly, not in a restart loop.
        "readinessProbe": {**readiness, "initialDelaySeconds": 10, "periodSeconds": 10, "timeoutSeconds": 5,
                           "failureThreshold": 12},
        "livenessProbe": {**raylet, "initialDelaySeconds": 30, "periodSeconds": 15, "timeoutSeconds": 5,
                          "failureThreshold": 8},
        "volumeMounts": [{"name": CONFIG_VOLUME, "mountPath": RUN_CONFIG_DIR, "readOnly": True},
                         *scratch_mounts(shm=True), *(dict(mount) for _, mount in extras.volumes)],
    }
    spec: dict[str, Any] = {
        "securityContext": pod_security_context(),
        "containers": [container],
        # The pods need no Kubernetes API access.
        "automountServiceAccountToken": False,
        "volumes": [{"name": CONFIG_VOLUME, "configMap": {"name": config_map_name}},
                    # Half the pod memory for the object store and NCCL, like Ray's own default.
                    *scratch_volumes(shm_size=_half(memory)), *(dict(volume) for volume, _ in extras.volumes)],
    }
    if gpus:
        spec["tolerations"] = [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}]
    if config.kubernetes.service_account:
        spec["serviceAccountName"] = config.kubernetes.service_account
    return {"metadata": {"labels": {**common, "easyvideor1.io/ray-role": role},
                         "annotations": {CONFIG_CHECKSUM_ANNOTATION: extras.checksum}}, "spec": spec}


def _submitter_template(config: RunConfig, common: dict[str, str]) -> dict[str, Any]:
    # KubeRay fills in the `ray job submit` command; this pins image, sizes and security.
    container = {
        "name": "ray-job-submitter",
        "image": config.kubernetes.image,
        "imagePullPolicy": "IfNotPresent",
        "env": env_list(WRITABLE_HOME_ENV),
        "resources": {"requests": {"cpu": "200m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
        "securityContext": container_security_context(),
        "volumeMounts": scratch_mounts(),
    }
    spec: dict[str, Any] = {"restartPolicy": "Never", "securityContext": pod_security_context(),
                            "automountServiceAccountToken": False, "containers": [container],
                            "volumes": scratch_volumes()}
    if config.kubernetes.service_account:
        spec["serviceAccountName"] = config.kubernetes.service_account
    return {"metadata": {"labels": {**common, "easyvideor1.io/ray-role": "submitter"}}, "spec": spec}


_UNITS = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
          "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}


def parse_quantity(text: str) -> int:
    """A Kubernetes memory quantity (``512Gi``, ``32G``, ``1000000``) in bytes."""
    for unit in sorted(_UNITS, key=len, reverse=True):
        if unit and text.endswith(unit):
            number = text[: -len(unit)]
            break
    else:
        unit, number = "", text
    try:
        value = float(number)
    except ValueError:
        raise ConfigError(f"invalid memory quantity {text!r} (expected e.g. 512Gi or 32G)") from None
    if value <= 0:
        raise ConfigError(f"memory quantity {text!r} must be positive")
    return int(value * _UNITS[unit])


def _half(memory: str) -> str:
    return f"{max(1, parse_quantity(memory) // 2 // 2**20)}Mi"

"""Pod and container settings shared by every workload this project renders.

Everything here meets the *restricted* Pod Security Standard and keeps the root file
system read-only; the few places a process must write (``/tmp``, Ray's ``/dev/shm``) are
``emptyDir`` volumes. The chart's ``_helpers.tpl`` renders the same settings, and the
tests hold both to one policy.
"""

from __future__ import annotations

from typing import Any

# The uid/gid baked into every image of docker/ (not 0, and not a uid a node's own
# accounts are likely to use).
RUN_AS_USER = 10001
RUN_AS_GROUP = 10001

# Writable scratch for HOME, caches and Ray's session directory under /tmp.
TMP_VOLUME = "tmp"
SHM_VOLUME = "dshm"

# Environment that points every cache at the writable /tmp instead of $HOME on a
# read-only root (Hugging Face, Triton, vLLM and Ray all write under these).
WRITABLE_HOME_ENV = (
    ("HOME", "/tmp"),
    ("XDG_CACHE_HOME", "/tmp/.cache"),
    ("HF_HOME", "/tmp/.cache/huggingface"),
)


def pod_security_context() -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS_USER,
        "runAsGroup": RUN_AS_GROUP,
        "fsGroup": RUN_AS_GROUP,
        # Only re-own volumes when their root does not match, so big PVCs mount fast.
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security_context() -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS_USER,
        "runAsGroup": RUN_AS_GROUP,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def env_list(pairs: tuple[tuple[str, str], ...] | list[tuple[str, str]]) -> list[dict[str, str]]:
    return [{"name": name, "value": value} for name, value in pairs]


def scratch_volumes(*, shm_size: str | None = None) -> list[dict[str, Any]]:
    """``/tmp`` always; ``/dev/shm`` (memory-backed) when ``shm_size`` is given (Ray's
    object store and NCCL need far more than the container runtime's 64 MiB default)."""
    volumes: list[dict[str, Any]] = [{"name": TMP_VOLUME, "emptyDir": {}}]
    if shm_size is not None:
        volumes.append({"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": shm_size}})
    return volumes


def scratch_mounts(*, shm: bool = False) -> list[dict[str, Any]]:
    mounts: list[dict[str, Any]] = [{"name": TMP_VOLUME, "mountPath": "/tmp"}]
    if shm:
        mounts.append({"name": SHM_VOLUME, "mountPath": "/dev/shm"})
    return mounts

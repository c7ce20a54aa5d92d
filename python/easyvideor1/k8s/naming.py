"""Object names and the ``app.kubernetes.io/*`` labels of rendered objects."""

from __future__ import annotations

import hashlib
import re

from easyvideor1 import __version__
from easyvideor1.errors import ConfigError

PART_OF = "easyvideor1"
# KubeRay names the RayCluster of a RayJob "<job>-<5 random chars>" and its head Service
# "<cluster>-head-svc"; 40 keeps every derived name inside the 63-character DNS label.
MAX_RAYJOB_NAME = 40
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def dns_label(text: str, max_len: int = 63) -> str:
    """``text`` made a valid DNS-1123 label: lower case, ``[a-z0-9-]``, at most ``max_len``.

    A name that had to be shortened keeps a short hash of the original, so two long names
    that share a prefix do not collide."""
    cleaned = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    cleaned = re.sub(r"-{2,}", "-", cleaned)
    if not cleaned:
        raise ConfigError(f"cannot make a Kubernetes name from {text!r}")
    if len(cleaned) > max_len:
        digest = hashlib.sha256(text.encode()).hexdigest()[:6]
        cleaned = f"{cleaned[: max_len - 7].rstrip('-')}-{digest}"
    return cleaned


def check_dns_label(name: str, what: str, max_len: int = 63) -> str:
    if len(name) > max_len or not _DNS_LABEL.match(name):
        raise ConfigError(f"{what} {name!r}: must be a DNS label (lower-case letters, digits and '-', "
                          f"starting and ending with a letter or digit) of at most {max_len} characters")
    return name


def labels(*, name: str, instance: str, component: str, managed_by: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": name,
        "app.kubernetes.io/instance": instance,
        "app.kubernetes.io/version": __version__,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/part-of": PART_OF,
        "app.kubernetes.io/managed-by": managed_by,
    }

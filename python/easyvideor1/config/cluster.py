"""Where a distributed run's services are: the cluster file that ``evr1 up`` writes.

``apply_cluster_defaults(cfg)`` fills the distributed URLs a run config leaves unset from the
cluster file of ``evr1 up`` (``distributed.cluster_file``, else ``$EVR1_CLUSTER_FILE``, else
``.evr1/cluster.json`` when present).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from easyvideor1.config.schema import RunConfig
from easyvideor1.errors import ConfigError
from easyvideor1.logging import event, get_logger

log = get_logger(__name__)
CLUSTER_FILE_ENV = "EVR1_CLUSTER_FILE"
DEFAULT_CLUSTER_FILE = Path(".evr1") / "cluster.json"


def find_cluster_file(cfg: RunConfig) -> Path | None:
    explicit = cfg.distributed.cluster_file or os.environ.get(CLUSTER_FILE_ENV)
    if explicit:
        if not Path(explicit).is_file():
            raise ConfigError(f"cluster file {explicit} not found (written by `evr1 up`)")
        return Path(explicit)
    return DEFAULT_CLUSTER_FILE if DEFAULT_CLUSTER_FILE.is_file() else None


def apply_cluster_defaults(cfg: RunConfig) -> tuple[RunConfig, dict[str, Any]]:
    """``cfg`` with unset distributed URLs (and an unset frame store) taken from cluster.json,
    and the weights store's options (S3 endpoint and keys) when the store came from there."""
    path = find_cluster_file(cfg)
    if path is None:
        return cfg, {}
    cluster = json.loads(path.read_text())
    if cluster.get("state") != "up":
        if path == DEFAULT_CLUSTER_FILE:  # found by chance in the working directory: `evr1 down` left it
            event(log, "cluster_file_ignored", logging.WARNING, file=str(path), state=cluster.get("state"))
            return cfg, {}
        raise ConfigError(f"{path}: the cluster is {cluster.get('state')!r}, not up (run `evr1 up`)")
    defaults, data = cluster.get("defaults", {}), cfg.model_dump(mode="json")
    dist, options = data["distributed"], {}
    for key in ("queue_url", "weights_store", "frame_cache_url", "ray_address"):
        if dist.get(key) is None and defaults.get(key):
            dist[key] = defaults[key]
    if dist["weights_store"] == defaults.get("weights_store") and cluster.get("s3"):
        s3 = cluster["s3"]  # the cluster's own store: its endpoint and keys
        options = {"endpoint": s3["endpoint"], "access_key": s3["access_key"], "secret_key": s3["secret_key"]}
    if dist["namespace"] == "default" and defaults.get("namespace"):
        dist["namespace"] = defaults["namespace"]
    if data["data"]["frame_cache"]["store"] is None and dist.get("frame_cache_url"):
        data["data"]["frame_cache"]["store"] = dist["frame_cache_url"]
    event(log, "cluster_defaults_applied", file=str(path), queue=dist["queue_url"], namespace=dist["namespace"])
    return RunConfig.model_validate(data), options



"""Who a distributed run is and where its services are: ``evr1 up``'s cluster.json and the run identity.

``apply_cluster_defaults(cfg)`` fills the distributed URLs a run config leaves unset from the
cluster file of ``evr1 up`` (``distributed.cluster_file``, else ``$EVR1_CLUSTER_FILE``, else
``.evr1/cluster.json`` when present). :class:`RunIdentity` names one training run: the prefix of
its task ids, its version board and its prefix in the weights store (``output_dir/distributed_run.json``),
so runs can share one rollout pool and a resumed run continues its own versions.
"""

from __future__ import annotations

import json
import logging
import os
import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from easyvideor1.config.schema import RunConfig
from easyvideor1.errors import ConfigError
from easyvideor1.logging import event, get_logger

log = get_logger(__name__)
CLUSTER_FILE_ENV = "EVR1_CLUSTER_FILE"
DEFAULT_CLUSTER_FILE = Path(".evr1") / "cluster.json"
RUN_FILE = "distributed_run.json"


# ---- cluster.json defaults --------------------------------------------------------------------
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


# ---- run identity ------------------------------------------------------------------------------
@dataclass
class RunIdentity:
    """Task-id prefix, version board and weights-store prefix of one training run."""

    run_id: str
    generation: int = 0  # bumped when a resumed run must publish a version its board already passed
    namespace: str = "default"

    @property
    def board(self) -> str:
        return f"weights-{self.run_id}-g{self.generation}"

    @property
    def store_prefix(self) -> str:
        return f"{self.run_id}/g{self.generation}"

    def save(self, output_dir: Path) -> None:
        output_dir.mkdir(parents=True, exist_ok=True)
        tmp = output_dir / f".{RUN_FILE}.tmp"
        tmp.write_text(json.dumps({"run_id": self.run_id, "generation": self.generation,
                                   "namespace": self.namespace}))
        os.replace(tmp, output_dir / RUN_FILE)

    @classmethod
    def for_run(cls, cfg: RunConfig) -> RunIdentity:
        """The saved identity when this run resumes from a checkpoint, else a new one."""
        from easyvideor1.train.checkpoint import latest_checkpoint

        out = Path(cfg.trainer.output_dir)
        resuming = cfg.trainer.resume == "auto" and latest_checkpoint(out) is not None
        saved = out / RUN_FILE
        if resuming and saved.is_file():
            data = json.loads(saved.read_text())
            if data.get("namespace") == cfg.distributed.namespace:
                return cls(str(data["run_id"]), int(data["generation"]), cfg.distributed.namespace)
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", cfg.trainer.experiment_name).strip("-")[:40] or "run"
        identity = cls(f"{slug}-{uuid.uuid4().hex[:10]}", 0, cfg.distributed.namespace)
        identity.save(out)
        return identity

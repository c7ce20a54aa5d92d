"""Who a distributed run is: :class:`RunIdentity` names one training run: the prefix of its task
ids, its version board and its prefix in the weights store (``output_dir/distributed_run.json``),
so runs can share one rollout pool and a resumed run continues its own versions.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from dataclasses import dataclass
from pathlib import Path

from easyvideor1.config.schema import RunConfig

RUN_FILE = "distributed_run.json"


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
    def for_run(cls, cfg: RunConfig, *, resuming: bool) -> RunIdentity:
        """The saved identity when this run resumes from a checkpoint (``resuming``), else a new one."""
        out = Path(cfg.trainer.output_dir)
        saved = out / RUN_FILE
        if resuming and saved.is_file():
            data = json.loads(saved.read_text())
            if data.get("namespace") == cfg.distributed.namespace:
                return cls(str(data["run_id"]), int(data["generation"]), cfg.distributed.namespace)
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", cfg.trainer.experiment_name).strip("-")[:40] or "run"
        identity = cls(f"{slug}-{uuid.uuid4().hex[:10]}", 0, cfg.distributed.namespace)
        identity.save(out)
        return identity

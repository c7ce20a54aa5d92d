"""Distributed mode's policy sync: each version into the weights store and onto the version board.

The rollout pool's engines follow the board (:mod:`easyvideor1.weight_sync.follower`). The store
keeps whole versions (every tensor, frozen ones too): an engine that joins late, recovers, or
held another run's weights loads one file and is complete.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from easyvideor1.config.schema import RunConfig
from easyvideor1.logging import event, get_logger
from easyvideor1.outages import watch
from easyvideor1.queue import open_version_board
from easyvideor1.weight_sync.policy import PolicySync
from easyvideor1.weight_sync.publish import WeightPublisher
from easyvideor1.weight_sync.store import join_store

if TYPE_CHECKING:  # rollout/ imports weight_sync at run time, never the reverse
    from easyvideor1.rollout.remote_run import RunIdentity
    from easyvideor1.rollout.remote_stage import RemoteRolloutStage

log = get_logger(__name__)


class RemotePolicySync(PolicySync):
    """``push(state_dict, version)`` publishes a policy version for the pool."""

    def __init__(self, cfg: RunConfig, stage: RemoteRolloutStage, identity: RunIdentity,
                 store_options: dict[str, Any]):
        self.queue_url, self.namespace = cfg.distributed.queue_url, cfg.distributed.namespace
        self.root, self.store_options = cfg.distributed.weights_store, store_options
        self.output_dir = Path(cfg.trainer.output_dir)
        self.stage, self.identity = stage, identity
        self._announced = None
        self._open()
        stage.on_recover.append(self.reannounce)

    def _open(self) -> None:
        self.board = open_version_board(self.queue_url, self.namespace, self.identity.board)
        self.publisher = WeightPublisher(join_store(self.root, self.identity.store_prefix), self.board, keep=3,
                                         **self.store_options)

    def push(self, state_dict: dict[str, Any], version: int) -> None:
        latest = self.board.latest()
        if latest is not None and latest.version == version:
            # A resumed run re-pushing the checkpoint's version: the board already has it.
            event(log, "weights_already_published", version=version, board=self.identity.board)
            self._announced = latest
        else:
            if latest is not None and latest.version > version:
                # Resumed behind its board (steps after the last checkpoint): continue on a new board.
                self.board.close()
                self.identity.generation += 1
                self.identity.save(self.output_dir)
                self._open()
                event(log, "weights_board_rotated", board=self.identity.board, version=version,
                      previous_latest=latest.version)
            # A store that stops answering (S3 paused) makes the push wait: say so past what
            # the bytes need at a slow 100 MiB/s, plus a margin.
            nbytes = sum(t.numel() * t.element_size() for t in state_dict.values() if hasattr(t, "numel"))
            with watch("weights store", f"waiting for the push of version {version}",
                       after_s=15.0 + nbytes / (100 << 20)):
                self.publisher.publish(version, state_dict)
            self._announced = self.board.latest()
        self.stage.version = version

    def reannounce(self) -> None:
        """After a Redis restart without persistence the board is empty: announce the newest again."""
        record, latest = self._announced, self.board.latest()
        if record is not None and (latest is None or latest.version < record.version):
            self.board.publish(record.version, record.uri, record.meta)
            event(log, "weights_reannounced", version=record.version, board=self.identity.board)

    def close(self) -> None:
        self.board.close()

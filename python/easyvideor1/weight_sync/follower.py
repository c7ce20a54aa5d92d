"""Keep a rollout engine on the policy a task asks for (rollout worker side of weight sync).

Each training run publishes its versions on its own board (``VersionBoard`` name) under its
own prefix of the weights store, so one rollout pool can serve run after run: a task names
the board, the prefix and the minimum version (wire.WeightsRef). ``ensure`` then

* loads the board's newest version when it is newer than the engine's (or the engine holds
  another run's weights), waiting up to ``timeout_s`` for ``min_version`` if it is not out yet;
* resets the engine to the base model (the worker's model directory, version 0) when the
  board is still empty: a fresh run starts from the base model, not from the previous run.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from easyvideor1.logging import event, get_logger
from easyvideor1.queue import VersionBoard, open_version_board
from easyvideor1.weight_sync.publish import WeightSubscriber
from easyvideor1.weight_sync.store import WeightSyncError, join_store

if TYPE_CHECKING:  # rollout/ imports weight_sync at run time, never the reverse
    from easyvideor1.rollout.base import RolloutEngine
    from easyvideor1.rollout.wire import WeightsRef

log = get_logger(__name__)
_MAX_BOARDS = 8  # subscribers kept open (one per run seen recently)


class EngineWeights:
    def __init__(self, engine: RolloutEngine, model_dir: str, *, board_url: str, namespace: str,
                 weights_root: str | None, store_options: dict[str, Any] | None = None, timeout_s: float = 300.0):
        self.engine, self.model_dir = engine, str(model_dir)
        self.board_url, self.namespace = board_url, namespace
        self.weights_root, self.store_options = weights_root, dict(store_options or {})
        self.timeout_s = timeout_s
        self.board: str | None = None  # the board whose policy the engine holds
        self.at_base = True  # the engine holds the model directory's weights
        self._subscribers: OrderedDict[tuple[str, str], tuple[WeightSubscriber, VersionBoard]] = OrderedDict()

    def _subscriber(self, ref: WeightsRef) -> WeightSubscriber:
        key = (ref.board, ref.store_prefix)
        found = self._subscribers.get(key)
        if found is not None:
            self._subscribers.move_to_end(key)
            return found[0]
        assert self.weights_root is not None
        board = open_version_board(self.board_url, self.namespace, ref.board)
        subscriber = WeightSubscriber(join_store(self.weights_root, ref.store_prefix), board, **self.store_options)
        self._subscribers[key] = (subscriber, board)
        while len(self._subscribers) > _MAX_BOARDS:
            _, (_, old) = self._subscribers.popitem(last=False)
            old.close()
        return subscriber

    def ensure(self, ref: WeightsRef) -> int:
        """Bring the engine to ``ref``'s run at a version >= ``ref.min_version``; returns the version."""
        if self.weights_root is None:
            if ref.min_version > 0:
                raise WeightSyncError(f"task wants policy version >= {ref.min_version} of board {ref.board!r}, "
                                      "but this worker was started without a weights store (--weights-store)")
            return self._base(ref.board)
        subscriber = self._subscriber(ref)
        latest = subscriber.latest_version()
        if latest is None and ref.min_version == 0:
            if self.board == ref.board:  # an emptied board (Redis restarted): keep what the engine has
                return int(self.engine.policy_version)
            return self._base(ref.board)
        other_run = self.board != ref.board
        if latest is not None and latest >= ref.min_version:
            version = subscriber.apply_to(self.engine, force=other_run)
        else:
            version = subscriber.apply_to(self.engine, ref.min_version, timeout=self.timeout_s, force=other_run)
        self.board, self.at_base = ref.board, False
        return version

    def _base(self, board: str) -> int:
        if not self.at_base:
            self.engine.update_weights(self.model_dir, 0)
            event(log, "engine_reset_to_base", model=self.model_dir, board=board)
        self.board, self.at_base = board, True
        return 0

    def close(self) -> None:
        for _, board in self._subscribers.values():
            board.close()
        self._subscribers.clear()

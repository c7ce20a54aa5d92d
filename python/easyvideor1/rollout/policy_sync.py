"""How a new policy reaches the engines that roll out with it.

:class:`PolicySync` is the interface the trainer pushes each version through:
:class:`EnginePolicySync` updates the in-process engine in place; the distributed mode's
:class:`~easyvideor1.rollout.remote_stage.RemotePolicySync` publishes the version to the weights
store and the version board that the rollout pool follows.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from easyvideor1.rollout.base import RolloutEngine


class PolicySync(ABC):
    @abstractmethod
    def push(self, state_dict: dict[str, Any], version: int) -> None:
        """Make ``version`` (full, unsharded state dict) the policy of the next rollouts."""

    def close(self) -> None:
        """Release what the sync holds."""
        return None


class EnginePolicySync(PolicySync):
    """Embedded mode: push each new policy straight into the in-process rollout engine.

    ``owns_engine``: close the engine with the sync (an engine handed in by a caller stays theirs)."""

    def __init__(self, engine: RolloutEngine, *, owns_engine: bool = True):
        self.engine, self.owns_engine = engine, owns_engine

    def push(self, state_dict: dict[str, Any], version: int) -> None:
        self.engine.update_weights(state_dict, version=version)

    def close(self) -> None:
        if self.owns_engine:
            self.engine.close()

"""The policy being trained, as the RL loop sees it: one in-process :class:`~easyvideor1.train.actor.Actor`
(FSDP2 when several ranks share a process group) or a group of FSDP ranks elsewhere (the Ray
trainer's ``RayActorGroup``, services/trainer). ``RLTrainer`` only calls these methods."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch


class ActorGroup(ABC):
    @abstractmethod
    def compute_log_probs(self, items: Sequence[Any], *, reference: bool = False) -> list[torch.Tensor]:
        """Per-token log-probs of each item's response under the policy (or the reference model)."""

    @abstractmethod
    def update(self, items: Sequence[Any], *, seed: int) -> dict[str, float]:
        """The PPO-style update over ``items`` (advantages and old log-probs set); its metrics."""

    @abstractmethod
    def full_state_dict(self, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
        """The whole, unsharded policy (what the rollout engines load), floating tensors in
        ``dtype`` when given (cast on the device), else as trained (float32)."""

    @abstractmethod
    def load_full_state_dict(self, state: dict[str, torch.Tensor]) -> None: ...

    @abstractmethod
    def trainer_state(self) -> dict[str, Any]:
        """Optimizer and scheduler state for a checkpoint."""

    @abstractmethod
    def load_trainer_state(self, state: dict[str, Any]) -> None: ...

    @abstractmethod
    def export_hf(self, out_dir: str | Path, processor: Any) -> Path:
        """A Hugging Face model directory loadable by transformers and vLLM."""

    def close(self) -> None:
        """Release ranks, process groups and memory."""
        return None

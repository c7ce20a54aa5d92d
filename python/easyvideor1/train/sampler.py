"""A resumable batch sampler: the data-loader position is part of every checkpoint."""

from __future__ import annotations

import numpy as np


class ResumableSampler:
    """Yields batches of dataset indices, epoch after epoch, reproducibly.

    The order of epoch ``e`` is a permutation seeded by ``(seed, e)``, so the state is just
    ``(epoch, position)`` and a resumed run continues with exactly the batches it would have
    drawn. A batch that crosses an epoch boundary takes the rest of one epoch and the start of
    the next.
    """

    def __init__(self, num_items: int, batch_size: int, *, shuffle: bool = True, seed: int = 0):
        if num_items <= 0:
            raise ValueError("cannot sample from an empty dataset")
        if batch_size <= 0:
            raise ValueError(f"batch_size must be > 0, got {batch_size}")
        self.num_items, self.batch_size, self.shuffle, self.seed = num_items, batch_size, shuffle, seed
        self.epoch = 0
        self.position = 0
        self._order = self._epoch_order(0)

    def _epoch_order(self, epoch: int) -> np.ndarray:
        if not self.shuffle:
            return np.arange(self.num_items)
        return np.random.default_rng([self.seed, epoch]).permutation(self.num_items)

    def next_batch(self, size: int | None = None) -> list[int]:
        size = size or self.batch_size
        batch: list[int] = []
        while len(batch) < size:
            if self.position >= self.num_items:
                self.epoch += 1
                self.position = 0
                self._order = self._epoch_order(self.epoch)
            take = min(size - len(batch), self.num_items - self.position)
            batch.extend(int(i) for i in self._order[self.position:self.position + take])
            self.position += take
        return batch

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position, "seed": self.seed, "num_items": self.num_items}

    def load_state_dict(self, state: dict[str, int]) -> None:
        if int(state["num_items"]) != self.num_items:
            raise ValueError(f"checkpoint was taken over {state['num_items']} items, this dataset has "
                             f"{self.num_items}: refusing to resume with a different data order")
        self.seed = int(state["seed"])
        self.epoch = int(state["epoch"])
        self.position = int(state["position"])
        self._order = self._epoch_order(self.epoch)

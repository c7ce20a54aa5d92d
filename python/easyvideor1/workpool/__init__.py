"""Killable worker processes: one supervision implementation for the whole library.

:mod:`~easyvideor1.workpool.pool` is the pool (used by the cache builder and reward
scoring); :mod:`~easyvideor1.workpool.proc` holds the primitives it shares with the code
sandbox (own process group, group kill, deadline reads, capped output).
"""

from easyvideor1.workpool.pool import ItemResult, WorkerPool, WorkerSpec, WorkerStartError, add_preload

__all__ = ["ItemResult", "WorkerPool", "WorkerSpec", "WorkerStartError", "add_preload"]

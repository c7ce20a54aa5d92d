"""CUDA IPC: a GPU tensor of this process opened in another process on the same GPU, no copy.

``share(tensor)`` is the handle: ``torch.multiprocessing.reductions.reduce_tensor``'s arguments,
pickled to bytes, since vLLM's msgpack RPC refuses the torch classes among them (the bytes go
only between this trainer and its own engine). ``open_shared(handle)`` rebuilds the tensor in
the receiving process (vLLM's worker) on its current device: engine and trainer are colocated
on one GPU, and the trainer's device index need not be the worker's (each may see the GPU
under another index).
"""

from __future__ import annotations

import pickle
from typing import Any

_DEVICE = 6  # index of the device in reduce_tensor's arguments for a CUDA tensor


def share(tensor: Any) -> bytes:
    from torch.multiprocessing.reductions import reduce_tensor

    rebuild, args = reduce_tensor(tensor)
    if rebuild.__name__ != "rebuild_cuda_tensor":
        raise ValueError(f"CUDA IPC needs a CUDA tensor, got one on {tensor.device}")
    return pickle.dumps(tuple(args))


def open_shared(handle: bytes) -> Any:
    import torch
    from torch.multiprocessing.reductions import rebuild_cuda_tensor

    args = list(pickle.loads(handle))
    args[_DEVICE] = torch.cuda.current_device()
    return rebuild_cuda_tensor(*args)

"""Everything that moves policy weights from the trainer into rollout engines.

Trainer side (senders) and engine side (receivers), by transport:

* :mod:`~easyvideor1.weight_sync.policy`: ``PolicySync``, the interface the trainer pushes each
  version through, and ``EnginePolicySync`` (the engine in this process, in place; colocated
  sleep/wake);
* :mod:`~easyvideor1.weight_sync.sender` (with :mod:`~easyvideor1.weight_sync.buckets` and
  :mod:`~easyvideor1.weight_sync.ipc`): the actor's changed trainable weights, layer by layer,
  cast into a reusable bucket, each full bucket handed over by CUDA IPC handle (actor and
  engine on one GPU) or as host bytes through vLLM's RPC;
* :mod:`~easyvideor1.weight_sync.host`: whole state dicts: state dicts as safetensors bytes in
  parts below vLLM's RPC limit, or one file in ``/dev/shm`` whose path travels;
* :mod:`~easyvideor1.weight_sync.broadcast`: the same buckets broadcast to a pool of engines in a
  process group of its own (gloo on CPU, nccl on GPUs), the trainer rank 0, each engine 1..N;
* :mod:`~easyvideor1.weight_sync.receiver`: the vLLM worker extension that loads what arrives;
* :mod:`~easyvideor1.weight_sync.store` and :mod:`~easyvideor1.weight_sync.publish`: versions in
  an object store (``WeightPublisher`` sends, ``WeightSubscriber`` receives);
  :mod:`~easyvideor1.weight_sync.remote`: ``RemotePolicySync``, the distributed mode's sync
  through them; :mod:`~easyvideor1.weight_sync.follower`: a pool engine following a run's board.

vLLM's own weight-transfer API (``vllm/distributed/weight_transfer``, in 0.26 and 0.32) is not
used: its interface differs between the two versions this project runs (0.26 on the GPU machine,
0.32 here), its ``ipc`` backend is CUDA-only and imports ``ray`` at load in 0.26, and measured on
an H200 at 3B its packed IPC path took 0.54 s per sync against 0.23 s for a reusable bucket
loaded by the model's ``load_weights`` (``../shared/gpu-vllm/README.md``).

The version board (``VersionBoard``) stays in :mod:`easyvideor1.queue` (``queue/versions.py``,
``queue/redis_versions.py``): it is a Redis structure beside the work queue, sharing its client,
key prefix, namespaces, Lua scripts and errors, and ``queue/`` sits below this package (the board
says which version exists and where; it moves no weights).

Dependency direction: this package is at ``rollout/``'s level: it imports ``models``, ``config``
and ``queue``; ``rollout/`` and ``train/`` import it; it imports ``rollout`` for type hints only.
"""

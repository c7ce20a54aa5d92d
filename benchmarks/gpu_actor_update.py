"""Actor-update throughput on one GPU: a Qwen2.5-VL-3B-shaped random model on a 128-frame video.

Side by side in one process, on the same sample (about 21k tokens: 128 frames of 392x672 at
2 fps -> 64 temporal patches x 336 visual tokens, plus a prompt and a 256-token response):

* baseline: plain transformers forward + backward, gradient checkpointing, default (sdpa)
  attention, transformers' own position ids;
* ours: the trainer's forward (``models.forward.compute_log_probs``: explicit M-RoPE positions)
  with the packed attention of ``models/attention.py`` (all vision windows of a layer in one
  varlen kernel instead of a Python loop over windows, flash SDPA for the LM), selective
  checkpointing (``models/checkpointing.py``: the activations of part of the layers are kept
  where the GPU has the memory, the rest recomputed) and ``torch.compile`` of each layer
  (fused norms, activations and rotary embeddings): the trainer's ``worker.actor.attention``,
  ``keep_activations_*`` and ``compile`` settings.

Prints step time, tokens/s, estimated MFU (dense bf16 peak 989 TFLOP/s), the ratio, and the
step time with cached frames vs decoding the video on the fly.

usage (GPU): python benchmarks/gpu_actor_update.py [--steps 3] [--layers 36] [--profile]
       CPU smoke: python benchmarks/gpu_actor_update.py --smoke --profile
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
PEAK_BF16_FLOPS = 989e12


def qwen25_vl_3b_config(token_ids: dict[str, int], layers: int, *, smoke: bool = False):
    from transformers import Qwen2_5_VLConfig

    if smoke:  # the same architecture, small enough for a CPU run of the whole path
        return Qwen2_5_VLConfig(
            text_config={"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": layers,
                         "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 151936,
                         "max_position_embeddings": 128000, "tie_word_embeddings": True,
                         "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0,
                                             "mrope_section": [2, 3, 3]}},
            vision_config={"depth": 4, "hidden_size": 64, "intermediate_size": 128, "num_heads": 4,
                           "out_hidden_size": 64, "patch_size": 14, "spatial_merge_size": 2,
                           "temporal_patch_size": 2, "window_size": 112, "fullatt_block_indexes": [1, 3],
                           "tokens_per_second": 2, "in_chans": 3},
            tie_word_embeddings=True, **token_ids)
    return Qwen2_5_VLConfig(
        text_config={"hidden_size": 2048, "intermediate_size": 11008, "num_hidden_layers": layers,
                     "num_attention_heads": 16, "num_key_value_heads": 2, "vocab_size": 151936,
                     "max_position_embeddings": 128000, "rms_norm_eps": 1e-6, "tie_word_embeddings": True,
                     "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0,
                                         "mrope_section": [16, 24, 24]}},
        vision_config={"depth": 32, "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16,
                       "out_hidden_size": 2048, "patch_size": 14, "spatial_merge_size": 2,
                       "temporal_patch_size": 2, "window_size": 112, "fullatt_block_indexes": [7, 15, 23, 31],
                       "tokens_per_second": 2, "in_chans": 3},
        tie_word_embeddings=True, **token_ids)


def build_sample(root: Path, frames_wanted: int):
    from easyvideor1.cache import FrameLoader, open_store
    from easyvideor1.data.synth import make_long_video
    from easyvideor1.models.inputs import PromptBuilder, VideoInput
    from easyvideor1.models.tiny import build_tiny_model
    from easyvideor1.video.metadata import VideoParams

    tiny = build_tiny_model("qwen2_5_vl", root / "tiny", seed=0)  # tokenizer + processor only
    builder = PromptBuilder.from_pretrained(str(tiny))
    video = make_long_video(root / "clip.mp4", seconds=frames_wanted / 2, fps=30, width=672, height=392)
    params = VideoParams(fps=2, min_frames=4, max_frames=frames_wanted, min_pixels=28 * 28,
                         max_pixels=672 * 392, factor=28)
    store = open_store(str(root / "cache"))
    cached = FrameLoader(store, params, write_back=True)
    started = time.perf_counter()
    frames, meta = FrameLoader(None, params).load_video(video)
    decode_s = time.perf_counter() - started
    cached.load_video(video)  # miss: decode once and write the blob
    started = time.perf_counter()
    cached_frames, _ = cached.load_video(video)
    load_s = time.perf_counter() - started
    assert cached.stats()["hits"] == 1 and (cached_frames == frames).all()
    prompt = builder.build("<video>\nDescribe how the scene moves.", [VideoInput(frames, meta)], sample_id="bench")
    tok = builder.tokenizer
    ids = {"image_token_id": tok.convert_tokens_to_ids("<|image_pad|>"),
           "video_token_id": tok.convert_tokens_to_ids("<|video_pad|>"),
           "vision_start_token_id": tok.convert_tokens_to_ids("<|vision_start|>"),
           "vision_end_token_id": tok.convert_tokens_to_ids("<|vision_end|>")}
    return prompt, ids, decode_s, load_s


def train_flops(model, n_tokens: int, n_patches: int) -> float:
    """6 x parameters x tokens for LM and vision (matmul FLOPs of forward + backward)."""
    vision = sum(p.numel() for p in model.model.visual.parameters())
    embed = model.get_input_embeddings().weight.numel()
    text = sum(p.numel() for p in model.parameters()) - vision - embed
    return 6.0 * (text * n_tokens + vision * n_patches)


def time_steps(fn, steps: int) -> float:
    import torch

    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    fn()  # warm-up
    sync()
    times = []
    for _ in range(steps):
        started = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - started)
    return sorted(times)[len(times) // 2]


def main() -> None:
    import torch
    from transformers import Qwen2_5_VLForConditionalGeneration

    from easyvideor1.config.schema import ActorConfig
    from easyvideor1.models.forward import collate_forward_batch, compute_log_probs
    from easyvideor1.train.actor import configure_vlm

    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--layers", type=int, default=36)
    parser.add_argument("--frames", type=int, default=128)
    parser.add_argument("--response", type=int, default=256)
    parser.add_argument("--device", default="cuda", help="cpu only for a quick smoke run with tiny sizes")
    parser.add_argument("--keep-lm", type=float, default=0.5,
                        help="ours: fraction of decoder layers whose activations are kept (not recomputed)")
    parser.add_argument("--keep-vision", type=float, default=0.25,
                        help="ours: fraction of vision blocks whose activations are kept")
    parser.add_argument("--no-compile", dest="compile", action="store_false",
                        help="ours: skip torch.compile of each decoder layer and vision block")
    parser.add_argument("--profile", action="store_true",
                        help="after timing, profile one step of ours and print where the GPU time goes")
    parser.add_argument("--smoke", action="store_true",
                        help="CPU smoke mode: a small model of the same architecture, 4 frames, one step")
    args = parser.parse_args()
    if args.smoke:
        args.device, args.layers, args.frames, args.response, args.steps, args.compile = "cpu", 2, 4, 8, 1, False
    device = torch.device(args.device)
    with tempfile.TemporaryDirectory() as tmp:
        prompt, token_ids, decode_s, load_s = build_sample(Path(tmp), args.frames)
    response = [int(t) for t in torch.randint(10, 400, (args.response,), generator=torch.Generator().manual_seed(0))]
    batch = collate_forward_batch([prompt], [response], pad_token_id=0)
    n_tokens = batch.input_ids.shape[1]
    n_patches = int(batch.visual["video_grid_thw"].prod(-1).sum())
    print(f"sample: {args.frames} frames -> {prompt.num_video_tokens} visual tokens, {n_tokens} tokens in all, "
          f"{n_patches} vision patches")

    config = qwen25_vl_3b_config(token_ids, args.layers, smoke=args.smoke)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2_5_VLForConditionalGeneration(config).to(torch.bfloat16)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.config.use_cache = False
    model.train()
    flops = train_flops(model, n_tokens, n_patches)
    print(f"model: {sum(p.numel() for p in model.parameters()) / 1e9:.2f} B parameters, "
          f"{flops / 1e12:.0f} TFLOP per forward+backward")

    visual = {k: (v.to(device, torch.bfloat16) if v.is_floating_point() and k.startswith("pixel") else v.to(device))
              for k, v in batch.visual.items()}
    on_device = {"input_ids": batch.input_ids.to(device), "attention_mask": batch.attention_mask.to(device),
                 "mm_token_type_ids": batch.mm_token_type_ids.to(device), **visual}

    def baseline_step() -> None:
        model.zero_grad(set_to_none=True)
        out = model(**on_device, use_cache=False, logits_to_keep=args.response + 1)
        logits = out.logits[:, :-1].float()
        targets = on_device["input_ids"][:, -args.response:]
        loss = -torch.log_softmax(logits, -1).gather(-1, targets.unsqueeze(-1)).mean()
        loss.backward()

    ours_batch = collate_forward_batch([prompt], [response], pad_token_id=0)
    ours_batch.input_ids = on_device["input_ids"]
    ours_batch.attention_mask = on_device["attention_mask"]
    ours_batch.position_ids = ours_batch.position_ids.to(device)
    ours_batch.mm_token_type_ids = on_device["mm_token_type_ids"]
    ours_batch.response_mask = ours_batch.response_mask.to(device)
    ours_batch.visual = visual

    def ours_step() -> None:
        model.zero_grad(set_to_none=True)
        log_probs, _ = compute_log_probs(model, ours_batch, with_entropy=False)
        (-log_probs.mean()).backward()

    base_s = time_steps(baseline_step, args.steps)
    print(f"baseline: {base_s:.2f} s/step (peak memory {torch.cuda.max_memory_allocated() / 2**30:.0f} GiB)"
          if device.type == "cuda" else f"baseline: {base_s:.2f} s/step")
    actor_cfg = ActorConfig(attention="packed", keep_activations_lm=args.keep_lm,
                            keep_activations_vision=args.keep_vision, compile=args.compile)
    configure_vlm(model, actor_cfg, device, trainable=True, gradient_checkpointing=True)  # the trainer's own path
    print(f"ours: packed attention, activations kept for {args.keep_lm:.0%} of decoder layers and "
          f"{args.keep_vision:.0%} of vision blocks, compile={args.compile}")
    ours_s = time_steps(ours_step, args.steps)
    peak = torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else 0.0
    for name, seconds in (("plain transformers (sdpa, checkpointing)", base_s), ("easyvideor1 packed", ours_s)):
        print(f"{name:>42}: {seconds:7.2f} s/step  {n_tokens / seconds:8.0f} tokens/s  "
              f"MFU {flops / seconds / PEAK_BF16_FLOPS * 100:5.1f}%")
    print(f"actor-update speed-up (ours vs plain transformers): {base_s / ours_s:.2f}x  (peak memory {peak:.0f} GiB)")
    print(f"frames: decode {decode_s:.2f} s vs cache load {load_s:.3f} s; step with on-the-fly decoding "
          f"{ours_s + decode_s:.2f} s vs cached {ours_s + load_s:.2f} s: {(ours_s + decode_s) / (ours_s + load_s):.2f}x")
    if args.profile:
        print_profile(ours_step, device)


# Kernel-name fragments -> the part of the step they belong to (first match wins).
KERNEL_PARTS = (
    # cuDNN's SDPA kernels are named ..._flash_bprop_... / ..._flash_fprop_...
    ("attention backward", ("flash_bwd", "fmha_bwd", "attn_bwd", "dq_dk_dv", "bwd_kernel", "bprop")),
    ("attention forward", ("flash_fwd", "fmha", "attn_fwd", "fprop", "flash")),
    ("matmul (GEMM)", ("gemm", "cutlass", "sm90_xmma", "cublas", "nvjet")),
    ("triton (compiled norms/activations/rotary)", ("triton",)),
    ("copies and casts", ("copy", "cast", "memcpy", "memset")),
    ("reductions / softmax", ("reduce", "softmax", "norm")),
)


def kernel_part(name: str) -> str:
    lowered = name.lower()
    for part, fragments in KERNEL_PARTS:
        if any(f in lowered for f in fragments):
            return part
    return "other elementwise"


def print_profile(step, device) -> None:
    """One profiled step: GPU time per part of the step and the ten costliest kernels."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        step()
        if device.type == "cuda":
            torch.cuda.synchronize()
    kernels = [e for e in prof.key_averages() if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA]
    if not kernels:
        print("profile: no CUDA kernels recorded (CPU run)")
        return
    total = sum(e.self_device_time_total for e in kernels) or 1.0
    parts: dict[str, float] = {}
    for e in kernels:
        parts[kernel_part(e.key)] = parts.get(kernel_part(e.key), 0.0) + e.self_device_time_total
    print(f"profile of one step: {total / 1e6:.2f} s of GPU kernel time")
    for part, us in sorted(parts.items(), key=lambda kv: -kv[1]):
        print(f"  {part:>44}: {us / 1e6:6.2f} s  {us / total * 100:5.1f}%")
    for e in sorted(kernels, key=lambda e: -e.self_device_time_total)[:10]:
        print(f"  {e.self_device_time_total / 1e3:9.1f} ms  x{e.count:<5} {e.key[:110]}")


if __name__ == "__main__":
    main()

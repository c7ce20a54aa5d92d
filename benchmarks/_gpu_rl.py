"""Shared by the gpu_* benchmarks: synthetic video tasks whose frames are already in a frame cache,
the embedded trainer's run config, and small device helpers.

The media files are a few random bytes each: the cache key is a hash of a file's bytes plus the
frame parameters, so the trainer's loader finds the blobs written here and never decodes (a
machine without FFmpeg runs the whole RL path). Frames are random noise with a coloured square,
sized on the family's factor grid, with the metadata a 2 fps sampling would give.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# vLLM 0.26 on CUDA imports flashinfer for its sampler unless told not to (not always installed).
os.environ.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")

COLOURS = {"red": (220, 30, 30), "green": (30, 200, 30), "blue": (30, 30, 220), "yellow": (230, 220, 30)}


def on_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def gpu_gib() -> dict[str, float]:
    """Device-wide GiB in use (every process: the engine core too) and this process's peak."""
    import torch

    if not torch.cuda.is_available():
        return {}
    free, total = torch.cuda.mem_get_info()
    return {"gpu_used_gib": round((total - free) / 2**30, 2),
            "peak_here_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2)}


def actor_peak_gib(trainer: Any) -> float | None:
    """This process's allocation peak since the step began (the keep policy resets the device's
    counter per micro-batch and keeps the running maximum)."""
    import torch

    if not torch.cuda.is_available():
        return None
    keep = getattr(trainer.actor, "keep_policy", None)
    peak = max(torch.cuda.max_memory_allocated(), keep.peak_bytes if keep is not None else 0)
    return round(peak / 2**30, 2)


def synthetic_video_tasks(root: Path, *, count: int, seed: int = 0) -> Path:
    """``root/train.jsonl``: yes/no and multiple-choice questions about a square's colour, one
    stand-in media file each under ``root/media`` (random bytes: hashed for the cache key, never
    decoded, since ``fill_frame_cache`` writes the frames; the GPU machine has no PyAV)."""
    rng = np.random.default_rng(seed)
    (root / "media").mkdir(parents=True, exist_ok=True)
    names = list(COLOURS)
    rows = []
    for k in range(count):
        colour = names[k % len(names)]
        media = root / "media" / f"clip{k:04d}.mp4"
        media.write_bytes(rng.bytes(1024))  # identity only: never decoded
        row = {"problem_id": f"gpu-{k:04d}", "data_type": "video", "videos": [f"media/{media.name}"],
               "synth": {"colour": colour}}
        if k % 2:
            options = [f"{chr(65 + i)}. {c}" for i, c in enumerate(names)]
            row.update(problem="<video>\nWhat colour is the square?", problem_type="multiple choice",
                       options=options, answer=chr(65 + names.index(colour)))
        else:
            row.update(problem="<video>\nIs the square red? Answer yes or no.", problem_type="boolean",
                       answer="yes" if colour == "red" else "no")
        rows.append(row)
    path = root / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def run_config(*, model: str | Path, data: Path, out_dir: Path, frames: int, height: int, width: int,
               questions: int, n: int, max_response: int, steps: int, overrides: list[str] = ()) -> Any:
    """The embedded trainer's config for these tasks: frames from the cache at ``data/cache``."""
    from easyvideor1.config import load_config
    from easyvideor1.models.families import detect_family

    family = detect_family(model)
    visual = -(-frames // family.temporal_patch_size) * (height // family.factor) * (width // family.factor)
    return load_config(None, [
        f"data.train_files={data / 'train.jsonl'}", f"data.media_root={data}",
        f"data.max_prompt_length={visual + 512}", f"data.max_response_length={max_response}",
        f"data.rollout_batch_size={questions}", "data.video_fps=2", f"data.video_max_frames={frames}",
        "data.video_min_frames=2", f"data.video_min_pixels={height * width}",
        f"data.video_max_pixels={height * width}", f"data.frame_cache.store={data / 'cache'}",
        f"worker.actor.model_path={model}", f"worker.actor.mini_batch_size={questions}",
        f"worker.rollout.n={n}", "algorithm.mix_policy.enable=false", "algorithm.kl.enable=false",
        f"trainer.output_dir={out_dir}", "trainer.loggers=[jsonl]", "trainer.val_every=0",
        "trainer.val_before_train=false", f"trainer.total_steps={steps}", "trainer.save_every=0",
        *overrides])


def fill_frame_cache(cfg: Any, *, frames: int, height: int, width: int, seed: int = 0) -> dict[str, Any]:
    """Write the blob of every training video under the key the trainer's loader will look up."""
    from easyvideor1.cache import FrameLoader, open_store
    from easyvideor1.cache.blob import encode_blob
    from easyvideor1.data import load_samples
    from easyvideor1.models.families import detect_family, frame_params
    from easyvideor1.video.decode import DECODER_NAME
    from easyvideor1.video.metadata import VideoMetadata

    started = time.perf_counter()
    family = detect_family(cfg.worker.actor.model_path)
    store = open_store(cfg.data.frame_cache.store)
    loader = FrameLoader(store, *frame_params(cfg, family))  # the trainer's keys, without its build pass
    rng = np.random.default_rng(seed)
    written = 0
    for sample in load_samples(cfg.data.train_files, media_root=cfg.data.media_root):
        colour = COLOURS[(sample.extra.get("synth") or {}).get("colour", "red")]
        for path in sample.videos:
            key = loader.key_for(path, loader.clip_params(None))
            if store.exists(key.key):
                continue
            video = rng.integers(0, 60, size=(frames, height, width, 3), dtype=np.uint8)
            top, left = height // 4, width // 4
            video[:, top:top + height // 2, left:left + width // 2] = colour
            meta = VideoMetadata(source_fps=2.0, total_frames=frames, duration=frames / 2.0,
                                 frame_indices=tuple(range(frames)), timestamps=tuple(i / 2.0 for i in range(frames)),
                                 height=height, width=width, source_height=height, source_width=width,
                                 factor=family.factor, decoder=DECODER_NAME)
            store.put(key.key, encode_blob(video, meta, key))
            written += 1
    return {"blobs_written": written, "seconds": round(time.perf_counter() - started, 1)}


class LogProbProbe:
    """Engine log-probs vs the trainer's, per step: wraps the stage (to keep the engine's
    log-probs of the step's responses) and the actor (to compare its old log-probs, computed on
    the same weights right after the sync, with them)."""

    def __init__(self, trainer: Any):
        self.trainer = trainer
        self.engine_logprobs: list[list[float] | None] = []
        self.items: list[Any] = []
        self.old: list[Any] = []
        run, compute = trainer.stage.run, trainer.actor.compute_log_probs

        def run_and_keep(*args: Any, **kwargs: Any) -> Any:
            result = run(*args, **kwargs)
            self.engine_logprobs = [lp for g in result.groups for lp in (g.logprobs or [None] * len(g.responses))]
            return result

        def compute_and_keep(items: Any, *, reference: bool = False) -> Any:
            out = compute(items, reference=reference)
            if not reference:
                self.items, self.old = list(items), out
            return out

        trainer.stage.run = run_and_keep
        trainer.actor.compute_log_probs = compute_and_keep
        self._compute = compute

    def step_report(self) -> dict[str, float]:
        """|engine - trainer| over the step's sampled tokens, and how far the update then moved the
        policy on the same tokens (the trainer's log-probs after the update minus before)."""
        gaps = [np.abs(np.asarray(e, dtype=np.float64) - o.numpy()) for e, o in zip(self.engine_logprobs, self.old)
                if e is not None and len(e)]
        new = self._compute(self.items)
        moved = [np.abs(n.numpy() - o.numpy()) for n, o in zip(new, self.old) if len(o)]
        flat, flat_moved = np.concatenate(gaps), np.concatenate(moved)
        return {"lp_gap_mean": float(flat.mean()), "lp_gap_p99": float(np.quantile(flat, 0.99)),
                "lp_gap_max": float(flat.max()), "lp_moved_mean": float(flat_moved.mean()), "tokens": int(flat.size)}


def markdown_table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.3g}" if abs(v) < 1e3 else f"{v:,.0f}"
        return str(v)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(fmt(r.get(c, "")) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


# Qwen3-VL-8B-Instruct's shape (its config.json): the text and vision fields that size the model.
QWEN3_VL_8B_TEXT = {"hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36,
                    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
                    "max_position_embeddings": 262144, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
                    "rope_parameters": {"rope_type": "default", "rope_theta": 5000000.0,
                                        "mrope_section": [24, 20, 20], "mrope_interleaved": True}}
QWEN3_VL_8B_VISION = {"depth": 27, "hidden_size": 1152, "intermediate_size": 4304, "num_heads": 16,
                      "out_hidden_size": 4096, "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2,
                      "num_position_embeddings": 2304, "deepstack_visual_indexes": [8, 16, 24],
                      "hidden_act": "gelu_pytorch_tanh", "in_channels": 3}


def scaled_config(tiny_dir: str | Path, text: dict[str, Any], vision: dict[str, Any], *, tie: bool) -> dict[str, Any]:
    """A tiny model's config.json with the text/vision fields of a real size (its special-token
    ids, tokenizer and processor stay the tiny model's: ids < 450)."""
    cfg = json.loads((Path(tiny_dir) / "config.json").read_text())
    cfg["text_config"] = {**cfg["text_config"], **text, "tie_word_embeddings": tie}
    cfg["vision_config"] = {**cfg["vision_config"], **vision}
    cfg["tie_word_embeddings"] = tie
    return cfg


def model_parameters(config: dict[str, Any]) -> int:
    """Parameters of the model ``config`` describes, counted on the meta device (nothing allocated)."""
    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText

    hf = AutoConfig.for_model(**config)
    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(hf)
    return sum(p.numel() for p in model.parameters())


def write_random_checkpoint(out: str | Path, tiny_dir: str | Path, config: dict[str, Any], *, seed: int = 0
                            ) -> dict[str, Any]:
    """A bf16 random checkpoint of ``config`` at ``out`` with the tiny model's tokenizer and
    processor: N(0, 0.02) for linear/conv/embedding weights, 1 for norms, 0 for biases (drawn on
    the GPU when there is one); a tied head is not saved."""
    import shutil

    import torch
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoModelForImageTextToText

    started = time.perf_counter()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for item in Path(tiny_dir).iterdir():
        if item.is_file() and not item.name.endswith(".safetensors") and item.name not in (
                "config.json", "model.safetensors.index.json"):
            shutil.copy(item, out / item.name)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    hf = AutoConfig.from_pretrained(out)
    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(hf, dtype=torch.bfloat16)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    gen = torch.Generator(device).manual_seed(seed)
    tensors: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    for mname, module in model.named_modules():
        for pname, p in module.named_parameters(recurse=False):
            if id(p) in seen:
                continue
            seen.add(id(p))
            t = torch.empty(p.shape, dtype=torch.bfloat16, device=device)
            if pname == "bias":
                t.zero_()
            elif isinstance(module, (torch.nn.Linear, torch.nn.Conv3d, torch.nn.Conv2d, torch.nn.Embedding)):
                t.normal_(0.0, 0.02, generator=gen)
            else:  # norms
                t.fill_(1.0)
            tensors[f"{mname}.{pname}" if mname else pname] = t.cpu()
    if config.get("tie_word_embeddings"):
        tensors.pop("lm_head.weight", None)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    return {"params": sum(t.numel() for t in tensors.values()), "seconds": round(time.perf_counter() - started, 1)}


def host_available_bytes() -> int:
    """MemAvailable of /proc/meminfo: what the host can still give this process."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("/proc/meminfo has no MemAvailable line")


def host_peak_gib() -> float:
    """This process's peak resident memory (ru_maxrss, KiB on Linux)."""
    import resource

    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)


def _encode_clip(job: tuple[str, float, int, int, int]) -> str:
    from easyvideor1.data.synth import make_long_video  # PyAV: imported where a clip is written

    path, seconds, width, height, seed = job
    return str(make_long_video(path, seconds=seconds, fps=30, width=width, height=height, seed=seed))


def encode_clips(paths: list[Path], *, seconds: float, width: int, height: int, workers: int = 8) -> dict[str, Any]:
    """Real H.264 clips (30 fps, ``data.synth.make_long_video``, seed = position), one process
    per clip: call it before CUDA or vLLM exist in this process (the pool forks)."""
    from concurrent.futures import ProcessPoolExecutor

    started = time.perf_counter()
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
    jobs = [(str(p), seconds, width, height, k) for k, p in enumerate(paths)]
    with ProcessPoolExecutor(max_workers=max(1, min(len(jobs), workers))) as pool:
        list(pool.map(_encode_clip, jobs))
    return {"clips": len(paths), "seconds_each": seconds, "size": f"{height}x{width}",
            "encode_s": round(time.perf_counter() - started, 1), "bytes": sum(p.stat().st_size for p in paths)}

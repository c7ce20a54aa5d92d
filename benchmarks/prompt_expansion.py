"""Prompt ids from metadata (``expand``) vs the full build with pixels (``build_prompt``).

Side by side in one process, on the tiny models' processors (the pixel work does not depend
on the model size), one 128-frame video per prompt:

- processor on pixels: ``processor(text, videos, ...)`` + M-RoPE positions (what
  ``build_prompt`` did before the expansion existed);
- ``build_prompt``: expansion + ``pixel_tensors`` + the three-way checks;
- ``expand``: text + metadata only, what a stage that just needs ids pays.

Rounds are interleaved so all see the same background load; the best round is reported.

    .venv/bin/python benchmarks/prompt_expansion.py [--families qwen2_5_vl qwen3_vl] [--frames 128]
        [--rows 8 --cols 8] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _best(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def run_family(family: str, workdir: Path, *, frames: int, rows: int, cols: int, rounds: int) -> None:
    from transformers import AutoProcessor

    from easyvideor1.models import build_prompt, build_tiny_model, mrope_positions
    from easyvideor1.models.inputs import expand, hf_video_metadata, render_prompt
    from easyvideor1.models.tiny import random_video_input

    processor = AutoProcessor.from_pretrained(build_tiny_model(family, workdir / family, seed=0))
    # 29.97 fps source, every 7th frame: fractional timestamps and seconds per patch.
    video = random_video_input(family, frames, rows, cols, source_fps=29.97, stride=7)
    problem = "<video>\nWhat happens first, and what happens last?"
    text = render_prompt(processor, problem)

    def on_pixels():
        out = processor(text=[text], videos=[video.frames], video_metadata=[hf_video_metadata(video.metadata)],
                        do_sample_frames=False, do_resize=False, return_tensors="pt")
        seconds = out.get("second_per_grid_ts")
        mrope_positions(family, out["input_ids"][0].tolist(), image_token_id=processor.image_token_id,
                        video_token_id=processor.video_token_id, video_grid_thw=out["video_grid_thw"].tolist(),
                        second_per_grid_ts=None if seconds is None else seconds.tolist())
        return out

    def built():
        return build_prompt(processor, problem, [video], family=family)

    def expanded():
        return expand(processor, problem, [video.metadata], family=family)

    reference, full, ids_only = on_pixels(), built(), expanded()  # warm-up, and the three agree
    assert reference["input_ids"][0].tolist() == full.prompt_ids == ids_only.prompt_ids
    best = {"pixels": [], "build": [], "expand": []}
    for _ in range(rounds):
        best["pixels"].append(_best(on_pixels, 1))
        best["build"].append(_best(built, 1))
        best["expand"].append(_best(expanded, 3))
    t_pixels, t_build, t_expand = (min(best[k]) for k in ("pixels", "build", "expand"))
    print(f"[{family}] {frames} frames of {video.metadata.height}x{video.metadata.width}, "
          f"{len(ids_only.prompt_ids)} prompt tokens ({ids_only.num_video_tokens} visual)")
    print(f"  processor on pixels + positions : {t_pixels * 1e3:9.2f} ms")
    print(f"  build_prompt (expand + pixels)  : {t_build * 1e3:9.2f} ms")
    print(f"  expand (metadata only)          : {t_expand * 1e3:9.2f} ms")
    print(f"  ratio build_prompt / expand     : {t_build / t_expand:9.1f}x")
    print(f"  ratio processor / expand        : {t_pixels / t_expand:9.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", nargs="+", default=["qwen2_5_vl", "qwen3_vl"])
    parser.add_argument("--frames", type=int, default=128)
    parser.add_argument("--rows", type=int, default=8, help="frame height in factor units (8 -> 224/256 px)")
    parser.add_argument("--cols", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="evr1-expand-") as tmp:
        for family in args.families:
            run_family(family, Path(tmp), frames=args.frames, rows=args.rows, cols=args.cols, rounds=args.rounds)


if __name__ == "__main__":
    main()

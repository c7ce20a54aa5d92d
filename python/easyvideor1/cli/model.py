"""``evr1 model``: build tiny random models and inspect model directories."""

from __future__ import annotations

import argparse
import json

from easyvideor1.models.families import FAMILIES


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("model", help="model families and tiny test models")
    sub = parser.add_subparsers(dest="model_command", metavar="SUBCOMMAND", required=True)

    tiny = sub.add_parser("tiny", help="write a tiny random-weight model of a real architecture (offline)")
    tiny.add_argument("--family", required=True, choices=sorted(FAMILIES), help="model family")
    tiny.add_argument("--out", required=True, help="output directory (Hugging Face format)")
    tiny.add_argument("--seed", type=int, default=0, help="weight seed: the same seed gives identical weights")
    tiny.set_defaults(func=_tiny)

    info = sub.add_parser("info", help="print the family and vision geometry of a model directory")
    info.add_argument("model_dir")
    info.set_defaults(func=_info)


def _tiny(args: argparse.Namespace) -> int:
    from easyvideor1.models.tiny import build_tiny_model, safetensors_digest

    out = build_tiny_model(args.family, args.out, seed=args.seed)
    print(json.dumps({"family": args.family, "out": str(out), "seed": args.seed,
                      "weights_sha256": safetensors_digest(out)}))
    return 0


def _info(args: argparse.Namespace) -> int:
    from easyvideor1.models.families import detect_family

    family = detect_family(args.model_dir)
    print(json.dumps({
        "family": family.name, "patch_size": family.patch_size, "temporal_patch_size": family.temporal_patch_size,
        "merge_size": family.merge_size, "factor": family.factor, "time_axis": family.time_axis,
        "vllm_cpu_dtype": family.vllm_cpu_dtype,
    }))
    return 0

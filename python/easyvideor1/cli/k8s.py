"""``evr1 k8s render-job CONFIG [KEY=VALUE ...] [--out FILE]``: the trainer as a KubeRay RayJob.

Prints (or writes) a multi-document YAML: the ConfigMap holding the resolved run config,
then the RayJob that mounts it, ready for ``kubectl apply -f -``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from easyvideor1.config import load_config


def _render_job(args: argparse.Namespace) -> int:
    from easyvideor1.k8s import dump_manifests, render_job

    config = load_config(args.config, args.overrides)
    text = dump_manifests(render_job(config, name=args.name, suspend=args.suspend))
    if args.out:
        Path(args.out).write_text(text)
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser("k8s", help="render Kubernetes manifests from a run config")
    sub = parser.add_subparsers(dest="k8s_command", metavar="ACTION")
    job = sub.add_parser(
        "render-job", help="the trainer as a KubeRay RayJob plus its config ConfigMap",
        description="Render a RayJob (head and GPU worker groups sized by the config's kubernetes.* "
                    "section) and the ConfigMap with the resolved run config it mounts. "
                    "Apply with: evr1 k8s render-job run.yaml | kubectl apply -f -")
    job.add_argument("config", help="run config YAML (see docs/config.md)")
    job.add_argument("overrides", nargs="*", help="dotted KEY=VALUE overrides, e.g. kubernetes.num_workers=4")
    job.add_argument("--out", help="write the manifests here instead of standard output")
    job.add_argument("--name", help="RayJob name (default: trainer.experiment_name made a DNS label)")
    job.add_argument("--suspend", action="store_true",
                     help="create the RayJob suspended (spec.suspend: true); set it to false to start")
    job.set_defaults(func=_render_job)
    parser.set_defaults(func=lambda a: parser.print_help() or 2)

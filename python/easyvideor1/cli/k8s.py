"""``evr1 k8s render-job CONFIG [KEY=VALUE ...] [--out FILE]``: the trainer as a KubeRay RayJob.

Prints (or writes) a multi-document YAML: the ConfigMap holding the resolved run config,
then the RayJob that mounts it, ready for ``kubectl apply -f -``.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from easyvideor1.config import load_config

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _env_value(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not _ENV_NAME.match(name):
        raise argparse.ArgumentTypeError(f"expected VAR=VALUE, got {text!r}")
    return name, value


def _secret_ref(text: str) -> tuple[str, str, str]:
    name, sep, ref = text.partition("=")
    secret, colon, key = ref.partition(":")
    if not sep or not colon or not _ENV_NAME.match(name) or not secret or not key:
        raise argparse.ArgumentTypeError(f"expected VAR=SECRET:KEY, got {text!r}")
    return name, secret, key


def _render_job(args: argparse.Namespace) -> int:
    from easyvideor1.k8s import dump_manifests, render_job, s3_env, secret_env

    config = load_config(args.config, args.overrides)
    env = s3_env(args.s3_endpoint, args.s3_secret)
    env += [{"name": name, "value": value} for name, value in args.env]
    env += [secret_env(name, secret, key) for name, secret, key in args.secret_env]
    text = dump_manifests(render_job(config, name=args.name, suspend=args.suspend, env=env))
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
                    "section) and the ConfigMap with the resolved run config it mounts (read-only at "
                    "/etc/easyvideor1, as in the Helm chart's pods; its SHA-256 is the pods' checksum/run-config). "
                    "Apply with: evr1 k8s render-job run.yaml | kubectl apply -f -")
    job.add_argument("config", help="run config YAML (see docs/config.md)")
    job.add_argument("overrides", nargs="*", help="dotted KEY=VALUE overrides, e.g. kubernetes.num_workers=4")
    job.add_argument("--out", help="write the manifests here instead of standard output")
    job.add_argument("--name", help="RayJob name (default: trainer.experiment_name made a DNS label)")
    job.add_argument("--s3-endpoint", metavar="URL",
                     help="S3 endpoint of s3:// stores in the config (sets EVR1_S3_ENDPOINT in the Ray pods)")
    job.add_argument("--s3-secret", metavar="NAME",
                     help="Secret with AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY for the Ray pods")
    job.add_argument("--env", type=_env_value, action="append", default=[], metavar="VAR=VALUE",
                     help="extra environment variable of the Ray pods (repeatable)")
    job.add_argument("--secret-env", type=_secret_ref, action="append", default=[], metavar="VAR=SECRET:KEY",
                     help="environment variable from a Secret key, e.g. EVR1_REWARD_TOKEN=reward-token:token")
    job.add_argument("--suspend", action="store_true",
                     help="create the RayJob suspended (spec.suspend: true); set it to false to start")
    job.set_defaults(func=_render_job)
    parser.set_defaults(func=lambda a: parser.print_help() or 2)

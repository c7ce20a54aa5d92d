"""Kubernetes manifests rendered from a run config (``evr1 k8s render-job``, the operator)."""

from easyvideor1.k8s.manifests import dump_manifests
from easyvideor1.k8s.rayjob import (
    RAY_VERSION,
    RUN_CONFIG_PATH,
    TRAIN_ENTRYPOINT,
    job_name,
    render_job,
    s3_env,
    secret_env,
)

__all__ = ["RAY_VERSION", "RUN_CONFIG_PATH", "TRAIN_ENTRYPOINT", "dump_manifests", "job_name", "render_job", "s3_env",
           "secret_env"]

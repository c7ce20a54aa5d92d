"""Kubernetes manifests rendered from a run config (``evr1 k8s render-job``, the operator)."""

from easyvideor1.k8s.manifests import dump_manifests
from easyvideor1.k8s.rayjob import (
    CONFIG_CHECKSUM_ANNOTATION,
    CONFIG_VOLUME,
    RAY_VERSION,
    RUN_CONFIG_DIR,
    RUN_CONFIG_KEY,
    RUN_CONFIG_PATH,
    TRAIN_ENTRYPOINT,
    job_name,
    render_job,
    run_config_checksum,
    s3_env,
    secret_env,
)

__all__ = ["CONFIG_CHECKSUM_ANNOTATION", "CONFIG_VOLUME", "RAY_VERSION", "RUN_CONFIG_DIR", "RUN_CONFIG_KEY",
           "RUN_CONFIG_PATH", "TRAIN_ENTRYPOINT", "dump_manifests", "job_name", "render_job", "run_config_checksum",
           "s3_env", "secret_env"]

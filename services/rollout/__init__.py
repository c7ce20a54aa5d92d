"""The rollout pool: vLLM engines as Ray Serve replicas, each running the library's rollout worker.

Transport only: the task loop, weight following and scoring are
:mod:`easyvideor1.rollout.worker`; this package wraps it as a Serve deployment
(``services.rollout.deployment:build_app``) and adds ``evr1 serve rollout``.
"""

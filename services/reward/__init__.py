"""The reward service: ``POST /v1/score`` over the library's reward registry.

Transport only: item validation and scoring come from :mod:`easyvideor1.rewards.client`,
so the HTTP and in-process clients give identical results. Scoring runs in a pool of
worker processes (:mod:`services.reward.pool`) with per-item timeouts.
"""

"""The reward service: ``POST /v1/score`` over the library's reward registry.

Transport only: item validation and scoring come from :mod:`easyvideor1.rewards.client`,
and scoring runs in the library's pool of worker processes (:mod:`easyvideor1.rewards.pool`
over :mod:`easyvideor1.workpool`) with the same per-item time limits as the in-process
client, so the HTTP and in-process clients give identical results.
"""

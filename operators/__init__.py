"""Kubernetes operators of easyvideor1 (kopf). Run: ``kopf run -m operators.videorljob.handlers``."""

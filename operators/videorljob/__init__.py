"""The VideoRLJob operator: cache-warm Job -> suspended RayJob, released when the cache is ready.

``manifests`` builds the child objects, ``reconcile`` decides what to do from what is
observed (plain functions, no cluster), ``handlers`` is the thin kopf layer that observes
and executes.
"""

GROUP = "easyvideor1.io"
VERSION = "v1alpha1"
PLURAL = "videorljobs"
KIND = "VideoRLJob"
API_VERSION = f"{GROUP}/{VERSION}"


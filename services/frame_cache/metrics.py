"""Prometheus metrics of the frame-cache service, on a registry of its own (one per app)."""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)

disable_created_metrics()  # the *_created series double the output and nobody graphs them

# A HEAD answers in ~100 us; a large blob streamed from S3 can take seconds.
_REQUEST_BUCKETS = (1e-4, 3e-4, 1e-3, 3e-3, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 120.0)
_BUILD_BUCKETS = (0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0, 3600.0, 14400.0)


class FrameCacheMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.blob_hits = Counter("evr1_frame_cache_blob_hits", "Blob reads (GET/HEAD) that found the blob",
                                 ["method"], registry=r)
        self.blob_misses = Counter("evr1_frame_cache_blob_misses", "Blob reads (GET/HEAD) of an absent key",
                                   ["method"], registry=r)
        self.bytes_served = Counter("evr1_frame_cache_bytes_served", "Blob bytes streamed to clients",
                                    registry=r)
        self.blob_uploads = Counter("evr1_frame_cache_blob_uploads", "Blob uploads (PUT), by outcome "
                                    "(stored, identical, conflict, rejected, forged, unverifiable, replaced)",
                                    ["outcome"], registry=r)
        self.upload_verifications = Counter("evr1_frame_cache_upload_verifications", "Accepted uploads by what "
                                            "vouched for them (source, credential, open)", ["how"], registry=r)
        self.admin_operations = Counter("evr1_frame_cache_admin_operations", "Admin operations done (delete, "
                                        "replace)", ["operation"], registry=r)
        self.uploads_in_flight = Gauge("evr1_frame_cache_uploads_in_flight", "PUT bodies being received or "
                                       "checked", registry=r)
        self.bytes_received = Counter("evr1_frame_cache_bytes_received", "Blob bytes accepted by PUT",
                                      registry=r)
        self.store_errors = Counter("evr1_frame_cache_store_errors", "Store operations that failed (503)",
                                    ["operation"], registry=r)
        self.requests = Counter("evr1_frame_cache_requests", "HTTP requests, by route, method and status",
                                ["route", "method", "status"], registry=r)
        self.request_seconds = Histogram("evr1_frame_cache_request_seconds", "Time to answer a request "
                                         "(for GET blobs: until the last byte was handed to the server)",
                                         ["route", "method"], buckets=_REQUEST_BUCKETS, registry=r)
        self.builds_submitted = Counter("evr1_frame_cache_builds_submitted", "Build requests queued",
                                        ["kind"], registry=r)
        self.builds_finished = Counter("evr1_frame_cache_builds_finished", "Builds finished by this "
                                       "process's workers, by status (done, failed)", ["status"], registry=r)
        self.build_media = Counter("evr1_frame_cache_build_media", "Media of finished builds, by outcome "
                                   "(built, reused, failed)", ["outcome"], registry=r)
        self.build_failures = Counter("evr1_frame_cache_build_failures", "Media that failed to build, by "
                                      "error kind (the listed ones: at most 1000 per build)", ["error_kind"], registry=r)
        self.build_seconds = Histogram("evr1_frame_cache_build_seconds", "Wall time of one build",
                                       buckets=_BUILD_BUCKETS, registry=r)
        self.builds_running = Gauge("evr1_frame_cache_builds_running", "Builds running in this process",
                                    registry=r)
        # The tool endpoint (services/frame_cache/tools.py), by tool: window or crop.
        self.tool_requests = Counter("evr1_frame_cache_tool_requests", "Tool requests answered, by tool and "
                                     "status", ["tool", "status"], registry=r)
        self.tool_errors = Counter("evr1_frame_cache_tool_errors", "Tool requests refused or failed, by reason "
                                   "(bad_request, decode, store, timeout, cache)", ["tool", "reason"], registry=r)
        self.tool_store = Counter("evr1_frame_cache_tool_store", "Answered tool requests whose frames were in "
                                  "the store (hit) or decoded (miss)", ["tool", "outcome"], registry=r)
        self.tool_frames = Counter("evr1_frame_cache_tool_frames", "Frames (a crop counts one) returned by the "
                                   "tool endpoint", ["tool"], registry=r)
        self.tool_seconds = Histogram("evr1_frame_cache_tool_seconds", "Time to answer a tool request (decode "
                                      "included)", ["tool"], buckets=_REQUEST_BUCKETS, registry=r)
        self.build_workers = Gauge("evr1_frame_cache_build_workers", "Build worker threads alive", registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)

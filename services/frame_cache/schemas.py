"""Response models of the frame-cache service, as published in ``/openapi.json``."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, ConfigDict, Field

from services.frame_cache.builds import BuildRequest
from services.frame_cache.tools import REQUEST_MODELS


class ErrorResponse(BaseModel):
    detail: str


_ERROR_TEXT = {400: "invalid key, id or request; an upload rejected (with the reason)",
               401: "missing or invalid bearer token",
               403: "the service is read-only, or the credential does not allow this (read cannot write; "
                    "DELETE and replace need the admin credential)",
               404: "not found", 409: "the key is already stored with other bytes (blobs are immutable)",
               411: "length required", 413: "body too large", 422: "malformed request body",
               503: "the store or the queue cannot be reached, or too many uploads at once (Retry-After)"}


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {code: {"model": ErrorResponse, "description": _ERROR_TEXT[code]} for code in codes}


def head_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """A HEAD answer has no body: the reason of a 404 is in its ``X-Reason`` header."""
    return {code: {"description": _ERROR_TEXT[code]} for code in codes}


class PutResponse(BaseModel):
    key: str
    bytes: int
    stored: bool = Field(..., description="false when the blob was already there (nothing written)")
    verified: Literal["source", "credential", "open", "identical"] = Field(
        ..., description="source: frames compared with the decoded source; credential: the source is out of "
        "reach, accepted from the write/admin credential; open: a service without tokens; identical: the "
        "stored bytes")


class DeleteResponse(BaseModel):
    key: str
    deleted: bool


class StatsResponse(BaseModel):
    count: int
    bytes: int
    url: str


class BuildAccepted(BaseModel):
    build_id: str
    status: Literal["queued"]


class BuildCounts(BaseModel):
    built: int = Field(..., description="blobs decoded and stored by this build")
    reused: int = Field(..., description="blobs that were already stored")
    failed: int = Field(..., description="media files that could not be built (see failures)")
    bad_rows: int = 0
    media: int = 0
    unique: int = 0
    rows: int = 0


class BuildFailureModel(BaseModel):
    model_config = ConfigDict(extra="allow")

    path: str
    error_kind: str
    error_class: str
    reason: str


class BuildStatus(BaseModel):
    model_config = ConfigDict(extra="allow")

    build_id: str
    status: Literal["queued", "running", "done", "failed"]
    request: dict[str, Any] | None = None
    created_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    worker: str | None = None
    attempt: int | None = None
    counts: BuildCounts | None = None
    bytes_written: int | None = None
    failures: list[BuildFailureModel] | None = Field(None, description="first 1000 failed media, with reasons")
    bad_rows: list[dict[str, Any]] | None = None
    seconds: float | None = None
    error: str | None = Field(None, description="why the build could not run (status failed)")


class HealthResponse(BaseModel):
    status: str


class ReadyResponse(BaseModel):
    ready: bool
    store: str
    queue: str
    build_workers: int
    builds_running: int
    detail: str | None = None


_PATTERNS = {"key": "^[0-9a-f]{16,128}$", "build_id": "^[0-9a-f]{32}$"}


def install_openapi(app: FastAPI) -> None:
    """Publish ``BuildRequest`` and the tool requests (bodies are parsed by hand for clear 4xx messages)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
            request = BuildRequest.model_json_schema(ref_template="#/components/schemas/{model}")
            defs = request.pop("$defs", {})
            doc.setdefault("components", {}).setdefault("schemas", {}).update(defs, BuildRequest=request)
            for name, model in REQUEST_MODELS.items():
                tool = model.model_json_schema(ref_template="#/components/schemas/{model}")
                doc["components"]["schemas"].update(tool.pop("$defs", {}), **{name: tool})
            # The routes check these formats themselves (400 with a reason, not FastAPI's 422);
            # the patterns are published so clients and schema-driven tests know them.
            for operations in doc["paths"].values():
                for operation in operations.values():
                    for parameter in operation.get("parameters", []):
                        if parameter["name"] in _PATTERNS and parameter["in"] == "path":
                            parameter["schema"]["pattern"] = _PATTERNS[parameter["name"]]
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = openapi

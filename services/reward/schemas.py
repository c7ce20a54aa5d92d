"""Request/response models of the reward service, as published in ``/openapi.json``.

The request models document the contract; the service validates items one by one
itself (``easyvideor1.rewards.client.prepare_item``) so that a bad item costs that item
only, with its reason in ``error``, instead of a 422 for the whole batch.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from easyvideor1.config.schema import SCORING_FIELDS, RewardConfig


class ScoreItemModel(BaseModel):
    model_config = ConfigDict(title="ScoreItem", extra="allow")

    id: str | int | None = Field(None, description="echoed back in the result")
    problem_type: str | None = Field(
        None, description="any spelling or alias of a type from /v1/problem-types; required on "
                          "/v1/score, optional on /v1/score/{problem_type}")
    response: str = Field(..., description="the model's response")
    ground_truth: str = Field(..., description="the answer, in the format of its problem type "
                                               "(structured answers JSON-encoded)")
    options: list[str] | None = Field(None, description='multiple choice: ["A. red", "B. blue", ...]')
    problem: str | None = Field(None, description="the question (used by some scorers)")
    data_type: str | None = Field(None, description="video, image, text or image_video")
    extra: dict[str, Any] | None = Field(None, description="scorer-specific inputs")


class ScoreBatchRequest(BaseModel):
    model_config = ConfigDict(title="ScoreBatchRequest")

    items: list[ScoreItemModel]
    config: dict[str, Any] | None = Field(
        None, description="scoring settings for this request: RewardConfig scoring fields (the run config's "
                          "worker.reward, without url and workers); fields not given keep the service's values; "
                          "null or absent: the service's own worker.reward")


class ScoreResultModel(BaseModel):
    model_config = ConfigDict(title="ScoreResult")

    id: str | int | None = Field(None, description="the item's id")
    overall: float = Field(..., description="accuracy_weight * accuracy + format_weight * format; 0 on error")
    accuracy: float
    format: float
    details: dict[str, Any] = Field(default_factory=dict, description="scorer-specific evidence")
    error: str | None = Field(None, description="why the item could not be scored (then all scores are 0)")
    problem_type: str | None = Field(None, description="canonical problem type, when it resolved")


class ScoreResponse(BaseModel):
    results: list[ScoreResultModel] = Field(..., description="one per item, in request order")


class ErrorResponse(BaseModel):
    detail: str
    known: list[str] | None = Field(None, description="known problem types (404 only)")


class ProblemTypeModel(BaseModel):
    name: str
    aliases: list[str]
    heavy: bool = Field(..., description="scored one item per worker job (rendering, sandbox, judge)")
    description: str
    route: str = Field(..., description="per-type scoring route")


class ProblemTypesResponse(BaseModel):
    problem_types: list[ProblemTypeModel]


class HealthResponse(BaseModel):
    status: str


class ReadyResponse(BaseModel):
    ready: bool
    workers: int = Field(..., description="live worker processes")
    worker_pids: list[int]
    scorers: int = Field(..., description="registered problem types")
    detail: str | None = None


def scoring_config_schema() -> dict[str, Any]:
    """The ``config`` object of a scoring request, from RewardConfig itself (never a copy of
    its fields): its scoring fields, all optional, without defaults (the service's apply)."""
    fields = RewardConfig.model_json_schema()["properties"]
    properties = {name: {k: v for k, v in prop.items() if k != "default"}
                  for name, prop in fields.items() if name in SCORING_FIELDS}
    return {"title": "ScoringConfig", "type": "object", "properties": properties, "additionalProperties": False,
            "description": "RewardConfig scoring fields; extra_scorer_modules must be loaded by the service"}


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    texts = {401: "missing or wrong bearer token", 404: "unknown problem type",
             413: "body or batch too large",
             422: "body is not a JSON object with an 'items' list, or its 'config' is refused",
             503: "not ready (warming up or no scorer modules)"}
    return {code: {"model": ErrorResponse, "description": texts[code]} for code in codes}

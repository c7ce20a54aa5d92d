"""The fields a prompt template sees for a sample; here, not in rollout, so that commands
which only render prompts (``evr1 data export``) do not import the engines."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from easyvideor1.data import Sample


def sample_fields(sample: Sample) -> dict[str, Any]:
    """The fields a prompt template sees (the row as in the data file)."""
    fields = sample.to_row()
    fields["problem"] = sample.problem
    fields["options"] = list(sample.options) if sample.options else []
    fields.setdefault("videos", list(sample.videos))
    fields.setdefault("images", list(sample.images))
    return fields

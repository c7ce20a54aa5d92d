"""Sample schema and validation, data files, synthetic video tasks."""

from easyvideor1.data.loader import (
    ValidationReport,
    load_samples,
    load_samples_report,
    validate_file,
    write_samples,
)
from easyvideor1.data.schema import (
    DATA_TYPES,
    IMAGE_PLACEHOLDER,
    VIDEO_PLACEHOLDER,
    Sample,
    count_placeholders,
    ensure_placeholders,
    parse_row,
    strip_answer_wrapper,
)

__all__ = [
    "DATA_TYPES",
    "IMAGE_PLACEHOLDER",
    "VIDEO_PLACEHOLDER",
    "Sample",
    "ValidationReport",
    "count_placeholders",
    "ensure_placeholders",
    "load_samples",
    "load_samples_report",
    "parse_row",
    "strip_answer_wrapper",
    "validate_file",
    "write_samples",
]

"""Model families, the shared prompt/input builder, M-RoPE positions, the trainer's log-prob
function and the tiny-model factory. See docs/models.md."""

from easyvideor1.models.families import (
    FAMILIES,
    IMAGE_PAD,
    QWEN2_5_VL,
    QWEN2_VL,
    QWEN3_5,
    QWEN3_VL,
    VIDEO_PAD,
    VISION_END,
    VISION_START,
    ModelFamily,
    detect_family,
    family_from_config,
    get_family,
    qwen3_frame_timestamps,
    video_prompt_token_count,
    visual_token_count,
)
from easyvideor1.models.forward import (
    ForwardBatch,
    check_batch_visual_tokens,
    collate_forward_batch,
    compute_log_probs,
)
from easyvideor1.models.inputs import (
    PROCESSOR_KWARGS,
    ImageInput,
    MediaInputError,
    PlaceholderMismatchError,
    PromptBuilder,
    PromptInputs,
    VideoInput,
    build_prompt,
    check_visual_tokens,
    messages_from_problem,
)
from easyvideor1.models.rope import PositionError, continue_positions, mrope_positions
from easyvideor1.models.tiny import build_tiny_model, perturb_weights, safetensors_digest

__all__ = [
    "FAMILIES", "IMAGE_PAD", "PROCESSOR_KWARGS", "QWEN2_5_VL", "QWEN2_VL", "QWEN3_5", "QWEN3_VL", "VIDEO_PAD",
    "VISION_END", "VISION_START", "ForwardBatch", "ImageInput", "MediaInputError", "ModelFamily",
    "PlaceholderMismatchError", "PositionError", "PromptBuilder", "PromptInputs", "VideoInput", "build_prompt",
    "build_tiny_model", "check_batch_visual_tokens", "check_visual_tokens", "collate_forward_batch",
    "compute_log_probs", "continue_positions", "detect_family", "family_from_config", "get_family",
    "messages_from_problem", "mrope_positions", "perturb_weights", "qwen3_frame_timestamps",
    "safetensors_digest", "video_prompt_token_count", "visual_token_count",
]

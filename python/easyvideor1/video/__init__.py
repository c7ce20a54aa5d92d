"""Video and image decoding, frame sampling, smart resize and the metadata that travels with frames."""

from easyvideor1.video.decode import DECODER_NAME, decode_video, probe_video
from easyvideor1.video.image import IMAGE_DECODER_NAME, load_image
from easyvideor1.video.metadata import (
    FACTOR_QWEN2,
    FACTOR_QWEN3,
    ImageMetadata,
    ImageParams,
    VideoMetadata,
    VideoParams,
)
from easyvideor1.video.sampling import (
    sample_frame_indices,
    sample_window_indices,
    smart_resize,
    window_frame_range,
)

__all__ = [
    "DECODER_NAME",
    "FACTOR_QWEN2",
    "FACTOR_QWEN3",
    "IMAGE_DECODER_NAME",
    "ImageMetadata",
    "ImageParams",
    "VideoMetadata",
    "VideoParams",
    "decode_video",
    "load_image",
    "probe_video",
    "sample_frame_indices",
    "sample_window_indices",
    "smart_resize",
    "window_frame_range",
]

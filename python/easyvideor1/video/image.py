"""Load an image as uint8 RGB, upright (EXIF orientation) and smart-resized to its own budget."""

from __future__ import annotations

import os
import warnings

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from easyvideor1.errors import MediaDecodeError, MediaTooLargeError
from easyvideor1.video.files import check_media_file
from easyvideor1.video.metadata import ImageMetadata, ImageParams
from easyvideor1.video.sampling import smart_resize

IMAGE_DECODER_NAME = f"pillow-{Image.__version__}"


def load_image(path: str | os.PathLike, params: ImageParams) -> tuple[np.ndarray, ImageMetadata]:
    """``(H, W, 3)`` uint8 RGB (read-only) and its metadata; sizes use the image budget.

    The size check reads only the header, so an oversized image is refused before its
    pixels are decoded.
    """
    path = os.fspath(path)
    check_media_file(path)
    try:
        with warnings.catch_warnings():
            # Between Pillow's warning and error thresholds our own limit decides.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(path) as image:
                width, height = image.size
                if width * height > params.max_source_pixels:
                    raise MediaTooLargeError(path, f"resolution {width}x{height} ({width * height} pixels) exceeds "
                                                   f"max_source_pixels={params.max_source_pixels}")
                rgb = ImageOps.exif_transpose(image).convert("RGB")
    except Image.DecompressionBombError as exc:
        raise MediaTooLargeError(path, f"refused by Pillow's decompression-bomb limit: {exc}") from None
    except UnidentifiedImageError:
        raise MediaDecodeError(path, "not a readable image (unknown or corrupt format)") from None
    except OSError as exc:
        raise MediaDecodeError(path, f"cannot decode image: {exc}") from None
    src_h, src_w = rgb.height, rgb.width
    try:
        new_h, new_w = smart_resize(src_h, src_w, params.factor, params.min_pixels, params.max_pixels)
    except ValueError as exc:
        raise MediaDecodeError(path, f"cannot resize: {exc}") from None
    if (new_h, new_w) != (src_h, src_w):
        rgb = rgb.resize((new_w, new_h), Image.Resampling.BICUBIC)
    array = np.asarray(rgb, dtype=np.uint8)
    if not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)
    array.setflags(write=False)
    return array, ImageMetadata(height=new_h, width=new_w, source_height=src_h, source_width=src_w,
                                factor=params.factor)

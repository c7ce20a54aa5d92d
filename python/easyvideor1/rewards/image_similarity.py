"""Image similarity for the rendered-code rewards: SSIM in numpy, grayscale.

SSIM (Wang et al., 2004) with an 11x11 Gaussian window (sigma 1.5) and constants
K1 = 0.01, K2 = 0.03, L = 255 (8-bit data range), ``C1 = (K1 L)^2``, ``C2 = (K2 L)^2``::

    mu_x = G * x,  sigma_x^2 = G * x^2 - mu_x^2,  sigma_xy = G * (x y) - mu_x mu_y
    SSIM(x, y) = mean over valid windows of
        ((2 mu_x mu_y + C1) (2 sigma_xy + C2)) / ((mu_x^2 + mu_y^2 + C1) (sigma_x^2 + sigma_y^2 + C2))

``G *`` is a separable Gaussian filter evaluated only where the window fits ("valid"),
which equals ``skimage.metrics.structural_similarity(gaussian_weights=True, sigma=1.5,
use_sample_covariance=False, data_range=255)`` (skimage filters with reflection and then
crops the same border). Images are converted to 8-bit luma (ITU-R 601, PIL's ``L``) after
compositing any alpha over white. The result lies in [-1, 1]; 1 means identical.
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

WINDOW = 11
SIGMA = 1.5
K1, K2 = 0.01, 0.03
DATA_RANGE = 255.0


def _gaussian_kernel(size: int = WINDOW, sigma: float = SIGMA) -> np.ndarray:
    offsets = np.arange(size, dtype=np.float64) - (size - 1) / 2.0
    kernel = np.exp(-(offsets**2) / (2.0 * sigma**2))
    return kernel / kernel.sum()


_KERNEL = _gaussian_kernel()


def _filter_valid(image: np.ndarray) -> np.ndarray:
    """Separable Gaussian filter, 'valid' region only: (H, W) -> (H - 10, W - 10)."""
    rows = np.lib.stride_tricks.sliding_window_view(image, WINDOW, axis=0) @ _KERNEL
    return np.lib.stride_tricks.sliding_window_view(rows, WINDOW, axis=1) @ _KERNEL


def to_gray(image: Image.Image | np.ndarray) -> np.ndarray:
    """An image (PIL or uint8 array: HxW, HxWx3, HxWx4) as float64 luma in [0, 255]."""
    if isinstance(image, np.ndarray):
        if image.ndim == 2:
            return image.astype(np.float64)
        image = Image.fromarray(np.ascontiguousarray(image.astype(np.uint8)))
    if image.mode in ("RGBA", "LA", "P", "PA"):
        rgba = image.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        image = Image.alpha_composite(white, rgba)
    return np.asarray(image.convert("L"), dtype=np.float64)


def png_to_gray(png: bytes) -> np.ndarray:
    """Decode PNG bytes into a float64 luma array (alpha composited over white)."""
    with Image.open(io.BytesIO(png)) as image:
        image.load()
        return to_gray(image)


def ssim(a: np.ndarray, b: np.ndarray) -> float:
    """SSIM of two same-shaped grayscale images in [0, 255] (see the module docstring)."""
    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 2:
        raise ValueError(f"ssim needs two 2-D images of one shape, got {x.shape} and {y.shape}")
    if min(x.shape) < WINDOW:
        raise ValueError(f"images must be at least {WINDOW}x{WINDOW}, got {x.shape}")
    c1 = (K1 * DATA_RANGE) ** 2
    c2 = (K2 * DATA_RANGE) ** 2
    mu_x, mu_y = _filter_valid(x), _filter_valid(y)
    var_x = _filter_valid(x * x) - mu_x * mu_x
    var_y = _filter_valid(y * y) - mu_y * mu_y
    cov = _filter_valid(x * y) - mu_x * mu_y
    numerator = (2.0 * mu_x * mu_y + c1) * (2.0 * cov + c2)
    denominator = (mu_x * mu_x + mu_y * mu_y + c1) * (var_x + var_y + c2)
    return float(np.mean(numerator / denominator))

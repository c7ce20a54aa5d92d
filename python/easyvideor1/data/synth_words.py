"""Texts for the OCR tasks: short upper-case words and numbers (readable at 64x64)."""

from __future__ import annotations

import numpy as np

WORDS = (
    "CAT", "DOG", "SUN", "MAP", "BOX", "KEY", "CUP", "HAT", "PEN", "BUS", "CAR", "EGG", "FOX", "ICE",
    "JAM", "LOG", "OWL", "PIG", "RAY", "TEA", "VAN", "WEB", "YAK", "ZIP", "BIRD", "CAKE", "DUCK",
    "FISH", "GOLD", "HILL", "KITE", "LAMP", "MOON", "NEST", "ROSE", "SHIP", "TREE", "WOLF",
)


def random_text(rng: np.random.Generator) -> str:
    """A word from :data:`WORDS` or a 2-3 digit number, with equal probability."""
    if rng.random() < 0.5:
        return WORDS[int(rng.integers(len(WORDS)))]
    return str(int(rng.integers(10, 1000)))

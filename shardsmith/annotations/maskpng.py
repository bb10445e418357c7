"""A class mask as PNG bytes (one byte a pixel, lossless): written, and renumbered when a
dataset's object ids differ from an image's own.  Only numpy and OpenCV: no geometry."""

from __future__ import annotations

import cv2
import numpy as np


def mask_png(mask: np.ndarray) -> bytes:
    """A class mask as a one-channel 8-bit PNG (lossless; fixed settings: same mask, same
    bytes)."""
    ok, data = cv2.imencode(".png", np.ascontiguousarray(mask, np.uint8),
                            [cv2.IMWRITE_PNG_COMPRESSION, 6])
    if not ok:  # pragma: no cover - OpenCV encodes any uint8 image
        raise ValueError("cannot encode the mask as PNG")
    return data.tobytes()


def remap_png(png: bytes, ids: list[int]) -> bytes:
    """A class mask PNG with value ``v`` replaced by ``ids[v - 1]`` (0 and 255, "ignore",
    stay)."""
    mask = cv2.imdecode(np.frombuffer(png, np.uint8), cv2.IMREAD_UNCHANGED)
    table = np.zeros(256, np.uint8)
    table[1 : len(ids) + 1] = ids
    table[255] = 255
    return mask_png(table[mask])

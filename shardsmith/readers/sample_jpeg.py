"""The one checked decode of a shard's JPEG: its header is read and bounded before a pixel is.

A JPEG's frame header (SOF) states its size, and a decoder allocates that size before it reads
any entropy data: 16x16 pixels of data whose header says 65500x65500 make simplejpeg, NumPy or
TensorFlow allocate 12 GB.  A shard is untrusted input (a dataset from another team's share,
re-signed so that it passes the digests), so every decode of a sample's JPEG in the readers,
``bench-read`` and ``inspect --quality`` goes through ``decode_sample``: the header is parsed
first (``simplejpeg.decode_jpeg_header``, no allocation), and a size other than the one the
sample index records, or larger than the largest sample of the selection, or than
``MAX_SAMPLE_PIXELS`` in any case, is refused as a ``SampleJpegError``, which each caller turns
into its own error (a corrupt sample named by shard and key, one line of a command).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import simplejpeg

# Far above any sample shardsmith packs (an 8192x8192 tile is 67 MP) and low enough that one
# decode cannot exhaust a training machine (200 MB of RGB).
MAX_SAMPLE_PIXELS = 1 << 26


class SampleJpegError(ValueError):
    """A sample's JPEG that is refused or does not decode; the message says why, in words."""


def sample_header(jpeg: Any) -> tuple[int, int, str]:
    """(height, width, colorspace) from the JPEG's frame header; ``SampleJpegError`` when it
    has none."""
    try:
        height, width, colorspace, _ = simplejpeg.decode_jpeg_header(jpeg)
    except ValueError as exc:
        raise SampleJpegError(f"does not decode ({exc})") from None
    return height, width, colorspace


def check_header(jpeg: Any, expect: tuple[int, int] | None = None,
                 bound: tuple[int, int] | None = None) -> tuple[int, int, str]:
    """The header of ``jpeg`` once checked: exactly ``expect`` (height, width) when given, at
    most ``bound`` (height, width) when given, and at most ``MAX_SAMPLE_PIXELS`` always."""
    height, width, colorspace = sample_header(jpeg)
    if expect is not None and (height, width) != tuple(expect):
        raise SampleJpegError(f"its JPEG header says {width}x{height}, the dataset records "
                              f"{expect[1]}x{expect[0]} (not decoded)")
    if bound is not None and (height > bound[0] or width > bound[1]):
        raise SampleJpegError(f"its JPEG header says {width}x{height}, larger than any sample "
                              f"the dataset records ({bound[1]}x{bound[0]} at most; not "
                              "decoded)")
    if height * width > MAX_SAMPLE_PIXELS or not height or not width:
        raise SampleJpegError(f"its JPEG header says {width}x{height}, not a size a sample can "
                              "have (not decoded)")
    return height, width, colorspace


def decode_sample(jpeg: Any, colorspace: str = "RGB", *, expect: tuple[int, int] | None = None,
                  bound: tuple[int, int] | None = None,
                  buffer: np.ndarray | None = None) -> np.ndarray:
    """The pixels (H x W x C uint8) of a sample's JPEG after ``check_header``; ``colorspace``
    "RGB", "GRAY" or "KEEP" (gray stays gray, anything else RGB); ``buffer``: decode into it
    (it must hold the image).  Raises ``SampleJpegError``."""
    height, width, stored = check_header(jpeg, expect, bound)
    if colorspace == "KEEP":
        colorspace = "GRAY" if stored.upper() == "GRAY" else "RGB"
    try:
        pixels = simplejpeg.decode_jpeg(jpeg, colorspace=colorspace, buffer=buffer)
    except ValueError as exc:
        raise SampleJpegError(f"does not decode ({exc})") from None
    if pixels.shape[:2] != (height, width):  # the header was checked; this is a broken decoder
        raise SampleJpegError(f"decoded to {pixels.shape[1]}x{pixels.shape[0]}, its header "
                              f"says {width}x{height}")
    return pixels

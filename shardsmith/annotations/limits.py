"""How much annotation one image may carry.

Annotation files are untrusted input, so every count a file declares or implies is bounded
before it costs memory or time: a 3 KB mask of isolated pixels would otherwise be 250,000
objects, and a COCO RLE may declare a million by a million pixels.  The bounds are far above
what a real inspection dataset holds (a few hundred objects an image at most) and are
documented in the README; going past one rejects that image with ``bad_annotation``.
"""

from __future__ import annotations

from ..door import MIB

MAX_OBJECTS = 10_000  # objects an image: file lines or shapes, COCO entries, mask regions
MAX_POINTS = 1_000_000  # polygon vertices an image, over all its objects
COCO_CAP = 64 * MIB  # a COCO file, read whole in the driver (about 8x that once parsed)
MAX_OBJECT_CLASSES = 254  # a class mask has one byte a pixel; 255 is left for "ignore"


def too_many_objects(count: int) -> str:
    """The message for an image with ``count`` objects (more than ``MAX_OBJECTS``)."""
    return f"{count:,} objects: more than the {MAX_OBJECTS:,} an image may have"

"""Defect annotations: read from the usual formats, carried through every pixel operation.

The data flow mirrors the images':

* ``sources``  (driver)  which files hold annotations, never scanned as images; the labels file
  and the COCO file are read once into compact per-image records; a digest per image says
  whether its annotations changed since the last version;
* ``parse``    (worker)  YOLO, Pascal VOC, LabelMe, COCO records and PNG masks → ``Shape``s in
  the pixel frame of the original (untrusted input: a malformed file is a ``bad_annotation``
  reject naming the file and line, never a crash);
* ``geometry`` (worker)  the exact map from the original's pixels to a sample's pixels (EXIF
  orientation, reduced DCT decode, crop, resize, letterbox, tile), applied to boxes and
  polygons, with clipping;
* ``masks``    (worker)  masks reduced so that a defect never vanishes: an output pixel is
  marked when any part of its area is (max over the area, per class); instances as RLE.

Coordinates are continuous pixel coordinates: pixel ``i`` covers ``[i, i + 1)``, so a box
``(x0, y0, x1, y1)`` of whole pixels is ``(left, top, right + 1, bottom + 1)``.
"""

from .model import AnnotationError, ImageAnnotations, Objects, Shape

__all__ = ["AnnotationError", "ImageAnnotations", "Objects", "Shape"]

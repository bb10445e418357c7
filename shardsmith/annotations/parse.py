"""Annotation files → ``Shape``s in the original's pixels.  Runs in the worker processes.

Every parser takes the file's bytes and the name to report it by, and raises
``BadImage("bad_annotation", "FILE line N: what is wrong")`` for anything malformed: an
annotation file is untrusted input.  XML is parsed without DTDs, entities or external
references (``defusedxml``); LabelMe's embedded ``imageData`` is never decoded and its
``imagePath`` must stay inside the source tree.  What a file may hold is bounded
(``limits``: objects and polygon points an image) before it is built: a YOLO file is read a
line at a time, XML elements and JSON values are counted before they pile up.

Conventions converted here into continuous pixel coordinates (pixel ``i`` covers
``[i, i + 1)``): YOLO's centre/size normalised by the image size; Pascal VOC's 1-based,
inclusive pixel indices (``xmin = 1`` is the first column: ``x0 = xmin - 1``, ``x1 = xmax``);
COCO's ``[x, y, width, height]``; LabelMe's points as they are.
"""

from __future__ import annotations

import io
import json
import math
import posixpath
import re
from collections.abc import Callable
from typing import Any
from xml.etree.ElementTree import Element, ParseError, TreeBuilder

import numpy as np

from ..decoders import foreign_detail
from ..errors import BadImage
from ..text import shown
from .limits import MAX_OBJECTS, MAX_POINTS, too_many_objects
from .model import Shape

Frame = tuple[int, int]  # (width, height) of the pixels the annotations describe
CIRCLE_VERTICES = 32
TOLERANCE = 1e-6  # of a normalised coordinate: exporters round 1.0 to 1.000001
CLASS_ID = re.compile(r"[0-9]{1,9}")  # ASCII digits: str.isdigit takes "²" and "٣"
FILLED_LINE = re.compile(r"\S[^\r\n]*")  # a line's text from its first non-blank on
# A VOC object is about ten elements; a LabelMe shape a handful of JSON values plus three a
# point.  Counted before the tree is built, so a file of a million empty elements is refused
# before it is a million objects in memory.
MAX_XML_ELEMENTS = 16 * MAX_OBJECTS + 1024
MAX_JSON_VALUES = 3 * MAX_POINTS + 32 * MAX_OBJECTS + 1024


def bad(where: str, problem: str) -> BadImage:
    return BadImage("bad_annotation", f"{where}: {problem}")


def _number(value: Any, where: str, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise bad(where, f"{what} is not a number: {shown(value)}")
    try:
        number = float(value)
    except ValueError:
        raise bad(where, f"{what} is not a number: {shown(value)}") from None
    except OverflowError:  # an int of 400 digits
        raise bad(where, f"{what} is out of range: {shown(value)}") from None
    if not math.isfinite(number):
        raise bad(where, f"{what} is not a finite number: {shown(value)}")
    return number


def _bounds(points: list[float]) -> tuple[float, float, float, float]:
    xs, ys = points[0::2], points[1::2]
    return min(xs), min(ys), max(xs), max(ys)


def _check_box(box: tuple[float, float, float, float], frame: Frame, where: str) -> None:
    x0, y0, x1, y1 = box
    if not (x0 < x1 and y0 < y1):
        raise bad(where, f"an empty box ({x0:g}, {y0:g}, {x1:g}, {y1:g})")
    width, height = frame
    if x1 <= 0 or y1 <= 0 or x0 >= width or y0 >= height:
        raise bad(where, f"the box ({x0:g}, {y0:g}, {x1:g}, {y1:g}) lies outside the "
                  f"{width}x{height} image")


def _check_frame(recorded: tuple[Any, Any], frame: Frame, where: str) -> None:
    """A size the annotation file records must be the image's (else its coordinates are for
    another image, or for the other orientation)."""
    if recorded == (None, None):
        return
    width = _number(recorded[0], where, "the image width")
    height = _number(recorded[1], where, "the image height")
    if (width, height) != frame:
        raise bad(where, f"made for a {width:g}x{height:g} image, this one is "
                  f"{frame[0]}x{frame[1]} (source.annotations.coordinates: stored or upright?)")


def parse_yolo(data: bytes, where: str, frame: Frame, names: tuple[str, ...]) -> list[Shape]:
    """YOLO: a line per object, ``CLASS CX CY W H`` (a box) or ``CLASS X1 Y1 X2 Y2 ...`` (a
    polygon, the segmentation format), normalised to 0..1; class ids index ``names``."""
    width, height = frame
    shapes: list[Shape] = []
    text, vertices = _text(data, where), 0
    number, counted_to = 1, 0
    # Blank lines are skipped by the regular expression, not one by one in Python: a file of
    # 64 MiB of newlines costs one scan, and never a list of its lines.
    for match in FILLED_LINE.finditer(text):
        number += text.count("\n", counted_to, match.start())
        counted_to = match.start()
        here = f"{where} line {number}"
        if len(shapes) >= MAX_OBJECTS:
            raise bad(here, too_many_objects(len(shapes) + 1))
        most = 2 * (MAX_POINTS - vertices) + 1  # fields: the class and the coordinates left
        fields = match.group().split(maxsplit=most)  # never more strings than that
        if len(fields) > most:
            raise bad(here, f"more than the {MAX_POINTS:,} polygon points an image may have")
        if len(fields) != 5 and (len(fields) < 7 or len(fields) % 2 == 0):
            raise bad(here, f"expected CLASS CX CY W H or CLASS X1 Y1 X2 Y2 X3 Y3 ..., got "
                      f"{len(fields)} fields")
        if not CLASS_ID.fullmatch(fields[0]):
            raise bad(here, f"class {shown(fields[0], 40)} is not a class id")
        class_id = int(fields[0])
        if class_id >= len(names):
            raise bad(here, f"class {class_id} is not in source.annotations.classes "
                      f"({len(names)} names)")
        if len(fields) > 5:
            vertices += (len(fields) - 1) // 2
        values = [_number(field, here, "a coordinate") for field in fields[1:]]
        if any(value < -TOLERANCE or value > 1 + TOLERANCE for value in values):
            raise bad(here, "coordinates must be normalised to 0..1")
        if len(fields) == 5:
            cx, cy, w, h = values
            box = ((cx - w / 2) * width, (cy - h / 2) * height,
                   (cx + w / 2) * width, (cy + h / 2) * height)
            _check_box(box, frame, here)
            shapes.append(Shape(names[class_id], box))
        else:
            points = [value * (width if at % 2 == 0 else height)
                      for at, value in enumerate(values)]
            shapes.append(_polygon_shape(names[class_id], [points], frame, here))
    return shapes


def _polygon_shape(name: str, rings: list[list[float]], frame: Frame, where: str) -> Shape:
    box = (min(_bounds(ring)[0] for ring in rings), min(_bounds(ring)[1] for ring in rings),
           max(_bounds(ring)[2] for ring in rings), max(_bounds(ring)[3] for ring in rings))
    _check_box(box, frame, where)
    return Shape(name, box, tuple(tuple(ring) for ring in rings))


def _text(data: bytes, where: str) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise bad(where, f"not UTF-8 text (byte {exc.start})") from None


class _TooMany(Exception):
    """More XML elements than an image's objects can need (raised from inside the parser)."""

    def __init__(self, line: int):
        super().__init__(line)
        self.line = line


class _LineBuilder(TreeBuilder):
    """A tree builder that remembers the line each element starts on (for messages)."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: dict[int, int] = {}
        self.parser: Any = None

    def start(self, tag: str, attrs: dict[str, str]) -> Element:
        if len(self.lines) >= MAX_XML_ELEMENTS:
            raise _TooMany(self.parser.CurrentLineNumber if self.parser else 0)
        element = super().start(tag, attrs)
        self.lines[id(element)] = self.parser.CurrentLineNumber if self.parser else 0
        return element


def parse_voc(data: bytes, where: str, frame: Frame) -> list[Shape]:
    """Pascal VOC XML: ``<object><name/><bndbox><xmin/>...</bndbox></object>``, 1-based."""
    from defusedxml import DefusedXmlException
    from defusedxml.ElementTree import DefusedXMLParser

    builder = _LineBuilder()
    parser = DefusedXMLParser(target=builder, forbid_dtd=True)
    builder.parser = parser.parser
    try:
        parser.feed(data)
        root = parser.close()
    except ParseError as exc:
        raise bad(where, f"not well-formed XML ({exc})") from None
    except LookupError as exc:  # <?xml encoding="bogus"?>: expat asks the codecs for it
        raise bad(where, f"not well-formed XML (an unknown encoding: {exc})") from None
    except _TooMany as exc:
        raise bad(f"{where} line {exc.line}", f"more than {MAX_XML_ELEMENTS:,} XML elements "
                  f"(an image may have {MAX_OBJECTS:,} objects)") from None
    except DefusedXmlException as exc:
        raise bad(where, f"refused: {type(exc).__name__} (DTDs and entities are not "
                  "expanded)") from None

    def line(element: Element) -> str:
        return f"{where} line {builder.lines.get(id(element), 0)}"

    size = root.find("size")
    if size is not None:
        _check_frame((size.findtext("width"), size.findtext("height")), frame, line(size))
    shapes: list[Shape] = []
    for element in root.iter("object"):
        if len(shapes) >= MAX_OBJECTS:
            raise bad(line(element), too_many_objects(len(root.findall(".//object"))))
        name = (element.findtext("name") or "").strip()
        if not name:
            raise bad(line(element), "an object without a <name>")
        bndbox = element.find("bndbox")
        if bndbox is None:
            raise bad(line(element), f"object {shown(name)} has no <bndbox>")
        corners = [_number(bndbox.findtext(tag), line(bndbox), tag)
                   for tag in ("xmin", "ymin", "xmax", "ymax")]
        box = (corners[0] - 1, corners[1] - 1, corners[2], corners[3])
        _check_box(box, frame, line(bndbox))
        shapes.append(Shape(name, box))
    return shapes


def parse_labelme(data: bytes, where: str, frame: Frame, depth: int = 0) -> list[Shape]:
    """LabelMe JSON: ``shapes`` of polygons, rectangles, circles (as polygons), and lines or
    points (boxes around them, without a mask).  ``imageData`` is ignored; ``imagePath`` may
    go up ``depth`` folders (the file's own depth in its tree), not out of the tree."""
    values = data.count(b"[") + data.count(b"{") + data.count(b",")
    if values > MAX_JSON_VALUES:
        raise bad(where, f"about {values:,} JSON values: more than {MAX_POINTS:,} polygon "
                  f"points and {MAX_OBJECTS:,} objects can need")
    document = _json(data, where)
    if not isinstance(document, dict) or not isinstance(document.get("shapes", []), list):
        raise bad(where, "not a LabelMe file (expected an object with a list of shapes)")
    image_path = document.get("imagePath")
    if image_path is not None and not _stays_inside(image_path, depth):
        raise bad(where, f"imagePath {shown(image_path)} leads out of the source tree "
                  "(refused)")
    _check_frame((document.get("imageWidth"), document.get("imageHeight")), frame, where)
    if len(document.get("shapes", [])) > MAX_OBJECTS:
        raise bad(where, too_many_objects(len(document["shapes"])))
    shapes = []
    for number, item in enumerate(document.get("shapes", [])):
        here = f"{where} shape {number}"
        if not isinstance(item, dict):
            raise bad(here, "not an object")
        name, kind = item.get("label"), item.get("shape_type") or "polygon"
        if not isinstance(name, str) or not name:
            raise bad(here, "no label")
        points = item.get("points")
        if not isinstance(points, list) or not all(
                isinstance(point, list) and len(point) == 2 for point in points):
            raise bad(here, "points must be a list of [x, y]")
        flat = [_number(value, here, "a coordinate") for point in points for value in point]
        shapes.append(_labelme_shape(name, kind, flat, frame, here))
    return shapes


def _labelme_shape(name: str, kind: str, flat: list[float], frame: Frame,
                   where: str) -> Shape:
    count = len(flat) // 2
    if kind == "polygon":
        if count < 3:
            raise bad(where, f"a polygon of {count} points")
        return _polygon_shape(name, [flat], frame, where)
    if kind == "rectangle":
        if count != 2:
            raise bad(where, f"a rectangle of {count} points")
        x0, y0, x1, y1 = _bounds(flat)
        _check_box((x0, y0, x1, y1), frame, where)
        return Shape(name, (x0, y0, x1, y1))
    if kind == "circle":
        if count != 2:
            raise bad(where, f"a circle of {count} points")
        cx, cy, px, py = flat
        radius = math.hypot(px - cx, py - cy)
        ring = [value for step in range(CIRCLE_VERTICES) for value in (
            cx + radius * math.cos(2 * math.pi * step / CIRCLE_VERTICES),
            cy + radius * math.sin(2 * math.pi * step / CIRCLE_VERTICES))]
        return _polygon_shape(name, [ring], frame, where)
    if kind in ("line", "linestrip", "point", "points"):
        if count < 1:
            raise bad(where, f"a {kind} without points")
        x0, y0, x1, y1 = _bounds(flat)  # a box around the pixels the points fall in
        box = (math.floor(x0), math.floor(y0), math.floor(x1) + 1, math.floor(y1) + 1)
        _check_box(box, frame, where)
        return Shape(name, box)
    raise bad(where, f"shape_type {shown(kind)} is not supported (polygon, rectangle, circle, "
              "line, linestrip, point)")


def _json(data: bytes, where: str) -> Any:
    try:
        return json.loads(_text(data, where))
    except ValueError as exc:
        raise bad(where, f"not valid JSON ({exc})") from None
    except RecursionError:
        raise bad(where, "not valid JSON (nested too deeply)") from None


def _stays_inside(path: Any, depth: int) -> bool:
    """A relative path that, from a folder ``depth`` folders below the top of its tree, stays
    inside that tree (``../x.jpg`` from one folder down does): no absolute path, no drive, no
    NUL, no more ``..`` than ``depth`` once resolved; backslashes are separators."""
    if not isinstance(path, str) or not path or "\0" in path:
        return False
    path = path.replace("\\", "/")
    if path.startswith("/") or (len(path) > 1 and path[1] == ":"):
        return False
    parts = posixpath.normpath(path).split("/")
    return parts.count("..") <= depth  # normpath leaves ".." only at the front


def shapes_from_record(record: dict[str, Any], where: str, frame: Frame) -> list[Shape]:
    """The objects of a per-image record the driver made from a COCO file (already checked
    there: numbers are numbers); raises bad_annotation for a record marked bad."""
    if "error" in record:
        raise BadImage("bad_annotation", record["error"])
    if "size" in record:
        _check_frame(tuple(record["size"]), frame, where)
    shapes = []
    for item in record.get("objects", []):
        here = f"{where} annotation {item.get('id', '?')}"
        box = tuple(item["box"])
        _check_box(box, frame, here)
        if "rle" in item and list(item["rle"]["size"]) != [frame[1], frame[0]]:
            raise bad(here, f"an RLE of size {item['rle']['size']} on a {frame[0]}x{frame[1]} "
                      "image")
        polygons = tuple(tuple(ring) for ring in item.get("polygons", ()))
        shapes.append(Shape(item["name"], box, polygons, item.get("rle")))
    return shapes


def read_mask(data: bytes, where: str, frame: Frame, values: str, names: tuple[str, ...],
              image_class: str, mask_class: str = "") -> tuple[np.ndarray, tuple[str, ...]]:
    """A PNG mask → (class mask in the original's frame, its class names).

    ``binary``: every non-zero pixel is ``mask_class`` when set, else the image's class
    (``defect`` without one);
    ``index``: pixel value ``k`` is ``names[k - 1]``.
    """
    from PIL import Image, UnidentifiedImageError

    try:
        image = Image.open(io.BytesIO(data))
        if image.size != frame:
            raise bad(where, f"the mask is {image.size[0]}x{image.size[1]}, the image "
                      f"{frame[0]}x{frame[1]}")
        if values == "index" and image.mode not in ("L", "P", "I;16", "I"):
            raise bad(where, f"an index mask needs one channel, this one is {image.mode}")
        pixels = np.asarray(image if image.mode in ("L", "P", "I;16", "I", "1")
                            else image.convert("RGB"))
    except BadImage:
        raise
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
        raise bad(where, f"not a readable PNG mask ({exc})") from None
    except MemoryError:
        raise bad(where, "not enough memory to decode the PNG mask") from None
    except Exception as exc:  # Pillow raises any type on hostile bytes: decoders.foreign_errors
        raise bad(where, f"not a readable PNG mask ({foreign_detail(exc)})") from None
    if pixels.ndim == 3:
        pixels = pixels.max(axis=2)
    if values == "binary":
        return (pixels > 0).astype(np.uint8), (mask_class or image_class or "defect",)
    top = int(pixels.max()) if pixels.size else 0
    if top > len(names):
        raise bad(where, f"pixel value {top} is not a class of source.annotations.classes "
                  f"({len(names)} names)")
    return pixels.astype(np.uint8), names


# An image's own annotation file, read by the parser of its kind (``source.annotations.files``;
# config.ANNOTATION_FILES names each kind's extension): the file's bytes, its path, the frame of
# the image, the class names and how many folders up the file may name an image.
FileParser = Callable[[bytes, str, Frame, tuple[str, ...], int], list[Shape]]
FILE_PARSERS: dict[str, FileParser] = {
    "yolo": lambda data, where, frame, names, depth: parse_yolo(data, where, frame, names),
    "voc": lambda data, where, frame, names, depth: parse_voc(data, where, frame),
    "labelme": lambda data, where, frame, names, depth: parse_labelme(data, where, frame, depth),
}

"""What ``--size`` and ``--quality`` cost: packed samples against a slow, exact reference.

For a few seeded samples the original is read again, under the source the user names
(``--source``; never the one the untrusted manifest records: ``named_source``), and decoded
at full resolution.  An exact reference then takes it through the same geometry as the pack
(``imaging.plan_geometry``) in 32-bit float all the way: EXIF orientation by Pillow's
transposes, 16-bit data scaled in float, alpha composited at full resolution, area averaging
by Pillow's BOX filter on float planes (bicubic where the pack upscales).  Two figures per
sample, both against the sample as packed (decoded from its shard):

* **fidelity**: PSNR and SSIM at the packed size against the reference, i.e. the cost of the
  JPEG quality and of the fast path (reduced DCT decode, integer area steps, 8-bit rounding);
* **detail**: PSNR at the original resolution of the sample scaled back up (bicubic) against
  the original, i.e. what the chosen size throws away, fine scratches included.

SSIM is the usual one (Wang et al. 2004: Gaussian window sigma 1.5, K1 0.01, K2 0.03, on
0-255 values, averaged over channels), computed with OpenCV, which the pack already needs.
At its peak a sample costs the decoded original plus three float planes of it (12 bytes a
pixel: about 1 GB for an 8000x6000 original), so originals over ``MAX_REFERENCE_PIXELS``
are left out and named.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np
from PIL import Image

from ..config import ImageConfig
from ..dataset.manifest import Manifest, SampleRecord
from ..dataset.records import digest_as
from ..decoders import decode_pixels, open_header, orientation
from ..errors import BadImage, ConfigError, SourceUnavailableError
from ..packing.imaging import TRANSPOSING_ORIENTATIONS, Geometry, plan_geometry
from ..progress import Progress
from ..readers.sample_jpeg import SampleJpegError, decode_sample
from ..text import plural, printable
from .census import packed_config
from .named_source import Originals, not_named
from .picks import read_packed

MAX_REFERENCE_PIXELS = 120_000_000
TRANSPOSE = {2: Image.Transpose.FLIP_LEFT_RIGHT, 3: Image.Transpose.ROTATE_180,
             4: Image.Transpose.FLIP_TOP_BOTTOM, 5: Image.Transpose.TRANSPOSE,
             6: Image.Transpose.ROTATE_270, 7: Image.Transpose.TRANSVERSE,
             8: Image.Transpose.ROTATE_90}
LUMA = (0.299, 0.587, 0.114)
ALL = -2  # the label of the all-classes row


@dataclass(frozen=True)
class SampleQuality:
    """The figures of one sample; PSNR in dB (``math.inf`` for identical pixels)."""

    key: str
    path: str
    label: int
    split: str
    psnr: float
    ssim: float
    detail_psnr: float
    width: int
    height: int
    original_width: int
    original_height: int


@dataclass(frozen=True)
class ClassQuality:
    """Mean and worst figures of one class."""

    label: int
    samples: int
    psnr_mean: float
    psnr_min: float
    ssim_mean: float
    ssim_min: float
    detail_psnr_mean: float


@dataclass(frozen=True)
class QualityFigure:
    """Per-sample figures, the samples left out with why, and the settings they measure."""

    size: int
    resize: str
    jpeg_quality: int
    samples: tuple[SampleQuality, ...]
    skipped: tuple[tuple[str, str], ...]
    seconds: float

    def per_class(self) -> list[ClassQuality]:
        labels = sorted({sample.label for sample in self.samples})
        return [_summarise(label, [s for s in self.samples if s.label == label])
                for label in labels]

    def overall(self) -> ClassQuality | None:
        return _summarise(ALL, list(self.samples)) if self.samples else None


def measure_quality(directory: Path, manifest: Manifest, chosen: list[SampleRecord],
                    quiet: bool = True, originals: Originals | None = None) -> QualityFigure:
    """Figures for the ``chosen`` samples of ``directory`` (seeded, classes in turn: the
    census's picks), their originals read under the source the user named (``named_source``).

    Raises ConfigError when no source is named, SourceUnavailableError when the named one is
    not reachable; a sample whose original is gone, changed since the pack or too large is
    skipped and named, not measured.
    """
    started = time.monotonic()
    image_config = packed_config(manifest).image
    if image_config.tiles.enabled:
        raise ConfigError("--quality compares resized samples with their originals; this "
                          "dataset is cut into tiles (image.tiles), whose pixels are the "
                          "original's own")
    if originals is None:
        raise ConfigError(f"--quality: {not_named(manifest.source).why_not}")
    if originals.root is None:
        raise SourceUnavailableError(originals.why_not)
    packed = read_packed(directory, manifest, chosen)
    measured: list[SampleQuality] = []
    skipped: list[tuple[str, str]] = []
    progress = Progress(len(chosen), 0, "img", "quality", quiet)
    try:
        for record in chosen:
            jpeg = packed.get(record.key)
            if jpeg is None:
                skipped.append((record.path, "not found in its shard (shardsmith verify)"))
            else:
                result = _measure_record(originals, record, jpeg, image_config)
                if isinstance(result, str):
                    skipped.append((record.path, result))
                else:
                    measured.append(result)
            progress.update(1)
    finally:
        progress.close()
    return QualityFigure(image_config.size, image_config.resize, image_config.quality,
                         tuple(measured), tuple(skipped), time.monotonic() - started)


def _measure_record(originals: Originals, record: SampleRecord, jpeg: bytes,
                    config: ImageConfig) -> SampleQuality | str:
    """The figures of one sample, or why it cannot be measured."""
    try:
        data = originals.read(record.path, max(0, record.source_size))
    except FileNotFoundError:
        return "the original is gone"
    except OSError as exc:
        return f"cannot read the original: {exc.strerror or exc}"
    except BadImage as exc:
        return "the original changed since the pack" if exc.reason == "too_large" \
            else f"the original {exc.detail}"
    unchanged = (digest_as(record.source_digest, data) == record.source_digest
                 if record.source_digest else len(data) == record.source_size)
    if not unchanged:
        return "the original changed since the pack"
    try:
        figures = compare(data, jpeg, config)
    except BadImage as exc:
        return exc.detail
    psnr, ssim, detail, (width, height), (original_width, original_height) = figures
    return SampleQuality(record.key, record.path, record.label, record.split, psnr, ssim,
                         detail, width, height, original_width, original_height)


def compare(original: bytes, jpeg: bytes, config: ImageConfig):
    """(PSNR, SSIM, detail PSNR, packed (w, h), upright original (w, h)) of a packed sample
    against the exact reference of its original; raises BadImage."""
    planes = _Planes(original, config)
    width, height = planes.width, planes.height
    geometry = plan_geometry(width, height, config)
    packed = _packed_region(jpeg, geometry)
    if packed.shape[2] != planes.count:
        raise BadImage("unsupported", f"the sample has {packed.shape[2]} channels, the "
                       f"reference {planes.count}")
    squared_error = detail_error = ssim_sum = 0.0
    x, y, crop_w, crop_h = geometry.crop
    target_w, target_h = geometry.size
    resample = (Image.Resampling.BOX if target_w <= crop_w and target_h <= crop_h
                else Image.Resampling.BICUBIC)
    for channel in range(planes.count):
        upright = Image.fromarray(planes.plane(channel), "F")
        if planes.rotation in TRANSPOSE:
            upright = upright.transpose(TRANSPOSE[planes.rotation])
        if (crop_w, crop_h) != (width, height):
            upright = upright.crop((x, y, x + crop_w, y + crop_h))
        reference = np.asarray(upright.resize(geometry.size, resample))
        sample = np.ascontiguousarray(packed[:, :, channel], dtype=np.float32)
        squared_error += _mean_squared(sample, reference)
        ssim_sum += ssim(sample, reference)
        back = Image.fromarray(sample, "F").resize((crop_w, crop_h), Image.Resampling.BICUBIC)
        detail_error += _mean_squared_images(back, upright)
        del upright, back
    return (_psnr(squared_error / planes.count), ssim_sum / planes.count,
            _psnr(detail_error / planes.count), geometry.size, (width, height))


class _Planes:
    """An original decoded at full resolution, handing out one float32 plane (0-255) at a
    time, in stored orientation and in the output's colours (composited, gray or RGB)."""

    def __init__(self, data: bytes, config: ImageConfig):
        with open_header(data) as image:
            stored_w, stored_h = image.size
            if stored_w * stored_h > min(config.max_pixels, MAX_REFERENCE_PIXELS):
                raise BadImage("too_large", f"{stored_w}x{stored_h} is too large for the "
                               f"full-resolution reference (over "
                               f"{MAX_REFERENCE_PIXELS / 1e6:.0f} MP)")
            self.rotation = orientation(image)
            try:
                pixels, bgr = decode_pixels(data, image, stored_w, stored_h)
            except (OSError, ValueError, SyntaxError, EOFError, cv2.error) as exc:
                raise BadImage("corrupt", f"cannot decode the original: {exc}") from None
        transposed = self.rotation in TRANSPOSING_ORIENTATIONS
        self.width, self.height = (stored_h, stored_w) if transposed else (stored_w, stored_h)
        self.scale = np.float32(255.0 / 65535.0 if pixels.dtype == np.uint16 else 1.0)
        if pixels.ndim == 2:
            self.colour, alpha = [pixels], None
        else:
            order = (2, 1, 0) if bgr else (0, 1, 2)
            self.colour = ([pixels[:, :, i] for i in order] if pixels.shape[2] >= 3
                           else [pixels[:, :, 0]])
            alpha = pixels[:, :, -1] if pixels.shape[2] in (2, 4) else None
        self.opacity = None if alpha is None else alpha * (self.scale / np.float32(255.0))
        background = config.background
        if len(self.colour) == 1:
            background = (sum(w * c for w, c in zip(LUMA, config.background, strict=True)),)
        self.background = background
        self.gray = config.color == "gray" and len(self.colour) == 3
        self.count = 1 if self.gray or (config.color != "rgb" and len(self.colour) == 1) else 3

    def plane(self, channel: int) -> np.ndarray:
        if self.gray:
            gray = self._colour(0) * np.float32(LUMA[0])
            gray += self._colour(1) * np.float32(LUMA[1])
            gray += self._colour(2) * np.float32(LUMA[2])
            return gray
        return self._colour(channel if len(self.colour) == 3 else 0)

    def _colour(self, index: int) -> np.ndarray:
        values = self.colour[index].astype(np.float32)
        values *= self.scale
        if self.opacity is not None:  # colour x opacity + background x (1 - opacity)
            values -= np.float32(self.background[index])
            values *= self.opacity
            values += np.float32(self.background[index])
        return values


def _packed_region(jpeg: bytes, geometry: Geometry) -> np.ndarray:
    """The packed sample as H x W x C uint8, without the letterbox bars of ``pad``; its JPEG
    header must say the size the settings give (checked before decoding: a header claiming
    65500x65500 is refused, not allocated)."""
    target_w, target_h = geometry.size
    canvas_w, canvas_h = geometry.canvas if geometry.canvas is not None else geometry.size
    try:
        pixels = decode_sample(jpeg, "KEEP", expect=(canvas_h, canvas_w))
    except SampleJpegError as exc:
        raise BadImage("corrupt", f"the packed sample: {exc}") from None
    if geometry.canvas is not None:
        top, left = (canvas_h - target_h) // 2, (canvas_w - target_w) // 2
        pixels = pixels[top : top + target_h, left : left + target_w]
    return pixels


def ssim(first: np.ndarray, second: np.ndarray) -> float:
    """Mean structural similarity of two float planes of 0-255 values (1.0: identical)."""
    c1, c2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2
    a, b = first.astype(np.float64), second.astype(np.float64)

    def blur(values: np.ndarray) -> np.ndarray:
        return cv2.GaussianBlur(values, (11, 11), 1.5, borderType=cv2.BORDER_REFLECT)

    mean_a, mean_b = blur(a), blur(b)
    var_a = blur(a * a) - mean_a**2
    var_b = blur(b * b) - mean_b**2
    covariance = blur(a * b) - mean_a * mean_b
    index = ((2 * mean_a * mean_b + c1) * (2 * covariance + c2)) / (
        (mean_a**2 + mean_b**2 + c1) * (var_a + var_b + c2))
    inner = index[5:-5, 5:-5]  # as scikit-image: the border, where the window is cut, is left out
    return float((inner if inner.size else index).mean())


def _mean_squared(first: np.ndarray, second: np.ndarray) -> float:
    difference = first - second
    return float(np.vdot(difference, difference)) / difference.size


def _mean_squared_images(first: Image.Image, second: Image.Image, rows: int = 256) -> float:
    """Mean squared difference of two float images, a band of rows at a time: a
    full-resolution plane is never copied whole."""
    width, height = first.size
    total = 0.0
    for top in range(0, height, rows):
        box = (0, top, width, min(height, top + rows))
        difference = np.asarray(first.crop(box)) - np.asarray(second.crop(box))
        total += float(np.vdot(difference, difference))
    return total / (width * height)


def _psnr(mean_squared: float) -> float:
    return math.inf if mean_squared <= 0 else 10 * math.log10(255.0**2 / mean_squared)


def _summarise(label: int, samples: list[SampleQuality]) -> ClassQuality:
    return ClassQuality(
        label=label,
        samples=len(samples),
        psnr_mean=float(np.mean([s.psnr for s in samples])),
        psnr_min=min(s.psnr for s in samples),
        ssim_mean=float(np.mean([s.ssim for s in samples])),
        ssim_min=min(s.ssim for s in samples),
        detail_psnr_mean=float(np.mean([s.detail_psnr for s in samples])),
    )


def quality_lines(figure: QualityFigure, class_name: Callable[[int], str]) -> list[str]:
    """Per-class PSNR / SSIM of the packed samples against the exact reference, as text."""
    lines = [f"quality  {plural(len(figure.samples), 'sample')} at {figure.size} px "
             f"{figure.resize}, JPEG quality {figure.jpeg_quality}, against an exact "
             f"reference ({figure.seconds:.1f}s)",
             f"  {'class':<16}{'samples':>8}{'PSNR dB':>10}{'worst':>8}{'SSIM':>8}"
             f"{'worst':>8}{'detail dB':>11}"]
    rows = figure.per_class()
    overall = figure.overall()
    for row in [*rows, *([overall] if overall and len(rows) > 1 else [])]:
        name = "all" if row.label == ALL else class_name(row.label)
        lines.append(f"  {name:<16.16}{row.samples:>8}{_db(row.psnr_mean):>10}"
                     f"{_db(row.psnr_min):>8}{row.ssim_mean:>8.4f}{row.ssim_min:>8.4f}"
                     f"{_db(row.detail_psnr_mean):>11}")
    lines.append("  PSNR, SSIM: the sample against an exact float resize to its size (the cost of "
                 "--quality and the fast path)")
    lines.append("  detail: the sample scaled back up against the full-resolution original (what "
                 "--size discards)")
    for path, why in figure.skipped:
        lines.append(f"  skipped {printable(path)}: {why}")
    return lines


def _db(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:.2f}"


def _finite(value: float) -> float | None:
    return None if math.isinf(value) else round(value, 4)


def quality_json(figure: QualityFigure, class_name: Callable[[int], str]) -> dict[str, Any]:
    """The figure as JSON-ready values (an infinite PSNR, for identical pixels, is null)."""
    return {
        "size": figure.size, "resize": figure.resize, "jpeg_quality": figure.jpeg_quality,
        "seconds": round(figure.seconds, 3),
        "per_class": [{
            "label": row.label, "name": class_name(row.label), "samples": row.samples,
            "psnr_mean": _finite(row.psnr_mean), "psnr_min": _finite(row.psnr_min),
            "ssim_mean": round(row.ssim_mean, 5), "ssim_min": round(row.ssim_min, 5),
            "detail_psnr_mean": _finite(row.detail_psnr_mean),
        } for row in figure.per_class()],
        "samples": [{
            "key": s.key, "path": s.path, "label": s.label, "split": s.split,
            "psnr": _finite(s.psnr), "ssim": round(s.ssim, 5),
            "detail_psnr": _finite(s.detail_psnr), "width": s.width, "height": s.height,
            "original_width": s.original_width, "original_height": s.original_height,
        } for s in figure.samples],
        "skipped": [{"path": path, "why": why} for path, why in figure.skipped],
    }

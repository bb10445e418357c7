#!/usr/bin/env python3
"""Generate a realistic source tree of industrial-looking originals.

    scripts/make_sample_tree.py OUT [--count N] [--width W --height H] [--kinds LIST]
                                    [--classes ok,scratch,dent] [--bad N] [--seed S]

Class folders hold images with a smooth lit surface, machined texture, a few defects
(scratches, dents) and sensor noise: not flat colour and not pure noise, so JPEG sizes and
decode costs are like real camera originals (8000x6000 at quality 95 is ~19 MB).

Kinds (cycled in order): jpg, png, tif16 (16-bit RGB TIFF), bmp, gray_png, gray_tif16,
rgba_png, cmyk_jpg, exif_jpg (stored sideways with an EXIF orientation tag), palette_png.
``--bad N`` adds N broken files in turn: zero-byte, truncated JPEG, text named .png.

Every file is a function of (seed, its number): a rerun with the same arguments leaves the
tree as it is (no file is rewritten, so mtimes stay and a pack of it stays up to date), and a
larger ``--count`` only adds files.
"""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import cv2
import numpy as np
from PIL import Image

ALL_KINDS = (
    "jpg", "png", "tif16", "bmp", "gray_png", "gray_tif16",
    "rgba_png", "cmyk_jpg", "exif_jpg", "palette_png",
)
EXTENSION = {
    "jpg": ".jpg", "png": ".png", "tif16": ".tif", "bmp": ".bmp", "gray_png": ".png",
    "gray_tif16": ".tiff", "rgba_png": ".png", "cmyk_jpg": ".jpg", "exif_jpg": ".JPG",
    "palette_png": ".png",
}
NOISE_TILE = 509  # prime, so tiled noise does not line up with 8x8 JPEG blocks


def synthetic_image(rng: np.random.Generator, width: int, height: int) -> np.ndarray:
    """Uint8 RGB: lit surface + machined texture + defects + sensor noise (fast at 48 MP)."""
    # Lit metal surface: a smooth grey illumination field with a slight per-part tint.
    coarse = rng.uniform(80, 180, (max(2, height // 400), max(2, width // 400)))
    light = cv2.resize(coarse.astype(np.float32), (width, height), interpolation=cv2.INTER_CUBIC)
    tint = rng.uniform(0.85, 1.1, 3).astype(np.float32)
    image = light[..., None] * tint
    # Machined texture: fine directional grooves plus blotchy mid-frequency structure.
    grooves = rng.normal(0, 9, (1, width)).astype(np.float32)
    image += cv2.GaussianBlur(grooves, (0, 0), 1.2)[..., None]
    blotches = rng.normal(0, 14, (max(2, height // 24), max(2, width // 24))).astype(np.float32)
    image += cv2.resize(blotches, (width, height), interpolation=cv2.INTER_LINEAR)[..., None]
    for _ in range(int(rng.integers(1, 4))):  # scratches and dents
        x0, x1 = rng.integers(0, width, 2)
        y0, y1 = rng.integers(0, height, 2)
        thickness = max(1, width // 800)
        cv2.line(image, (int(x0), int(y0)), (int(x1), int(y1)), (30, 30, 35), thickness)
        radius = max(2, width // int(rng.integers(40, 120)))
        cv2.circle(image, (int(x1), int(y0)), radius, (60, 55, 50), -1)
    noise = rng.normal(0, 6, (NOISE_TILE, NOISE_TILE, 3)).astype(np.float32)
    reps = (height // NOISE_TILE + 1, width // NOISE_TILE + 1, 1)
    image += np.tile(noise, reps)[:height, :width]
    return np.clip(image, 0, 255).astype(np.uint8)


def write_kind(path: Path, kind: str, rgb: np.ndarray, rng: np.random.Generator, quality: int):
    """Save ``rgb`` as the given kind of original."""
    if kind == "jpg":
        Image.fromarray(rgb).save(path, "JPEG", quality=quality)
    elif kind == "png":
        cv2.imwrite(str(path), rgb[:, :, ::-1], [cv2.IMWRITE_PNG_COMPRESSION, 3])
    elif kind in ("tif16", "gray_tif16"):
        wide = rgb.astype(np.uint16) * 257 + rng.integers(0, 257, rgb.shape, dtype=np.uint16)
        if kind == "gray_tif16":
            wide = wide[:, :, 1]
        else:
            wide = wide[:, :, ::-1]
        cv2.imwrite(str(path), wide, [cv2.IMWRITE_TIFF_COMPRESSION, 1])
    elif kind == "bmp":
        cv2.imwrite(str(path), rgb[:, :, ::-1])
    elif kind == "gray_png":
        Image.fromarray(rgb[:, :, 1]).save(path, "PNG", compress_level=3)
    elif kind == "rgba_png":
        alpha = np.full(rgb.shape[:2], 255, np.uint8)
        alpha[:, : rgb.shape[1] // 4] = 0  # a transparent margin, composited on the background
        Image.fromarray(np.dstack([rgb, alpha])).save(path, "PNG", compress_level=3)
    elif kind == "cmyk_jpg":
        Image.fromarray(rgb).convert("CMYK").save(path, "JPEG", quality=quality)
    elif kind == "exif_jpg":
        exif = Image.Exif()
        exif[0x0112] = 6  # stored rotated: viewers turn it 90 degrees clockwise
        sideways = np.ascontiguousarray(np.rot90(rgb, 1))
        Image.fromarray(sideways).save(path, "JPEG", quality=quality, exif=exif)
    elif kind == "palette_png":
        Image.fromarray(rgb).quantize(64).save(path, "PNG")
    else:
        raise ValueError(f"unknown kind {kind}")


def write_bad(path_dir: Path, number: int, rng: np.random.Generator) -> Path:
    """Broken files of the kinds a NAS accumulates (an existing one is left as it is)."""
    variant = number % 3
    if variant == 0:
        path, data = path_dir / f"bad_{number:04d}_empty.jpg", b""
    elif variant == 1:
        path = path_dir / f"bad_{number:04d}_truncated.jpg"
        buffer = io.BytesIO()
        Image.fromarray(synthetic_image(rng, 640, 480)).save(buffer, "JPEG", quality=90)
        data = buffer.getvalue()[: len(buffer.getvalue()) // 2]
    else:
        path = path_dir / f"bad_{number:04d}_notes.png"
        data = b"operator notes: camera 3 lens cleaned\n"
    if not path.exists() or path.read_bytes() != data:
        path.write_bytes(data)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("output", type=Path)
    parser.add_argument("--count", type=int, default=24)
    parser.add_argument("--width", type=int, default=1600)
    parser.add_argument("--height", type=int, default=1200)
    parser.add_argument("--kinds", default=",".join(ALL_KINDS),
                        help="comma-separated kinds to cycle through")
    parser.add_argument("--classes", default="ok,scratch,dent")
    parser.add_argument("--bad", type=int, default=0, help="number of broken files to add")
    parser.add_argument("--quality", type=int, default=95)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    unknown = set(kinds) - set(ALL_KINDS)
    if unknown:
        parser.error(f"unknown kinds: {', '.join(sorted(unknown))}")
    classes = [c.strip() for c in args.classes.split(",") if c.strip()]
    total_bytes = 0
    for number in range(args.count):
        kind = kinds[number % len(kinds)]
        folder = args.output / classes[number % len(classes)]
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"img_{number:05d}_{kind}{EXTENSION[kind]}"
        if not path.exists():  # else made by an earlier run with the same arguments
            rng = np.random.default_rng([args.seed, number])
            write_kind(path, kind, synthetic_image(rng, args.width, args.height), rng,
                       args.quality)
        total_bytes += path.stat().st_size
    for number in range(args.bad):
        folder = args.output / classes[number % len(classes)]
        folder.mkdir(parents=True, exist_ok=True)
        write_bad(folder, number, np.random.default_rng([args.seed, 1_000_000 + number]))
    print(
        f"{args.output}: {args.count} images ({total_bytes / 1e6:,.1f} MB, "
        f"{args.width}x{args.height}) in {len(classes)} classes, {args.bad} broken files"
    )


if __name__ == "__main__":
    main()

"""Small test originals made on the fly, one function per kind of file a NAS holds."""

from __future__ import annotations

import io
from pathlib import Path

import cv2
import numpy as np
from PIL import Image


def gradient_rgb(width: int, height: int, seed: int = 0) -> np.ndarray:
    """Smooth colour gradient plus mild noise: compresses like a photo, easy to compare."""
    rng = np.random.default_rng(seed)
    x = np.linspace(0, 1, width, dtype=np.float32)[None, :]
    y = np.linspace(0, 1, height, dtype=np.float32)[:, None]
    image = np.stack([200 * x + 30 + 0 * y, 180 * y + 40 + 0 * x, 120 * (1 - x) * y + 60], -1)
    image += rng.normal(0, 3, image.shape).astype(np.float32)
    return np.clip(image, 0, 255).astype(np.uint8)


def encode(array_or_image, fmt: str, **params) -> bytes:
    image = array_or_image if isinstance(array_or_image, Image.Image) else Image.fromarray(
        array_or_image
    )
    buffer = io.BytesIO()
    image.save(buffer, fmt, **params)
    return buffer.getvalue()


def jpeg(width=320, height=240, seed=0, quality=92) -> bytes:
    return encode(gradient_rgb(width, height, seed), "JPEG", quality=quality)


def png(width=320, height=240, seed=0) -> bytes:
    return encode(gradient_rgb(width, height, seed), "PNG")


def bmp(width=320, height=240, seed=0) -> bytes:
    return encode(gradient_rgb(width, height, seed), "BMP")


def webp(width=320, height=240, seed=0) -> bytes:
    return encode(gradient_rgb(width, height, seed), "WEBP", lossless=True)


def gray_png(width=320, height=240, seed=0) -> bytes:
    return encode(gradient_rgb(width, height, seed)[:, :, 1], "PNG")


def cmyk_jpeg(width=320, height=240, seed=0) -> bytes:
    return encode(Image.fromarray(gradient_rgb(width, height, seed)).convert("CMYK"), "JPEG",
                  quality=95)


def rgba_png(width=320, height=240, transparent_left: int = 0) -> bytes:
    rgb = gradient_rgb(width, height)
    alpha = np.full((height, width), 255, np.uint8)
    alpha[:, :transparent_left] = 0
    return encode(np.dstack([rgb, alpha]), "PNG")


def palette_png(width=320, height=240) -> bytes:
    return encode(Image.fromarray(gradient_rgb(width, height)).quantize(32), "PNG")


def tiff16(value: int = 32768, width=320, height=240, channels: int = 1) -> bytes:
    """Flat 16-bit TIFF (OpenCV writes true 16-bit RGB, which Pillow cannot)."""
    shape = (height, width) if channels == 1 else (height, width, channels)
    ok, data = cv2.imencode(".tif", np.full(shape, value, np.uint16))
    assert ok
    return data.tobytes()


def exif_rotated_jpeg(width=400, height=200, orientation=6) -> bytes:
    """Stored ``width``x``height`` with a red block at the stored top-left corner."""
    rgb = np.full((height, width, 3), 128, np.uint8)
    rgb[: height // 4, : width // 4] = (255, 0, 0)
    exif = Image.Exif()
    exif[0x0112] = orientation
    return encode(rgb, "JPEG", quality=95, exif=exif)


def truncated_jpeg() -> bytes:
    data = jpeg(640, 480)
    return data[: len(data) // 2]


def pack_small(source: Path, output: Path, fmt: str, size: int, splits: str) -> Path:
    """Pack ``source`` in-process with small shards (3 samples), one worker, quietly."""
    from shardsmith import load_config, pack

    pack(load_config(None, {"source.path": str(source), "output.path": str(output),
                            "output.format": fmt, "output.shard_samples": 3,
                            "image.size": size, "splits": splits,
                            "run.quiet": True, "run.workers": 1}))
    return output


def manifest_of(dataset: Path) -> dict:
    """The manifest as a user's script reads it: plain JSON."""
    import json

    return json.loads((dataset / "manifest.json").read_text())


def samples_of(dataset: Path) -> list[dict]:
    """The lines of the sample index the manifest names."""
    import json

    name = manifest_of(dataset)["samples_index"]["name"]
    return [json.loads(line) for line in (dataset / name).read_text().splitlines()]


def dataset_bytes(output: Path) -> dict[str, bytes]:
    """Every file of a dataset, the manifest without its timing fields."""
    return without_timings({p.name: p.read_bytes() for p in sorted(output.iterdir())
                            if p.is_file()})


def without_timings(files: dict[str, bytes]) -> dict[str, bytes]:
    """``files`` of a dataset (name -> bytes) with the manifest's timing fields left out."""
    import json

    manifest = json.loads(files.pop("manifest.json"))
    for volatile in ("created", "run"):
        manifest.pop(volatile)
    for version in manifest["history"]:
        version.pop("created")
    files["manifest.json"] = json.dumps(manifest, sort_keys=True).encode()
    return files


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def mixed_tree(root: Path) -> dict[str, str]:
    """A small source tree with every supported kind and the usual broken files.

    Returns {relpath: expected outcome} where the outcome is "ok" or a reject reason.
    """
    files = {
        "ok/rgb.jpg": (jpeg(640, 480, 1), "ok"),
        "ok/photo.JPEG": (jpeg(300, 500, 2), "ok"),
        "ok/plain.png": (png(400, 300, 3), "ok"),
        "ok/gray.png": (gray_png(256, 256, 4), "ok"),
        "ok/scan.bmp": (bmp(320, 200, 5), "ok"),
        "ok/lossless.webp": (webp(200, 200, 6), "ok"),
        "scratch/deep16.tif": (tiff16(32768, 300, 200, 3), "ok"),
        "scratch/gray16.tiff": (tiff16(20000, 256, 320), "ok"),
        "scratch/cmyk.jpg": (cmyk_jpeg(320, 240, 7), "ok"),
        "scratch/alpha.png": (rgba_png(320, 240, 80), "ok"),
        "scratch/palette.png": (palette_png(200, 150), "ok"),
        "scratch/rotated.jpg": (exif_rotated_jpeg(400, 200, 6), "ok"),
        "scratch/many.jpg": (jpeg(512, 384, 8), "ok"),
        "dent/a.jpg": (jpeg(800, 600, 9), "ok"),
        "dent/b.png": (png(500, 250, 10), "ok"),
        "dent/c.jpg": (jpeg(333, 222, 11), "ok"),
        "dent/empty.jpg": (b"", "empty"),
        "dent/truncated.jpg": (truncated_jpeg(), "corrupt"),
        "ok/notes.png": (b"this is not an image\n", "not_an_image"),
    }
    for relpath, (data, _) in files.items():
        write(root / relpath, data)
    return {relpath: outcome for relpath, (_, outcome) in files.items()}

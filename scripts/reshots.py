"""Synthetic re-shots: the same industrial part photographed twice on one fixture.

A fixture is a plate under fixed lighting (its texture, locating holes, clamps and light field
are a function of the seed and the fixture number); a part is one of four shape families
(plates with holes, bent brackets, PCBs with pads and chips, textured castings) whose geometry
is a function of (seed, fixture, part). A shot places the part near the fixture's nominal pose,
lights it, adds sensor noise and encodes a JPEG at quality 90. A re-shot of a part moves it by
up to 5% of the image in x and y, turns it by up to 3 degrees, scales it by 0.9 to 1/0.9,
changes the exposure by up to 15% either way and is encoded at quality 60. Each is drawn per
re-shot from its own seeded stream, so any one image is a function of its coordinates alone.

Used by scripts/make_reshots.py (writes a tree and its ground truth), scripts/neardup_curve.py
(measures hashes on it) and the tests.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

WIDTH, HEIGHT = 512, 384
FAMILIES = ("plate", "bracket", "pcb", "casting")
PART_CANVAS = 320  # a part is drawn once on a square canvas, then posed on the fixture
ORIGINAL_QUALITY, RESHOT_QUALITY = 90, 60


@dataclass(frozen=True)
class Shot:
    """One image of the corpus: where it goes and what it shows."""

    path: str
    part: str
    fixture: int
    reshot: bool


def _rng(*coordinates: int) -> np.random.Generator:
    return np.random.default_rng(list(coordinates))


def fixture_scene(seed: int, fixture: int) -> tuple[np.ndarray, np.ndarray]:
    """The fixture's plate (float32 BGR, unlit) and its light field (float32, ~0.6 to 1.1)."""
    rng = _rng(seed, fixture, 1 << 20)
    base = rng.uniform(50, 120)
    tint = rng.uniform(0.85, 1.15, 3)
    coarse = rng.normal(0, 12, (6, 8)).astype(np.float32)
    plate = base + cv2.resize(coarse, (WIDTH, HEIGHT), interpolation=cv2.INTER_CUBIC)
    plate = plate[..., None] * tint.astype(np.float32)
    grain = rng.normal(0, 4, (HEIGHT, WIDTH)).astype(np.float32)
    plate += cv2.GaussianBlur(grain, (0, 0), 1.0)[..., None]
    pitch = int(rng.integers(40, 90))  # a grid of tapped holes
    offset_x, offset_y = (int(v) for v in rng.integers(0, pitch, 2))
    for y in range(offset_y, HEIGHT, pitch):
        for x in range(offset_x, WIDTH, pitch):
            cv2.circle(plate, (x, y), 4, (20.0, 20.0, 22.0), -1, cv2.LINE_AA)
    for _ in range(int(rng.integers(2, 5))):  # clamps and locating pins around the part
        x, y = int(rng.integers(0, WIDTH)), int(rng.integers(0, HEIGHT))
        w, h = int(rng.integers(15, 60)), int(rng.integers(15, 60))
        shade = float(rng.uniform(20, 200))
        cv2.rectangle(plate, (x, y), (x + w, y + h), (shade, shade, shade * 0.95), -1)
    ys, xs = np.mgrid[0:HEIGHT, 0:WIDTH].astype(np.float32)
    centre_x, centre_y = rng.uniform(0.3, 0.7) * WIDTH, rng.uniform(0.3, 0.7) * HEIGHT
    radius = ((xs - centre_x) ** 2 + (ys - centre_y) ** 2) / (WIDTH * WIDTH)
    slope_x, slope_y = rng.uniform(-0.25, 0.25, 2)
    light = 1.05 - rng.uniform(0.5, 1.2) * radius + slope_x * (xs / WIDTH - 0.5) \
        + slope_y * (ys / HEIGHT - 0.5)
    return plate.astype(np.float32), np.clip(light, 0.4, 1.2).astype(np.float32)


def part_layer(seed: int, fixture: int, part: int) -> tuple[np.ndarray, np.ndarray]:
    """The part drawn on its own canvas: float32 BGR and float32 coverage in 0..1."""
    rng = _rng(seed, fixture, part)
    family = FAMILIES[int(rng.integers(len(FAMILIES)))]
    size = PART_CANVAS
    colour = np.zeros((size, size, 3), np.float32)
    mask = np.zeros((size, size), np.float32)
    centre = size // 2
    if family in ("plate", "bracket"):
        grey = float(rng.uniform(140, 215))
        w, h = int(rng.uniform(120, 250)), int(rng.uniform(80, 200))
        x0, y0 = centre - w // 2, centre - h // 2
        cv2.rectangle(mask, (x0, y0), (x0 + w, y0 + h), 1.0, -1)
        if family == "bracket":  # an L: a leg off one corner, a darker bend line
            leg_w, leg_h = int(rng.uniform(30, 70)), int(rng.uniform(40, 100))
            cv2.rectangle(mask, (x0, y0 + h), (x0 + leg_w, min(size - 1, y0 + h + leg_h)),
                          1.0, -1)
        colour[:] = grey
        colour += cv2.GaussianBlur(rng.normal(0, 10, (size, size)).astype(np.float32),
                                   (0, 0), 6.0, sigmaY=0.5)[..., None]  # brushed
        if family == "bracket":
            cv2.line(colour, (x0, y0 + h), (x0 + w, y0 + h), (grey * 0.6,) * 3, 5)
        for _ in range(int(rng.integers(1, 7))):
            radius = int(rng.integers(5, 22))
            x = int(rng.integers(x0 + radius + 4, x0 + w - radius - 4))
            y = int(rng.integers(y0 + radius + 4, y0 + h - radius - 4))
            cv2.circle(mask, (x, y), radius, 0.0, -1, cv2.LINE_AA)
    elif family == "pcb":
        w, h = int(rng.uniform(140, 260)), int(rng.uniform(100, 200))
        x0, y0 = centre - w // 2, centre - h // 2
        cv2.rectangle(mask, (x0, y0), (x0 + w, y0 + h), 1.0, -1)
        colour[:] = (float(rng.uniform(20, 60)), float(rng.uniform(90, 150)),
                     float(rng.uniform(20, 50)))
        pad = int(rng.integers(5, 10))
        for y in range(y0 + 8, y0 + h - 8, 2 * pad):
            for x in range(x0 + 8, x0 + w - 8, 2 * pad):
                if rng.random() < 0.35:
                    cv2.rectangle(colour, (x, y), (x + pad, y + pad), (60, 150, 200), -1)
        for _ in range(int(rng.integers(1, 5))):
            cw, ch = int(rng.integers(20, 70)), int(rng.integers(15, 50))
            x = int(rng.integers(x0, x0 + max(1, w - cw)))
            y = int(rng.integers(y0, y0 + max(1, h - ch)))
            cv2.rectangle(colour, (x, y), (x + cw, y + ch), (25, 25, 28), -1)
        for _ in range(int(rng.integers(3, 9))):
            points = rng.integers([x0, y0], [x0 + w, y0 + h], (2, 2))
            cv2.line(colour, tuple(int(v) for v in points[0]),
                     tuple(int(v) for v in points[1]), (50, 170, 120), 2)
    else:  # casting: a lumpy outline, coarse texture, bosses and a bore
        vertices = int(rng.integers(10, 18))
        angles = np.sort(rng.uniform(0, 2 * np.pi, vertices))
        radii = rng.uniform(60, 130, vertices) * np.array([1.0, rng.uniform(0.6, 1.0)])[:, None]
        outline = np.stack([centre + radii[0] * np.cos(angles),
                            centre + radii[1] * np.sin(angles)], axis=1)
        cv2.fillPoly(mask, [outline.astype(np.int32)], 1.0, cv2.LINE_AA)
        grey = float(rng.uniform(70, 150))
        texture = cv2.GaussianBlur(rng.normal(0, 25, (size, size)).astype(np.float32),
                                   (0, 0), 2.5)
        colour[:] = grey
        colour += texture[..., None]
        for _ in range(int(rng.integers(1, 5))):
            x, y = (int(v) for v in rng.integers(centre - 60, centre + 60, 2))
            cv2.circle(colour, (x, y), int(rng.integers(8, 25)), (grey * 1.4,) * 3, -1)
        x, y = (int(v) for v in rng.integers(centre - 40, centre + 40, 2))
        cv2.circle(mask, (x, y), int(rng.integers(6, 18)), 0.0, -1, cv2.LINE_AA)
    mask = cv2.GaussianBlur(mask, (0, 0), 0.8)
    return colour, mask


def _pose(seed: int, fixture: int, part: int, shot: int) -> tuple[float, float, float, float]:
    """(centre x, centre y, degrees, scale): near the fixture's nominal pose; a re-shot moves
    the original by its own draw."""
    nominal = _rng(seed, fixture, 1 << 21)
    centre_x = WIDTH * nominal.uniform(0.45, 0.55)
    centre_y = HEIGHT * nominal.uniform(0.45, 0.55)
    placed = _rng(seed, fixture, part, 1 << 22)
    centre_x += WIDTH * placed.uniform(-0.02, 0.02)
    centre_y += HEIGHT * placed.uniform(-0.02, 0.02)
    angle, scale = placed.uniform(-2, 2), 1.0
    if shot:
        moved = _rng(seed, fixture, part, shot, 1 << 23)
        centre_x += WIDTH * moved.uniform(-0.05, 0.05)
        centre_y += HEIGHT * moved.uniform(-0.05, 0.05)
        angle += moved.uniform(-3, 3)
        scale = float(np.exp(moved.uniform(np.log(0.9), -np.log(0.9))))
    return centre_x, centre_y, angle, scale


def render(seed: int, fixture: int, part: int, shot: int,
           scene: tuple[np.ndarray, np.ndarray] | None = None) -> bytes:
    """The JPEG bytes of shot ``shot`` (0 is the original) of ``part`` on ``fixture``."""
    plate, light = scene if scene is not None else fixture_scene(seed, fixture)
    colour, mask = part_layer(seed, fixture, part)
    centre_x, centre_y, angle, scale = _pose(seed, fixture, part, shot)
    matrix = cv2.getRotationMatrix2D((PART_CANVAS / 2, PART_CANVAS / 2), angle, scale)
    matrix[:, 2] += (centre_x - PART_CANVAS / 2, centre_y - PART_CANVAS / 2)
    posed = cv2.warpAffine(colour, matrix, (WIDTH, HEIGHT), flags=cv2.INTER_LINEAR)
    cover = cv2.warpAffine(mask, matrix, (WIDTH, HEIGHT), flags=cv2.INTER_LINEAR)[..., None]
    exposure = _rng(seed, fixture, part, shot, 1 << 24)
    gain = exposure.uniform(0.85, 1.15) if shot else 1.0
    image = (plate * (1 - cover) + posed * cover) * light[..., None] * gain
    image += exposure.normal(0, 2.0, image.shape).astype(np.float32)
    pixels = np.clip(image + 0.5, 0, 255).astype(np.uint8)
    quality = RESHOT_QUALITY if shot else ORIGINAL_QUALITY
    ok, encoded = cv2.imencode(".jpg", pixels, [cv2.IMWRITE_JPEG_QUALITY, quality])
    assert ok
    return encoded.tobytes()


def corpus(fixtures: int, parts: int, reshots: int) -> Iterator[tuple[Shot, int, int, int]]:
    """Every image as (Shot, fixture, part, shot): ``parts`` originals per fixture, and
    ``reshots`` re-shot pairs in all, the first parts of each fixture in turn."""
    for fixture in range(fixtures):
        reshot_here = reshots // fixtures + (fixture < reshots % fixtures)
        for part in range(parts):
            part_id = f"f{fixture}-p{part:06d}"
            for shot in range(2 if part < reshot_here else 1):
                path = f"fixture{fixture}/p{part:06d}_s{shot}.jpg"
                yield Shot(path, part_id, fixture, bool(shot)), fixture, part, shot


def write_tree(root: Path, fixtures: int, parts: int, reshots: int, seed: int = 0) -> Path:
    """Writes the corpus under ``root`` and ``root/truth.csv`` (path, part, fixture); files
    already there are left as they are. Returns the CSV's path."""
    scenes = {f: fixture_scene(seed, f) for f in range(fixtures)}
    truth = root / "truth.csv"
    root.mkdir(parents=True, exist_ok=True)
    rows = []
    for shot, fixture, part, number in corpus(fixtures, parts, reshots):
        target = root / shot.path
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(render(seed, fixture, part, number, scenes[fixture]))
        rows.append((shot.path, shot.part, shot.fixture))
    with truth.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(("path", "part", "fixture"))
        writer.writerows(rows)
    return truth


def read_truth(truth: Path) -> list[tuple[str, str, int]]:
    """The rows of a ground-truth CSV: (path, part, fixture)."""
    with truth.open(newline="") as handle:
        return [(row["path"], row["part"], int(row["fixture"])) for row in csv.DictReader(handle)]

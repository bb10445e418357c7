"""``polygons.traced_rings`` traces an object on a grid of its own bounding rows and columns:
the outlines must be exactly those traced on the whole sample's grid."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from shardsmith.annotations import polygons


def traced_on_the_whole_sample(mask: np.ndarray) -> list[list[float]]:
    """The tracing before the crop: the sample's own grid of half pixels."""
    height, width = mask.shape
    grid = np.zeros((2 * height + 1, 2 * width + 1), np.uint8)
    grid[1::2, 1::2] = mask
    grid = cv2.dilate(grid, np.ones((3, 3), np.uint8))
    contours, _ = cv2.findContours(grid, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
    return [[float(value) for value in (contour.reshape(-1, 2) / 2.0).reshape(-1)]
            for contour in contours if len(contour) >= 3]


def random_masks(count: int, seed: int) -> list[np.ndarray]:
    """Boxes here and there (at the edges too), some with scattered pixels, some bool."""
    rng = np.random.default_rng(seed)
    masks = []
    for _ in range(count):
        height, width = (int(side) for side in rng.integers(1, 40, 2))
        mask = np.zeros((height, width), np.uint8)
        for _ in range(rng.integers(0, 4)):
            y, x = rng.integers(0, height), rng.integers(0, width)
            mask[y : y + rng.integers(1, 12), x : x + rng.integers(1, 12)] = 1
        if rng.random() < 0.3:
            mask |= (rng.random((height, width)) < 0.1).astype(np.uint8)
        masks.append(mask.astype(bool) if rng.random() < 0.2 else mask)
    return masks


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.slow
def test_an_objects_own_grid_traces_what_the_samples_grid_traces(seed):
    for mask in random_masks(500, seed):
        assert polygons.traced_rings(mask) == traced_on_the_whole_sample(mask)


@pytest.mark.parametrize("where", [(0, 0), (0, 90), (70, 0), (70, 90), (30, 40)],
                         ids=["top left", "top right", "bottom left", "bottom right", "inside"])
def test_an_object_at_a_corner_of_its_sample_traces_the_same(where):
    mask = np.zeros((80, 100), np.uint8)
    mask[where[0] : where[0] + 10, where[1] : where[1] + 10] = 1
    mask[where[0] + 3, where[1] + 3] = 0  # a hole: outer outlines only
    assert polygons.traced_rings(mask) == traced_on_the_whole_sample(mask)


def test_an_empty_mask_has_no_rings():
    assert polygons.traced_rings(np.zeros((5, 7), bool)) == []

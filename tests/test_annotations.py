"""Defect annotations carried through every pixel operation, in every input format.

Originals with defects drawn at known coordinates (``defects.py``) are annotated in each input
format, packed with each resize mode, eight EXIF orientations each, and read back with the
torch reader's detection targets: every box encloses its drawn defect within 1 px, and every
mask overlaps it with IoU >= 0.9.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from shardsmith.readers.torch import dataset

import defects
import images

RESIZE_MODES = ("fit", "shorter", "center_crop", "pad", "stretch")


def orientation_tree(source: Path, fmt: str) -> dict:
    relpaths = [f"parts/o{orientation}.jpg" for orientation in range(1, 9)]
    for orientation, relpath in enumerate(relpaths, 1):
        images.write(source / relpath, defects.original(orientation))
    return defects.write_annotations(source, relpaths, fmt)


def masked(fmt: str, name: str) -> bool:
    """Whether ``fmt`` annotates defect ``name`` with a mask (else with a box only)."""
    return fmt in ("coco", "mask") or name == "dent"


@pytest.mark.parametrize("fmt", defects.FORMATS)
@pytest.mark.slow
def test_boxes_and_masks_follow_every_resize_mode_and_exif_orientation(tmp_path, fmt):
    import simplejpeg

    source = tmp_path / "source"
    overrides = orientation_tree(source, fmt)
    worst_box, worst_iou = 0.0, 1.0
    for mode in RESIZE_MODES:
        output = tmp_path / mode
        manifest = defects.pack_with(source, output, overrides, **{
            "image.size": 256, "image.resize": mode, "image.pad_color": [128, 128, 128]})
        assert manifest["totals"]["packed"] == 8 and not manifest["rejects"]
        names = manifest["object_classes"]
        data = dataset(output, targets=True, shuffle=False)
        assert data.object_classes == names and len(data) == 8
        for image, target in data:  # the consumer's view: torchvision targets
            shown = defects.seen(image.permute(1, 2, 0).numpy())
            labels = target["labels"].tolist()
            assert sorted(names[label - 1] for label in labels) == sorted(defects.CLASSES)
            for number, label in enumerate(labels):
                name = names[label - 1]
                box, drawn = target["boxes"][number].tolist(), defects.extent(shown[name])
                worst_box = max(worst_box, *(abs(a - b) for a, b in zip(box, drawn,
                                                                        strict=True)))
                if "masks" in target and masked(fmt, name):
                    instance = target["masks"][number].numpy().astype(bool)
                    worst_iou = min(worst_iou, defects.iou(instance, shown[name]))
        for files in defects.members(output).values():  # the stored class masks
            assert ("mask.png" in files) == (fmt in defects.WITH_MASKS)
            if "mask.png" not in files:
                continue
            shown = defects.seen(simplejpeg.decode_jpeg(files["jpg"], colorspace="GRAY"))
            mask = cv2.imdecode(np.frombuffer(files["mask.png"], np.uint8), cv2.IMREAD_UNCHANGED)
            for name in defects.CLASSES:
                if masked(fmt, name):
                    worst_iou = min(worst_iou, defects.iou(mask == names.index(name) + 1,
                                                           shown[name]))
    assert worst_box <= 1.0, f"{fmt}: a box is {worst_box:.3f} px off its drawn defect"
    assert worst_iou >= 0.9, f"{fmt}: a mask overlaps its drawn defect with IoU {worst_iou:.3f}"


@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
def test_a_box_on_an_original_of_a_few_pixels_keeps_its_place(tmp_path, fmt):
    # A full decode of a 6x4 original also fits 7/8 of it once rounded up (ceil(6 * 7/8) = 6):
    # taken for a reduced decode, that scale shrank the box to [2.6, 0, 5.2, 3.5].
    source = tmp_path / "source"
    images.write(source / "tiny" / f"dot.{fmt.lower()}", images.encode(
        images.gradient_rgb(6, 4), fmt))
    (source / "tiny" / "dot.txt").write_text("0 0.75 0.5 0.5 1.0\n")  # the right half
    output = tmp_path / "out"
    manifest = defects.pack_with(source, output, {
        "source.annotations.files": "yolo", "source.annotations.classes": ["scratch"]},
        **{"image.size": 64})
    assert manifest["totals"]["packed"] == 1 and not manifest["rejects"]
    [(image, target)] = list(dataset(output, targets=True, shuffle=False))
    assert tuple(image.shape[1:]) == (4, 6)
    assert target["boxes"].tolist() == [[3.0, 0.0, 6.0, 4.0]]

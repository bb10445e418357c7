"""Check that ``shardsmith export --layout anomalib --anomalib-layout mvtec`` is read by
anomalib's own ``MVTecADDataset`` (it takes ``.png`` images only) and that ``--layout anomalib``
(Folder) is read by its ``FolderDataset``.

Runs in the consumers' venv (anomalib installed), offline:

    PYTHONPATH=$PWD build/consumers-venv/bin/python scripts/check_anomalib_mvtec.py

Packs a tiny annotated corpus (the tests' builders), exports both anomalib layouts and prints
what anomalib found; exits 1 when a split is empty or a mask does not match its image.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from anomalib.data.datasets import FolderDataset, MVTecADDataset  # noqa: E402

from shardsmith.ops.export import export  # noqa: E402

import defects  # noqa: E402
import images  # noqa: E402


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for split, name in (("train", "a"), ("val", "b")):
            path = images.write(root / "source" / split / "defect" / f"{name}.jpg",
                                defects.corpus_original("jpeg8", 1))
            defects.write_corpus_annotations(path.with_suffix(""))
            for index in range(2):
                images.write(root / "source" / split / "good" / f"clean{index}.jpg",
                             defects.corpus_original("jpeg8", 1, with_defects=False))
        defects.pack_with(root / "source", root / "dataset",
                          {**defects.CORPUS_ANNOTATIONS, "image.tiles.size": 96,
                           "image.tiles.keep": "all", "splits.folder": True,
                           "splits": "train=0.5,val=0.5"})
        failures = 0
        export(root / "dataset", root / "mvtec", "anomalib", anomalib_layout="mvtec", quiet=True)
        for split in ("train", "test"):
            dataset = MVTecADDataset(root=root / "mvtec", category="current", split=split)
            samples = dataset.samples
            abnormal = int((samples.label_index == 1).sum())
            print(f"MVTecADDataset {split}: {len(samples)} images, {abnormal} abnormal")
            if not len(samples) or (split == "test" and not abnormal):
                failures += 1
            item = dataset[len(dataset) - 1]
            if item.gt_mask is not None and item.gt_mask.shape[-2:] != item.image.shape[-2:]:
                print(f"  mask {tuple(item.gt_mask.shape)} is not its image's size")
                failures += 1
        export(root / "dataset", root / "folder", "anomalib", quiet=True)
        current = root / "folder" / "current"
        for split in ("train", "test"):
            dataset = FolderDataset(name="defects", root=current, normal_dir="normal",
                                    abnormal_dir="abnormal", normal_test_dir="normal_test",
                                    mask_dir="mask", split=split)
            print(f"FolderDataset {split}: {len(dataset.samples)} images")
            if not len(dataset.samples):
                failures += 1
        return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

"""The corpus `make consumers` trains on: what it draws is what the manifest counts.

The trainers themselves run in a venv of their own (`make consumers`); these checks need only
the test extras, so the counts every consumer is held to are checked in `make test` too.
"""

from __future__ import annotations

import json
import socket
import sys
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

pytest.importorskip("pycocotools", reason="the corpus writes RLE masks with pycocotools")

import check_consumers  # noqa: E402


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("consumers")
    check_consumers.make_corpus(work / "source", defects=9, normals=4)
    check_consumers.pack_corpus(work / "source", work / "wds", "webdataset")
    return work


@pytest.mark.slow
def test_manifest_truth_counts_every_drawn_object_per_class(packed: Path) -> None:
    document = json.loads((packed / "source" / "instances.json").read_text())
    drawn = Counter(annotation["category_id"] for annotation in document["annotations"])
    truth = check_consumers.manifest_truth(packed / "wds")
    counted = Counter()
    for split in truth["splits"].values():
        counted.update(split["objects"])
    assert truth["object_classes"] == list(check_consumers.CLASSES)
    assert counted == drawn


def test_good_images_are_normal_and_defect_images_abnormal(packed: Path) -> None:
    truth = check_consumers.manifest_truth(packed / "wds")
    splits = truth["splits"].values()
    assert sum(split["images"] for split in splits) == 13
    assert sum(split["abnormal"] for split in splits) == 9
    assert sum(split["classes"]["good"] for split in splits) == 4


def test_a_consumer_that_disagrees_with_the_manifest_fails_its_check() -> None:
    with pytest.raises(check_consumers.CheckFailed, match="images: 5, the manifest says 6"):
        check_consumers.expect("images", 5, 6)


def test_the_network_fence_refuses_and_records_a_name_lookup(monkeypatch) -> None:
    monkeypatch.setattr(check_consumers, "BLOCKED", [])
    with pytest.raises(socket.gaierror):
        check_consumers._refuse_network("socket.getaddrinfo", ("example.com", 443, 0, 0, 0))
    assert check_consumers.BLOCKED == ["getaddrinfo example.com"]

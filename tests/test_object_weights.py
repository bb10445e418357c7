"""Weights for defect classes that are object classes: a detection dataset's rare defects are
the classes of its boxes and masks, not image classes.  A sample weighs the largest weight
among its objects' classes; a sample without objects weighs ``(none)`` (default ``*``); a name
that is an image class and an object class at once is refused unless qualified.  Built on a
small packed dataset of 32 parts with YOLO boxes: 20 with no defect, 6 with a scratch, 4 with
a crack, 2 with both."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the torch reader needs PyTorch (the torch extra)")

from hostile_helpers import cli, one_error_line  # noqa: E402

from shardsmith.readers.torch import dataset  # noqa: E402
from shardsmith.readers.weights import WeightsError  # noqa: E402

import defects  # noqa: E402
import images  # noqa: E402

OBJECT_CLASSES = ["scratch", "crack"]  # object class ids 1 and 2
# (image folder, parts, object classes of each): the image folders are the image classes of
# the labelled pack; the pack without labels has none.
PARTS = [("good", 20, ()), ("good", 4, ("crack",)), ("scratch", 6, ("scratch",)),
         ("scratch", 2, ("scratch", "crack"))]
SIGMAS = 5  # a count this far from its mean has a chance under 1e-6 (normal tail)


def pack_parts(root: Path, labels: str) -> Path:
    source, number = root / "source", 0
    for folder, count, held in PARTS:
        for _ in range(count):
            path = images.write(source / folder / f"{number:03d}.jpg",
                                images.jpeg(48, 40, number))
            if held:
                path.with_suffix(".txt").write_text("".join(
                    f"{OBJECT_CLASSES.index(name)} 0.5 0.5 0.25 0.25\n" for name in held))
            number += 1
    defects.pack_with(source, root / "out", {
        "source.annotations.files": "yolo", "source.annotations.classes": OBJECT_CLASSES,
        "source.labels": labels, "image.size": 32, "image.resize": "center_crop",
        "output.shard_samples": 8, "splits": "train=1.0"})
    return root / "out"


@pytest.fixture(scope="module")
def unlabelled(tmp_path_factory) -> Path:
    """Packed with ``labels: none``: no image class at all, only object classes."""
    return pack_parts(tmp_path_factory.mktemp("unlabelled"), "none")


@pytest.fixture(scope="module")
def labelled(tmp_path_factory) -> Path:
    """Image classes good and scratch; object classes scratch and crack."""
    return pack_parts(tmp_path_factory.mktemp("labelled"), "folders")


def held_by_key(dataset_path: Path) -> dict[str, frozenset[str]]:
    """Each sample's object classes, from the sample index as a user's script reads it."""
    return {record["key"]: frozenset(OBJECT_CLASSES[number] for number, count
                                     in enumerate(record.get("objects") or []) if count)
            for record in images.samples_of(dataset_path)}


def drawn_groups(data, epoch: int = 0) -> Counter:
    """How many draws of ``epoch`` fell on samples of each set of object classes."""
    held = held_by_key(data.path)
    return Counter(held[data.table.key(int(number))] for number in data.plan.share(epoch))


def weighted(path: Path, **options):
    data = dataset(path, split="train", decode=False, seed=3, **options)
    data.path = path
    return data


def test_inspect_weights_names_an_object_class_of_a_dataset_packed_without_labels(unlabelled):
    result = cli("inspect", unlabelled, "--weights", "crack=10,*=1", "--json")
    assert result.exit_code == 0, result.output
    mix = json.loads(result.output)
    rows = {row["class"]: row for row in mix["classes"]}
    assert mix["by"] == "object class"
    assert (rows["object:crack"]["samples"], rows["object:scratch"]["samples"],
            rows["(none)"]["samples"]) == (6, 8, 20)
    # weights: crack parts 10 (6 of them), scratch-only parts 1 (6), no defect 1 (20)
    assert rows["object:crack"]["expected_share"] == pytest.approx(60 / 86)
    assert rows["(none)"]["expected_share"] == pytest.approx(20 / 86)


def test_a_sample_weighs_the_largest_weight_among_its_objects_classes(unlabelled):
    draws = 6000
    data = weighted(unlabelled, weights="crack=10,scratch=3", draws=draws)
    counts = drawn_groups(data)
    # per part: none 1 (20 parts), scratch 3 (6), crack 10 (4), scratch and crack 10 (2)
    mass = {frozenset(): 20 * 1, frozenset({"scratch"}): 6 * 3,
            frozenset({"crack"}): 4 * 10, frozenset({"scratch", "crack"}): 2 * 10}
    total = sum(mass.values())
    for group, weight in mass.items():
        share = weight / total
        bound = SIGMAS * math.sqrt(draws * share * (1 - share))
        assert abs(counts[group] - draws * share) <= bound, (group, counts)


def test_samples_without_objects_weigh_none_and_none_defaults_to_star(unlabelled):
    without = weighted(unlabelled, weights="crack=1,(none)=0", draws=500)
    assert drawn_groups(without)[frozenset()] == 0
    star = weighted(unlabelled, weights="crack=1,*=0", draws=500)
    assert set(drawn_groups(star)) == {frozenset({"crack"}), frozenset({"scratch", "crack"})}


def test_weighted_by_object_class_every_rank_yields_the_same_batches_and_resumes(unlabelled):
    ranks = [weighted(unlabelled, weights="crack=10", draws=50, batch_size=4, rank=rank,
                      world_size=3) for rank in range(3)]
    assert {len(data) for data in ranks} == {5}  # ceil(ceil(50 / 3) / 4)
    whole = [labels.tolist() for _, labels in ranks[1]]
    ranks[1].load_state_dict({"epoch": 0, "start": 2})
    assert [labels.tolist() for _, labels in ranks[1]] == whole[2:]


def test_dali_draws_the_torch_readers_batches_by_object_class(unlabelled):
    pytest.importorskip("nvidia.dali", reason="needs NVIDIA DALI (the dali extra)")
    import simplejpeg

    from shardsmith.readers.dali import loader

    batches = loader(unlabelled, split="train", batch_size=4, device="cpu", num_threads=1,
                     seed=3, weights="crack=10", draws=20)
    ours = [images_.numpy().copy() for images_, _ in batches]
    data = dataset(unlabelled, split="train", batch_size=4, decode=False, seed=3,
                   weights="crack=10", draws=20)
    theirs = [[bytes(jpeg.numpy()) for jpeg in jpegs] for jpegs, _ in data]
    assert len(ours) == len(theirs) == 5
    for pixels, jpegs in zip(ours, theirs, strict=True):
        for image, jpeg in zip(pixels, jpegs, strict=True):
            expected = simplejpeg.decode_jpeg(jpeg, colorspace="RGB")
            assert abs(image.astype(int) - expected.astype(int)).mean() < 1.0


def test_a_name_of_an_image_class_and_an_object_class_is_refused_unless_qualified(labelled):
    with pytest.raises(WeightsError, match="'scratch' is both an image class and an object "
                                           "class: write 'image:scratch' or 'object:scratch'"):
        weighted(labelled, weights="scratch=5")
    by_object = weighted(labelled, weights="object:scratch=5,*=0", draws=300)
    assert all("scratch" in group for group in drawn_groups(by_object))
    by_image = weighted(labelled, weights="image:scratch=5,good=0", draws=300)
    folders = {record["key"]: record["path"].split("/")[0]
               for record in images.samples_of(labelled)}
    assert {folders[by_image.table.key(int(n))] for n in by_image.plan.share(0)} == {"scratch"}


def test_inspect_refuses_an_unqualified_name_of_both_kinds_in_one_line(labelled):
    line = one_error_line(cli("inspect", labelled, "--weights", "scratch=5"), 2)
    assert "'image:scratch' or 'object:scratch'" in line


def test_an_unknown_name_lists_the_image_and_the_object_classes(labelled):
    line = one_error_line(cli("inspect", labelled, "--weights", "dent=5"), 2)
    assert "'dent' is not a class of this dataset" in line
    assert "classes: 'good', 'scratch'; object classes: 'scratch', 'crack'" in line


def test_an_image_class_weight_counts_beside_the_objects_where_the_spec_names_it(labelled):
    """good=2 draws the good parts without objects; a part holding a crack weighs the largest
    of its weights (crack 4); a scratch part with a scratch only weighs '*' (0)."""
    data = weighted(labelled, weights="good=2,crack=4,*=0", draws=400)
    keys = {record["key"]: record["path"].split("/")[0]
            for record in images.samples_of(labelled)}
    held = held_by_key(labelled)
    drawn = Counter((keys[data.table.key(int(n))], held[data.table.key(int(n))])
                    for n in data.plan.share(0))
    assert set(drawn) == {("good", frozenset()), ("good", frozenset({"crack"})),
                          ("scratch", frozenset({"scratch", "crack"}))}


def test_the_object_classes_mix_is_the_same_draw_as_the_reader_in_epoch_0(unlabelled):
    result = cli("inspect", unlabelled, "--weights", "crack=10", "--seed", 3, "--draws", 200,
                 "--json")
    rows = {row["class"]: row["drawn"] for row in json.loads(result.output)["classes"]}
    counts = drawn_groups(weighted(unlabelled, weights="crack=10", draws=200))
    assert rows["object:crack"] == sum(n for group, n in counts.items() if "crack" in group)
    assert rows["(none)"] == counts[frozenset()]

"""Sampling for rare defects: with class weights an epoch is ``draws`` samples drawn with
replacement by weight, a function of (seed, epoch) only, cut into equal shares per rank and
into batches like an unweighted epoch; ``set_epoch`` and mid-epoch resume work as there, the
DALI reader draws the torch reader's batches, and ``inspect --weights`` shows the class mix.
Built on a small packed dataset where defects are rare (scratch 4 and dent 8 of 72 parts)."""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch reader needs PyTorch (the torch extra)")

from hostile_helpers import cli, one_error_line  # noqa: E402
from machine import worker_counts  # noqa: E402

from shardsmith.readers.plan import epoch_order, rank_share  # noqa: E402
from shardsmith.readers.torch import SampleLoader, dataset  # noqa: E402
from shardsmith.readers.weights import ClassWeights, WeightsError, class_weights  # noqa: E402

import images  # noqa: E402

PARTS = {"good": 60, "scratch": 4, "dent": 8}
CLASSES = sorted(PARTS)  # the manifest's classes: dent 0, good 1, scratch 2
BATCH = 4
SIGMAS = 5  # a count this far from its mean has a chance under 1e-6 (normal tail)


@pytest.fixture(scope="module")
def parts(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("weighted")
    source, output = root / "source", root / "out"
    number = 0
    for name, count in PARTS.items():
        for _ in range(count):
            images.write(source / name / f"{number:03d}.jpg",
                         images.jpeg(40 + number % 7, 36, number))
            number += 1
    from shardsmith import load_config, pack

    pack(load_config(None, {"source.path": str(source), "output.path": str(output),
                            "output.format": "webdataset", "output.shard_samples": 8,
                            "image.size": 32, "image.resize": "center_crop",
                            "splits": "train=0.8,val=0.2", "run.quiet": True,
                            "run.workers": 1}))
    return output


def train_labels(parts: Path) -> Counter:
    return Counter(s["label"] for s in images.samples_of(parts) if s["split"] == "train")


def weighted(parts: Path, **options) -> object:
    options = {"split": "train", "batch_size": BATCH, "decode": False, "seed": 7,
               "weights": "scratch=10,dent=5", **options}
    return dataset(parts, **options)


def epoch_of(data, epoch: int | None = None, **loader) -> list[tuple[list[str], list[int]]]:
    """(sha1 of each JPEG, labels) of each batch of one epoch through a DataLoader."""
    if epoch is not None:
        data.set_epoch(epoch)
    batches = torch.utils.data.DataLoader(data, batch_size=None, **loader)
    return [([hashlib.sha1(bytes(jpeg.numpy())).hexdigest() for jpeg in jpegs],
             labels.tolist()) for jpegs, labels in batches]


def flat(batches) -> list[str]:
    return [sample for ids, _ in batches for sample in ids]


# --- the class mix ---------------------------------------------------------------------


def test_class_counts_over_an_epoch_match_the_weights_within_the_binomial_bound(parts):
    draws, weights = 3000, {"scratch": 10.0, "dent": 5.0, "good": 1.0}
    data = weighted(parts, batch_size=100, draws=draws)
    counts = Counter(label for _, labels in epoch_of(data, 0) for label in labels)
    present = train_labels(parts)
    mass = {label: present[label] * weights[CLASSES[label]] for label in present}
    for label, share in ((label, mass[label] / sum(mass.values())) for label in present):
        bound = SIGMAS * math.sqrt(draws * share * (1 - share))
        assert abs(counts[label] - draws * share) <= bound, (CLASSES[label], counts, share)
    # Unweighted, scratch would be about 6% of an epoch; weighted it is about 30%.
    assert counts[CLASSES.index("scratch")] > 3 * draws * present[2] / present.total()


def test_a_class_weighted_zero_is_never_drawn(parts):
    data = weighted(parts, weights="good=0", draws=400)
    labels = {label for _, labels in epoch_of(data, 0) for label in labels}
    assert labels == {CLASSES.index("dent"), CLASSES.index("scratch")}


def test_an_epoch_is_draws_samples_with_repeats(parts):
    data = weighted(parts, draws=30)
    ids = flat(epoch_of(data, 0))
    assert len(ids) == 30 and len(data) == math.ceil(30 / BATCH)
    assert len(set(ids)) < len(ids)  # drawn with replacement: the rare parts come back


# --- equal ranks, any workers, (seed, epoch) only --------------------------------------


@pytest.mark.parametrize("drop_last", [False, True])
def test_every_rank_yields_the_same_number_of_batches_cut_from_one_draw(parts, drop_last):
    draws, world = 50, 3
    whole = flat(epoch_of(weighted(parts, draws=draws), 2))
    shares = [epoch_of(weighted(parts, draws=draws, rank=rank, world_size=world,
                                drop_last=drop_last), 2) for rank in range(world)]
    lengths = [len(weighted(parts, draws=draws, rank=rank, world_size=world,
                            drop_last=drop_last)) for rank in range(world)]
    assert {len(share) for share in shares} == set(lengths) and len(set(lengths)) == 1
    joined = [sample for share in shares for sample in flat(share)]
    per_rank = draws // world if drop_last else math.ceil(draws / world)
    assert len(joined) == per_rank * world
    assert joined[:min(draws, len(joined))] == whole[:len(joined)]


@pytest.mark.parametrize("workers", worker_counts(1, 2, 3))
def test_batches_are_the_same_for_any_number_of_workers(parts, workers):
    alone = epoch_of(weighted(parts, draws=37), 1)
    assert epoch_of(weighted(parts, draws=37), 1, num_workers=workers) == alone


def test_the_draw_is_a_function_of_seed_and_epoch(parts):
    first, again = (flat(epoch_of(weighted(parts, seed=3), 4)) for _ in range(2))
    assert first == again
    assert flat(epoch_of(weighted(parts, seed=4), 4)) != first


def test_set_epoch_changes_the_draw_and_reaches_persistent_workers(parts):
    data = weighted(parts)
    loader = dict(num_workers=2, persistent_workers=True)
    batches = torch.utils.data.DataLoader(data, batch_size=None, **loader)
    seen = {}
    for epoch in (0, 1, 0):
        data.set_epoch(epoch)
        seen.setdefault(epoch, []).append([hashlib.sha1(bytes(jpeg.numpy())).hexdigest()
                                           for jpegs, _ in batches for jpeg in jpegs])
    assert seen[0][0] == seen[0][1] == flat(epoch_of(weighted(parts), 0))
    assert seen[1][0] != seen[0][0]


def test_resuming_mid_epoch_gives_the_rest_of_the_epoch(parts):
    whole = epoch_of(weighted(parts), 3)
    resumed = weighted(parts)
    resumed.load_state_dict({"epoch": 3, "start": 5})
    assert epoch_of(resumed, num_workers=2) == whole[5:]


def test_per_sample_mode_draws_the_same_samples_in_exactly_len_batches(parts):
    data = dataset(parts, split="train", decode=False, seed=7, weights="scratch=10,dent=5",
                   draws=29)
    loader = SampleLoader(data, batch_size=BATCH, num_workers=2,
                          collate_fn=lambda samples: samples)
    batches = list(loader)
    assert len(batches) == len(loader) == math.ceil(29 / BATCH)
    ids = [hashlib.sha1(bytes(jpeg.numpy())).hexdigest() for batch in batches
           for jpeg, _ in batch]
    assert ids == flat(epoch_of(weighted(parts, draws=29), 0))


def test_without_weights_the_epoch_is_the_unweighted_plan_unchanged(parts):
    data = dataset(parts, split="train", batch_size=BATCH, decode=False, seed=7)
    expected = rank_share(epoch_order(data.table, 7, 2), 0, 1)
    assert np.array_equal(data.plan.share(2), expected)
    assert len(set(flat(epoch_of(data, 2)))) == train_labels(parts).total()


# --- the SPEC ----------------------------------------------------------------------------


def test_a_spec_names_classes_by_name_or_id_and_star_weights_the_rest():
    by_name = class_weights("scratch=10, dent=2.5, *=0.5", CLASSES)
    assert by_name == ClassWeights((2.5, 0.5, 10.0), 0.5)
    assert class_weights("#2=10,#0=2.5,*=0.5", CLASSES) == by_name
    assert class_weights({"scratch": 10, 0: 2.5, "*": 0.5}, CLASSES) == by_name
    assert class_weights("scratch=10", CLASSES) == ClassWeights((1.0, 1.0, 10.0), 1.0)


def test_a_class_name_holding_an_equals_sign_is_named_up_to_its_last_one():
    assert class_weights("a=b=3", ["a=b", "c"]).per_class == (3.0, 1.0)


@pytest.mark.parametrize(("spec", "problem"), [
    ("crack=2", "'crack' is not a class of this dataset"),
    ("#3=2", "class id 3 is not one of 0 to 2"),
    ("#" + "1" * 5000 + "=2", "is not a class id .at most 18 digits."),
    ("#" + "0" * 30 + "3=2", "class id 3 is not one of 0 to 2"),
    ("scratch=-1", "must be >= 0"),
    ("scratch=nan", "must be finite"),
    ("scratch=inf", "must be finite"),
    ("scratch=lots", "'lots' is not a number"),
    ("scratch", "is not CLASS=WEIGHT"),
    ("scratch=1,,dent=2", "'' is not CLASS=WEIGHT"),
    ("scratch=1,scratch=2", "class 'scratch' is given twice"),
    ("*=0", "every weight is zero"),
    ("dent=0,good=0,scratch=0,*=0", "every weight is zero"),
    ({"scratch": True}, "True is not a number"),
])
def test_a_malformed_spec_is_a_value_error_naming_the_problem(spec, problem):
    with pytest.raises(ValueError, match="weights: .*" + problem.replace("*", r"\*")):
        class_weights(spec, CLASSES)


def test_the_reader_refuses_a_malformed_spec_and_draws_without_weights(parts):
    with pytest.raises(WeightsError, match="'crack' is not a class"):
        weighted(parts, weights="crack=2")
    with pytest.raises(ValueError, match="draws= sets the size of a weighted epoch"):
        dataset(parts, split="train", draws=10)
    with pytest.raises(ValueError, match="draws: expected a whole number >= 1"):
        weighted(parts, draws=0)


def test_weights_left_only_on_classes_the_split_lacks_leave_nothing_to_draw(parts):
    val = {CLASSES[s["label"]] for s in images.samples_of(parts) if s["split"] == "val"}
    if val == set(CLASSES):
        pytest.skip("this pack put every class in val")
    spec = ",".join(f"{name}={0 if name in val else 1}" for name in CLASSES)
    with pytest.raises(ValueError, match="every sample of the selection has weight 0"):
        weighted(parts, weights=spec, split="val")


# --- DALI ------------------------------------------------------------------------------


def test_dali_draws_the_torch_readers_weighted_batches(parts):
    pytest.importorskip("nvidia.dali", reason="needs NVIDIA DALI (the dali extra)")
    import simplejpeg

    from shardsmith.readers.dali import loader

    batches = loader(parts, split="train", batch_size=BATCH, device="cpu", num_threads=1,
                     seed=7, weights="scratch=10,dent=5", draws=30)
    batches.set_epoch(1)
    ours = [(images.numpy().copy(), labels.numpy().tolist()) for images, labels in batches]
    data = weighted(parts, draws=30)
    data.set_epoch(1)
    theirs = [([bytes(jpeg.numpy()) for jpeg in jpegs], labels.tolist())
              for jpegs, labels in data]
    assert len(ours) == len(theirs) == len(batches)
    for (pixels, labels), (jpegs, their_labels) in zip(ours, theirs, strict=True):
        assert labels == their_labels
        for image, jpeg in zip(pixels, jpegs, strict=True):
            expected = simplejpeg.decode_jpeg(jpeg, colorspace="RGB")
            # Two libjpeg-turbo builds may round an IDCT differently (as test_dali_plan).
            assert np.abs(image.astype(int) - expected.astype(int)).mean() < 1.0


# --- inspect --weights ----------------------------------------------------------------


def test_inspect_weights_shows_the_mix_the_reader_draws_in_epoch_0(parts):
    result = cli("inspect", parts, "--split", "train", "--weights", "scratch=10,dent=5",
                 "--seed", 7, "--draws", 300, "--json")
    assert result.exit_code == 0, result.output
    mix = json.loads(result.output)
    data = weighted(parts, draws=300, batch_size=100)
    drawn = Counter(label for _, labels in epoch_of(data, 0) for label in labels)
    present = train_labels(parts)
    assert mix["draws"] == 300
    for row in mix["classes"]:
        assert row["drawn"] == drawn[row["label"]]
        assert row["samples"] == present[row["label"]]
        assert row["unweighted_share"] == pytest.approx(present[row["label"]] / present.total())
    shares = {row["class"]: row["expected_share"] for row in mix["classes"]}
    mass = {name: present[CLASSES.index(name)] * w
            for name, w in (("dent", 5), ("good", 1), ("scratch", 10))}
    assert shares == pytest.approx({name: m / sum(mass.values()) for name, m in mass.items()})


def test_inspect_weights_prints_a_table_per_class(parts):
    result = cli("inspect", parts, "--weights", "scratch=10")
    assert result.exit_code == 0, result.output
    assert "drawn in epoch 0" in result.output
    for name in CLASSES:
        assert any(line.split()[1:2] == [name] for line in result.output.splitlines())


@pytest.mark.parametrize(("spec", "problem"), [
    ("crack=1", "'crack' is not a class of this dataset"),
    ("scratch=-2", "must be >= 0"),
    ("*=0", "every weight is zero"),
])
def test_inspect_a_malformed_spec_is_one_line_and_exit_2(parts, spec, problem):
    assert problem in one_error_line(cli("inspect", parts, "--weights", spec), 2)


def test_inspect_draws_without_weights_is_one_line_and_exit_2(parts):
    assert "--draws sets the size of the --weights epoch" in one_error_line(
        cli("inspect", parts, "--draws", 5), 2)


# --- bounds and odd numbers -------------------------------------------------------------


def test_draws_past_the_limit_is_a_weights_error_naming_the_limit_and_the_memory(parts):
    from shardsmith.readers.weights import MAX_DRAWS

    with pytest.raises(WeightsError, match=f"at most {MAX_DRAWS:,}.*would take"):
        weighted(parts, draws=10**12)
    for odd in (True, 2.0, 0, -3):
        with pytest.raises(WeightsError, match="whole number >= 1"):
            weighted(parts, draws=odd)


def test_inspect_draws_past_the_limit_is_one_line_and_exit_2(parts):
    line = one_error_line(cli("inspect", parts, "--weights", "scratch=10", "--draws",
                              10**12), 2)
    assert "at most" in line and "of memory" in line


def mix_of(spec: str, labels: np.ndarray, draws: int = 4000) -> Counter:
    from shardsmith.readers.weights import weighted_draws

    chosen = class_weights(spec, ["a", "b"])
    return Counter(labels[weighted_draws(chosen, labels, draws).order(1, 0)].tolist())


@pytest.mark.parametrize("spec", ["a=5e-324,b=1e-323", "a=0.85e308,b=1.7e308", "a=1,b=2"])
def test_the_mix_follows_the_weights_ratio_from_sub_normal_to_the_largest_float(spec):
    """a:b is 1:2 in each spec: 5e-324 is the smallest float, 1.7e308 near the largest."""
    labels, draws = np.array([0, 1]), 4000
    counts = mix_of(spec, labels, draws)
    bound = SIGMAS * math.sqrt(draws * (1 / 3) * (2 / 3))
    assert abs(counts[0] - draws / 3) <= bound, (spec, counts)


@pytest.mark.parametrize(("spec", "problem"), [
    ("a=1e-400", "too small for a float"),
    ("a=1_000", "is not a number"),
    ("a=\uff11\uff10", "is not a number"),  # fullwidth "10"
    ("a=1e999", "must be finite"),
])
def test_a_weight_literal_float_would_misread_is_refused(spec, problem):
    with pytest.raises(WeightsError, match=problem):
        class_weights(spec, ["a", "b"])


def test_a_weight_past_the_largest_float_is_a_weights_error():
    with pytest.raises(WeightsError, match="too large for a weight"):
        class_weights({"a": 10**400}, ["a", "b"])
    assert class_weights({"a": 0, "b": 1e308}, ["a", "b"]).per_class == (0.0, 1e308)


def test_seeds_and_epochs_past_32_bits_draw_their_own_epochs():
    from shardsmith.readers.weights import weighted_draws

    draws = weighted_draws(class_weights("*=1", ["a", "b"]), np.arange(50) % 2, 64)
    assert (draws.order(3, 2**32) != draws.order(3, 0)).any()
    assert (draws.order(2**32 + 3, 0) != draws.order(3, 0)).any()
    assert (draws.order(-1, 0) != draws.order(2**32 - 1, 0)).any()
    assert (draws.order(3, 1) == draws.order(3, 1)).all()


@pytest.mark.parametrize(("state", "problem"), [
    ([("epoch", 0)], "expected a mapping"),
    ({"epoch": 0, "start": -1}, "start must be a whole number"),
    ({"epoch": 0, "start": 10**6}, "start 1,000,000 is past the end of the epoch"),
    ({"epoch": 0, "start": 2, "done": 10**6}, "done 1,000,000 from start 2 is past the end"),
])
def test_a_resume_state_that_is_no_position_of_the_epoch_is_a_value_error(parts, state,
                                                                           problem):
    data = weighted(parts)
    with pytest.raises(ValueError, match=problem):
        data.load_state_dict(state)
    data.load_state_dict({"epoch": 0, "start": len(data)})  # the end of an epoch: nothing left


def test_inspect_weights_of_the_largest_float_give_finite_shares_and_valid_json(parts):
    """1e308 twice once overflowed the sum: 'nan%', a bare NaN in --json, numpy warnings."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's overflow warning fails the command
        result = cli("inspect", parts, "--weights", "good=1e308,scratch=1e308", "--json")
        text = cli("inspect", parts, "--weights", "good=1e308,scratch=1e308")
    assert result.exit_code == 0 and text.exit_code == 0, (result.output, text.output)

    def no_constant(name: str) -> None:
        raise AssertionError(f"not JSON: {name}")

    mix = json.loads(result.output, parse_constant=no_constant)
    shares = {row["class"]: row["expected_share"] for row in mix["classes"]}
    present = train_labels(parts) + Counter(s["label"] for s in images.samples_of(parts)
                                            if s["split"] != "train")
    total = present[CLASSES.index("good")] + present[CLASSES.index("scratch")]
    assert shares == {"dent": pytest.approx(0, abs=1e-300),  # weight 1 of ~2e308
                      "good": pytest.approx(present[1] / total),
                      "scratch": pytest.approx(present[2] / total)}
    assert "nan" not in text.output.lower()


def test_the_former_maximum_of_draws_is_refused_as_past_the_bound_of_its_cost(parts):
    """2**28 draws would take ~8.9 GB in each worker; the bound is 2**24 (~540 MB)."""
    with pytest.raises(WeightsError, match="at most 16,777,216 a weighted epoch"):
        weighted(parts, draws=2**28)
    assert len(weighted(parts, draws=2**20, batch_size=2**20)) == 1


def test_running_out_of_memory_is_one_line_and_exit_1(parts, monkeypatch):
    import shardsmith.insight.class_mix

    def out_of_memory(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(shardsmith.insight.class_mix, "class_mix", out_of_memory)
    line = one_error_line(cli("inspect", parts, "--weights", "*=1", "--draws", 10**6), 1)
    assert "out of memory" in line


def test_a_spec_is_read_in_one_pass_over_the_classes():
    """A SPEC of 50,000 terms over 50,000 classes took 19 s: a list search per term."""
    from collections.abc import Sequence

    class CountedClasses(Sequence):
        reads = 0

        def __init__(self, names: list[str]):
            self.names = names

        def __len__(self) -> int:
            return len(self.names)

        def __getitem__(self, index):
            CountedClasses.reads += 1
            return self.names[index]

    count = 2000
    names = CountedClasses([f"c{number}" for number in range(count)])
    chosen = class_weights(",".join(f"c{number}={number % 7}" for number in range(count)),
                           names)
    assert chosen.per_class[9] == 2.0
    assert CountedClasses.reads <= 3 * count, CountedClasses.reads


def test_the_unweighted_order_uses_the_seed_and_the_epoch_whole(parts):
    data = dataset(parts, split="train", decode=False)
    assert (epoch_order(data.table, 0, 2**32 + 3) != epoch_order(data.table, 0, 3)).any()
    assert (epoch_order(data.table, 2**32 + 3, 0) != epoch_order(data.table, 3, 0)).any()
    assert (epoch_order(data.table, -1, 0) != epoch_order(data.table, 2**32 - 1, 0)).any()


def test_the_unweighted_order_of_seeds_and_epochs_below_2_to_the_32_is_unchanged(parts):
    """The words seeding an epoch below 2**32 are the ones they always were: an order a run
    recorded stays the order it reads."""
    data = dataset(parts, split="train", decode=False)
    for seed, epoch in ((0, 0), (7, 2), (2**32 - 1, 2**32 - 1)):
        rng = np.random.default_rng([seed, epoch])
        blocks = []
        for start, end in data.table.shard_ranges():
            phase = int(rng.integers(256)) if end - start > 256 else 0
            blocks.append((start, end))
            assert phase == 0  # shards of 8 samples: one block each
        expected = np.concatenate([low + rng.permutation(high - low)
                                   for low, high in (blocks[i] for i in
                                                     rng.permutation(len(blocks)))])
        assert (epoch_order(data.table, seed, epoch) == expected).all()

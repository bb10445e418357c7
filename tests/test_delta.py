"""What a pack run changes, decided before any pixel is read: ``delta.diff`` on made-up
manifests and sample records, ``delta.resolve`` on made-up execution results.  No image is
decoded and no file is written: the Delta is a value."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from shardsmith.dataset.formats import ShardLimits
from shardsmith.dataset.manifest import (
    Manifest,
    RejectEntry,
    SampleIndexEntry,
    SampleRecord,
    ShardEntry,
    SplitTotals,
    Totals,
)
from shardsmith.errors import OutputStateError
from shardsmith.packing.delta import Facts, diff, resolve
from shardsmith.packing.incremental import append_classes, merged_by_compaction
from shardsmith.packing.plan import Plan, make_plan, sample_key
from shardsmith.packing.scan import SourceFile, SourceTable

SPLITS = (("train", 1.0),)
SHARD_0 = "train-000000.tar"
SHARD_1 = "train-000001.tar"


def table(*files: tuple[str, int, int] | tuple[str, int, int, int]) -> SourceTable:
    """A scan of (path, size, mtime_ns[, label])."""
    return SourceTable.of(SourceFile(*file) for file in files)


def planned(*files: tuple) -> Plan:
    return make_plan(table(*files), SPLITS, seed=0)


def record(path: str, shard: str, size: int = 10, mtime: int = 1, digest: str = "xxh3:aa",
           label: int = -1, annotation: str | None = None) -> SampleRecord:
    """The sample index line of ``path``, packed into ``shard``."""
    return SampleRecord(sample_key(path), path, label, "train", shard, 8, 8, 100, size, mtime,
                        digest, annotation_digest=annotation)


def shard(name: str, samples: int = 2, size: int = 1000) -> ShardEntry:
    return ShardEntry(name, "train", samples, size, "0" * 64)


def manifest(*shards: ShardEntry, rejects: tuple[RejectEntry, ...] = (),
             classes: tuple[str, ...] = (), next_numbers: dict | None = None) -> Manifest:
    """A previous version holding ``shards`` (no file of it exists: diff reads none)."""
    return Manifest(
        schema_version=3, format="webdataset", classes=classes,
        splits={"train": SplitTotals()}, shards=shards,
        samples_index=SampleIndexEntry("samples-v1.jsonl", 0, "0" * 64),
        totals=Totals(0, 0, 0, 0, 0, 0), fingerprint="f", rejects=rejects,
        content_fingerprint="c" * 64, next_shard_numbers=next_numbers or {},
    )


def position(plan: Plan, relpath: str) -> int:
    return int(plan.position_of()[plan.table.index_of(relpath)])


def relpaths(plan: Plan, positions: np.ndarray) -> list[str]:
    return sorted(plan.table.relpaths[int(plan.order[number])] for number in positions)


# ------------------------------------------------------------------------- certain sets

def test_a_first_pack_is_all_new_and_processes_the_whole_plan():
    plan = planned(("a.jpg", 10, 1), ("b.jpg", 10, 1))
    delta = diff(None, (), plan, Facts())
    assert delta.new == 2 and delta.items() is plan
    assert delta.summary() == "2 new (a first pack)"


def test_an_unchanged_tree_has_nothing_to_do_and_keeps_every_shard():
    plan = planned(("a.jpg", 10, 1), ("b.jpg", 10, 1))
    previous = manifest(shard(SHARD_0))
    delta = diff(previous, [record("a.jpg", SHARD_0), record("b.jpg", SHARD_0)], plan, Facts())
    assert len(delta.items()) == 0 and not delta.stale_shards and not delta.leaving_keys
    assert delta.summary() == "0 new, 0 removed, 0 changed; 0 shards rewritten, 1 kept"


def test_a_new_source_is_processed_and_a_removed_one_leaves_and_rewrites_its_shard():
    plan = planned(("a.jpg", 10, 1), ("c.jpg", 10, 1))
    previous = manifest(shard(SHARD_0), shard(SHARD_1))
    records = [record("a.jpg", SHARD_0), record("b.jpg", SHARD_1)]
    delta = diff(previous, records, plan, Facts())
    assert [item.source.relpath for item in delta.items()] == ["c.jpg"]
    assert delta.new == 1 and delta.removed == 1
    assert delta.stale_shards == {SHARD_1} and delta.leaving_keys == {sample_key("b.jpg")}
    assert relpaths(plan, delta.new_positions()) == ["c.jpg"]
    assert delta.summary() == "1 new, 1 removed, 0 changed; 1 shard rewritten, 1 kept"


class Passes:
    """Records that can be read again, counting how often they are."""

    def __init__(self, records: list[SampleRecord]):
        self.records, self.passes = records, 0

    def __iter__(self):
        self.passes += 1
        return iter(self.records)


def test_the_records_are_read_once_as_a_stream():
    plan = planned(("a.jpg", 10, 1), ("b.jpg", 10, 9))
    records = Passes([record("a.jpg", SHARD_0), record("b.jpg", SHARD_0, digest="")])
    diff(manifest(shard(SHARD_0)), records, plan, Facts())
    assert records.passes == 1


def test_records_that_cannot_be_read_again_are_refused():
    plan = planned(("a.jpg", 10, 1))
    with pytest.raises(TypeError, match="not an iterator"):
        diff(manifest(shard(SHARD_0)), iter([record("a.jpg", SHARD_0)]), plan, Facts())


def test_a_label_changed_in_the_labels_file_is_certain_and_rewrites_the_shard():
    plan = planned(("a.jpg", 10, 1, 1), ("b.jpg", 10, 1, 0))
    previous = manifest(shard(SHARD_0), classes=("x", "y"))
    records = [record("a.jpg", SHARD_0, label=0), record("b.jpg", SHARD_0, label=0)]
    delta = diff(previous, records, plan, Facts(("x", "y"), compare_labels=True))
    assert [item.source.relpath for item in delta.items()] == ["a.jpg"]
    assert delta.items()[0].expected_digest is None  # decoded: its samples are made anew
    assert delta.changed == 1 and not len(delta.candidates)
    assert delta.stale_shards == {SHARD_0} and delta.leaving_keys == {sample_key("a.jpg")}


def test_changed_annotations_make_a_source_certainly_changed():
    plan = planned(("a.jpg", 10, 1), ("b.jpg", 10, 1))
    digests = np.array([0x1F, 0x2A], np.uint64)  # per table position: a, b
    records = [record("a.jpg", SHARD_0, annotation="1f"), record("b.jpg", SHARD_0,
                                                                  annotation="2b")]
    delta = diff(manifest(shard(SHARD_0)), records, plan, Facts(annotation_digests=digests))
    assert [item.source.relpath for item in delta.items()] == ["b.jpg"]
    assert delta.changed == 1 and delta.leaving_keys == {sample_key("b.jpg")}


def test_a_tiled_original_counts_once_when_its_annotations_changed():
    plan = planned(("a.jpg", 10, 1, 1))
    tiles = [record("a.jpg", SHARD_0, label=0), record("a.jpg", SHARD_1, label=0)]
    tiles[1] = replace(tiles[1], key=sample_key("a.jpg") + "_r000c001")
    delta = diff(manifest(shard(SHARD_0), shard(SHARD_1), classes=("x", "y")), tiles, plan,
                 Facts(("x", "y"), compare_labels=True))
    assert delta.changed == 1 and delta.stale_shards == {SHARD_0, SHARD_1}
    assert len(delta.leaving_keys) == 2


def test_a_damaged_shard_is_repaired_its_samples_packed_again_not_copied():
    plan = planned(("a.jpg", 10, 1), ("b.jpg", 10, 1))
    previous = manifest(shard(SHARD_0), shard(SHARD_1))
    records = [record("a.jpg", SHARD_0), record("b.jpg", SHARD_1)]
    delta = diff(previous, records, plan, Facts(damaged=frozenset({SHARD_1})))
    assert [item.source.relpath for item in delta.items()] == ["b.jpg"]
    assert delta.repaired == 1 and [s.name for s in delta.damaged] == [SHARD_1]
    assert not delta.stale_shards and delta.leaving_keys == {sample_key("b.jpg")}
    assert delta.summary() == ("0 new, 0 removed, 0 changed, 1 sample repaired; "
                               "0 shards rewritten, 1 kept, 1 damaged")


def tiles(path: str, *shards: str, **fields) -> list[SampleRecord]:
    """The sample records of the tiles of ``path``, one in each of ``shards``."""
    return [replace(record(path, name, **fields), key=f"{sample_key(path)}_r000c{column:03d}")
            for column, name in enumerate(shards)]


@pytest.mark.parametrize("damaged_first", [False, True])
def test_an_original_with_a_tile_in_a_damaged_shard_is_packed_again_all_its_tiles_leave(
        damaged_first):
    plan = planned(("a.jpg", 10, 1), ("b.jpg", 10, 1))
    previous = manifest(shard(SHARD_0), shard(SHARD_1))
    records = [*tiles("a.jpg", SHARD_0, SHARD_1), record("b.jpg", SHARD_0)]
    if damaged_first:
        records[0], records[1] = records[1], records[0]
    delta = diff(previous, records, plan, Facts(damaged=frozenset({SHARD_1})))
    assert [item.source.relpath for item in delta.items()] == ["a.jpg"]
    assert delta.items()[0].expected_digest is None  # decoded: every tile is made anew
    assert delta.leaving_keys == {tile.key for tile in records if tile.path == "a.jpg"}
    assert delta.stale_shards == {SHARD_0}  # b.jpg is copied out of it, not decoded
    assert delta.repaired == 1 and not len(delta.candidates)


@pytest.mark.parametrize("damaged_first", [False, True])
def test_a_touched_original_with_a_tile_in_a_damaged_shard_is_no_longer_a_candidate(
        damaged_first):
    plan = planned(("a.jpg", 10, 9))
    records = tiles("a.jpg", SHARD_0, SHARD_1, digest="xxh3:a1")
    if damaged_first:
        records.reverse()
    delta = diff(manifest(shard(SHARD_0), shard(SHARD_1)), records, plan,
                 Facts(damaged=frozenset({SHARD_1})))
    assert delta.items()[0].expected_digest is None and not len(delta.candidates)
    assert delta.leaving_keys == {tile.key for tile in records}
    assert delta.stale_shards == {SHARD_0} and not len(delta.candidate_samples)


def test_the_records_are_read_a_second_time_only_for_a_tile_kept_before_its_damaged_one():
    plan = planned(("a.jpg", 10, 1))
    previous, damaged = manifest(shard(SHARD_0), shard(SHARD_1)), frozenset({SHARD_1})
    kept_first = Passes(tiles("a.jpg", SHARD_0, SHARD_1))
    diff(previous, kept_first, plan, Facts(damaged=damaged))
    damaged_first = Passes(tiles("a.jpg", SHARD_1, SHARD_0))
    diff(previous, damaged_first, plan, Facts(damaged=damaged))
    assert (kept_first.passes, damaged_first.passes) == (2, 1)


def test_a_reject_whose_file_did_not_change_is_kept_without_reading_it():
    plan = planned(("a.jpg", 10, 1), ("bad.jpg", 5, 1))
    kept = RejectEntry("bad.jpg", "corrupt", "truncated", 5, 1)
    delta = diff(manifest(shard(SHARD_0), rejects=(kept,)), [record("a.jpg", SHARD_0)], plan,
                 Facts())
    assert delta.kept_rejects == (kept,) and len(delta.items()) == 0 and delta.new == 0


def test_a_reject_whose_file_changed_is_judged_again_and_counts_as_changed():
    plan = planned(("a.jpg", 10, 1), ("bad.jpg", 7, 2))
    reject = RejectEntry("bad.jpg", "corrupt", "truncated", 5, 1)
    delta = diff(manifest(shard(SHARD_0), rejects=(reject,)), [record("a.jpg", SHARD_0)],
                 plan, Facts())
    assert [item.source.relpath for item in delta.items()] == ["bad.jpg"]
    assert delta.kept_rejects == () and delta.changed == 1 and delta.new == 0


def test_a_reject_whose_file_is_gone_is_removed_and_one_the_scan_found_is_left_to_it():
    plan = planned(("a.jpg", 10, 1))
    gone = RejectEntry("gone.jpg", "corrupt", "truncated", 5, 1)
    unlisted = RejectEntry("locked", "unreadable", "permission denied")  # no stat: the scan's
    delta = diff(manifest(shard(SHARD_0), rejects=(gone, unlisted)),
                 [record("a.jpg", SHARD_0)], plan, Facts())
    assert delta.removed == 1 and delta.kept_rejects == ()


# ------------------------------------------------------------------------- candidates

def stat_changed() -> tuple[Plan, Manifest, list[SampleRecord]]:
    """a.jpg touched (its mtime changed), b.jpg as it was, in two shards."""
    plan = planned(("a.jpg", 10, 9), ("b.jpg", 10, 1))
    previous = manifest(shard(SHARD_0, 1), shard(SHARD_1, 1))
    return plan, previous, [record("a.jpg", SHARD_0, digest="xxh3:a1"),
                            record("b.jpg", SHARD_1)]


def test_a_source_whose_stat_changed_is_a_candidate_carrying_its_previous_digest():
    plan, previous, records = stat_changed()
    delta = diff(previous, records, plan, Facts())
    assert delta.items()[0].source.relpath == "a.jpg"
    assert delta.items()[0].expected_digest == "xxh3:a1"
    assert delta.changed == 0 and not delta.stale_shards and not delta.leaving_keys
    assert delta.summary() == ("0 new, 0 removed, up to 1 changed; 0 to 1 shard rewritten, "
                               "1 to 2 kept")


def test_a_candidate_found_unchanged_is_touched_and_its_shard_kept():
    plan, previous, records = stat_changed()
    outcome = resolve(diff(previous, records, plan, Facts()), [], 0,
                      {"a.jpg": ["xxh3:a1", 10, 9]})
    assert outcome.changes["touched"] == 1 and outcome.changes["changed"] == 0
    assert not outcome.stale_shards and not outcome.leaving_keys
    assert outcome.touched == {"a.jpg": ["xxh3:a1", 10, 9]}


def test_a_candidate_with_new_content_changed_its_sample_leaves_and_its_shard_is_rewritten():
    plan, previous, records = stat_changed()
    outcome = resolve(diff(previous, records, plan, Facts()), [], 1, {})
    assert outcome.changes["changed"] == 1 and outcome.changes.get("touched", 0) == 0
    assert outcome.stale_shards == {SHARD_0}
    assert outcome.leaving_keys == {sample_key("a.jpg")}


def test_a_previous_sample_without_a_digest_is_decoded_not_compared():
    plan = planned(("a.jpg", 10, 9))
    delta = diff(manifest(shard(SHARD_0)), [record("a.jpg", SHARD_0, digest="")], plan,
                 Facts())
    assert delta.items()[0].expected_digest is None and not len(delta.candidates)


def test_a_touched_sample_without_a_digest_changed_it_leaves_and_its_shard_is_rewritten():
    plan = planned(("a.jpg", 10, 9), ("b.jpg", 10, 1))
    records = [record("a.jpg", SHARD_0, digest=""), record("b.jpg", SHARD_0)]
    delta = diff(manifest(shard(SHARD_0)), records, plan, Facts())
    assert delta.leaving_keys == {sample_key("a.jpg")} and delta.stale_shards == {SHARD_0}
    assert delta.changed == 1
    assert delta.summary() == "0 new, 0 removed, 1 changed; 1 shard rewritten, 0 kept"
    outcome = resolve(delta, [], 1, {})
    assert outcome.leaving_keys == {sample_key("a.jpg")} and outcome.changes["changed"] == 1


def test_a_tile_without_a_digest_sends_every_tile_of_its_original_out_once():
    plan = planned(("a.jpg", 10, 9))
    records = tiles("a.jpg", SHARD_0, SHARD_1, "train-000002.tar", digest="xxh3:a1")
    records[1] = replace(records[1], source_digest="")  # tile 0 was a candidate before it
    previous = manifest(shard(SHARD_0), shard(SHARD_1), shard("train-000002.tar"))
    delta = diff(previous, records, plan, Facts())
    assert not len(delta.candidates) and delta.changed == 1
    assert delta.leaving_keys == {tile.key for tile in records}
    assert delta.stale_shards == {SHARD_0, SHARD_1, "train-000002.tar"}


def test_new_sources_rejected_count_as_rejected_not_added():
    plan = planned(("a.jpg", 10, 1), ("new.jpg", 10, 1), ("new2.jpg", 10, 1))
    delta = diff(manifest(shard(SHARD_0)), [record("a.jpg", SHARD_0)], plan, Facts())
    rejected = RejectEntry("new2.jpg", "corrupt", "truncated", 10, 1)
    outcome = resolve(delta, [rejected], 1, {})
    assert (outcome.changes["added"], outcome.changes["rejected"]) == (1, 1)


# ------------------------------------------------------------------------- shard numbers

def test_numbering_only_grows_past_every_used_or_reserved_number():
    plan = planned(("a.jpg", 10, 1))
    records = [record("a.jpg", "train-000003.tar")]
    reserved = manifest(shard("train-000003.tar"), next_numbers={"train": 7})
    assert diff(reserved, records, plan, Facts()).next_numbers == {"train": 7}
    used = manifest(shard("train-000003.tar"), next_numbers={"train": 2})
    assert diff(used, records, plan, Facts()).next_numbers == {"train": 4}


def test_compaction_merges_the_small_shards_of_a_split_when_there_are_two_or_more():
    limits = ShardLimits(bytes=1000, samples=None)
    shards = [shard(SHARD_0, size=100), shard(SHARD_1, size=900),
              shard("train-000002.tar", size=200), shard("val-000000.tar", size=10)]
    shards[3] = ShardEntry("val-000000.tar", "val", 1, 10, "0" * 64)
    assert merged_by_compaction(shards, limits) == {SHARD_0, "train-000002.tar"}
    assert merged_by_compaction(shards, limits, frozenset({SHARD_0})) == set()


# ------------------------------------------------------------------------- the value itself

def test_the_digest_names_the_delta_the_same_inputs_give_the_same_one():
    plan, previous, records = stat_changed()
    first = diff(previous, records, plan, Facts(identity="cfg:src"))
    again = diff(previous, list(records), plan, Facts(identity="cfg:src"))
    assert first.digest == again.digest
    assert diff(previous, records, plan, Facts(identity="other:src")).digest != first.digest
    damaged = Facts(identity="cfg:src", damaged=frozenset({SHARD_1}))
    assert diff(previous, records, plan, damaged).digest != first.digest


def test_the_delta_is_frozen():
    plan, previous, records = stat_changed()
    delta = diff(previous, records, plan, Facts())
    with pytest.raises(AttributeError):
        delta.removed = 5  # type: ignore[misc]


def test_a_class_list_that_does_not_begin_with_the_previous_one_is_refused():
    plan = planned(("a.jpg", 10, 1, 0))
    with pytest.raises(OutputStateError, match="class list"):
        diff(manifest(shard(SHARD_0), classes=("x", "y")), [], plan, Facts(("y", "x")))


def test_classes_new_in_a_scan_go_last_in_a_new_table_the_scan_unchanged():
    files = table(("a/1.jpg", 1, 1, 0), ("c/2.jpg", 1, 1, 1))  # scan classes ("a", "c")
    merged_files, classes = append_classes(files, ("b", "c"), ("a", "c"))
    assert classes == ("b", "c", "a")
    assert merged_files.labels.tolist() == [2, 1] and files.labels.tolist() == [0, 1]


# ------------------------------------------------------- classes appended, annotation rules

def bad_annotation(path: str, digest: str | None, size: int = 5) -> RejectEntry:
    return RejectEntry(path, "bad_annotation", "class 2 is not in source.annotations.classes",
                       size, 1, digest)


def test_a_bad_annotation_reject_whose_annotations_did_not_change_is_kept():
    plan = planned(("a.jpg", 10, 1), ("bad.jpg", 5, 1))
    reject = bad_annotation("bad.jpg", "2a")
    digests = np.array([0x1F, 0x2A], np.uint64)  # per table position: a, bad
    delta = diff(manifest(shard(SHARD_0), rejects=(reject,)),
                 [record("a.jpg", SHARD_0, annotation="1f")], plan,
                 Facts(annotation_digests=digests))
    assert delta.kept_rejects == (reject,) and len(delta.items()) == 0


def test_a_bad_annotation_reject_is_judged_again_when_its_label_file_changed():
    plan = planned(("a.jpg", 10, 1), ("bad.jpg", 5, 1))  # the image itself is as it was
    digests = np.array([0x1F, 0x2B], np.uint64)
    delta = diff(manifest(shard(SHARD_0), rejects=(bad_annotation("bad.jpg", "2a"),)),
                 [record("a.jpg", SHARD_0, annotation="1f")], plan,
                 Facts(annotation_digests=digests))
    assert [item.source.relpath for item in delta.items()] == ["bad.jpg"]
    assert delta.kept_rejects == () and delta.changed == 1


def test_a_bad_annotation_reject_is_judged_again_when_the_classes_grew():
    plan = planned(("a.jpg", 10, 1), ("bad.jpg", 5, 1))
    digests = np.array([0x1F, 0x2A], np.uint64)
    delta = diff(manifest(shard(SHARD_0), rejects=(bad_annotation("bad.jpg", "2a"),)),
                 [record("a.jpg", SHARD_0, annotation="1f")], plan,
                 Facts(annotation_digests=digests, classes_appended=True))
    assert [item.source.relpath for item in delta.items()] == ["bad.jpg"]
    assert not delta.stale_shards  # the packed samples name no new id: they stay


@pytest.mark.parametrize("recorded", [None, "not hex", "2a" * 40])
def test_a_bad_annotation_reject_without_a_readable_digest_is_judged_again(recorded):
    plan = planned(("bad.jpg", 5, 1))
    delta = diff(manifest(rejects=(bad_annotation("bad.jpg", recorded),)), [], plan,
                 Facts(annotation_digests=np.array([0x2A], np.uint64)))
    assert [item.source.relpath for item in delta.items()] == ["bad.jpg"]


def test_a_reject_of_another_reason_stays_when_only_the_classes_grew():
    plan = planned(("bad.jpg", 5, 1))
    reject = RejectEntry("bad.jpg", "corrupt", "truncated", 5, 1, "2a")
    delta = diff(manifest(rejects=(reject,)), [], plan,
                 Facts(annotation_digests=np.array([0x2B], np.uint64), classes_appended=True))
    assert delta.kept_rejects == (reject,)


def test_older_annotation_rules_send_every_annotated_source_to_be_derived_again():
    plan = planned(("a.jpg", 10, 1), ("b.jpg", 10, 1), ("c.jpg", 10, 1))
    digests = np.array([0x1F, 0x2A, 0x3C], np.uint64)
    tiles_of_b = tiles("b.jpg", SHARD_0, SHARD_1, annotation="2a")
    records = [record("a.jpg", SHARD_0, annotation="1f"), *tiles_of_b,
               record("c.jpg", SHARD_1, annotation="3c")]
    delta = diff(manifest(shard(SHARD_0), shard(SHARD_1)), records, plan,
                 Facts(annotation_digests=digests, older_rules=True))
    assert relpaths(plan, delta.work) == ["a.jpg", "b.jpg", "c.jpg"]
    assert relpaths(plan, delta.reannotated_positions()) == ["a.jpg", "b.jpg", "c.jpg"]
    assert all(item.expected_digest is None for item in delta.items())  # copied, not compared
    assert delta.reannotated == 3 and delta.changed == 0  # b counts once for its two tiles
    assert len(delta.leaving_keys) == 4 and delta.stale_shards == {SHARD_0, SHARD_1}
    assert delta.summary() == ("0 new, 0 removed, 0 changed, 3 re-annotated (3 with their "
                               "JPEG bytes copied); 2 shards rewritten, 0 kept")
    assert resolve(delta, [], 3, {}).changes["reannotated"] == 3


def test_older_annotation_rules_leave_a_changed_source_counted_as_changed():
    plan = planned(("a.jpg", 10, 1), ("b.jpg", 10, 1))
    digests = np.array([0x1F, 0x2B], np.uint64)
    records = [record("a.jpg", SHARD_0, annotation="1f"),
               record("b.jpg", SHARD_0, annotation="2a")]
    delta = diff(manifest(shard(SHARD_0)), records, plan,
                 Facts(annotation_digests=digests, older_rules=True))
    assert (delta.changed, delta.reannotated) == (1, 1)
    assert relpaths(plan, delta.reannotated_positions()) == ["a.jpg"]


def test_samples_without_annotations_are_not_derived_again_under_older_rules():
    plan = planned(("a.jpg", 10, 1))
    delta = diff(manifest(shard(SHARD_0)), [record("a.jpg", SHARD_0)], plan,
                 Facts(older_rules=True))
    assert len(delta.items()) == 0 and delta.reannotated == 0


def test_a_source_decoded_again_that_is_rejected_now_counts_as_rejected_not_changed():
    plan = planned(("a.jpg", 10, 9), ("b.jpg", 10, 1))
    records = [record("a.jpg", SHARD_0, digest=""), record("b.jpg", SHARD_0)]
    delta = diff(manifest(shard(SHARD_0)), records, plan, Facts())
    outcome = resolve(delta, [RejectEntry("a.jpg", "corrupt", "not a JPEG")], 0, {})
    assert (outcome.changes["changed"], outcome.changes["rejected"]) == (0, 1)
    assert outcome.leaving_keys == {sample_key("a.jpg")}

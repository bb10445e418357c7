"""One schema (issue 17): the config, the manifest and the sample index are read by one strict
validation engine, errors are one line naming the path, and the settings fingerprint stays our
own function of the settings, equal across releases.
"""

from __future__ import annotations

import hashlib
import json
import re
import types

import pytest

import shardsmith.dataset.manifest as manifest_module
from shardsmith.config import load_config
from shardsmith.dataset.manifest import (
    Manifest,
    SampleIndexEntry,
    SampleRecord,
    iter_sample_index,
    read_manifest,
    sample_line,
    write_manifest,
)
from shardsmith.errors import ConfigError, ManifestError
from shardsmith.schema import decode, line_reader, parse

# Computed with the release before the schema engine changed (issue 17): a dataset packed by any
# release with these settings has this fingerprint.  A change here makes every existing
# dataset a foreign one (``pack`` would refuse to build on it without --overwrite).
GOLDEN_FINGERPRINTS = {
    "default": ({}, "e7d3da46b61ce05c4b43e375ade07fa1f33f43d2d4a65ff5fd9601866042ece7"),
    "tiled": ({"image.tiles.size": 1024, "image.tiles.overlap": 64, "image.size": 1024},
              "014d984779870a8d9659f9074a4f2b25429bfe1583878b183b49ee06242ec4ce"),
    "annotated": ({"source.annotations.coco": "coco.json",
                   "source.annotations.min_visible": 0.5},
                  "fd41999e84bd082b0e3b17eaa1661f2dd897d82f43f283231bb1e0367420e019"),
    "tfrecord": ({"output.format": "tfrecord", "image.size": 256,
                  "splits": "train=0.8,val=0.2", "seed": 7},
                 "617492b5942298d0de3176abca43750f61c4939ca7138a0b6eca023751fbaccd"),
}


@pytest.mark.parametrize("name", list(GOLDEN_FINGERPRINTS))
def test_the_settings_fingerprint_is_the_one_every_release_computed(name):
    overrides, fingerprint = GOLDEN_FINGERPRINTS[name]
    assert load_config(None, overrides).fingerprint() == fingerprint


# ------------------------------------------------------------------ strict, one line, the path


@pytest.mark.parametrize(("overrides", "message"), [
    ({"image.size": "512"}, "image.size: expected an integer, got '512'"),
    ({"image.size": 512.0}, "image.size: expected an integer, got 512.0"),
    ({"image.size": True}, "image.size: expected an integer, got True"),
    ({"run.quiet": 1}, "run.quiet: expected true or false, got 1"),
    ({"output.shard_samples": "x"}, "output.shard_samples: expected an integer, got 'x'"),
    ({"image.subsampling": 443}, 'image.subsampling: expected a string, got 443 (quote it: "443")'),
    ({"image.background": [1, 2, "x"]}, "image.background[2]: expected an integer, got 'x'"),
    ({"image.background": [1, 2, 300]}, "image.background: expected 3 integers 0-255, got "
                                        "[1, 2, 300]"),
    ({"source.extensions": [1]}, 'source.extensions[0]: expected a string, got 1 (quote it: "1")'),
    ({"image.tiles": 3}, "image.tiles: expected a mapping, got int"),
])
def test_a_setting_of_the_wrong_type_is_one_line_naming_it(overrides, message):
    with pytest.raises(ConfigError) as caught:
        load_config(None, overrides)
    assert str(caught.value) == message


def test_an_unquoted_subsampling_is_read_as_its_name_as_every_release_read_it():
    assert load_config(None, {"image.subsampling": 444}).image.subsampling == "444"


def test_a_whole_number_is_still_a_fraction_and_a_comma_list_still_a_list():
    config = load_config(None, {"output.shard_size_mb": 100, "source.extensions": "JPG, png"})
    assert config.output.shard_size_mb == 100.0 and isinstance(config.output.shard_size_mb, float)
    assert config.source.extensions == ("jpg", "png")


def manifest_dict(**changes: object) -> dict:
    """A small valid manifest as an older release wrote it (no recorded facts)."""
    digest = "0" * 64
    manifest = {
        "schema_version": 2, "format": "webdataset", "classes": ["a", "b"],
        "splits": {"train": {"samples": 2, "shards": 1, "bytes": 100}},
        "shards": [{"name": "train-000000.tar", "split": "train", "samples": 2, "bytes": 100,
                    "sha256": digest,
                    "index": {"name": "train-000000.idx", "bytes": 10, "sha256": digest}}],
        "samples_index": {"name": "samples-v1.jsonl", "bytes": 10, "sha256": digest,
                          "samples": 2},
        "totals": {"seen": 2, "packed": 2, "rejected": 0, "excluded": 0, "bytes_in": 5,
                   "bytes_out": 100},
        "fingerprint": digest, "config": {}, "excluded": {"hidden": 1},
    }
    manifest.update(changes)
    return manifest


def read(data: dict) -> Manifest:
    return parse(Manifest, data, "")


@pytest.mark.parametrize(("change", "message"), [
    (lambda m: m["shards"][0].update(bytes="abc"),
     "shards[0].bytes: expected an integer, got 'abc'"),
    (lambda m: m["shards"][0].update(bytes=100.0),
     "shards[0].bytes: expected an integer, got 100.0"),
    (lambda m: m["shards"][0].update(samples=True),
     "shards[0].samples: expected an integer, got True"),
    (lambda m: m["shards"][0].update(samples=-3),
     "shards[0].samples: -3 is out of range (from 0 to 9007199254740991)"),
    (lambda m: m["shards"][0].update(bytes=10**30),
     "shards[0].bytes: 100000000000000000000000000... is out of range (from 0 to "
     "9007199254740991)"),
    (lambda m: m["shards"][0].pop("sha256"), "shards[0].sha256: missing"),
    (lambda m: m["shards"][0]["index"].update(bytes="1"),
     "shards[0].index.bytes: expected an integer, got '1'"),
    (lambda m: m["excluded"].update(symlink="many"),
     "excluded.symlink: expected an integer, got 'many'"),
    (lambda m: m["splits"].update(val={"samples": 1.5}),
     "splits.val.samples: expected an integer, got 1.5"),
    (lambda m: m.update(next_shard_numbers={"train": 10**9}),
     "next_shard_numbers.train: 1000000000 is out of range (from 0 to 999999)"),
    (lambda m: m.update(shards="abc"), "shards: expected a list, got 'abc'"),
    (lambda m: m.update(has_masks="yes"), "has_masks: expected true or false, got 'yes'"),
    (lambda m: m.update(image_size=8), "image_size: 8 is out of range (from 16 to 16384)"),
    (lambda m: m.update(image_size=2**64),
     "image_size: 18446744073709551616 is out of range (from 16 to 16384)"),
    (lambda m: m.update(image_resize=3), "image_resize: expected a string, got 3"),
    (lambda m: m["shards"][0].update(name="../x.tar"),
     "shards[0].name: '../x.tar' is not a shard name shardsmith writes (refused: names must "
     "be plain file names of the dataset)"),
])
def test_a_manifest_field_of_the_wrong_type_or_size_is_one_line_naming_its_path(change,
                                                                                  message):
    data = manifest_dict()
    change(data)
    with pytest.raises(ManifestError) as caught:
        read(data)
    assert str(caught.value) == message


def test_a_top_level_that_is_not_a_mapping_is_named_as_the_document():
    with pytest.raises(ManifestError, match="^the document: expected a mapping, got list$"):
        read([manifest_dict()])


# ------------------------------------------------------------------ the dataset's facts


def test_an_older_manifest_gets_its_facts_from_the_settings_it_recorded():
    defaults = read(manifest_dict())
    assert (defaults.image_size, defaults.image_resize, defaults.has_masks) == (512, "fit", False)
    settings = {"image": {"size": 256, "resize": "pad"},
                "source": {"annotations": {"coco": "coco.json"}}}
    annotated = read(manifest_dict(config=settings))
    assert (annotated.image_size, annotated.image_resize, annotated.has_masks) == \
        (256, "pad", True)


def test_recorded_facts_that_agree_with_the_settings_are_read_as_recorded():
    settings = {"image": {"size": 64, "resize": "stretch"},
                "source": {"annotations": {"coco": "coco.json"}}}
    manifest = read(manifest_dict(config=settings, image_size=64, image_resize="stretch",
                                  has_masks=True))
    assert (manifest.image_size, manifest.image_resize, manifest.has_masks) == \
        (64, "stretch", True)


@pytest.mark.parametrize(("facts", "message"), [
    ({"image_size": 64}, "image_size 64 disagrees with its settings (image.size 512)"),
    ({"image_resize": "center_crop"},
     "image_resize center_crop disagrees with its settings (image.resize fit)"),
    ({"has_masks": True},
     "has_masks true disagrees with its settings (source.annotations: has_masks false)"),
])
def test_a_recorded_fact_the_settings_do_not_give_is_refused_naming_both(facts, message):
    with pytest.raises(ManifestError, match=f"^{re.escape(message)}: the manifest is damaged$"):
        read(manifest_dict(**facts))


@pytest.mark.parametrize(("document", "message"), [
    (b'{"a": 1, "b": {"c": 2, "c": 3}}', "not valid JSON: the key 'c' appears twice in one "
                                         "object"),
    (b'\xef\xbb\xbf{"a": 1}', "not valid JSON: starts with a byte-order mark (save it as UTF-8 "
                            "without one)"),
])
def test_a_document_with_a_key_twice_or_a_byte_order_mark_is_one_line(document, message):
    with pytest.raises(ManifestError) as caught:
        decode(document, "manifest.json", unique_keys=True)
    assert str(caught.value) == f"manifest.json: {message}"


def test_an_older_manifest_whose_settings_do_not_validate_is_one_line():
    with pytest.raises(ManifestError, match=r"^config: image\.size: expected an integer, got 'x'$"):
        read(manifest_dict(config={"image": {"size": "x"}}))


def test_a_new_manifest_writes_its_facts(tmp_path):
    manifest = read(manifest_dict(config={"image": {"size": 128}}))
    write_manifest(tmp_path, manifest)
    written = json.loads((tmp_path / "manifest.json").read_text())
    assert (written["image_size"], written["image_resize"], written["has_masks"]) == \
        (128, "fit", False)
    assert read_manifest(tmp_path) == manifest


# ------------------------------------------------------------------ sample index lines


RECORD = {"key": "a_0123abcd", "path": "a/0.jpg", "label": 0, "split": "train",
          "shard": "train-000000.tar", "width": 32, "height": 32, "jpeg_bytes": 900,
          "source_size": 5000, "source_mtime_ns": 1_700_000_000 * 10**9,
          "source_digest": "xxh3:0"}
read_line = line_reader(SampleRecord)


def test_a_sample_line_reads_the_same_by_the_fast_path_and_the_checked_one():
    line = sample_line(RECORD)
    assert read_line(line, "line 1") == parse(SampleRecord, json.loads(line), "line 1")


def test_a_path_that_is_not_utf8_written_as_a_lone_surrogate_escape_is_read():
    record = dict(RECORD, path="a/\udcff.jpg")  # os.fsdecode of the byte 0xff
    assert read_line(sample_line(record), "line 1").path == "a/\udcff.jpg"


@pytest.mark.parametrize(("line", "message"), [
    (sample_line(dict(RECORD, label="1")), "line 1.label: expected an integer, got '1'"),
    (sample_line(dict(RECORD, width=32.0)), "line 1.width: expected an integer, got 32.0"),
    (sample_line(dict(RECORD, label=2**40)),
     "line 1.label: 1099511627776 is out of range (from -1 to 2147483647)"),
    (sample_line(dict(RECORD, source_mtime_ns=10**30)),
     "line 1.source_mtime_ns: 100000000000000000000000000... is out of range (from "
     "-9223372036854775808 to 9223372036854775807)"),
    (sample_line(dict(RECORD, group=7)), "line 1.group: expected a string, got 7"),
    (sample_line({k: v for k, v in RECORD.items() if k != "shard"}), "line 1.shard: missing"),
    (sample_line(dict(RECORD, shard="val-000000.tar")),
     "line 1: sample a_0123abcd of split train is in val-000000.tar, a shard of another split"),
    (b'{"key": 1e400}\n', "line 1.key: expected a string, got inf"),
    (b'{"key": "\xff"}\n', "line 1: not valid JSON: \"'utf-8' codec can't decode byte 0xff in "
                            "position 9: invalid start byte\""),
    (b"[]\n", "line 1: expected a mapping, got list"),
])
def test_a_damaged_sample_line_is_one_line_naming_the_field(line, message):
    with pytest.raises(ManifestError) as caught:
        read_line(line, "line 1")
    assert str(caught.value) == message


def test_a_sample_line_nested_past_any_parser_is_one_line():
    line = b'{"key":' + b"[" * 100_000 + b"]" * 100_000 + b"}\n"
    with pytest.raises(ManifestError, match="^line 1: not valid JSON: 'maximum recursion depth"):
        read_line(line, "line 1")


def test_a_byte_order_mark_before_a_sample_line_is_named():
    with pytest.raises(ManifestError, match="^line 1: not valid JSON: starts with a byte-order"):
        read_line(b"\xef\xbb\xbf" + sample_line(RECORD), "line 1")


# ------------------------------------------------------------------ the index a block at a time


def index_of(tmp_path, lines: list[bytes]):
    """A sample index of ``lines`` as the manifest names it (name, size, sha256)."""
    data = b"".join(lines)
    (tmp_path / "samples-v1.jsonl").write_bytes(data)
    entry = SampleIndexEntry("samples-v1.jsonl", len(data), hashlib.sha256(data).hexdigest(),
                             len(lines))
    return types.SimpleNamespace(samples_index=entry)


def keyed(number: int, **changes) -> bytes:
    return sample_line(dict(RECORD, key=f"a_{number:08x}", **changes))


@pytest.mark.parametrize("block", [1 << 20, 64, 500])
def test_the_index_read_a_block_at_a_time_gives_every_record_in_order(tmp_path, monkeypatch,
                                                                      block):
    # blocks of 64 bytes end inside every line; one line is read by the checked path (a path
    # that is not UTF-8, which msgspec refuses): the same records, in order
    monkeypatch.setattr(manifest_module, "INDEX_BLOCK", block)
    lines = [keyed(number) for number in range(40)]
    lines[17] = keyed(17, path="a/\udcff.jpg")
    records = list(iter_sample_index(tmp_path, index_of(tmp_path, lines)))
    assert records == [read_line(line, "line 1") for line in lines]


@pytest.mark.parametrize("block", [1 << 20, 500])
@pytest.mark.parametrize(("damage", "message"), [
    (keyed(0, label="1"), "line 31.label: expected an integer, got '1'"),
    (b"\n", "line 31: not valid JSON"),
    (b"{}\n" + keyed(0), "line 31.key: missing"),
])
def test_a_damaged_line_deep_in_the_index_is_named_by_its_number(tmp_path, monkeypatch, block,
                                                                 damage, message):
    monkeypatch.setattr(manifest_module, "INDEX_BLOCK", block)
    lines = [keyed(number) for number in range(30)] + [damage] + [keyed(99)]
    with pytest.raises(ManifestError) as caught:
        list(iter_sample_index(tmp_path, index_of(tmp_path, lines)))
    assert str(caught.value).startswith(f"{tmp_path / 'samples-v1.jsonl'}: {message}")


@pytest.mark.parametrize("block", [1 << 20, 100])
def test_a_line_longer_than_any_record_is_refused_by_its_number(tmp_path, monkeypatch, block):
    monkeypatch.setattr(manifest_module, "INDEX_BLOCK", block)
    monkeypatch.setattr(manifest_module, "LINE_CAP", 400)
    lines = [keyed(number) for number in range(5)] + [keyed(5, path="a/" + "x" * 500 + ".jpg")]
    with pytest.raises(ManifestError, match=r"line 6: longer than 400 bytes"):
        list(iter_sample_index(tmp_path, index_of(tmp_path, lines + [keyed(6)])))
    assert len(list(iter_sample_index(tmp_path, index_of(tmp_path, lines[:5])))) == 5


def split_after_first_comma(line: bytes) -> list[bytes]:
    at = line.index(b",") + 1
    return [line[:at] + b"\n", line[at:]]


@pytest.mark.parametrize("lines", [
    # two records on a line and a blank one: as many records as lines in the block
    [keyed(0)[:-1] + b" " + keyed(1), b"\n", keyed(2)],
    [keyed(0)[:-1] + keyed(1), b"  \n", keyed(2)],
    # a record over two lines and two records on a third
    [*split_after_first_comma(keyed(0))[:1],
     split_after_first_comma(keyed(0))[1][:-1] + b" " + keyed(1), keyed(2)],
], ids=["two on a line, a blank", "two touching, spaces", "one over two lines, two on one"])
def test_a_block_of_as_many_records_as_lines_but_not_one_a_line_is_refused(tmp_path, lines):
    # A reader of a block as JSON values apart by any white space (msgspec's decode_lines)
    # would take a line that holds two for a blank one, or for one record over two lines.
    # Read line by line, as every release read the index, the first such line is refused.
    with pytest.raises(ManifestError, match=r"samples-v1.jsonl: line 1: not valid JSON"):
        list(iter_sample_index(tmp_path, index_of(tmp_path, lines)))


def test_records_apart_by_carriage_returns_and_spaces_are_read_as_line_by_line(tmp_path):
    lines = [keyed(0)[:-1] + b"\r\n", b" " + keyed(1)[:-1] + b" \n", keyed(2)[:-1]]
    records = list(iter_sample_index(tmp_path, index_of(tmp_path, lines)))
    assert records == [read_line(keyed(number), "line 1") for number in range(3)]

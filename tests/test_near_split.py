"""``splits.near_duplicates: together``: the shots of one part in one split, in both formats,
whatever the worker count; an increment puts a new shot in its cluster's split and moves no
packed sample; groups and clusters join; folder splits and dense clusters are reported, not
forced."""

from __future__ import annotations

import hashlib
import json
import logging
from itertools import combinations
from pathlib import Path

import cv2
import numpy as np
import pytest
import webdataset as wds
import yaml
from click.testing import CliRunner
from test_neardup_inspect import _originals, _truth

from shardsmith.cli import main
from shardsmith.packing import nearhash, nearsplit
from shardsmith.packing.plan import assign_split

import images

pytest_plugins = ("s3server",)  # its fixtures: s3 (a real S3 server on 127.0.0.1)

SPLITS = (("train", 0.5), ("val", 0.5))


def _run(*args: object) -> tuple[int, str]:
    result = CliRunner().invoke(main, [str(arg) for arg in args])
    return result.exit_code, result.output


def _tree(root: Path, keep=lambda path: True) -> Path:
    for path, (jpeg, _) in _originals().items():
        if keep(path):
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_bytes(jpeg)
    return root


def _pack(tmp_path: Path, source: Path, out: Path | str, fmt: str = "webdataset",
          together: bool = True, workers: int = 2, labels: str = "none",
          image: dict | None = None, **splits: object) -> str:
    job = tmp_path / f"job-{str(out).rsplit('/', 1)[-1]}.yaml"
    job.write_text(yaml.safe_dump({
        "source": {"path": str(source), "labels": labels},
        "output": {"path": str(out), "format": fmt},
        "image": {"size": 256, **(image or {})},
        "splits": {"train": 0.5, "val": 0.5, **splits}
        | ({"near_duplicates": "together"} if together else {}),
        "run": {"workers": workers, "quiet": True},
    }))
    code, output = _run("pack", "--config", job)
    assert code == 0, output
    return output


def _lines(out: Path) -> dict[str, dict]:
    name = json.loads((out / "manifest.json").read_text())["samples_index"]["name"]
    return {line["path"]: line for line in map(json.loads,
                                               (out / name).read_text().splitlines())}


def _clusters(out: Path) -> list[list[dict]]:
    code, output = _run("inspect", out, "--near-duplicates", "--json")
    assert code == 0, output
    return [cluster["samples"] for cluster in json.loads(output)["clusters"]]


def _leaking(out: Path) -> list[list[str]]:
    return [sorted(sample["path"] for sample in samples) for samples in _clusters(out)
            if len({sample["split"] for sample in samples}) > 1]


@pytest.mark.parametrize("fmt", ["webdataset", "tfrecord"])
def test_every_cluster_lands_in_one_split_and_the_dataset_reads_back(
        tmp_path: Path, fmt: str) -> None:
    source = _tree(tmp_path / "src")
    apart, together = tmp_path / "apart", tmp_path / "together"
    _pack(tmp_path, source, apart, fmt, together=False)
    _pack(tmp_path, source, together, fmt)
    assert len(_leaking(apart)) >= 3  # the corpus leaks by path alone
    assert _leaking(together) == []
    lines = _lines(together)
    assert len(lines) == len(_originals())
    moved = [path for path, line in lines.items()
             if line["split"] != assign_split(path, SPLITS)]
    assert moved  # some originals left the split of their path
    for line in lines.values():
        assert line["shard"].startswith(line["split"] + "-")
    manifest = json.loads((together / "manifest.json").read_text())
    assert manifest["near_duplicates"] == "together"
    assert f"{len(moved)} originals put in the split" in manifest["history"][-1]["note"]
    for split, totals in manifest["splits"].items():
        assert totals["samples"] == sum(line["split"] == split for line in lines.values())
    code, output = _run("verify", together, "--decode")
    assert code == 0, output
    if fmt == "webdataset":  # KEY.json names the split of its shard, as webdataset reads it
        for shard in together.glob("*.tar"):
            split = shard.name.split("-")[0]
            for sample in wds.WebDataset(str(shard), shardshuffle=False):
                assert json.loads(sample["json"])["split"] == split


def _digests(out: Path) -> dict[str, str]:
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(out.iterdir())
            if path.suffix in (".tar", ".tfrecord", ".idx", ".txt")}


def test_the_same_bytes_whatever_the_worker_count(tmp_path: Path) -> None:
    source = _tree(tmp_path / "src")
    one, three = tmp_path / "one", tmp_path / "three"
    _pack(tmp_path, source, one, workers=1)
    _pack(tmp_path, source, three, workers=3)
    assert _digests(one) == _digests(three)
    assert list(_lines(one).values()) == list(_lines(three).values())


def test_an_increment_puts_new_shots_in_their_clusters_split_and_moves_no_packed_sample(
        tmp_path: Path) -> None:
    source = _tree(tmp_path / "src", lambda path: not path.startswith("export/"))
    out = tmp_path / "out"
    _pack(tmp_path, source, out)
    before = _lines(out)
    shards_before = {name: digest for name, digest in _digests(out).items()
                     if not name.endswith(".txt")}  # a split's list of shards grows
    _tree(source)  # the re-exported folder arrives: copies of parts already packed
    _pack(tmp_path, source, out)
    after = _lines(out)
    for path, line in before.items():  # nothing packed moved, no shard was rewritten
        assert (after[path]["split"], after[path]["shard"]) == (line["split"], line["shard"])
    assert all(_digests(out)[name] == digest for name, digest in shards_before.items())
    assert _leaking(out) == []
    new = [path for path in after if path.startswith("export/")]
    assert any(after[path]["split"] != assign_split(path, SPLITS) for path in new)
    changes = out / json.loads((out / "manifest.json").read_text())["changes"][-1]["name"]
    added = [json.loads(line) for line in changes.read_text().splitlines()[1:]]
    assert {(line["path"], line["split"]) for line in added} == \
        {(path, after[path]["split"]) for path in new}


@pytest.mark.parametrize("together", [True, False])
def test_a_changed_original_stays_in_the_split_it_was_moved_to_with_the_option_on_or_off(
        tmp_path: Path, together: bool) -> None:
    source = _tree(tmp_path / "src")
    out = tmp_path / "out"
    _pack(tmp_path, source, out)
    before = _lines(out)
    path = next(path for path, line in before.items()
                if line["split"] != assign_split(path, SPLITS))
    pixels = cv2.imread(str(source / path))
    cv2.imwrite(str(source / path), pixels, [cv2.IMWRITE_JPEG_QUALITY, 55])
    _pack(tmp_path, source, out, together=together)  # off: nothing moves back either
    after = _lines(out)
    assert after[path]["source_digest"] != before[path]["source_digest"]
    assert {p: line["split"] for p, line in after.items()} == \
        {p: line["split"] for p, line in before.items()}
    assert after[path]["shard"].startswith(before[path]["split"] + "-")
    manifest = json.loads((out / "manifest.json").read_text())
    changes = (out / manifest["changes"][-1]["name"]).read_text().splitlines()
    assert [(line["change"], line["path"], line["split"], "split_before" in line)
            for line in map(json.loads, changes[1:])] == \
        [("changed", path, before[path]["split"], False)]
    code, output = _run("verify", out, "--decode")
    assert code == 0, output


def test_a_group_and_a_cluster_join_as_one_unit(tmp_path: Path) -> None:
    source = _tree(tmp_path / "src")
    out = tmp_path / "out"
    # a group of each part number's tens: p00000x, p00001x, ... (shots of other parts)
    _pack(tmp_path, source, out, group=r"p0000(?P<group>[0-9])[0-9]_")
    lines = _lines(out)
    assert _leaking(out) == []
    groups: dict[str, set[str]] = {}
    for line in lines.values():
        groups.setdefault(line["group"], set()).add(line["split"])
    assert all(len(splits) == 1 for splits in groups.values()), groups


def test_folder_splits_report_the_clusters_across_them_and_move_nothing(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    source = tmp_path / "src"
    for number, (path, (jpeg, _)) in enumerate(_originals().items()):
        target = source / ("train" if number % 2 else "val") / "good" / path.replace("/", "_")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(jpeg)
    out = tmp_path / "out"
    with caplog.at_level(logging.WARNING):
        _pack(tmp_path, source, out, labels="folders", folder=True)
    assert all(line["split"] == path.split("/")[0] for path, line in _lines(out).items())
    assert _leaking(out)
    assert "the folders name the splits" in caplog.text


def test_a_dense_cluster_is_reported_not_forced_into_one_split(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    source = _tree(tmp_path / "src")
    jpeg = next(iter(_originals().values()))[0]
    for number in range(12):  # one frame copied twelve times: a belt that stood still
        (source / "belt" / f"frame{number:02d}.jpg").parent.mkdir(exist_ok=True)
        (source / "belt" / f"frame{number:02d}.jpg").write_bytes(jpeg)
    out = tmp_path / "out"
    with caplog.at_level(logging.WARNING):
        _pack(tmp_path, source, out)
    lines = _lines(out)
    frames = {path: line["split"] for path, line in lines.items() if path.startswith("belt/")}
    assert frames == {path: assign_split(path, SPLITS) for path in frames}
    assert len(set(frames.values())) == 2
    assert "dense" in caplog.text
    code, output = _run("inspect", out, "--near-duplicates")
    assert code == 0 and "packed with splits.near_duplicates: together" in output, output


def test_the_flag_sets_the_option_over_the_job_files_splits(tmp_path: Path) -> None:
    source = _tree(tmp_path / "src", lambda path: path.startswith("export/"))
    job, out = tmp_path / "job.yaml", tmp_path / "out"
    job.write_text(yaml.safe_dump({"source": {"path": str(source), "labels": "none"},
                                   "output": {"path": str(out)}, "image": {"size": 256},
                                   "splits": {"train": 0.5, "val": 0.5}}))
    code, output = _run("pack", "--config", job, "--near-duplicates", "together", "--quiet")
    assert code == 0, output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["near_duplicates"] == "together"
    assert manifest["config"]["splits"] == {"train": 0.5, "val": 0.5}


def test_the_option_needs_the_hashes_and_one_of_two_words(tmp_path: Path) -> None:
    source = _tree(tmp_path / "src")
    for extra, said in (({"output": {"near_hashes": False}}, "leave output.near_hashes on"),
                        ({}, "expected independent or together, got 'yes'")):
        job = tmp_path / "job.yaml"
        job.write_text(yaml.safe_dump({
            "source": {"path": str(source)}, "output": {"path": str(tmp_path / "out")},
            "splits": {"train": 1.0, "near_duplicates": "together" if extra else "yes"},
            **extra}))
        code, output = _run("pack", "--config", job)
        assert code == 2 and said in output and len(output.strip().splitlines()) == 1, output


def _placed(paths: list[str], split: list[int], fixed: list[int], roots: list[int],
            groups: list[str | None] | None = None) -> nearsplit.Placed:
    return nearsplit.place(paths, np.array(split), np.array(fixed),
                           groups or [None] * len(paths), np.array(roots))


def test_a_unit_goes_to_the_split_of_its_first_packed_original_else_its_first_by_path(
        ) -> None:
    # a, b, c one cluster; b packed before in split 1: a and c join it
    placed = _placed(["c", "a", "b"], [0, 0, 1], [-1, -1, 1], [0, 0, 0])
    assert dict(placed.moves) == {0: 1, 1: 1} and placed.moved_originals == 2
    # none packed before: the split "a" has on its own
    placed = _placed(["c", "a", "b"], [0, 1, 0], [-1, -1, -1], [0, 0, 0])
    assert dict(placed.moves) == {0: 1, 2: 1}
    # packed apart before: nothing packed moves, the new one named, the cluster reported
    placed = _placed(["a", "b", "n"], [0, 1, 0], [0, 1, -1], [0, 0, 0])
    assert dict(placed.moves) == {} and placed.torn == ("n",)
    assert dict(placed.across) == {"earlier": 1}
    # a group joins two clusters, x-y and z-w (y and z of one group): w is first
    placed = _placed(["x", "y", "z", "w"], [0, 1, 1, 1], [-1] * 4, [0, 0, 2, 2],
                     [None, "g", "g", None])
    assert dict(placed.moves) == {0: 1}
    # the tiles of one original move together
    placed = _placed(["t", "t", "s"], [1, 1, 0], [-1] * 3, [0, 1, 0])
    assert dict(placed.moves) == {0: 0, 1: 0} and placed.moved_originals == 1


@pytest.mark.parametrize("fmt", ["webdataset", "tfrecord"])
def test_turning_the_option_on_makes_one_resplit_version_that_lists_each_moved_original(
        tmp_path: Path, fmt: str) -> None:
    source = _tree(tmp_path / "src")
    out = tmp_path / "out"
    _pack(tmp_path, source, out, fmt, together=False)
    before = _lines(out)
    assert _leaking(out)
    _pack(tmp_path, source, out, fmt)
    after = _lines(out)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["version"] == 2 and manifest["near_duplicates"] == "together"
    assert "resplit" in manifest["history"][-1]["note"]
    assert _leaking(out) == []
    moved = {path for path in before if after[path]["split"] != before[path]["split"]}
    assert moved
    changes = (out / manifest["changes"][-1]["name"]).read_text().splitlines()[1:]
    lines = [json.loads(line) for line in changes]
    assert all(line["change"] == "moved" for line in lines)
    assert {line["path"]: (line["split_before"], line["split"]) for line in lines} == \
        {path: (before[path]["split"], after[path]["split"]) for path in moved}
    assert manifest["history"][-1]["originals"]["moved"] == len(moved)
    code, output = _run("diff", out, "--json")
    assert code == 0 and json.loads(output)["originals"]["moved"] == len(moved), output
    code, output = _run("log", out)
    assert code == 0 and "moved" in output.splitlines()[0], output
    code, output = _run("report", out, "-o", tmp_path / "report.html")
    html = (tmp_path / "report.html").read_text()
    assert code == 0 and "Originals moved to another split" in html and "None" not in html
    code, output = _run("verify", out, "--decode")
    assert code == 0, output
    _pack(tmp_path, source, out, fmt)  # nothing left to do
    assert json.loads((out / "manifest.json").read_text())["version"] == 2
    _pack(tmp_path, source, out, fmt, together=False)  # off again: nothing moves back
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["version"] == 3 and "near_duplicates" not in manifest
    assert {path: line["split"] for path, line in _lines(out).items()} == \
        {path: line["split"] for path, line in after.items()}


def test_the_tiles_of_an_original_move_together_and_no_cluster_of_tiles_leaks(
        tmp_path: Path) -> None:
    source = _tree(tmp_path / "src")
    out = tmp_path / "out"
    _pack(tmp_path, source, out, image={"tiles": {"size": 128, "overlap": 0}})
    name = json.loads((out / "manifest.json").read_text())["samples_index"]["name"]
    splits: dict[str, set[str]] = {}
    for line in map(json.loads, (out / name).read_text().splitlines()):
        splits.setdefault(line["path"], set()).add(line["split"])
        assert line["shard"].startswith(line["split"] + "-")
    assert all(len(found) == 1 for found in splits.values())
    assert any(found != {assign_split(path, SPLITS)} for path, found in splits.items())
    assert _leaking(out) == []
    code, output = _run("verify", out, "--decode")
    assert code == 0, output


def test_equal_bare_tiles_join_no_originals_and_leave_their_pairs_together() -> None:
    """Ten originals of two tiles: tile 0 of o0 and o1 a checked re-shot pair, tile 1 of each
    the same bare plate (equal hashes).  Equal tiles are checked, not taken for one image:
    they join nothing, and the pair stays a cluster of two originals, not a dense one of
    ten that keeps nothing together."""
    seen = nearhash.SampleLines()
    for number in range(10):
        for tile in range(2):
            seen.add({"key": f"o{number}_0123456789ab_r000c{tile:03d}", "path": f"o{number}.jpg",
                      "width": 256, "height": 256, "shard": "train-000000.tar"})
    hashes = np.arange(1, 21, dtype=np.uint64).repeat(2).reshape(-1, 2)
    hashes[1::2] = 99  # every tile 1: the bare plate
    assert nearhash._equal_tiles(hashes, np.arange(20)).tolist() == \
        [[at, at + 2] for at in range(1, 18, 2)]  # checked, each to the next
    roots = nearhash.components(seen, hashes, np.zeros(20, bool), np.array([[0, 2]]))
    assert roots[2] == roots[0] and len(set(roots.tolist())) == 19  # the pair, no more
    split = np.array([0, 0, 1, 1] + [0] * 16, np.int32)  # o0 in train, o1 in val
    placed = nearsplit.place([f"o{at // 2}.jpg" for at in range(20)], split,
                             np.full(20, -1, np.int32), [None] * 20, roots)
    assert {placed.moves.get(at, int(split[at])) for at in range(4)} == {0}
    assert not placed.across


def test_an_original_is_its_path_wherever_its_lines_are() -> None:
    seen = nearhash.SampleLines()  # a forged index: the lines of a.jpg parted by b.jpg's
    for number, path in enumerate(["a.jpg", "a.jpg", "b.jpg", "a.jpg", "c/a.jpg"]):
        seen.add({"key": f"k{number}_0123456789ab_r000c{number:03d}", "path": path,
                  "width": 256, "height": 256, "shard": "train-000000.tar"})
    original = seen.originals().tolist()
    assert original[0] == original[1] == original[3] and len(set(original)) == 3


def test_a_bare_region_in_every_original_joins_none_of_them(tmp_path: Path) -> None:
    source = tmp_path / "src"
    ramp = np.repeat(np.repeat(np.linspace(60, 200, 512)[None, :, None], 384, 0), 3, 2)
    for path, (jpeg, _) in _originals().items():  # the same bare plate on the right of each
        pixels = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)
        (source / path).parent.mkdir(parents=True, exist_ok=True)
        cv2.imwrite(str(source / path), np.hstack([pixels, ramp.astype(np.uint8)]))
    out = tmp_path / "out"
    _pack(tmp_path, source, out, image={"tiles": {"size": 384, "overlap": 128}})
    code, output = _run("inspect", out, "--near-duplicates", "--json")
    assert code == 0, output
    report = json.loads(output)
    truth = _truth()
    found = 0
    for cluster in report["clusters"]:
        paths = sorted({sample["path"] for sample in cluster["samples"]})
        assert not cluster["dense"] and not cluster["leakage"], paths
        pairs = set(combinations(paths, 2))
        assert pairs <= truth, f"joined different parts: {sorted(pairs - truth)}"
        found += len(pairs)
    assert found >= 0.6 * len(truth)  # measured: 28 of 38


@pytest.mark.slow
def test_packs_to_a_bucket_hold_the_bytes_of_local_ones_kept_together_off_and_resplit(
        tmp_path: Path, s3, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHARDSMITH_SPOOL", str(tmp_path / "spool"))
    source = _tree(tmp_path / "src")
    local = tmp_path / "local"
    for together in (True, False, True):  # a fresh pack, off, on again: a resplit
        _pack(tmp_path, source, local, together=together)
        _pack(tmp_path, source, f"{s3.url}/ds", together=together)
        objects = {Path(key).name: s3.fs.cat_file(key)
                   for key in s3.fs.ls(f"{s3.name}/ds", detail=False)
                   if s3.fs.info(key)["type"] == "file"}
        # the previous version's objects stay until the next commit (a stage may copy them)
        expected = images.dataset_bytes(local)
        assert images.without_timings({name: data for name, data in objects.items()
                                       if name in expected}) == expected


def test_the_dry_run_counts_the_clusters_memory_only_when_they_are_kept_together(
        tmp_path: Path) -> None:
    source = _tree(tmp_path / "src", lambda path: path.startswith("export/"))
    for together in (True, False):
        job = tmp_path / "job.yaml"
        job.write_text(yaml.safe_dump({
            "source": {"path": str(source), "labels": "none"},
            "output": {"path": str(tmp_path / "out")}, "image": {"size": 256},
            "splits": {"train": 0.5, "val": 0.5}
            | ({"near_duplicates": "together"} if together else {})}))
        code, output = _run("pack", "--config", job, "--dry-run")
        assert code == 0, output
        assert ("near-dup splits" in output) == together, output

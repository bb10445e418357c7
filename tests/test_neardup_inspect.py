"""``shardsmith inspect --near-duplicates`` on packed datasets of both formats: re-shots of one
fixture and a re-exported folder found as clusters of their part, leakage first, nothing
joined that is not one part; a sample that cannot be read named, not fatal."""

from __future__ import annotations

import json
import sys
from functools import cache
from itertools import combinations
from pathlib import Path

import cv2
import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from reshots import corpus, fixture_scene, render  # noqa: E402

from shardsmith.cli import main  # noqa: E402
from shardsmith.neardup import search  # noqa: E402
from shardsmith.neardup.hashing import SURFACE_DIFFER  # noqa: E402

SEED, PARTS, RESHOTS, REEXPORTED = 5, 40, 8, 12


@cache
def _originals() -> dict[str, tuple[bytes, str]]:
    """path -> (JPEG, part): one fixture's parts, re-shots of the first, and a folder that
    re-exports the first parts at another quality (a copy team's export, say)."""
    scene = fixture_scene(SEED, 0)
    shots = {}
    for shot, fixture, part, number in corpus(1, PARTS, RESHOTS):
        shots[shot.path] = (render(SEED, fixture, part, number, scene), shot.part)
    for path, (jpeg, part) in list(shots.items())[:REEXPORTED]:
        pixels = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)
        _, again = cv2.imencode(".jpg", pixels, [cv2.IMWRITE_JPEG_QUALITY, 70])
        shots["export/" + path.split("/")[-1]] = (again.tobytes(), part)
    return shots


def _truth() -> set[tuple[str, str]]:
    by_part: dict[str, list[str]] = {}
    for path, (_, part) in _originals().items():
        by_part.setdefault(part, []).append(path)
    return {tuple(sorted(pair)) for paths in by_part.values()  # type: ignore[misc]
            for pair in combinations(paths, 2)}


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, [str(arg) for arg in args])
    return result.exit_code, result.output


@pytest.fixture(params=["webdataset", "tfrecord"])
def dataset(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    source = tmp_path / "src"
    for path, (jpeg, _) in _originals().items():
        (source / path).parent.mkdir(parents=True, exist_ok=True)
        (source / path).write_bytes(jpeg)
    out = tmp_path / "out"
    code, output = _run("pack", source, out, "--labels", "none", "--size", "256",
                        "--split", "train=0.5,val=0.5", "--format", request.param,
                        "--workers", "1")
    assert code == 0, output
    return out


def _pairs(report: dict) -> set[tuple[str, str]]:
    """The pairs of originals clustered (a tiled original's samples are one original)."""
    return {pair for cluster in report["clusters"]  # type: ignore[misc]
            for pair in combinations(sorted({sample["path"] for sample in cluster["samples"]}),
                                     2)}


def test_clusters_are_parts_shot_twice_leakage_first(dataset: Path) -> None:
    code, output = _run("inspect", dataset, "--near-duplicates", "--json")
    assert code == 0, output
    report = json.loads(output)
    found, truth = _pairs(report), _truth()
    assert found <= truth, f"joined different parts: {sorted(found - truth)}"
    reshots = {pair for pair in truth if not pair[0].startswith("export/")}
    exported = truth - reshots
    assert len(found & reshots) >= 0.6 * len(reshots)  # measured 0.77 at 30,000 parts
    assert len(found & exported) >= 0.9 * len(exported)
    leaking = [cluster["leakage"] for cluster in report["clusters"]]
    assert any(leaking) and leaking == sorted(leaking, reverse=True)
    for cluster in report["clusters"]:
        assert cluster["leakage"] == (len({s["split"] for s in cluster["samples"]}) > 1)
        assert not cluster["dense"]
        for pair in cluster["pairs"]:
            assert pair["distance"] <= report["distance"]
            assert pair["differs_percent"] <= report["threshold"] or (
                pair["one_surface"] and pair["differs_percent"] <= SURFACE_DIFFER)
    # the brushed and cast parts keep their grain: most pairs are of one surface, and say so
    assert any(pair["one_surface"] for cluster in report["clusters"] for pair in cluster["pairs"])
    code, text = _run("inspect", dataset, "--near-duplicates")
    assert code == 0
    assert f"{len(report['clusters'])} clusters: " in text
    assert "% differs, one surface)" in text
    heads = [line.split(":")[0] for line in text.splitlines()
             if line.startswith(("leakage", "one split"))]
    assert heads == ["leakage"] * sum(leaking) + ["one split"] * (len(leaking) - sum(leaking))


@pytest.mark.parametrize("fmt, tiles, found", [
    ("webdataset", {"size": 224, "overlap": 32}, 0.0),  # most parts cut by the tiles
    ("tfrecord", {"size": 384, "overlap": 320}, 0.9)])  # each part whole in some tile
def test_tiles_join_originals_only_where_a_tile_holds_the_part_whole(
        tmp_path: Path, fmt: str, tiles: dict, found: float) -> None:
    source, out = tmp_path / "src", tmp_path / "out"
    for path, (jpeg, _) in _originals().items():
        (source / path).parent.mkdir(parents=True, exist_ok=True)
        (source / path).write_bytes(jpeg)
    job = tmp_path / "job.yaml"
    job.write_text(json.dumps({
        "source": {"path": str(source), "labels": "none"},
        "output": {"path": str(out), "format": fmt},
        "image": {"size": 256, "tiles": tiles},
        "splits": {"train": 0.5, "val": 0.5, "near_duplicates": "together"},
        "run": {"workers": 2, "quiet": True}}))
    code, output = _run("pack", "--config", job)
    assert code == 0, output
    code, output = _run("inspect", out, "--near-duplicates", "--json")
    assert code == 0, output
    report = json.loads(output)
    pairs, truth = _pairs(report), _truth()
    # a part cut by a tile's border is no part: two plates' corners look alike
    assert pairs <= truth, f"joined different parts: {sorted(pairs - truth)}"
    assert len(pairs) >= found * len(truth)  # measured: 0 of 38, and 37 (38 untiled)
    for cluster in report["clusters"]:
        assert len({sample["path"] for sample in cluster["samples"]}) > 1  # not one image's
        assert not cluster["leakage"]  # packed together: an original's tiles in one split
    code, text = _run("inspect", out, "--near-duplicates")
    assert code == 0, text
    listed = [line.split()[1] for line in text.splitlines() if line.startswith("  ")]
    assert len(listed) == len(set(listed))  # an original once, however many tiles join


def _packed(tmp_path: Path, count: int) -> Path:
    """The first ``count`` originals of the corpus packed to 256 px, one worker."""
    source, out = tmp_path / "src", tmp_path / "out"
    for path, (jpeg, _) in list(_originals().items())[:count]:
        (source / path).parent.mkdir(parents=True, exist_ok=True)
        (source / path).write_bytes(jpeg)
    assert _run("pack", source, out, "--labels", "none", "--size", "256", "--workers",
                "1")[0] == 0
    return out


def test_a_sample_that_cannot_be_read_is_named_and_left_out(tmp_path: Path) -> None:
    out = _packed(tmp_path, 20)
    shard = next(out.glob("train-*.tar"))
    data = bytearray(shard.read_bytes())
    at = data.index(b"\xff\xd8\xff")  # the first sample's JPEG: its header made nonsense
    data[at : at + 600] = bytes(600)
    shard.write_bytes(bytes(data))
    code, output = _run("inspect", out, "--near-duplicates", "--json")
    assert code == 0, output
    report = json.loads(output)
    assert len(report["unreadable"]) == 1
    assert all(report["unreadable"][0] not in [s["key"] for s in cluster["samples"]]
               for cluster in report["clusters"])


def test_a_stored_jpeg_of_another_size_than_its_line_says_is_named_not_fatal(
        tmp_path: Path) -> None:
    out = _packed(tmp_path, 20)
    shard = next(out.glob("train-*.tar"))
    data = bytearray(shard.read_bytes())
    at = data.index(b"\xff\xd8\xff")  # the first sample's JPEG: a strip of grey instead
    _, strip = cv2.imencode(".jpg", np.full((200, 64), 128, np.uint8))
    data[at : at + len(strip)] = strip.tobytes()
    shard.write_bytes(bytes(data))
    code, output = _run("inspect", out, "--near-duplicates", "--json")
    assert code == 0, output
    report = json.loads(output)
    assert len(report["unreadable"]) == 1 and report["clusters"]
    assert all(report["unreadable"][0] not in [s["key"] for s in cluster["samples"]]
               for cluster in report["clusters"])


def test_more_samples_than_the_search_takes_are_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = _packed(tmp_path, 20)
    monkeypatch.setattr(search, "MAX_HASHES", 10)
    code, output = _run("inspect", out, "--near-duplicates")
    assert code == 2
    assert output.strip().splitlines() == [
        "shardsmith: error: 20 hashed samples: the near-duplicate search takes 10 at most"]


def test_a_distance_needs_the_near_duplicates(tmp_path: Path) -> None:
    code, output = _run("inspect", tmp_path, "--distance", "3")
    assert code == 2 and "--near-duplicates" in output


def test_the_sheet_draws_each_cluster_the_same_twice(dataset: Path, tmp_path: Path) -> None:
    first, second = tmp_path / "a.png", tmp_path / "b.png"
    for target in (first, second):
        code, output = _run("sheet", dataset, "--near-duplicates", "-o", target)
        assert code == 0, output
    assert first.read_bytes() == second.read_bytes()
    report = json.loads(_run("inspect", dataset, "--near-duplicates", "--json")[1])
    with Image.open(first) as sheet:
        rows = (sheet.height - 2 * 28 - 40 - 20) // (22 + 160 + 30 + 10)
        assert rows == min(len(report["clusters"]), 24)
        pixels = np.asarray(sheet.convert("L"))
    assert pixels[28 + 40 + 22 + 20 : 28 + 40 + 22 + 140, 28 + 20 : 28 + 140].std() > 10


def test_a_split_shows_the_clusters_holding_one_of_its_samples(dataset: Path) -> None:
    every = json.loads(_run("inspect", dataset, "--near-duplicates", "--json")[1])
    code, output = _run("inspect", dataset, "--near-duplicates", "--json", "--split", "val")
    assert code == 0, output
    shown = json.loads(output)

    def clusters(report: dict) -> list[set[str]]:
        return [{sample["path"] for sample in cluster["samples"]}
                for cluster in report["clusters"]]

    # the whole clusters of val's samples, though only their pairs, and the pairs of those
    # they join, are checked
    with_val = [cluster for cluster in every["clusters"] if "val" in cluster["splits"]]
    assert with_val and sorted(map(sorted, clusters(shown))) == \
        sorted(map(sorted, clusters({"clusters": with_val})))
    assert 0 < shown["pairs_checked"] < every["pairs_checked"]
    code, output = _run("inspect", dataset, "--near-duplicates", "--split", "nope")
    assert code == 2 and "no split 'nope'" in output


def test_the_sheet_of_a_split_draws_its_clusters_only(dataset: Path, tmp_path: Path) -> None:
    report = json.loads(_run("inspect", dataset, "--near-duplicates", "--json", "--split",
                             "val")[1])
    code, output = _run("sheet", dataset, "--near-duplicates", "--split", "val", "-o",
                        tmp_path / "val.png")
    assert code == 0, output
    every = json.loads(_run("inspect", dataset, "--near-duplicates", "--json")[1])
    assert report["pairs_checked"] < every["pairs_checked"]  # val's pairs only, as inspect's
    assert f"{len(report['clusters']):,} near-duplicate clusters, " \
           f"{report['pairs_checked']:,} pairs checked" in output


def test_the_sheet_refuses_the_draws_options_it_would_ignore(tmp_path: Path) -> None:
    for flags in (["--per-class", "3"], ["--seed", "1"], ["--objects"]):
        result = CliRunner().invoke(main, ["sheet", str(tmp_path), "--near-duplicates",
                                           *flags, "-o", str(tmp_path / "near.png")])
        assert result.exit_code == 2, result.output
        line = result.output.strip()
        assert "\n" not in line and f"{flags[0]}: the sheet of --near-duplicates" in line
        assert not (tmp_path / "near.png").exists()

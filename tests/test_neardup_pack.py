"""The pack stores each sample's near-duplicate hashes in the sample index (never in a shard):
the hashes a dataset of an older release is given by its next pack are those a pack makes, an
increment's equal a fresh pack's, tiles are hashed per place, and forged hashes are refused."""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner
from test_neardup_inspect import _originals

from shardsmith.cli import main
from shardsmith.insight import near_duplicates
from shardsmith.neardup import hashing, tasks
from shardsmith.packing import jpegcopy, nearhash

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))


def _run(*args: object) -> tuple[int, str]:
    result = CliRunner().invoke(main, [str(arg) for arg in args])
    return result.exit_code, result.output


def _tree(root: Path, count: int | None = None) -> Path:
    for path, (jpeg, _) in list(_originals().items())[:count]:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(jpeg)
    return root


def _job(tmp_path: Path, source: Path, out: Path, fmt: str, hashes: bool = True,
         **image: object) -> Path:
    job = tmp_path / f"job-{out.name}.yaml"
    job.write_text(yaml.safe_dump({
        "source": {"path": str(source), "labels": "none"},
        "output": {"path": str(out), "format": fmt, "near_hashes": hashes},
        "image": {"size": 256, **image},
        "splits": {"train": 0.5, "val": 0.5},
        "run": {"workers": 2, "quiet": True},
    }))
    return job


def _manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def _lines(out: Path) -> dict[str, dict]:
    name = _manifest(out)["samples_index"]["name"]
    lines = [json.loads(line) for line in (out / name).read_text().splitlines()]
    return {line["key"]: line for line in lines}


def _shards(out: Path) -> dict[str, str]:
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(out.iterdir()) if path.suffix in (".tar", ".tfrecord", ".idx")}


@pytest.mark.parametrize("fmt", ["webdataset", "tfrecord"])
def test_an_older_dataset_is_given_the_hashes_a_pack_makes_and_its_shards_stay(
        tmp_path: Path, fmt: str) -> None:
    source = _tree(tmp_path / "src")
    fresh, older = tmp_path / "fresh", tmp_path / "older"
    assert _run("pack", "--config", _job(tmp_path, source, fresh, fmt))[0] == 0
    assert _manifest(fresh)["near_hash"] == {"algorithm": hashing.ALGORITHM,
                                             "version": hashing.VERSION}
    made = _lines(fresh)
    assert all(len(line["near"]) == 3 for line in made.values())
    # a dataset without hashes, as an older release leaves it
    assert _run("pack", "--config", _job(tmp_path, source, older, fmt, hashes=False))[0] == 0
    assert "near_hash" not in _manifest(older)
    assert not any("near" in line for line in _lines(older).values())
    shards = _shards(older)
    assert _run("pack", "--config", _job(tmp_path, source, older, fmt))[0] == 0
    assert _manifest(older)["version"] == 2
    assert _shards(older) == shards == _shards(fresh)  # nothing decoded, nothing rewritten
    backfilled = _lines(older)
    assert {key: line["near"] for key, line in backfilled.items()} == \
        {key: line["near"] for key, line in made.items()}  # 0 bits differ
    assert _run("pack", "--config", _job(tmp_path, source, older, fmt))[0] == 0
    assert _manifest(older)["version"] == 2  # up to date now


def test_an_increment_hashes_as_a_fresh_pack_of_the_same_originals(tmp_path: Path) -> None:
    source = _tree(tmp_path / "src", 30)
    out, fresh = tmp_path / "out", tmp_path / "fresh"
    assert _run("pack", "--config", _job(tmp_path, source, out, "webdataset"))[0] == 0
    before = _lines(out)
    _tree(source)  # the night's new shots, a re-exported folder among them
    assert _run("pack", "--config", _job(tmp_path, source, out, "webdataset"))[0] == 0
    assert _run("pack", "--config", _job(tmp_path, source, fresh, "webdataset"))[0] == 0
    after, expected = _lines(out), _lines(fresh)
    assert {key: line["near"] for key, line in after.items()} == \
        {key: line["near"] for key, line in expected.items()}
    # the fixture grew under BACKGROUND_SHOTS samples: its background, and so its hashes, too
    assert all(after[key]["near"][2] != line["near"][2] for key, line in before.items())


def test_tiles_are_hashed_against_the_background_of_their_place(tmp_path: Path) -> None:
    source = _tree(tmp_path / "src", 12)
    out = tmp_path / "out"
    code, output = _run("pack", "--config", _job(tmp_path, source, out, "webdataset",
                                                 tiles={"size": 128, "overlap": 0}))
    assert code == 0, output
    lines = _lines(out)
    places = {}
    for key, line in lines.items():
        places.setdefault(key[-8:], set()).add(line["near"][2])
    assert len(places) > 1 and all(len(digests) == 1 for digests in places.values())
    assert len({next(iter(digests)) for digests in places.values()}) == len(places)


@pytest.mark.parametrize("forged", [
    {"near": ["zz" * 8, "00" * 8, "0" * 8]}, {"near": ["0" * 16, "0" * 16]},
    {"near": ["0" * 16, "0" * 16, "0" * 8, "x"]}, {"near": "0" * 40}, {"near": [1, 2, 3]},
    {"near_signature": "A" * 167}, {"near_signature": "A" * 166 + "=="},
    {"near_signature": "-" * 168}, {"near_signature": [0] * 126}])
def test_a_forged_hash_is_one_line_and_exit_2(tmp_path: Path, forged: dict) -> None:
    out = tmp_path / "out"
    assert _run("pack", "--config", _job(tmp_path, _tree(tmp_path / "src", 6), out,
                                         "webdataset"))[0] == 0
    manifest = _manifest(out)
    index = out / manifest["samples_index"]["name"]
    lines = index.read_text().splitlines()
    first = json.loads(lines[0]) | forged
    data = ("\n".join([json.dumps(first, sort_keys=True), *lines[1:]]) + "\n").encode()
    index.write_bytes(data)
    manifest["samples_index"] |= {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (out / "manifest.json").write_text(json.dumps(manifest))
    result = CliRunner().invoke(main, ["inspect", str(out), "--near-duplicates"])
    assert result.exit_code == 2, result.output
    assert "near" in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def _section(html: str) -> str:
    start = html.index('id="near-duplicates"')
    return re.sub(r"<[^>]+>", " ", html[start : html.index("</section>", start)])


def test_the_nightly_report_lists_the_clusters_across_splits_new_samples_joined(
        tmp_path: Path) -> None:
    originals = list(_originals().items())
    first = [(path, value) for path, value in originals if path.endswith("_s0.jpg")]
    source, out = tmp_path / "src", tmp_path / "out"
    for path, (jpeg, _) in first:
        (source / path).parent.mkdir(parents=True, exist_ok=True)
        (source / path).write_bytes(jpeg)
    job = _job(tmp_path, source, out, "webdataset")
    assert _run("pack", "--config", job)[0] == 0
    _tree(source)  # the night: re-shots of parts packed before, and a re-exported folder
    assert _run("pack", "--config", job)[0] == 0
    assert _run("report", out, "-o", tmp_path / "report.html")[0] == 0
    section = _section((tmp_path / "report.html").read_text())
    report = json.loads(_run("inspect", out, "--near-duplicates", "--json")[1])
    old = {path for path, _ in first}
    leaking_with_new = [cluster for cluster in report["clusters"] if cluster["leakage"]
                        and any(sample["path"] not in old for sample in cluster["samples"])]
    assert leaking_with_new
    assert f"new in this version ({len(leaking_with_new)})" in section
    for cluster in leaking_with_new:
        assert all(sample["path"] in section for sample in cluster["samples"])


def test_the_cluster_of_one_sample_is_the_cluster_a_check_of_every_pair_finds(
        tmp_path: Path) -> None:
    # the report and an increment check the pairs of their new samples' clusters, outward
    # from those samples: an earlier sample that only its twin joins is in the cluster too
    out = tmp_path / "out"
    assert _run("pack", "--config", _job(tmp_path, _tree(tmp_path / "src"), out,
                                         "webdataset"))[0] == 0
    whole = near_duplicates.find(out, workers=1)
    larger = [sorted(member.key for member in cluster.members)
              for cluster in whole.clusters if cluster.originals > 2]
    assert len(larger) >= 4
    for keys in larger:
        for key in keys:
            found = near_duplicates.find(out, touching=frozenset([key]), workers=1)
            assert [sorted(member.key for member in cluster.members)
                    for cluster in found.clusters] == [keys], key
            assert found.candidates < whole.candidates


def test_a_new_samples_cluster_grows_outward_until_it_is_whole_or_dense(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # two slow belts, each frame the next one's twin: 20 frames and 6; the check stubbed so
    # that only neighbouring frames pass (frames 2 and 3 of the short belt, 22 and 23, by one
    # surface over the threshold), and hashes a random walk of 2 bits a frame
    seen, walk = nearhash.SampleLines(), np.random.default_rng(3).permutation(64)
    hashes = np.zeros((26, 2), np.uint64)
    for at, (belt, frame) in enumerate([(0, f) for f in range(20)] + [(1, f) for f in range(6)]):
        seen.add({"key": f"b{belt}f{frame}", "path": f"belt{belt}/{frame:02d}.jpg", "width": 256,
                  "height": 192, "shard": "s.tar", "near": None})
        bits = [int(bit) for bit in walk[: 2 * frame]] + [40 + belt, 41 + belt]
        hashes[at] = [sum(1 << bit for bit in bits)] * 2

    def check(seen: object, pairs: np.ndarray, *args: object, **kwargs: object) -> tuple:
        checked.extend(map(tuple, pairs.tolist()))
        checks = np.zeros(len(pairs), hashing.CHECKS)
        checks["score"] = np.where(np.abs(pairs[:, 0] - pairs[:, 1]) == 1, 0.0, 100.0)
        surface = (pairs.min(axis=1) == 22) & (pairs.max(axis=1) == 23)
        checks["score"][surface], checks["one_surface"][surface] = 1.5, True
        return checks, set(), set()

    checked: list[tuple[int, int]] = []
    monkeypatch.setattr(nearhash, "checked", check)
    for newest, whole in ((19, False), (25, True)):
        focus = np.arange(26) == newest
        pairs, checks, failed = nearhash.verified(seen, hashes, np.ones(26, bool), None, None,
                                                  True, focus=focus, threshold=0.4)
        roots = nearhash.components(seen, hashes, failed, pairs[hashing.joined(checks, 0.4)])
        cluster = np.flatnonzero(roots == roots[newest]).tolist()
        if whole:  # the short belt: every frame, though only the newest is new
            assert cluster == list(range(20, 26))
        else:  # the long one: the rings stop once it holds more than DENSE_SIZE frames
            assert len(cluster) == hashing.DENSE_SIZE + 2
            assert cluster == list(range(19 - hashing.DENSE_SIZE - 1, 20))
    assert len(checked) == len(set(checked))  # no pair checked twice


def test_the_report_of_a_dataset_without_hashes_says_so_in_one_line(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert _run("pack", "--config", _job(tmp_path, _tree(tmp_path / "src", 6), out,
                                         "webdataset", hashes=False))[0] == 0
    assert _run("report", out, "-o", tmp_path / "report.html")[0] == 0
    assert "holds no near-duplicate hashes" in _section((tmp_path / "report.html").read_text())


def test_hashes_of_another_version_are_made_again_not_kept(tmp_path: Path) -> None:
    source, out = _tree(tmp_path / "src", 12), tmp_path / "out"
    job = _job(tmp_path, source, out, "webdataset")
    assert _run("pack", "--config", job)[0] == 0
    made = {key: line["near"] for key, line in _lines(out).items()}
    manifest = _manifest(out)  # as a later (or forged) release would leave it
    index = out / manifest["samples_index"]["name"]
    lines = [json.loads(line) | {"near": ["0" * 16, "0" * 16, "0" * 8]}
             for line in index.read_text().splitlines()]
    data = "".join(json.dumps(line, sort_keys=True) + "\n" for line in lines).encode()
    index.write_bytes(data)
    manifest["samples_index"] |= {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    manifest["near_hash"]["version"] = hashing.VERSION + 1
    (out / "manifest.json").write_text(json.dumps(manifest))
    assert _run("pack", "--config", job)[0] == 0
    assert _manifest(out)["near_hash"]["version"] == hashing.VERSION
    assert {key: line["near"] for key, line in _lines(out).items()} == made


def test_a_line_without_its_signature_is_hashed_again(tmp_path: Path) -> None:
    """A line with hashes and no signature (an edited index) gets both again from its stored
    JPEG: ``inspect`` finds the clusters it finds in the dataset as packed."""
    source, out = _tree(tmp_path / "src", 24), tmp_path / "out"
    assert _run("pack", "--config", _job(tmp_path, source, out, "webdataset"))[0] == 0
    code, packed = _run("inspect", out, "--near-duplicates", "--json")
    assert code == 0 and json.loads(packed)["clusters"], packed
    manifest = _manifest(out)
    index = out / manifest["samples_index"]["name"]
    lines = [{name: value for name, value in json.loads(line).items()
              if name != "near_signature"} for line in index.read_text().splitlines()]
    data = "".join(json.dumps(line, sort_keys=True) + "\n" for line in lines).encode()
    index.write_bytes(data)
    manifest["samples_index"] |= {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (out / "manifest.json").write_text(json.dumps(manifest))
    code, output = _run("inspect", out, "--near-duplicates", "--json")
    assert code == 0, output
    report = json.loads(output)
    assert report["hashes_made"] == len(lines)
    assert report["clusters"] == json.loads(packed)["clusters"]


def test_a_fixture_that_lost_samples_hashes_as_a_fresh_pack_of_the_originals_left(
        tmp_path: Path) -> None:
    source, out, fresh = _tree(tmp_path / "src", 30), tmp_path / "out", tmp_path / "fresh"
    assert _run("pack", "--config", _job(tmp_path, source, out, "webdataset"))[0] == 0
    before = _lines(out)
    next(iter(sorted((source / "fixture0").iterdir()))).unlink()
    assert _run("pack", "--config", _job(tmp_path, source, out, "webdataset"))[0] == 0
    assert _run("pack", "--config", _job(tmp_path, source, fresh, "webdataset"))[0] == 0
    after = {key: line["near"] for key, line in _lines(out).items()}
    assert after == {key: line["near"] for key, line in _lines(fresh).items()}
    assert all(after[key][2] != before[key]["near"][2] for key in after)  # a new background


def test_a_folder_of_few_samples_borrows_the_new_background_of_the_fixture_that_grew(
        tmp_path: Path) -> None:
    source, out, fresh = _tree(tmp_path / "src"), tmp_path / "out", tmp_path / "fresh"
    for path in sorted((source / "fixture0").iterdir())[-8:]:
        path.unlink()  # the re-exported folder (12 samples) borrows this fixture's background
    assert _run("pack", "--config", _job(tmp_path, source, out, "webdataset"))[0] == 0
    _tree(source)  # the fixture grows; the re-exported folder does not change
    assert _run("pack", "--config", _job(tmp_path, source, out, "webdataset"))[0] == 0
    assert _run("pack", "--config", _job(tmp_path, source, fresh, "webdataset"))[0] == 0
    after = {key: line["near"] for key, line in _lines(out).items()}
    assert after == {key: line["near"] for key, line in _lines(fresh).items()}
    assert len({near[2] for near in after.values()}) == 1  # one background, borrowed


def test_a_hash_of_another_version_that_cannot_be_made_again_is_dropped(
        tmp_path: Path) -> None:
    source, out = _tree(tmp_path / "src", 12), tmp_path / "out"
    job = _job(tmp_path, source, out, "webdataset")
    assert _run("pack", "--config", job)[0] == 0
    manifest = _manifest(out)
    manifest["near_hash"]["version"] = hashing.VERSION + 1  # its hashes: not of this release
    (out / "manifest.json").write_text(json.dumps(manifest))
    shard = next(out.glob("*.tar"))
    data = bytearray(shard.read_bytes())
    start = data.index(b"\xff\xd8\xff")  # the first sample's JPEG, nonsense at the same size
    data[start : start + 400] = bytes(400)
    shard.write_bytes(bytes(data))
    assert _run("pack", "--config", job)[0] == 0
    lines = list(_lines(out).values())
    assert sum("near" not in line for line in lines) == 1
    assert all(len(line["near"]) == 3 for line in lines if "near" in line)


def test_fixtures_hashed_a_few_at_a_time_get_the_hashes_of_all_at_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = _tree(tmp_path / "src")  # two folders: a fixture and a re-export that borrows
    assert _run("pack", "--config", _job(tmp_path, source, tmp_path / "all", "webdataset"))[0] \
        == 0
    monkeypatch.setattr(nearhash, "GROUP", 1)  # memory: one background held at a time
    assert _run("pack", "--config", _job(tmp_path, source, tmp_path / "one", "webdataset"))[0] \
        == 0
    assert {key: line["near"] for key, line in _lines(tmp_path / "one").items()} == \
        {key: line["near"] for key, line in _lines(tmp_path / "all").items()}


def test_a_fixtures_shots_are_read_when_its_background_is_made_not_all_fixtures_at_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = _tree(tmp_path / "src")  # two folders: two backgrounds to make
    reads, made = [0], []
    read, make = jpegcopy.PreviousJpegs.jpeg, tasks.background_task

    def counted(self: jpegcopy.PreviousJpegs, *args: object) -> bytes:
        reads[0] += 1
        return read(self, *args)

    def background(task: tuple[list[bytes | None], bool]):
        made.append((reads[0], len(task[0])))
        return make(task)

    monkeypatch.setattr(jpegcopy.PreviousJpegs, "jpeg", counted)
    monkeypatch.setattr(nearhash.tasks, "background_task", background)
    job = _job(tmp_path, source, tmp_path / "out", "webdataset")
    assert _run("pack", "--config", job, "--workers", 1)[0] == 0
    assert len(made) == 2
    # in one process, each task is read as it is taken: the shots of one fixture at a time
    assert [read for read, _ in made] == [made[0][1], made[0][1] + made[1][1]]


def test_inspect_a_few_fixtures_at_a_time_finds_what_all_at_once_find_with_or_without_hashes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = _tree(tmp_path / "src")  # two folders: pairs within each and across them
    hashed, older = tmp_path / "hashed", tmp_path / "older"
    assert _run("pack", "--config", _job(tmp_path, source, hashed, "webdataset"))[0] == 0
    assert _run("pack", "--config", _job(tmp_path, source, older, "webdataset",
                                         hashes=False))[0] == 0

    def report(dataset: Path) -> dict:
        code, output = _run("inspect", dataset, "--near-duplicates", "--json")
        assert code == 0, output
        return {name: value for name, value in json.loads(output).items()
                if name not in ("dataset", "hashes_made")}

    every = report(hashed)
    assert every["clusters"] and report(older) == every  # made from the stored samples
    monkeypatch.setattr(nearhash, "GROUP", 1)  # memory: one fixture's background at a time
    monkeypatch.setattr(nearhash, "KEPT", 1)  # hashed, and checked
    assert report(hashed) == every and report(older) == every


def _folders(root: Path, full: int, few: int) -> Path:
    """``full`` folders of the same 40 originals, and ``few`` folders of 8 of them each
    (which borrow a full one's background): pairs join every folder."""
    originals = list(_originals().values())[:40]
    for number in range(full):
        for part, (jpeg, _) in enumerate(originals):
            (root / f"full{number}").mkdir(parents=True, exist_ok=True)
            (root / f"full{number}" / f"{part:02d}.jpg").write_bytes(jpeg)
    for number in range(few):
        for part, (jpeg, _) in enumerate(originals[number * 5 : number * 5 + 8]):
            (root / f"few{number}").mkdir(parents=True, exist_ok=True)
            (root / f"few{number}" / f"{part:02d}.jpg").write_bytes(jpeg)
    return root


def test_a_full_fixture_that_lent_its_background_before_its_turn_is_hashed_and_checked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = _folders(tmp_path / "src", 3, 6)  # a full folder after a few one, in the index
    assert _run("pack", "--config", _job(tmp_path, source, tmp_path / "all", "webdataset"))[0] \
        == 0
    code, output = _run("inspect", tmp_path / "all", "--near-duplicates", "--json")
    assert code == 0, output
    every = json.loads(output)
    assert not every["unreadable"] and every["clusters"]
    monkeypatch.setattr(nearhash, "GROUP", 1)  # a fixture lent to a group, then its own
    monkeypatch.setattr(nearhash, "KEPT", 2)
    assert _run("pack", "--config", _job(tmp_path, source, tmp_path / "one", "webdataset"))[0] \
        == 0
    lines = _lines(tmp_path / "one")
    assert all("near" in line for line in lines.values())
    assert {key: line["near"] for key, line in lines.items()} == \
        {key: line["near"] for key, line in _lines(tmp_path / "all").items()}
    code, output = _run("inspect", tmp_path / "all", "--near-duplicates", "--json")
    assert code == 0, output
    assert json.loads(output) == every


def test_inspect_of_a_dataset_without_hashes_makes_each_background_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = _tree(tmp_path / "src")  # two folders: two backgrounds, for hashes and checks
    out = tmp_path / "out"
    assert _run("pack", "--config", _job(tmp_path, source, out, "webdataset", hashes=False))[0] \
        == 0
    made, make = [], tasks.background_task

    def background(task: tuple[list[bytes | None], bool]):
        made.append(len(task[0]))
        return make(task)

    monkeypatch.setattr(nearhash.tasks, "background_task", background)
    code, output = _run("inspect", out, "--near-duplicates", "--json", "--workers", 1)
    assert code == 0, output
    report = json.loads(output)
    assert report["hashes_made"] == report["samples"] and report["pairs_checked"]
    assert len(made) == report["fixtures"] == 2  # up to 255 decodes each, not twice

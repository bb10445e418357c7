"""Near-duplicates against a hostile dataset: a damaged shard is read once, not once a sample,
and what cannot be read is named and counted as such; a strip too thin to show a part gets no
hash; a pack to a bucket stores the hashes a local pack makes, night after night."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from hostile_helpers import cli
from test_neardup_pack import _job, _lines, _manifest, _run, _tree

from shardsmith.dataset.formats import FORMATS
from shardsmith.insight import near_duplicates

pytest_plugins = ("s3server",)  # its fixtures: s3, fault_proxy, s3_server


def _forge(out: Path, near: object, near_hash: object) -> None:
    """Every line's ``near`` and the manifest's ``near_hash`` replaced, the sums made to fit."""
    manifest = _manifest(out)
    index = out / manifest["samples_index"]["name"]
    lines = [line | {"near": near} for line in _lines(out).values()]
    data = "".join(json.dumps(line, sort_keys=True) + "\n" for line in lines).encode()
    index.write_bytes(data)
    manifest["samples_index"] |= {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (out / "manifest.json").write_text(json.dumps(manifest | {"near_hash": near_hash}))


@pytest.mark.parametrize("fmt", ["webdataset", "tfrecord"])
def test_a_truncated_shard_is_read_once_and_its_samples_named_not_counted_as_hashed(
        tmp_path: Path, fmt: str, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    assert _run("pack", "--config", _job(tmp_path, _tree(tmp_path / "src", 24), out, fmt))[0] == 0
    _forge(out, None, None)  # no hashes: inspect makes them, reading every sample
    shard = max((path for path in out.iterdir() if path.suffix in (".tar", ".tfrecord")),
                key=lambda path: path.stat().st_size)
    with shard.open("r+b") as handle:
        handle.truncate(shard.stat().st_size - 600)
    reads: list[str] = []
    records = FORMATS[fmt].records

    def counted(self: object, path: Path, size: int):  # noqa: ANN202 (a generator)
        reads.append(path.name)
        return records(self, path, size)

    monkeypatch.setattr(FORMATS[fmt], "records", counted)
    found = near_duplicates.find(out, workers=1)
    keys = {json.loads(line)["key"] for line in (out / "samples-v1.jsonl").read_text()
            .splitlines() if json.loads(line)["shard"] == shard.name}
    assert reads.count(shard.name) == 1
    assert set(found.unreadable) == keys
    assert found.made == found.samples - len(keys)


def test_strips_too_thin_to_show_a_part_get_no_hash_and_join_no_cluster(
        tmp_path: Path) -> None:
    import cv2
    import numpy as np
    from test_neardup_inspect import _originals

    source, out = tmp_path / "src", tmp_path / "out"
    parts = [jpeg for path, (jpeg, _) in _originals().items() if path.startswith("fixture0/")]
    for height in (2, 64):
        (source / f"h{height}").mkdir(parents=True)
        for number, jpeg in enumerate(parts):
            image = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)
            strip = cv2.resize(image, (256, height), interpolation=cv2.INTER_AREA)
            cv2.imwrite(str(source / f"h{height}" / f"p{number:03d}.jpg"), strip)
    assert _run("pack", "--config", _job(tmp_path, source, out, "webdataset"))[0] == 0
    lines = [json.loads(line) for line in (out / "samples-v1.jsonl").read_text().splitlines()]
    assert {line["path"].split("/")[0] for line in lines if "near" in line} == {"h64"}
    code, output = _run("inspect", out, "--near-duplicates", "--json")
    assert code == 0, output
    report = json.loads(output)
    assert all(sample["path"].startswith("h64/") for cluster in report["clusters"]
               for sample in cluster["samples"])
    assert len(report["unreadable"]) == len(parts)


def _hashes(read) -> tuple[object, dict[str, list[str]]]:  # noqa: ANN001 (name -> bytes)
    manifest = json.loads(read("manifest.json"))
    lines = read(manifest["samples_index"]["name"]).decode().splitlines()
    return manifest["near_hash"], {json.loads(line)["key"]: json.loads(line)["near"]
                                   for line in lines}


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_bucket_holds_the_hashes_of_a_local_pack_after_each_night_and_is_not_inspected(
        tmp_path: Path, s3, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    monkeypatch.setenv("SHARDSMITH_SPOOL", str(tmp_path / "spool"))
    args = ("--size", "256", "--split", "train=0.5,val=0.5", "--workers", "2", "--quiet")
    source, local = _tree(tmp_path / "src", 30), tmp_path / "local"
    for night in ("first", "new shots and a re-exported folder", "one shot removed"):
        if night.startswith("new"):
            _tree(source)
        elif night.startswith("one"):
            sorted((source / "fixture0").iterdir())[0].unlink()
        result = cli("pack", source, f"{s3.url}/ds", *args)
        assert result.exit_code == 0, result.output
        shutil.rmtree(local, ignore_errors=True)
        assert cli("pack", source, local, *args).exit_code == 0
        assert _hashes(lambda name: s3.fs.cat_file(f"{s3.name}/ds/{name}")) == \
            _hashes(lambda name: (local / name).read_bytes()), night
    result = cli("inspect", f"{s3.url}/ds", "--near-duplicates")
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1 and "stage" in result.output


@pytest.mark.parametrize("fmt", ["webdataset", "tfrecord"])
def test_a_dataset_whose_every_shard_is_gone_names_its_samples_not_a_traceback(
        tmp_path: Path, fmt: str) -> None:
    out = tmp_path / "out"
    assert _run("pack", "--config", _job(tmp_path, _tree(tmp_path / "src", 12), out, fmt))[0] == 0
    for shard in [*out.glob("*.tar"), *out.glob("*.tfrecord")]:
        shard.unlink()  # the hashes stay in the index; no fixture's background can be made
    code, output = _run("inspect", out, "--near-duplicates", "--json")
    assert code == 0, output
    report = json.loads(output)
    assert len(report["unreadable"]) == 12 and report["clusters"] == []

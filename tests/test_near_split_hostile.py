"""``splits.near_duplicates: together`` attacked: a resplit to a bucket, versions composed
by ``diff``, the report's history, a changed original once the option is off."""

from __future__ import annotations

import json
import re
from pathlib import Path

import cv2
import pytest
from test_near_split import SPLITS, _lines, _pack, _run, _tree

from shardsmith.packing.plan import assign_split

import images

pytest_plugins = ("s3server",)


@pytest.mark.slow
def test_a_resplit_in_a_bucket_holds_the_bytes_of_a_local_resplit(
        tmp_path: Path, s3, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHARDSMITH_SPOOL", str(tmp_path / "spool"))
    source = _tree(tmp_path / "src")
    local = tmp_path / "local"
    for together in (False, True):
        _pack(tmp_path, source, local, together=together)
        _pack(tmp_path, source, f"{s3.url}/ds", together=together)
    objects = {Path(key).name: s3.fs.cat_file(key)
               for key in s3.fs.ls(f"{s3.name}/ds", detail=False)
               if s3.fs.info(key)["type"] == "file"}
    # the previous version's objects stay until the next commit (a stage may be copying them)
    expected = images.dataset_bytes(local)
    assert images.without_timings({name: data for name, data in objects.items()
                                   if name in expected}) == expected


def _splits(out: Path) -> dict[str, str]:
    return {path: line["split"] for path, line in _lines(out).items()}


def test_a_composed_diff_counts_as_moved_only_what_ends_in_another_split(
        tmp_path: Path) -> None:
    source = _tree(tmp_path / "src", lambda path: not path.startswith("export/"))
    out = tmp_path / "out"
    _pack(tmp_path, source, out, together=False)
    first = _splits(out)
    _pack(tmp_path, source, out)  # v2: the resplit moves some
    moved_once = _splits(out)
    _tree(source)  # v3, the option off: the copies land by their paths, first of their units
    _pack(tmp_path, source, out, together=False)
    _pack(tmp_path, source, out)  # v4: a resplit again, units now led by the copies
    last = _splits(out)
    assert any(moved_once[path] != split == last[path] for path, split in first.items())
    code, output = _run("diff", out, "v1", "v4", "--json")
    assert code == 0, output
    diff = json.loads(output)
    expected = {path: (split, last[path]) for path, split in first.items()
                if split != last[path]}
    assert diff["originals"]["moved"] == len(expected)
    assert {item["path"]: (item["split_before"], item["split"]) for item in diff["moved"]} \
        == expected


def test_the_report_s_history_shows_no_move_as_0_and_the_resplit_s_moves(
        tmp_path: Path) -> None:
    source = _tree(tmp_path / "src")
    out = tmp_path / "out"
    _pack(tmp_path, source, out, together=False)
    _pack(tmp_path, source, out)
    code, output = _run("report", out, "-o", tmp_path / "report.html")
    assert code == 0, output
    page = (tmp_path / "report.html").read_text()
    history = page[page.index('<section id="history">'):]
    history = history[:history.index("</section>")]
    rows = re.findall(r"<tr>(.*?)</tr>", history, re.S)[1:]
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", row, re.S) for row in rows]
    moved = {int(row[0]): row[7] for row in cells}  # version -> its moved cell
    code, output = _run("diff", out, "--json")
    assert code == 0, output
    assert moved == {2: str(json.loads(output)["originals"]["moved"]), 1: "0"}


def test_turning_the_option_off_keeps_a_changed_original_in_the_split_it_was_moved_to(
        tmp_path: Path) -> None:
    source = _tree(tmp_path / "src")
    out = tmp_path / "out"
    _pack(tmp_path, source, out)
    before = _lines(out)
    path = next(path for path, line in before.items()
                if line["split"] != assign_split(path, SPLITS))
    pixels = cv2.imread(str(source / path))
    cv2.imwrite(str(source / path), pixels, [cv2.IMWRITE_JPEG_QUALITY, 55])
    _pack(tmp_path, source, out, together=False)
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

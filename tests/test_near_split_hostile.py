"""``splits.near_duplicates: together`` attacked: versions composed by ``diff``, the report's
history."""

from __future__ import annotations

import json
import re
from pathlib import Path

from test_near_split import _lines, _pack, _run, _tree


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

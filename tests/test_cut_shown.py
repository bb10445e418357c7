"""Where a person looks at a dataset, a defect cut below ``min_visible`` shows as what it is:
``sheet --objects`` draws it dashed and names it "(cut)", apart from the objects a model is
given.  The corpus is tests/test_cut_defects.py's (tiles 1 and 3 show only a cut defect).
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from test_cut_defects import CUT_CONFIG, cut_tree

from shardsmith.cli import main
from shardsmith.dataset.manifest import read_manifest

from defects import pack_with


@pytest.fixture(params=["webdataset", "tfrecord"])
def packed(request, tmp_path):
    cut_tree(tmp_path / "source")
    pack_with(tmp_path / "source", tmp_path / "out", CUT_CONFIG,
              **{"output.format": request.param})
    return tmp_path / "out"


def test_the_objects_sheet_draws_a_cut_defect_dashed_and_apart(packed):
    from shardsmith.insight.sheet import render_sheet

    sheet = render_sheet(packed, read_manifest(packed), per_class=8, seed=0, objects=True)
    assert sorted((item.name, item.cut) for item in sheet.objects) == [
        ("crack", False), ("crack", True), ("scratch", False), ("scratch", True)]
    for item in sheet.objects:
        left, top, right, bottom = item.box
        edge = [sheet.image.getpixel((right, y)) == item.colour
                for y in range(top + 16, bottom + 1)]  # below its name
        if item.name == "scratch":  # tall enough to show dashes
            assert all(edge) != item.cut and any(edge), item


def test_the_sheet_summary_counts_the_cut_objects_drawn(packed, tmp_path):
    result = CliRunner().invoke(main, ["sheet", str(packed), "-o", str(tmp_path / "s.png"),
                                       "--per-class", "8", "--objects"])
    assert result.exit_code == 0, result.output
    assert "4 objects drawn, 2 of them cut below min_visible (dashed)" in result.output


def test_inspect_names_the_classes_of_the_cut_defects(packed):
    import json

    said = CliRunner().invoke(main, ["inspect", str(packed)])
    assert said.exit_code == 0, said.output
    assert "dropped by min_visible: 2 (crack 1, scratch 1)" in said.output
    found = json.loads(CliRunner().invoke(main, ["inspect", str(packed), "--json"]).output)
    assert found["objects"]["cut_objects_per_class"] == {"crack": 1, "scratch": 1}

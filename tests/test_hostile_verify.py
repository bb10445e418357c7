"""A hostile user's cases for ``verify`` (issue 9): a damaged or planted dataset is a problem
named in the output or one error line, never a traceback, never a file touched outside it.
"""

from __future__ import annotations

import pytest
from hostile_helpers import (
    GARBAGE,
    TRAVERSAL_NAMES,
    UNSAFE_MEMBERS,
    cli,
    crashed,
    files_outside,
    one_error_line,
    packed,
    replace_sample_index,
    rewrite_first_sample,
    traversal_dataset,
)

from images import manifest_of


@pytest.mark.parametrize("name", TRAVERSAL_NAMES)
def test_verify_refuses_a_traversal_shard_name_in_one_line(tmp_path, name):
    dataset, _ = traversal_dataset(tmp_path, name)
    before = files_outside(tmp_path, tmp_path / "nothing")
    line = one_error_line(cli("verify", dataset), 2)
    assert "manifest.json" in line
    assert files_outside(tmp_path, tmp_path / "nothing") == before


@pytest.mark.parametrize("unsafe", list(UNSAFE_MEMBERS))
def test_verify_reports_a_tar_member_that_could_escape_or_is_not_a_file(tmp_path, unsafe):
    dataset = packed(tmp_path)
    name = rewrite_first_sample(dataset, UNSAFE_MEMBERS[unsafe])
    result = cli("verify", dataset)
    assert not crashed(result), crashed(result)
    assert result.exit_code == 1, result.output
    problems = [line for line in result.output.splitlines() if line.startswith(f"{name}: ")]
    assert any("member" in line for line in problems), result.output


@pytest.mark.parametrize("kind", list(GARBAGE))
def test_garbage_in_the_sample_index_is_a_problem_verify_prints(tmp_path, kind):
    dataset = packed(tmp_path)
    data, fix_sha = GARBAGE[kind](manifest_of(dataset)["samples_index"]["bytes"])
    replace_sample_index(dataset, data, fix_size=False, fix_sha=fix_sha)
    result = cli("verify", dataset)
    assert not crashed(result), crashed(result)
    assert result.exit_code == 1, result.output
    name = manifest_of(dataset)["samples_index"]["name"]
    assert any(name in line for line in result.output.splitlines()), result.output


def test_verify_after_staging_one_split_notes_the_other_splits_leftovers(tmp_path):
    dataset = packed(tmp_path)
    val_shards = [s["name"] for s in manifest_of(dataset)["shards"] if s["split"] == "val"]
    assert val_shards
    staged = tmp_path / "nvme"
    assert cli("stage", dataset, "--to", staged, "--quiet").exit_code == 0
    assert cli("stage", dataset, "--to", staged, "--split", "train", "--quiet").exit_code == 0
    result = cli("verify", staged)
    assert result.exit_code == 0, result.output
    notes = [line for line in result.output.splitlines() if line.startswith("note: ")]
    for name in val_shards:
        assert f"note: {name}: not listed, left from an earlier stage; stage --prune removes " \
               "it" in notes, result.output

"""A hostile job config, round 2 (issue 16): YAML our loader cannot take, a ``splits.group`` too
big to compile, a config that is a FIFO or a device.  Each is one line naming what to fix and
exit 2, never a traceback, a hang or the machine's memory.
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
from pathlib import Path

import pytest
from hostile_helpers import REPO, cli, command, one_error_line, one_stderr_line, originals

from shardsmith.config import config_from_settings, load_config
from shardsmith.config.pattern import MAX_GROUP_PATTERN_CHARS, MAX_GROUP_REPEAT
from shardsmith.door import CONFIG_CAP
from shardsmith.errors import ConfigError
from shardsmith.packing.plan import group_pattern

MiB = 2**20
# Patterns whose compiled form would take gigabytes: counted repeats nested four deep (10**8
# copies) and a million copies of a million.
EXPANDING_PATTERNS = ["(?:(?:(?:(?:a{100}){100}){100}){100})", "(?:a{1000000}){1000000}"]


def pack_with_config(tmp_path: Path, text: str) -> str:
    """The one error line of ``pack --config`` on a job file holding ``text``."""
    config = tmp_path / "job.yaml"
    config.write_text(text)
    source = originals(tmp_path / "source")
    return one_error_line(cli("pack", source, tmp_path / "out", "--config", config), 2)


def in_little_memory(*args: object, timeout: float = 120) -> subprocess.CompletedProcess:
    """``shardsmith ARGS`` in a fresh process that may use 2 GiB of address space at most: a
    pattern that would expand past it fails (MemoryError) there instead of taking the machine."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    return subprocess.run(command(*args), cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, preexec_fn=limit)


# ------------------------------------------------------------------ YAML the loader cannot take

@pytest.mark.parametrize(("text", "kind"), [
    ("? [a, b]\n: 1\n", "list"),
    ("source: {? {a: 1} : 2}\n", "mapping"),
    ("source:\n  ? !!set {a}\n  : 1\n", "mapping"),
])
def test_a_key_that_is_a_list_or_a_mapping_is_one_line_naming_the_file_and_line(
        tmp_path, text, kind):
    line = pack_with_config(tmp_path, text)
    assert "job.yaml" in line and re.search(r"line \d+: a key must be a name, not a " + kind,
                                            line), line


def test_collections_nested_past_any_job_file_are_one_line_naming_the_line(tmp_path):
    line = pack_with_config(tmp_path, "source:\n  extensions: " + "[" * 5000 + "]" * 5000 + "\n")
    assert "job.yaml: line 2: nested more than" in line


@pytest.mark.parametrize(("value", "says"), [
    ("2001-13-45", "cannot be read as a YAML timestamp"),
    ("!!float abc", "cannot be read as a YAML float"),
    ("!!int abc", "cannot be read as a YAML int"),
    ("9" * 5000, "out of range"),
    ("0x" + "f" * 5000, "out of range"),
    ("0x" + "f" * 20, "out of range"),
])
def test_a_scalar_its_type_cannot_hold_is_one_line_naming_the_line(tmp_path, value, says):
    line = pack_with_config(tmp_path, f"output:\n  shard_size_mb: {value}\n")
    assert "job.yaml: line 2:" in line and says in line and len(line) < 300, line


def test_a_huge_integer_in_recorded_settings_is_a_config_error_naming_the_key():
    with pytest.raises(ConfigError, match=r"output\.shard_size_mb: .*out of range"):
        config_from_settings({"output": {"shard_size_mb": 10**400}})


def test_a_huge_split_fraction_is_one_short_line(tmp_path):
    line = pack_with_config(tmp_path, "splits:\n  train: 0x" + "f" * 400 + "\n")
    assert "job.yaml: line 2:" in line and len(line.replace(str(tmp_path), "")) < 200, line


def test_a_whole_float_past_any_integer_setting_is_one_line(tmp_path):
    line = pack_with_config(tmp_path, "image:\n  max_decoded_mb: 1.0e+300\n")
    assert "image.max_decoded_mb: expected an integer, got 1e+300" in line and len(line) < 200, \
        line


def test_a_number_key_given_twice_is_an_error_like_a_name_given_twice(tmp_path):
    line = pack_with_config(tmp_path, "1: a\n1: b\n")
    assert "job.yaml: line 2: the key 1 is given twice" in line



# ------------------------------------------------------------------ a split named twice, tiles off

@pytest.mark.parametrize("splits", ["train=0.5,val=0.5,train=0.1",
                                    "train=0.5, val=0.5, train =0.5"])
def test_a_split_named_twice_on_the_command_line_is_named_not_summed(tmp_path, splits):
    source = originals(tmp_path / "source")
    line = one_error_line(cli("pack", source, tmp_path / "out", "--split", splits), 2)
    assert "splits.train: the split is given twice" in line and "add up" not in line, line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("text", [
    "splits:\n  train: 0.5\n  val: 0.5\n  train: 0.1\n",
    "splits: {train: 0.5, val: 0.5, train: 0.1}\n",
    "splits: train=0.5,val=0.5,train=0.1\n",
])
def test_a_split_named_twice_in_the_job_file_is_named_not_summed(tmp_path, text):
    line = pack_with_config(tmp_path, text)
    assert "'train' is given twice" in line or "splits.train: the split is given twice" in line
    assert "add up" not in line, line


@pytest.mark.parametrize("scale", ["0", "7", "-0.5"])
def test_a_tile_scale_out_of_range_is_refused_with_tiles_off_too(tmp_path, scale):
    line = pack_with_config(tmp_path, f"image:\n  tiles:\n    scale: {scale}\n")
    assert "image.tiles.scale: expected more than 0 and at most 1" in line, line


@pytest.mark.parametrize(("tiles", "says"), [
    ("keep: some", "image.tiles.keep"),
    ("background_fraction: 2", "image.tiles.background_fraction: expected 0..1"),
])
def test_tile_settings_that_do_not_depend_on_the_size_are_checked_with_tiles_off(
        tmp_path, tiles, says):
    assert says in pack_with_config(tmp_path, f"image:\n  tiles:\n    {tiles}\n")


def test_a_tile_scale_in_range_with_tiles_off_is_accepted():
    config = load_config(None, {"source.path": "src", "output.path": "out",
                                "image.tiles.scale": 0.25})
    assert not config.image.tiles.enabled and config.image.tiles.scale == 0.25

# ------------------------------------------------------------------ splits.group too big to compile

@pytest.mark.parametrize("pattern", EXPANDING_PATTERNS)
@pytest.mark.slow
def test_a_group_pattern_that_expands_when_compiled_is_refused_before_compiling(tmp_path,
                                                                                pattern):
    source = originals(tmp_path / "source")
    refused = in_little_memory("pack", source, tmp_path / "out", "--group", pattern, "--quiet")
    line = one_stderr_line(refused, 2)
    assert line.startswith("shardsmith: error: splits.group:") and "expands to" in line


def test_a_group_pattern_in_the_config_file_is_measured_too(tmp_path):
    text = f"splits:\n  group: '{EXPANDING_PATTERNS[0]}'\n"
    assert "splits.group:" in pack_with_config(tmp_path, text)


def test_the_plan_measures_a_group_pattern_before_compiling_it():
    with pytest.raises(ConfigError, match=r"splits\.group: .*expands to"):
        group_pattern(EXPANDING_PATTERNS[1])


def test_a_group_pattern_longer_than_the_cap_is_refused():
    with pytest.raises(ConfigError, match=r"splits\.group: .*1,001 characters"):
        load_config(None, {"splits.group": "a" * (MAX_GROUP_PATTERN_CHARS + 1)})


def test_groups_nested_past_the_cap_are_refused_not_a_recursion_error():
    with pytest.raises(ConfigError, match=r"splits\.group: .*nests groups 400 deep"):
        load_config(None, {"splits.group": "(" * 400 + "a" + ")" * 400})


@pytest.mark.parametrize("pattern", [
    r"^[^/]+/(?P<group>lot[0-9]+)_",  # the README's
    r"(?<=_)(?P<group>part\d+)(?=_shot)",
    r"(?P<group>cam\d+)/\1_",
    r"(?P<group>\d{4}-\d{2}-\d{2})",
    r"(?:[a-z]{2}\d{3}){20}",
    r"[\]{}]{1,9}\{99999\}(?#{99999})\p{L}{2}[[:alpha:]]{3}",
    f"(?:a{{{MAX_GROUP_REPEAT}}})",
])
def test_group_patterns_people_write_are_still_accepted(pattern):
    config = load_config(None, {"splits.group": pattern})
    assert config.split_group == pattern
    assert group_pattern(pattern).pattern == pattern


def test_nested_counted_repeats_past_the_cap_are_refused():
    with pytest.raises(ConfigError, match=r"splits\.group: .*expands to"):
        load_config(None, {"splits.group": "(?:(?:a{100}){100}){2}"})


# ------------------------------------------------------------------ the config file itself

@pytest.mark.parametrize("subcommand", [["pack", "src", "out"], ["probe"], ["verify"],
                                        ["stage", "--to", "copy"]])
@pytest.mark.slow
def test_a_config_that_is_a_fifo_is_refused_at_once(tmp_path, subcommand):
    fifo = tmp_path / "job.yaml"
    os.mkfifo(fifo)
    args = [tmp_path / arg if arg in ("src", "out", "copy") else arg for arg in subcommand]
    (tmp_path / "src").mkdir()
    refused = subprocess.run(command(*args, "--config", fifo), cwd=REPO, capture_output=True,
                             text=True, timeout=30)  # a blocking open would hang here
    line = one_stderr_line(refused, 2)
    assert "job.yaml" in line and "FIFO" in line


def test_a_config_that_is_a_device_is_refused_unread(tmp_path):
    source = originals(tmp_path / "source")
    line = one_error_line(cli("pack", source, tmp_path / "out", "--config", "/dev/zero"), 2)
    assert "/dev/zero" in line and "character device" in line


def test_a_config_named_through_a_symlink_is_read(tmp_path):
    real = tmp_path / "real.yaml"
    real.write_text("output:\n  shard_size_mb: .nan\n")  # an error that proves it was read
    link = tmp_path / "job.yaml"
    link.symlink_to(real)
    source = originals(tmp_path / "source")
    line = one_error_line(cli("pack", source, tmp_path / "out", "--config", link), 2)
    assert "output.shard_size_mb" in line


def documented_config_cap() -> int:
    """The config cap docs/design.md states, in bytes."""
    table = (REPO / "docs" / "design.md").read_text()
    found = re.search(r"^\| config \| (\d+) MiB \|", table, re.MULTILINE)
    assert found, "docs/design.md has no config row in its caps table"
    return int(found.group(1)) * MiB


def test_a_config_within_the_documented_cap_is_read_and_one_over_it_is_refused(tmp_path):
    assert documented_config_cap() == CONFIG_CAP
    padding = "# " + "x" * 1021 + "\n"  # one KiB of comment
    config = tmp_path / "job.yaml"
    config.write_text(padding * (CONFIG_CAP // 1024 - 1) + "image:\n  size: 64\n")
    assert load_config(config).image.size == 64
    config.write_text(padding * (CONFIG_CAP // 1024) + "image:\n  size: 64\n")
    with pytest.raises(ConfigError, match=f"job.yaml: over {CONFIG_CAP // MiB} MiB"):
        load_config(config)

"""A setting is declared once, on its config field; the ``pack`` options, the override map and
the example job file are derived from that declaration."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import click
import pytest
import yaml
from click.testing import CliRunner

from shardsmith.cli import main, setting_options
from shardsmith.config import load_config
from shardsmith.config.declare import DECLARATION, setting
from shardsmith.config.settings import (
    declared,
    example_file,
    flags,
    override_map,
    overrides_of,
)

EXAMPLE = Path(__file__).resolve().parents[1] / "configs" / "example.yaml"

# pack's flags and the settings they override, as users know them (the map cli.py held).
FLAG_SETTINGS = {
    "--format": "output.format", "--shard-size": "output.shard_size_mb",
    "--shard-samples": "output.shard_samples", "--size": "image.size",
    "--resize": "image.resize", "--quality": "image.quality", "--split": "splits",
    "--group": "splits.group", "--labels": "source.labels", "--seed": "seed",
    "--workers": "run.workers", "--backend": "run.backend", "--scheduler": "run.scheduler",
    "--max-reject-fraction": "run.max_reject_fraction", "--overwrite": "run.overwrite",
    "--compact": "run.compact", "--quiet": "run.quiet",
}


def pack_help() -> str:
    result = CliRunner().invoke(main, ["pack", "--help"], terminal_width=100)
    assert result.exit_code == 0, result.output
    return result.output


def leaf_keys(tree: dict, prefix: str = "") -> set[str]:
    keys = set()
    for key, value in tree.items():
        if isinstance(value, dict) and key != "splits":
            keys |= leaf_keys(value, f"{prefix}{key}.")
        else:
            keys.add(f"{prefix}{key}")
    return keys | {f"splits.{key}" for key in tree.get("splits", {})
                   if key in ("group", "folder", "near_duplicates")}


def test_configs_example_yaml_is_what_init_config_prints():
    assert EXAMPLE.read_text() == example_file()


def test_every_field_of_the_config_tree_is_declared_with_setting():
    undeclared = [entry.path for entry in declared() if DECLARATION not in entry.field.metadata]
    assert undeclared == []


def test_every_setting_is_a_key_of_the_example_file():
    settings = {entry.path for entry in declared() if not entry.is_section}
    assert settings == leaf_keys(yaml.safe_load(example_file()))


def test_pack_keeps_its_flags_and_the_settings_they_override():
    assert {flag.flag: flag.path for flag in flags()} == FLAG_SETTINGS


def test_every_flag_is_in_pack_help_and_in_the_override_map():
    text, paths = pack_help(), override_map()
    for flag in flags():
        assert f"  {flag.flag} " in text
        assert paths[flag.parameter] == flag.path


def test_a_flag_sets_the_setting_it_is_declared_on():
    config = load_config(None, overrides_of({"image__size": 300, "splits": "train=0.8,val=0.2",
                                             "splits__group": "^(lot[0-9]+)",
                                             "run__quiet": True, "output__format": None}))
    assert config.image.size == 300
    assert config.splits == (("train", 0.8), ("val", 0.2))
    assert config.split_group == "^(lot[0-9]+)"
    assert config.run.quiet is True
    assert config.output.format == "webdataset"  # a flag not given leaves the file's value


def test_help_shows_the_declared_default_of_each_setting():
    text = " ".join(pack_help().split())
    for shown in ("Shard format. [default: webdataset]", "[default: 512]",
                  "Target shard size in MB. [default: 256]", "[default: train=1]",
                  "[default: 0.01]", "Shuffle seed. [default: 0]"):
        assert shown in text


# A made-up config tree: a setting declared on a field needs no other edit to appear on the
# command line, in the override map and in the example file.


@dataclass(frozen=True)
class MadeUpImage:
    size: int = setting(512, flag="--size", help="Target size.", comment="target size")
    sharpen: float = setting(0.5, flag="--sharpen", help="Unsharp mask amount.",
                             comment=("unsharp mask amount after resizing;", "0 = none"))
    denoise: bool = setting(False, flag="--denoise", help="Denoise first.")
    kernel: str = setting("lanczos", flag="--kernel", choices=("lanczos", "area"),
                          help="Resampling kernel.")


@dataclass(frozen=True)
class MadeUpConfig:
    image: MadeUpImage = setting(factory=MadeUpImage)
    seed: int = setting(0, comment="shuffle seed")


@click.command()
@setting_options(MadeUpConfig)
def made_up(**parameters) -> None:
    click.echo(json.dumps(overrides_of(parameters, MadeUpConfig), sort_keys=True))


def test_a_new_declared_setting_is_an_option_with_its_help_and_default():
    result = CliRunner().invoke(made_up, ["--help"], terminal_width=100)
    text = " ".join(result.output.split())
    assert "--sharpen FLOAT Unsharp mask amount. [default: 0.5]" in text
    assert "--denoise Denoise first." in text
    assert "--kernel [lanczos|area] Resampling kernel. [default: lanczos]" in text
    assert "--seed" not in text  # declared without a flag: the file only


def test_a_new_declared_setting_is_in_the_override_map():
    assert override_map(MadeUpConfig) == {
        "image__size": "image.size", "image__sharpen": "image.sharpen",
        "image__denoise": "image.denoise", "image__kernel": "image.kernel"}
    result = CliRunner().invoke(made_up, ["--sharpen", "0.7", "--denoise"])
    assert json.loads(result.output) == {"image.sharpen": 0.7, "image.denoise": True,
                                         "image.size": None, "image.kernel": None}


def test_a_new_declared_setting_is_in_the_example_file_with_its_comment():
    assert example_file(MadeUpConfig, header="# made up\n") == (
        "# made up\n"
        "\n"
        "image:\n"
        "  size: 512            # target size\n"
        "  sharpen: 0.5         # unsharp mask amount after resizing;\n"
        "                       # 0 = none\n"
        "  denoise: false\n"
        "  kernel: lanczos\n"
        "\n"
        "seed: 0                # shuffle seed\n"
    )


def test_the_example_file_quotes_only_what_plain_yaml_would_misread():
    @dataclass(frozen=True)
    class Quoting:
        digits: str = setting("420")
        empty: str = setting("")
        word: str = setting("rgb")
        boolean_word: str = setting("yes")
        words: tuple[str, ...] = setting(("jpg", "on"))

    text = example_file(Quoting, header="")
    assert yaml.safe_load(text) == {"digits": "420", "empty": "", "word": "rgb",
                                    "boolean_word": "yes", "words": ["jpg", "on"]}
    assert "word: rgb" in text and 'digits: "420"' in text


# Bad values on the derived options: one line and exit code 2, as before.


@pytest.mark.parametrize("arguments, message", [
    (["--size", "abc"], "'abc' is not a valid integer"),
    (["--format", "zip"], "'zip' is not one of 'webdataset', 'tfrecord'"),
    (["--size", "9" * 40], "image.size: a 133-bit integer is out of range"),
    (["--shard-size", "nan"], "output.shard_size_mb: expected a finite number"),
    (["--split", "train=half"], "splits.train: not a number"),
    (["--split", "train"], "splits: expected NAME=FRACTION"),
    (["--quality", "0"], "image.quality: expected 1..100, got 0"),
])
def test_a_bad_value_on_a_setting_flag_is_one_line_and_exit_2(tmp_path, arguments, message):
    result = CliRunner().invoke(main, ["pack", str(tmp_path / "src"), str(tmp_path / "out"),
                                       *arguments])
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
    assert "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


def test_the_declarations_leave_the_fingerprint_of_the_default_settings_as_it_was():
    assert load_config().fingerprint() == \
        "e7d3da46b61ce05c4b43e375ade07fa1f33f43d2d4a65ff5fd9601866042ece7"


def test_every_format_choice_has_a_format_object_that_names_its_files():
    from shardsmith.config import FORMATS as choices
    from shardsmith.dataset.formats import FORMATS, shard_format

    assert {name: fmt.extension for name, fmt in FORMATS.items()} == choices
    assert [shard_format(name).name for name in choices] == list(choices)


def test_every_annotation_file_choice_has_a_parser():
    from shardsmith.annotations.parse import FILE_PARSERS
    from shardsmith.config import ANNOTATION_FILES

    assert set(FILE_PARSERS) == set(ANNOTATION_FILES)

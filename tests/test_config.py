"""Configuration: YAML + overrides, validated once, errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from shardsmith.cli import main
from shardsmith.config import check_paths, load_config
from shardsmith.errors import ConfigError


def write_config(tmp_path, text: str):
    path = tmp_path / "job.yaml"
    path.write_text(text)
    return path


def test_defaults_are_the_documented_ones():
    config = load_config()
    assert config.image.size == 512 and config.image.resize == "fit"
    assert config.output.format == "webdataset" and config.output.shard_size_mb == 256
    assert config.splits == (("train", 1.0),)
    assert config.image.max_pixels == 300_000_000


def test_cli_style_overrides_win_over_the_file(tmp_path):
    path = write_config(tmp_path, "image:\n  size: 256\n  quality: 80\n")
    config = load_config(path, {"image.size": 384, "image.quality": None})
    assert config.image.size == 384 and config.image.quality == 80


@pytest.mark.parametrize(
    "text, key",
    [
        ("image:\n  sise: 256\n", "image.sise"),
        ("imag:\n  size: 256\n", "imag"),
        ("image:\n  size: big\n", "image.size"),
        ("image:\n  resize: squash\n", "image.resize"),
        ("output:\n  format: parquet\n", "output.format"),
        ("image:\n  background: [1, 2]\n", "image.background"),
        ("splits:\n  train: 0.7\n  val: 0.2\n", "splits"),
        ("splits:\n  Train: 1.0\n", "splits.Train"),
        ("run:\n  workers: -1\n", "run.workers"),
        ("source:\n  follow_symlinks: sometimes\n", "source.follow_symlinks"),
    ],
)
def test_bad_config_names_the_key(tmp_path, text, key):
    with pytest.raises(ConfigError) as caught:
        load_config(write_config(tmp_path, text))
    assert str(caught.value).startswith(key + ":")


def test_split_string_from_the_command_line_is_parsed():
    config = load_config(None, {"splits": "train=0.8, val=0.1,test=0.1"})
    assert config.splits == (("train", 0.8), ("val", 0.1), ("test", 0.1))


def test_output_inside_source_is_refused(tmp_path):
    (tmp_path / "src").mkdir()
    config = load_config(None, {"source.path": str(tmp_path / "src"),
                                "output.path": str(tmp_path / "src" / "shards")})
    with pytest.raises(ConfigError, match="output.path: .* inside the source tree"):
        check_paths(config)


def test_missing_source_is_refused(tmp_path):
    config = load_config(None, {"source.path": str(tmp_path / "nope"),
                                "output.path": str(tmp_path / "out")})
    with pytest.raises(ConfigError, match="source.path: .* is not a directory"):
        check_paths(config)


def test_fingerprint_ignores_paths_and_workers_but_not_pixels():
    base = load_config(None, {"source.path": "/a", "output.path": "/b", "run.workers": 1})
    moved = load_config(None, {"source.path": "/c", "output.path": "/d", "run.workers": 8})
    resized = load_config(None, {"image.size": 256})
    assert base.fingerprint() == moved.fingerprint()
    assert base.fingerprint() != resized.fingerprint()


def test_cli_reports_a_bad_config_in_one_line_before_any_work(tmp_path):
    (tmp_path / "src").mkdir()
    path = write_config(tmp_path, "image:\n  size: 256\n  qualty: 80\n")
    result = CliRunner().invoke(
        main, ["pack", str(tmp_path / "src"), str(tmp_path / "out"), "--config", str(path)]
    )
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "shardsmith: error: image.qualty: unknown key (known here: background, color, "
        "max_decoded_mb, max_pixels, pad_color, quality, resize, size, subsampling, tiles, "
        "upscale)"
    ]
    assert not (tmp_path / "out").exists()


def test_cli_help_documents_every_option():
    result = CliRunner().invoke(main, ["pack", "--help"])
    assert result.exit_code == 0
    for option in ("--config", "--format", "--size", "--resize", "--quality", "--shard-size",
                   "--shard-samples", "--split", "--group", "--labels", "--seed", "--workers",
                   "--max-reject-fraction", "--overwrite", "--quiet"):
        assert option in result.output


def _leaf_keys(tree: dict, prefix: str = "") -> set[str]:
    keys = set()
    for key, value in tree.items():
        if isinstance(value, dict) and key != "splits":
            keys |= _leaf_keys(value, f"{prefix}{key}.")
        else:
            keys.add(f"{prefix}{key}")
    return keys


def _config_keys(cls, prefix: str = "") -> set[str]:
    """Every YAML key of a config dataclass (``splits.group`` is stored as ``split_group``)."""
    import dataclasses

    names = set()
    for item in dataclasses.fields(cls):
        default = getattr(cls(), item.name)
        if dataclasses.is_dataclass(default):
            names |= _config_keys(type(default), f"{prefix}{item.name}.")
        else:
            names.add(item.metadata.get("yaml", f"{prefix}{item.name}"))
    return names


EXAMPLE = Path(__file__).resolve().parents[1] / "configs" / "example.yaml"
EXAMPLE_PATHS = {"source.path": "/mnt/nas/line3/originals", "output.path": "/data/shards/line3",
                 "stage.to": "/nvme/shards/line3"}


def test_example_config_documents_every_key():
    import yaml

    from shardsmith.config import Config

    tree = yaml.safe_load(EXAMPLE.read_text())
    documented = _leaf_keys(tree) | {f"splits.{key}" for key in tree["splits"]
                                     if key in ("group", "folder", "near_duplicates")}
    assert documented == _config_keys(Config)


def test_every_documented_default_is_the_real_default():
    import dataclasses

    example = load_config(EXAMPLE)
    paths = {key: getattr(getattr(example, key.split(".")[0]), key.split(".")[1])
             for key in EXAMPLE_PATHS}
    assert paths == EXAMPLE_PATHS  # the only values that are examples, not defaults
    blank = dataclasses.replace(
        example,
        source=dataclasses.replace(example.source, path=""),
        output=dataclasses.replace(example.output, path=""),
        stage=dataclasses.replace(example.stage, to=""),
    )
    assert blank == load_config()
    assert example.fingerprint() == load_config().fingerprint()


def test_shipped_configs_load():
    for path in (Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"):
        load_config(path)

"""A hostile configuration file (issue 9): an alias bomb, a key given twice, an infinite size:
one short line, exit 2, quickly.
"""

from __future__ import annotations

import pytest
from hostile_helpers import (
    cli,
    one_error_line,
    one_stderr_line,
    originals,
    run,
)

ALIAS_BOMB = """\
source:
  extensions:
    - &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]
    - &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
    - &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
    - &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
    - &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
    - &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
    - &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
    - &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
    - &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]
"""


@pytest.mark.slow
def test_a_yaml_alias_bomb_is_one_short_line(tmp_path):
    config = tmp_path / "bomb.yaml"
    config.write_text(ALIAS_BOMB)
    assert len(ALIAS_BOMB) < 450
    originals(tmp_path / "source")
    result = run("pack", tmp_path / "source", tmp_path / "out", "--config", config, timeout=60)
    line = one_stderr_line(result, 2)
    assert len(line) < 500 and "bomb.yaml" in line


def test_a_key_given_twice_in_yaml_is_an_error_naming_it(tmp_path):
    config = tmp_path / "twice.yaml"
    config.write_text("image:\n  size: 64\n  quality: 80\n  size: 128\n")
    originals(tmp_path / "source")
    line = one_error_line(cli("pack", tmp_path / "source", tmp_path / "out", "--config", config),
                          2)
    assert "'size'" in line and "twice.yaml" in line
    assert not (tmp_path / "out" / "manifest.json").exists()


@pytest.mark.parametrize("value", [".inf", ".nan"])
def test_an_infinite_shard_size_in_yaml_is_one_line(tmp_path, value):
    config = tmp_path / "job.yaml"
    config.write_text(f"output:\n  shard_size_mb: {value}\n")
    originals(tmp_path / "source")
    line = one_error_line(cli("pack", tmp_path / "source", tmp_path / "out", "--config", config),
                          2)
    assert "output.shard_size_mb" in line

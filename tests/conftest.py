import importlib.abc
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import images  # noqa: E402


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true",
                     help="rewrite tests/golden/ from the current output (review the diff)")
    parser.addoption(
        "--without", default="", metavar="MODULES",
        help="act as if these top-level modules were not installed (comma-separated, e.g. "
             "tensorflow,nvidia.dali): the tests that need them must skip with the reason")


class _Absent(importlib.abc.MetaPathFinder):
    """Makes ``import NAME`` (and its submodules) fail as for a package that is not installed."""

    def __init__(self, names: list[str]):
        self.names = names

    def find_spec(self, fullname, path=None, target=None):
        if any(fullname == name or fullname.startswith(name + ".") for name in self.names):
            raise ModuleNotFoundError(f"No module named {fullname!r} (--without)",
                                      name=fullname)
        return None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: takes more than a few seconds (deselect with "
                                       "-m 'not slow')")
    names = [name.strip() for name in config.getoption("--without").split(",") if name.strip()]
    if names:
        sys.meta_path.insert(0, _Absent(names))


@pytest.fixture
def tmpfs() -> Iterator[Callable[..., Path]]:
    """``tmpfs(path, size, "ro")`` mounts a tmpfs at ``path``; all are unmounted afterwards
    (root only: the tests that take it skip with the reason otherwise)."""
    from hostile_helpers import tmpfs_mounts

    yield from tmpfs_mounts()


@pytest.fixture
def mixed_source(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A source tree with every supported kind of original and three broken files."""
    root = tmp_path / "source"
    expected = images.mixed_tree(root)
    return root, expected

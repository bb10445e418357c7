import importlib.abc
import sys
import tempfile
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
    config.addinivalue_line("markers", "slow: takes about a second or more (make test-fast, "
                                       "-m 'not slow', leaves it out)")
    names = [name.strip() for name in config.getoption("--without").split(",") if name.strip()]
    if names:
        sys.meta_path.insert(0, _Absent(names))


# Where a test must never leave anything: the default spool of s3:// packs (when
# SHARDSMITH_SPOOL is not set) and the temporary folders that the product and the scripts name
# shardsmith-*.  Compared at the end of the session with what was there at its start.
OUTSIDE = ((Path.home() / ".cache" / "shardsmith" / "spool", "*"),
           (Path(tempfile.gettempdir()), "shardsmith-*"))
_BEFORE = pytest.StashKey[set]()
_LEFT = pytest.StashKey[list]()


def _outside() -> set[Path]:
    return {path for folder, pattern in OUTSIDE for path in folder.glob(pattern)}


def pytest_sessionstart(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):  # under xdist, the controller checks alone
        session.config.stash[_BEFORE] = _outside()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The run fails when a test left files where ``OUTSIDE`` says none may be."""
    before = session.config.stash.get(_BEFORE, None)
    if before is None or session.config.option.collectonly:
        return
    left = sorted(_outside() - before)
    session.config.stash[_LEFT] = left
    if left:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    left = config.stash.get(_LEFT, [])
    if left:
        terminalreporter.write_sep("=", "files left outside the tests' tmp folders (use "
                                        "tmp_path)", red=True)
        for path in left:
            terminalreporter.write_line(str(path))


@pytest.fixture(scope="session", autouse=True)
def spool_in_tmp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """``$SHARDSMITH_SPOOL`` under pytest's folder for the whole session (a test that needs a
    spool of its own sets it again): no pack to s3:// writes to ``~/.cache``."""
    spool = tmp_path_factory.mktemp("spool")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SHARDSMITH_SPOOL", str(spool))
        yield spool


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

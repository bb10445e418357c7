import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import images  # noqa: E402


@pytest.fixture
def mixed_source(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A source tree with every supported kind of original and three broken files."""
    root = tmp_path / "source"
    expected = images.mixed_tree(root)
    return root, expected

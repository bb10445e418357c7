"""``report -o -`` writes the page to stdout (``report DATASET -o - > page.html``, or a pipe),
the summary line to stderr, and no file named ``-``."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hostile_helpers import REPO, packed


@pytest.mark.slow
def test_report_to_dash_writes_the_page_to_stdout_and_no_file_named_dash(tmp_path):
    packed(tmp_path, "ds", count=4)
    process = subprocess.run([sys.executable, "-m", "shardsmith", "report", tmp_path / "ds",
                              "-o", "-"], cwd=tmp_path, capture_output=True, timeout=120,
                             env={**os.environ, "PYTHONPATH": str(REPO)})
    assert process.returncode == 0, process.stderr
    assert process.stdout.startswith(b"<!DOCTYPE html>") and b"</html>" in process.stdout
    assert process.stderr.decode().splitlines()[-1].startswith("stdout: ")  # after any note
    assert not (tmp_path / "-").exists()

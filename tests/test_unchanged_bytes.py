"""A dataset without annotations or tiles packs to the same bytes as before they existed.

The shards below were packed by the release before annotations and tiling, with the first of the
library versions in ``PINNED_WITH``; byte identity is promised for equal library versions
(docs/design.md, invariant 1), so with versions not listed the comparison is skipped on a
developer's machine, and fails in CI (``CI`` set, as CI services do), whose dev install pins the
versions (pyproject.toml): a golden skipped there would guard nothing.  A version set joins the
list only once this code packed these very bytes with it.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from pathlib import Path

import cv2
import numpy as np
import PIL
import pytest
import simplejpeg
from click.testing import CliRunner

from shardsmith.cli import main

import images

PINNED_WITH = (
    {"pillow": "13.0.0", "opencv": "5.0.0", "simplejpeg": "1.9.0", "numpy": "2.4.6"},
    {"pillow": "13.0.0", "opencv": "5.1.0", "simplejpeg": "1.9.0", "numpy": "2.4.6"},
)

PINNED = {
    "webdataset": {
        "fingerprint": "a5310a63ae3ec2c09a58186bc05966929f526e572030ef4fbb6d75794ec06019",
        "train-000000.tar": "acf3d3948514e7bf4ff879b60a1daa07f8bf6fad527ba10a49e0ed8e8ff971b7",
        "train-000000.idx": "3662d6c18087ccd4407e20fd69f934109a48df9527c8539dc5a1e6f4b2c7943f",
        "val-000000.tar": "0195868e174b8cfaafbc1026243b6af9444bc5d43ac26425d9b3775d065bfa5e",
        "val-000000.idx": "95b3a39145df8879f31b9dbbedfa2c2b9a68a431633b492062c6cf96a1cfe227",
    },
    "tfrecord": {
        "fingerprint": "a135c2bf03b24a60d7a983be056617c9b9132d97f3c1c9c303c687a707a91c08",
        "train-000000.tfrecord":
            "213dc339150d1d6877d466b8de1a4ac86c54bcd9baf91c5bd40fbbe6f836b5cb",
        "train-000000.idx": "b3abb40b1e78d66f50a587fc9579cf0e39bd48fb27bb91492d5be7d6b5360412",
        "val-000000.tfrecord": "044319090f4d83279d0be7d302df70c49b76a296c2110d6c74dbe26bba187c9a",
        "val-000000.idx": "549560e49e36d5e338ceba896d4c02ddec9a6f4b681ea25adeae699a259c6616",
    },
}


def library_versions() -> dict[str, str]:
    return {"pillow": PIL.__version__, "opencv": cv2.__version__,
            "simplejpeg": simplejpeg.__version__, "numpy": np.__version__}


def in_ci() -> bool:
    """Whether this runs in CI: ``CI`` set to anything but empty, 0 or false."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false")


@pytest.mark.parametrize("fmt", ["webdataset", "tfrecord"])
def test_a_dataset_without_annotations_packs_to_the_pinned_bytes(tmp_path: Path, fmt: str):
    source = tmp_path / "source"
    images.write(source / "dent" / "a.jpg", images.jpeg(320, 240, 1))
    images.write(source / "dent" / "b.png", images.png(200, 300, 2))
    images.write(source / "ok" / "c.jpg", images.exif_rotated_jpeg(400, 200, 6))
    images.write(source / "ok" / "d.tif", images.tiff16(30000, 160, 120, 3))
    output = tmp_path / fmt
    result = CliRunner().invoke(main, [
        "pack", str(source), str(output), "--format", fmt, "--shard-samples", "3",
        "--size", "64", "--split", "train=0.5,val=0.5", "--workers", "1", "--quiet"])
    assert result.exit_code == 0, result.output
    # The settings fingerprint is ours alone: equal whatever the library versions.
    assert images.manifest_of(output)["fingerprint"] == PINNED[fmt]["fingerprint"]
    if library_versions() not in PINNED_WITH:
        message = (f"the golden shard bytes were NOT compared: known for {PINNED_WITH}, "
                   f"these are {library_versions()}")
        if in_ci():
            pytest.fail(f"{message}; install the versions pyproject.toml's dev extra pins "
                        "(make install-dev)", pytrace=False)
        warnings.warn(message, stacklevel=1)  # in the warnings summary, not only the skips
        pytest.skip(message)
    found = {name: hashlib.sha256((output / name).read_bytes()).hexdigest()
             for name in PINNED[fmt] if name != "fingerprint"}
    assert found == {name: digest for name, digest in PINNED[fmt].items()
                     if name != "fingerprint"}


def test_the_dev_install_pins_a_version_set_these_bytes_were_packed_with():
    """CI installs the dev extra: with its versions the comparison above runs, never skips."""
    tomllib = pytest.importorskip("tomllib", reason="Python 3.10 has no tomllib")
    pyproject = Path(__file__).parent.parent / "pyproject.toml"
    dev = tomllib.loads(pyproject.read_text())["project"]["optional-dependencies"]["dev"]
    pins = dict(requirement.split("==") for requirement in dev if "==" in requirement)
    opencv = ".".join(pins["opencv-python-headless"].split(".")[:3])  # cv2.__version__'s form
    assert {"pillow": pins["pillow"], "opencv": opencv, "simplejpeg": pins["simplejpeg"],
            "numpy": pins["numpy"]} in PINNED_WITH

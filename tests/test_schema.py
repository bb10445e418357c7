"""One schema (issue 17): the config, the manifest and the sample index are read by one strict
validation engine, errors are one line naming the path, and the settings fingerprint stays our
own function of the settings, equal across releases.
"""

from __future__ import annotations

import pytest

from shardsmith.config import load_config

# Computed with the release before the schema engine changed (issue 17): a dataset packed by any
# release with these settings has this fingerprint.  A change here makes every existing
# dataset a foreign one (``pack`` would refuse to build on it without --overwrite).
GOLDEN_FINGERPRINTS = {
    "default": ({}, "e7d3da46b61ce05c4b43e375ade07fa1f33f43d2d4a65ff5fd9601866042ece7"),
    "tiled": ({"image.tiles.size": 1024, "image.tiles.overlap": 64, "image.size": 1024},
              "014d984779870a8d9659f9074a4f2b25429bfe1583878b183b49ee06242ec4ce"),
    "annotated": ({"source.annotations.coco": "coco.json",
                   "source.annotations.min_visible": 0.5},
                  "fd41999e84bd082b0e3b17eaa1661f2dd897d82f43f283231bb1e0367420e019"),
    "tfrecord": ({"output.format": "tfrecord", "image.size": 256,
                  "splits": "train=0.8,val=0.2", "seed": 7},
                 "617492b5942298d0de3176abca43750f61c4939ca7138a0b6eca023751fbaccd"),
}


@pytest.mark.parametrize("name", list(GOLDEN_FINGERPRINTS))
def test_the_settings_fingerprint_is_the_one_every_release_computed(name):
    overrides, fingerprint = GOLDEN_FINGERPRINTS[name]
    assert load_config(None, overrides).fingerprint() == fingerprint

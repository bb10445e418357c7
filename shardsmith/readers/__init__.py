"""Training-side readers over a packed or staged dataset (its manifest).

``shardsmith.readers.torch.dataset`` (WebDataset shards → PyTorch) and
``shardsmith.readers.tf.dataset`` (TFRecord shards → tf.data).  Each imports its framework
only when used; the rest of shardsmith never imports torch or tensorflow.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..manifest import read_manifest


def select_shards(path: str | Path, split: str | None, fmt: str) -> tuple[dict[str, Any],
                                                                           list[dict[str, Any]]]:
    """The manifest and the shards of ``split`` (all when None), checked against ``fmt``."""
    directory = Path(path)
    manifest = read_manifest(directory)
    if manifest["format"] != fmt:
        other = "shardsmith.readers.tf" if manifest["format"] == "tfrecord" else \
            "shardsmith.readers.torch"
        raise ConfigError(
            f"{directory} holds {manifest['format']} shards; this reader reads {fmt} "
            f"(use {other})"
        )
    if split is not None and split not in manifest["splits"]:
        known = ", ".join(manifest["splits"]) or "none"
        raise ConfigError(f"split {split!r} is not in {directory} (splits: {known})")
    shards = [dict(s, path=str(directory / s["name"])) for s in manifest["shards"]
              if split is None or s["split"] == split]
    return manifest, shards

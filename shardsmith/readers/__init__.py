"""Training-side readers over a packed or staged dataset (its manifest).

``shardsmith.readers.torch.dataset`` (WebDataset shards → PyTorch) and
``shardsmith.readers.tf.dataset`` (TFRecord shards → tf.data).  Each imports its framework
only when used; the rest of shardsmith never imports torch or tensorflow.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import ConfigError
from ..manifest import Manifest, ShardEntry, read_manifest


def select_shards(path: str | Path, split: str | None,
                  fmt: str) -> tuple[Manifest, list[tuple[str, ShardEntry]]]:
    """The manifest and (file path, entry) of the shards of ``split`` (all when None).

    Goes through the validated manifest model: shard names are plain names of the dataset,
    so every path is inside ``path``.
    """
    directory = Path(path)
    manifest = read_manifest(directory)
    if manifest.format != fmt:
        other = "shardsmith.readers.tf" if manifest.format == "tfrecord" else \
            "shardsmith.readers.torch"
        raise ConfigError(
            f"{directory} holds {manifest.format} shards; this reader reads {fmt} "
            f"(use {other})"
        )
    if split is not None and split not in manifest.splits:
        known = ", ".join(manifest.splits) or "none"
        raise ConfigError(f"split {split!r} is not in {directory} (splits: {known})")
    shards = [(str(directory / shard.name), shard) for shard in manifest.shards
              if split is None or shard.split == split]
    return manifest, shards

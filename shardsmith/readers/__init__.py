"""Training-side readers over a packed or staged dataset (its manifest).

``shardsmith.readers.torch.dataset`` (either shard format → PyTorch), ``shardsmith.readers.tf
.dataset`` (TFRecord shards → tf.data) and ``shardsmith.readers.dali.loader`` (either, decoded
on the GPU).  Each imports its framework only when used; the rest of shardsmith never imports
torch, tensorflow or DALI.
"""

from __future__ import annotations

from pathlib import Path

from ..dataset.manifest import Manifest, ShardEntry, iter_sample_index, read_manifest
from ..errors import ConfigError


def select_shards(path: str | Path, split: str | None,
                  fmt: str | None) -> tuple[Manifest, list[tuple[str, ShardEntry]]]:
    """The manifest and (file path, entry) of the shards of ``split`` (all when None), of
    format ``fmt`` (any when None).

    Goes through the validated manifest model: shard names are plain names of the dataset,
    so every path is inside ``path``.
    """
    directory = Path(path)
    manifest = read_manifest(directory)
    if fmt is not None and manifest.format != fmt:
        raise ConfigError(f"{directory} holds {manifest.format} shards; this reader reads "
                          f"{fmt} (shardsmith.readers.torch reads both)")
    if split is not None and split not in manifest.splits:
        known = ", ".join(manifest.splits) or "none"
        raise ConfigError(f"split {split!r} is not in {directory} (splits: {known})")
    shards = [(str(directory / shard.name), shard) for shard in manifest.shards
              if split is None or shard.split == split]
    return manifest, shards


RESIZE_HINT = "pack with --resize center_crop, pad or stretch (image.resize) for equal sizes"


def equal_image_size(directory: Path, manifest: Manifest, split: str | None) -> tuple[int, int]:
    """The one (height, width) every sample of the selection has, or a ConfigError: batches
    of decoded images need it."""
    sizes = set()
    for record in iter_sample_index(directory, manifest):
        if split is None or record.split == split:
            sizes.add((record.height, record.width))
            if len(sizes) > 1:
                break
    if len(sizes) != 1:
        found = ", ".join(f"{w}x{h}" for h, w in sorted(sizes)) or "none"
        raise ConfigError(f"batch_size= needs equal image sizes; this selection has "
                          f"several ({found}, ...): {RESIZE_HINT}")
    return next(iter(sizes))


def largest_image_size(directory: Path, manifest: Manifest, split: str | None) -> tuple[int, int]:
    """The largest height and the largest width the sample index records in the selection:
    what no sample's JPEG header may exceed (a header is read before a JPEG is decoded)."""
    height = width = 0
    for record in iter_sample_index(directory, manifest):
        if split is None or record.split == split:
            height, width = max(height, record.height), max(width, record.width)
    return height, width

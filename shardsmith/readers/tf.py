"""tf.data reader: an unbatched ``tf.data.Dataset`` of (uint8 HWC, int64 label) over TFRecords.

    from shardsmith.readers.tf import classes, dataset
    data = dataset("/nvme/shards/line3", split="train").batch(256).prefetch(tf.data.AUTOTUNE)

    # tf.distribute: one pipeline per input worker, each sample read by exactly one of them
    strategy.distribute_datasets_from_function(
        lambda context: dataset(path, split="train", input_context=context).batch(64))

Shard files are shuffled each epoch and their records interleaved; records are shuffled in a
buffer, then read, parsed and decoded in parallel.  With ``shuffle=False`` (or
``deterministic=True``) the order is the manifest's, the same each run.

With ``targets=True`` (a dataset packed with box or mask annotations) each element is a dict:
``image`` (uint8 HWC), ``label``, ``boxes`` (float32 N×4, ``ymin, xmin, ymax, xmax`` normalised
to 0..1 as the Object Detection API and ``tf.image.draw_bounding_boxes`` have them),
``classes`` (int64 N, ids from 1, as in ``label_map.pbtxt``), ``class_names`` (string N) and,
when the dataset has masks, ``mask`` (uint8 H×W, the class mask: 0 background, k a class id).

A sample with a defect cut below ``min_visible`` is left out of the record stream, and of the
epoch's count, unless ``keep_cut`` (``readers.cut``: its targets would call the defect
background).

The shards are untrusted (docs/readers.md, "What the tf.data reader guarantees").  TensorFlow
never opens one: when the dataset is made, every shard is opened through the door (a regular
file, no link, the manifest's size) and its framing checked against its index (each record's
length field, with its CRC, is the index's size, and the records tile the file) and the keys
its records hold against the sample index (``plan.load_table``), else a ``ManifestError``
names it.  Records are then read by offset from those checked descriptors
(a shard swapped since is refused), their CRC checked and parsed in Python, 64 records a
call, the JPEG header first (never larger than the largest recorded sample); then TensorFlow's
kernel decodes (with ``targets``, Python does: ``sample_jpeg.decode_sample``).
A record that fails any check is a corrupt sample: one warning naming its shard and key, and
it is skipped; iteration never raises a TensorFlow error for it.

An epoch holds exactly ``tf.data.experimental.cardinality(dataset)`` elements (batches, once
batched), known when the dataset is made: the samples of this pipeline's part
(``part_samples``).  Keras then knows an epoch's steps (no "Your input ran out of data" in
epoch 1).  A skipped record leaves its place to a sample of a fresh pass over the same part
(``repeat().take(n)``), as the torch reader replaces one, so the epoch stays whole.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

try:
    import tensorflow as tf
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "shardsmith.readers.tf needs TensorFlow: pip install 'shardsmith[tf]'"
    ) from exc

import logging
import os
import threading
from collections.abc import Callable

import numpy as np
from google.protobuf.message import DecodeError

from ..annotations.maskpng import MaskError, class_mask
from ..dataset.formats.base import SHARD_CAP, checked_index, open_shard
from ..dataset.formats.metadata import box_problem
from ..dataset.formats.tfrecord import check_framing, index_spans, read_payload
from ..dataset.manifest import ShardEntry
from ..door import Identity, OpenFile, Refused, open_file
from ..errors import ConfigError, ManifestError, ShardFormatError
from . import largest_image_size, select_shards
from .cut import cut_keys, log_left_out
from .plan import OPEN_SHARDS, SampleTable, load_table
from .sample_jpeg import SampleJpegError, check_header, decode_sample
from .targets import check_class_ids

log = logging.getLogger(__name__)

COLORSPACES = {0: "KEEP", 1: "GRAY", 3: "RGB"}
EDGES = ("ymin", "xmin", "ymax", "xmax")
READ_BATCH = 64  # records checked per call into Python: the call costs more than the checks


def object_classes(path: str | Path) -> list[str]:
    """The object classes of a dataset: class id ``k`` is ``object_classes(path)[k - 1]``."""
    manifest, _ = select_shards(path, None, "tfrecord")
    return list(manifest.object_classes or ())


def classes(path: str | Path) -> list[str]:
    """The class names of a dataset; a label is an index into this list."""
    manifest, _ = select_shards(path, None, "tfrecord")
    return list(manifest.classes)


def checked_shard(path: str, entry: ShardEntry) -> Identity:
    """The identity of a shard, once it is checked through the door and its framing against
    its index; ``ManifestError`` naming it otherwise."""
    name = os.path.basename(path)
    try:
        with open_shard(path) as handle:
            if handle.size != entry.bytes:
                raise ShardFormatError(f"{handle.size:,} bytes, the manifest says "
                                       f"{entry.bytes:,}")
            spans = index_spans(checked_index(Path(os.path.dirname(path)), entry),
                                handle.size)
            if len(spans) != entry.samples:
                raise ShardFormatError(f"{len(spans)} records, the manifest says "
                                       f"{entry.samples}")
            check_framing(handle, spans)
            return Identity(handle.info.st_ino, handle.size)
    except ShardFormatError as exc:
        raise ManifestError(f"{name}: {exc}; `shardsmith verify` names what is wrong, "
                            "`shardsmith stage` repairs a copy") from None
    except OSError as exc:
        raise ManifestError(f"{name}: cannot read the shard: {exc.strerror or exc}") from None


class _Shards:
    """The checked shards, each reopened through the door on first read with the identity it
    had when checked (a shard swapped since is refused) and kept open, at most
    ``OPEN_SHARDS`` at once.  tf.data calls ``read`` from several threads: one lock covers a
    lookup and its ``pread``, so a descriptor is never closed under a read."""

    def __init__(self, paths: list[str], identities: list[Identity]):
        self.paths, self.identities = paths, identities
        self._open: dict[int, OpenFile] = {}
        self._lock = threading.Lock()

    def read(self, shard: int, offset: int, size: int) -> bytes:
        with self._lock:
            handle = self._open.get(shard)
            if handle is None:
                if len(self._open) >= OPEN_SHARDS:
                    self._open.pop(next(iter(self._open))).close()
                try:
                    handle = open_file(self.paths[shard], SHARD_CAP,
                                       expect=self.identities[shard])
                except Refused as exc:
                    raise ShardFormatError(exc.detail) from None
                self._open[shard] = handle
            return read_payload(handle, offset, size)

    def __del__(self) -> None:
        for handle in self._open.values():
            handle.close()


class _Records:
    """Reads, checks, parses and decodes record ``number`` of the selection (in Python, called
    through ``tf.py_function``); a record that fails is logged and marked, never raised."""

    def __init__(self, table: SampleTable, identities: list[Identity], classes: int,
                 object_classes: int, channels: int, largest: tuple[int, int], with_mask: bool,
                 left_out: frozenset[str] = frozenset(), with_ignored: bool = False):
        self.table, self.shards = table, _Shards(list(table.paths), identities)
        self.names = [os.path.basename(path) for path in table.paths]
        self.shard = table.shard.astype(np.int64)
        self.spans = np.stack([table.image_offset, table.image_size], axis=1)  # a record each
        self.classes, self.object_classes = classes, object_classes
        self.colorspace, self.largest, self.with_mask = COLORSPACES[channels], largest, \
            with_mask
        # the keys of the samples with a defect cut below min_visible (``readers.cut``), and
        # whether the targets carry the cut objects as ignore (``keep_cut``)
        self.left_out, self.with_ignored = left_out, with_ignored
        self.warned: set[int] = set()  # the records skipped: a refill pass meets them again

    def starts(self) -> np.ndarray:
        """Where each shard's records begin in the selection's numbering, and where the last
        ends."""
        return np.searchsorted(self.shard, np.arange(len(self.names) + 1)).astype(np.int64)

    def where(self, number: int) -> str:
        """``SHARD: sample KEY`` of record ``number`` for messages, by the key the table read
        (the record's byte offset where none read)."""
        key = self.table.key(number)
        return f"{self.names[int(self.shard[number])]}: " + (
            f"sample {key[:200]}" if key else f"the record at byte {int(self.spans[number, 0])}")

    def example(self, number: int) -> Any:
        """The tf.train.Example of record ``number``; ``LeftOut``, unread, for a sample left
        out."""
        if self.table.key(number) in self.left_out:
            raise LeftOut
        offset, size = (int(value) for value in self.spans[number])
        payload = self.shards.read(int(self.shard[number]), offset, size)
        try:
            return tf.train.Example.FromString(payload)
        except (DecodeError, ValueError) as exc:  # upb's DecodeError, or a RuntimeWarning's
            raise ShardFormatError(f"not a tf.train.Example ({exc})") from None

    def checked_jpegs(self, numbers: Any) -> list[Any]:
        """(JPEG bytes, labels, ok flags) of the records ``numbers``, each checked by
        ``checked_jpeg``."""
        checked = [self.checked_jpeg(int(number)) for number in numbers.numpy()]
        return [[jpeg for jpeg, _, _ in checked],
                np.asarray([label for _, label, _ in checked], np.int64),
                np.asarray([ok for _, _, ok in checked], bool)]

    def checked_jpeg(self, number: int) -> tuple[bytes, int, bool]:
        """(JPEG bytes, label, ok) of record ``number``: read, CRC, parse, label and JPEG
        header checked here; the decode is left to TensorFlow's kernel."""
        try:
            jpeg, label = self._jpeg_and_label(self.example(number).features.feature)
            check_header(jpeg, None, self.largest)
            return jpeg, label, True
        except LeftOut:
            pass
        except SKIPPED as exc:
            self.skipped(number, exc)
        return b"", -1, False

    def read_targets(self, number: Any) -> list[Any]:
        """Image, label, boxes, class ids and names, mask and ok of record ``number``, checked
        and decoded here (a record that fails is logged and marked, never raised)."""
        try:
            return [*self._targets(self.example(int(number)).features.feature), True]
        except LeftOut:
            pass
        except SKIPPED as exc:
            self.skipped(int(number), exc)
        return [*self._placeholder(), False]

    def skipped(self, number: int, exc: Exception) -> None:
        """One warning for corrupt record ``number``, the first time it is met."""
        if number in self.warned:
            return
        self.warned.add(number)
        what = "unreadable" if isinstance(exc, OSError) else "corrupt"
        reason = exc.strerror or exc if isinstance(exc, OSError) else exc
        log.warning("%s: %s sample skipped (%s)", self.where(number), what, reason)

    def _jpeg_and_label(self, feature: Any) -> tuple[bytes, int]:
        encoded = _values(feature, "image/encoded", "bytes_list")
        labels = _values(feature, "image/class/label", "int64_list")
        if len(encoded) != 1 or len(labels) != 1:
            raise ShardFormatError(f"{len(encoded)} image/encoded and {len(labels)} "
                                   "image/class/label values, not one each")
        if not -1 <= labels[0] < self.classes:
            raise ShardFormatError(f"label {labels[0]} is not one of the {self.classes} "
                                   "classes")
        return encoded[0], labels[0]

    def _targets(self, feature: Any) -> list[Any]:
        jpeg, label = self._jpeg_and_label(feature)
        image = decode_sample(jpeg, self.colorspace, bound=self.largest)
        names = _values(feature, "image/object/class/text", "bytes_list")
        shape = image.shape[:2]
        boxes, ids = self._objects(feature, shape, "image/object", "objects", names)
        mask = self._mask(feature, shape) if self.with_mask else np.zeros((0, 0), np.uint8)
        ignored = self._objects(feature, shape, "image/object/cut", "cut objects") \
            if self.with_ignored else (np.zeros((0, 4), np.float32), np.zeros(0, np.int64))
        return [image, np.int64(label), boxes, ids, tf.constant(names, tf.string), mask,
                *ignored]

    def _objects(self, feature: Any, shape: tuple[int, int], prefix: str, what: str,
                 *more: list[Any]) -> tuple[np.ndarray, np.ndarray]:
        """The boxes (float32 N×4, ``EDGES``) and class ids of the objects under ``prefix``:
        ``image/object``, or ``image/object/cut`` for those min_visible dropped (``keep_cut``;
        none in a record of an earlier release, whose class mask's 255 pixels still mark
        those with pixels).  Lists of one length (``more`` too), finite, known class ids, and
        each box one of the image's ``shape`` (height, width) by the one geometry check."""
        edges = [_values(feature, f"{prefix}/bbox/{edge}", "float_list") for edge in EDGES]
        ids = _values(feature, f"{prefix}/class/label", "int64_list")
        if len({len(values) for values in (*edges, ids, *more)}) != 1:
            raise ShardFormatError(f"the {what}' boxes, class ids"
                                   f"{' and class names' * bool(more)} are not lists of one "
                                   "length")
        boxes = np.asarray(edges, np.float32).T.reshape(-1, 4)
        if not np.isfinite(boxes).all():
            raise ShardFormatError(f"a box of the {what} is not finite")
        height, width = shape
        for top, left, bottom, right in boxes.tolist():
            problem = box_problem((left * width, top * height, right * width, bottom * height),
                                  width, height)
            if problem is not None:
                raise ShardFormatError(f"{what}: {problem}")
        check_class_ids(ids, self.object_classes)
        return boxes, np.asarray(ids, np.int64)

    def _mask(self, feature: Any, shape: tuple[int, int]) -> np.ndarray:
        """The class mask PNG, checked (``maskpng.class_mask``)."""
        encoded = _values(feature, "image/segmentation/class/encoded", "bytes_list")
        if len(encoded) != 1:
            raise ShardFormatError("no class mask")
        try:
            return class_mask(encoded[0], shape[1], shape[0])
        except MaskError as exc:
            raise ShardFormatError(str(exc)) from None

    def _placeholder(self) -> list[Any]:
        image = np.zeros((1, 1, 1 if self.colorspace == "GRAY" else 3), np.uint8)
        return [image, np.int64(-1), np.zeros((0, 4), np.float32), np.zeros(0, np.int64),
                tf.constant([], tf.string), np.zeros((0, 0), np.uint8),
                np.zeros((0, 4), np.float32), np.zeros(0, np.int64)]


SKIPPED = (ShardFormatError, SampleJpegError, ValueError, OSError)  # a corrupt record


class LeftOut(Exception):
    """The record holds a sample with a defect cut below min_visible: not read (no warning;
    their count was logged once)."""




def _values(feature: Any, name: str, kind: str) -> list[Any]:
    """The values of feature ``name`` of kind ``kind`` (none when absent or of another kind)."""
    if name not in feature or feature[name].WhichOneof("kind") != kind:
        return []
    return list(getattr(feature[name], kind).value)


def dataset(
    path: str | Path,
    split: str | None = None,
    shuffle: bool = True,
    shuffle_buffer: int = 2000,
    seed: int | None = None,
    channels: int = 0,
    cycle_length: int | None = None,
    num_shards: int = 1,
    index: int = 0,
    input_context: Any = None,
    deterministic: bool = False,
    targets: bool = False,
    keep_cut: bool = False,
) -> tf.data.Dataset:
    """Unbatched (uint8 HWC image, int64 label) pairs; ``split=None`` reads every split.

    ``channels``: 0 keeps what was packed, 1 or 3 converts.  ``num_shards``/``index`` (or a
    ``tf.distribute.InputContext``) give this pipeline its part: whole shard files when there
    are at least as many files as parts, single records otherwise, so that every sample is read
    by exactly one pipeline.  ``seed`` makes the shuffled order repeatable; ``deterministic``
    keeps parallel reads in order.  Every shard is checked now (``ManifestError`` naming one
    that fails); a corrupt record is skipped with a warning naming it.  A sample with a
    defect cut below min_visible is left out (their count logged once, ``readers.cut``)
    unless ``keep_cut``, which keeps them and, with ``targets``, gives every element
    ``ignore_boxes`` and ``ignore_classes``: the cut objects, as ``boxes`` and ``classes``.
    """
    if input_context is not None:
        num_shards, index = input_context.num_input_pipelines, input_context.input_pipeline_id
    if not 0 <= index < num_shards:
        raise ConfigError(f"index {index} is not one of {num_shards} parts")
    if channels not in COLORSPACES:
        raise ConfigError(f"channels: expected 0, 1 or 3, got {channels!r}")
    manifest, shards = select_shards(path, split, "tfrecord")
    if targets and manifest.object_classes is None:
        raise ConfigError(f"{path} has no box or mask annotations (packed without "
                          "source.annotations): targets=True needs them")
    with_mask = targets and manifest.has_masks
    paths = [file for file, _ in shards]
    identities = [checked_shard(file, entry) for file, entry in shards]
    # each record's span and key, the keys held to the sample index's (a shard of another
    # split copied over one of the same layout is refused)
    table = load_table(Path(path), [entry for _, entry in shards], manifest)
    left_out = frozenset() if keep_cut else frozenset(cut_keys(Path(path), manifest, table))
    reader = _Records(table, identities, len(manifest.classes),
                      len(manifest.object_classes or ()), channels,
                      largest_image_size(Path(path), manifest, split), with_mask,
                      left_out, targets and keep_cut)
    starts = tf.constant(reader.starts())
    by_file = len(paths) >= num_shards
    keep = np.fromiter((table.key(number) not in left_out for number in range(len(table))),
                       bool, len(table))
    kept, epoch = _kept(reader.starts(), keep, by_file, num_shards, index)
    if reader.left_out:
        log_left_out(path, len(reader.left_out))
    files = tf.data.Dataset.range(len(paths))
    if num_shards > 1 and by_file:
        files = files.shard(num_shards, index)
    if shuffle and (by_file or num_shards == 1):  # parts by record need one file order
        files = files.shuffle(max(1, len(paths)), seed=seed, reshuffle_each_iteration=True)
    ordered = deterministic or not shuffle or not by_file
    records = files.interleave(
        lambda shard: tf.data.Dataset.range(starts[shard], starts[shard + 1]),
        cycle_length=cycle_length or min(len(paths), 8) or 1,
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=ordered,
    )
    if kept is not None:  # before the parts are cut, as the count of each part assumes
        records = records.filter(lambda number: kept[number])
    if num_shards > 1 and not by_file:
        records = records.shard(num_shards, index)
    if shuffle and shuffle_buffer > 1:
        records = records.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    if targets:
        parsed = records.map(_parse_targets(reader, channels),
                             num_parallel_calls=tf.data.AUTOTUNE, deterministic=ordered)
    else:
        parsed = records.batch(READ_BATCH).map(
            _parse(reader), num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=ordered).unbatch()
    # lambdas of other arguments: AutoGraph cannot tell two of one line and the same
    # arguments apart, and prints a warning of 18 lines
    good = parsed.filter(lambda element, ok: ok).map(lambda kept, _: kept)
    if not targets:
        # A JPEG whose header passed but whose data does not decode fails in the kernel:
        # skipped with TensorFlow's warning, as the records that fail our checks are.
        good = good.map(_decode(channels), num_parallel_calls=tf.data.AUTOTUNE,
                        deterministic=ordered).ignore_errors(log_warning=True)
    # Skipped records make the cardinality unknown; a fresh pass (reshuffled) fills their
    # places, so every epoch is ``epoch`` elements, as announced.  Take stops pulling at
    # ``epoch``: without a skipped record the second pass never starts, and a pass that
    # yields nothing (every record corrupt) ends the repeat.
    return good.repeat().take(epoch).prefetch(tf.data.AUTOTUNE)


def _kept(starts: np.ndarray, keep: np.ndarray, by_file: bool, num_shards: int,
          index: int) -> tuple[tf.Tensor | None, int]:
    """Which records the stream keeps (None: every record, those left out dropped as they are
    read) and how many samples this part's epoch holds: its records less those ``keep`` (a
    bool per record, from the keys the sample table read) leaves out.  Parts by record are
    cut from the one stream, which loses the records left out before it is cut."""
    counted = np.concatenate(([0], np.cumsum(keep, dtype=np.int64)))  # kept before each
    if keep.all() or by_file or num_shards == 1:
        return None, part_samples(counted[starts], num_shards, index)
    return tf.constant(keep), part_samples(counted[[0, -1]], num_shards, index)


def part_samples(starts: np.ndarray, num_shards: int, index: int) -> int:
    """How many samples part ``index`` of ``num_shards`` reads, from where each shard's
    records begin (``starts``, the last entry the total): whole shard files ``index``,
    ``index + num_shards``, ... when there are at least as many files as parts, else every
    ``num_shards``-th record from ``index`` (as ``dataset`` cuts them)."""
    files, total = len(starts) - 1, int(starts[-1])
    if num_shards == 1:
        return total
    if files >= num_shards:
        sizes = np.diff(starts)
        return int(sizes[index::num_shards].sum())
    return len(range(index, total, num_shards))


def _image_shape(channels: int) -> list[int | None]:
    return [None, None, channels or None]


def _parse(reader: _Records) -> Callable[[tf.Tensor], Any]:
    """Record numbers, a batch at a time (one call into Python per ``READ_BATCH`` records:
    the call, not the checks, is what costs), to their checked JPEG bytes, labels and flags."""
    def parse(numbers: tf.Tensor) -> Any:
        jpegs, labels, ok = tf.py_function(reader.checked_jpegs, [numbers],
                                           [tf.string, tf.int64, tf.bool])
        for tensor in (jpegs, labels, ok):
            tensor.set_shape([None])
        return (jpegs, labels), ok

    return parse


def _decode(channels: int) -> Callable[[tf.Tensor, tf.Tensor], Any]:
    """A checked record's JPEG decoded in TensorFlow's own kernel (parallel, no GIL): its
    header already said it is the size the dataset records."""
    def decode(jpeg: tf.Tensor, label: tf.Tensor) -> Any:
        image = tf.io.decode_jpeg(jpeg, channels=channels)
        image.set_shape(_image_shape(channels))
        return image, label

    return decode


def _parse_targets(reader: _Records, channels: int) -> Callable[[tf.Tensor], Any]:
    def parse(number: tf.Tensor) -> Any:
        image, label, boxes, ids, names, mask, ignore_boxes, ignore_ids, ok = tf.py_function(
            reader.read_targets, [number],
            [tf.uint8, tf.int64, tf.float32, tf.int64, tf.string, tf.uint8, tf.float32,
             tf.int64, tf.bool])
        image.set_shape(_image_shape(channels))
        for tensor, shape in ((label, []), (boxes, [None, 4]), (ids, [None]), (names, [None]),
                              (mask, [None, None]), (ignore_boxes, [None, 4]),
                              (ignore_ids, [None]), (ok, [])):
            tensor.set_shape(shape)
        found = {"image": image, "label": label, "boxes": boxes, "classes": ids,
                 "class_names": names}
        if reader.with_mask:
            found["mask"] = mask
        if reader.with_ignored:
            found["ignore_boxes"], found["ignore_classes"] = ignore_boxes, ignore_ids
        return found, ok

    return parse

"""The originals' headers read for a dry run: what each would cost a worker, and which a pack
would refuse, without decoding a pixel.

``pack --dry-run`` reads the headers of a seeded sample of the tree (the same originals whose
annotations it checks) and of the largest files, and asks of each what a pack's worker asks
before decoding (``imaging.budget_bytes``, the pixel and tile limits): the memory its decode
and output take, the samples it makes, or why it would be rejected.  The memory prediction
takes the largest of those costs; the reject forecast takes the share refused in the seeded
sample only (the largest files are not a fair sample of the tree).
"""

from __future__ import annotations

import random
import warnings
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
from PIL import Image

from ..annotations.geometry import TRANSPOSING, upright_size
from ..config import Config
from ..decoders import open_header, orientation
from ..errors import BadImage
from ..packing.annotated import MASK_BYTES_PER_PIXEL
from ..packing.imaging import Output, budget_bytes, layout, stored_size
from ..packing.originals import open_source, original_cap, read_all, use_storage
from ..packing.scan import ScanResult
from ..storage import Location
from ..tiling import MAX_TILES, scaled_size, tile_count

SAMPLE = 64  # originals of the seeded sample: their annotations and headers are read
LARGEST = 8  # and the largest files of the tree: the most a worker may have to decode
HEADER_BYTES = 1 << 20  # JPEG EXIF and PNG/TIFF headers fit; a TIFF with its IFD at the end
# is read whole (never decoded)
EXAMPLES_KEPT = 3


def seeded_sample(count: int, seed: int, size: int = SAMPLE) -> list[int]:
    """The indexes of the dry run's seeded sample of ``count`` originals, in tree order."""
    return sorted(random.Random(f"dry-run:{seed}").sample(range(count), min(size, count)))


@contextmanager
def read_header(root: str, relpath: str, config: Config, identity
                ) -> Iterator[tuple[Image.Image, bytes, int]]:
    """The parsed header of an original, the bytes it was parsed from (its first
    ``HEADER_BYTES``, or the whole file when the header is not all there) and the file's
    size.  Opened as a worker opens it (``open_source``); raises BadImage or OSError."""
    with open_source(root, relpath, config.source.follow_symlinks,
                     original_cap(config.image), identity) as handle, \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Pillow's warnings on damaged headers, as a worker
        data = handle.pread(min(HEADER_BYTES, handle.size), 0)
        try:
            header = open_header(data)
        except BadImage:
            if len(data) >= handle.size:
                raise
            data = read_all(handle)
            header = open_header(data)
        with header:
            yield header, data, handle.size


@dataclass(frozen=True)
class Cost:
    """What one original costs a worker: the memory ``image.max_decoded_mb`` bounds, its
    samples and their pixels together."""

    relpath: str
    budget_bytes: int
    samples: int
    pixels: int
    what: str  # "3000x2000 JPEG (RGB)"


@dataclass(frozen=True)
class HeaderSurvey:
    """The headers read for a dry run: ``sampled`` originals of the seeded sample (seed
    ``seed``) and the ``largest`` files besides; the costs of those a pack would convert;
    the refusals (reason -> originals) in the sample and among the largest files."""

    originals: int
    sampled: int
    largest: int
    seed: int
    costs: tuple[Cost, ...]
    sample_rejects: dict[str, int]
    other_rejects: dict[str, int]
    sample_refused: frozenset[str]  # the originals of the seeded sample a pack would reject
    examples: tuple[str, ...]  # "path: reason (detail)", the first few refusals
    # the seeded sample's headers: relpath -> (stored size, EXIF orientation), or what
    # reading the header raised (the annotation check reads its annotations in that frame)
    frames: dict[str, tuple[tuple[int, int], int] | BadImage | OSError] = field(
        default_factory=dict)

    @property
    def read(self) -> int:
        return self.sampled + self.largest

    @property
    def heaviest(self) -> Cost | None:
        """The original whose conversion takes the most memory."""
        return max(self.costs, key=lambda cost: cost.budget_bytes, default=None)

    @property
    def mean_samples(self) -> float:
        return sum(cost.samples for cost in self.costs) / len(self.costs) if self.costs else 1.0

    @property
    def mean_pixels(self) -> float:
        """The pixels of the samples of one original, on average."""
        return sum(cost.pixels for cost in self.costs) / len(self.costs) if self.costs else 0.0

    @property
    def rejected(self) -> int:
        return sum(self.sample_rejects.values()) + sum(self.other_rejects.values())


def survey_headers(scanned: ScanResult, config: Config, source: Location
                   ) -> HeaderSurvey:
    """Read the headers of the seeded sample and the largest files of ``scanned``."""
    files = scanned.files
    use_storage(config.storage.options())  # a bucket's originals: read as a worker reads
    sample = seeded_sample(len(files), config.seed)
    chosen = set(sample)
    # numpy, not a sorted list of Python ints: at 1M files that list alone is ~40 MB.
    by_size = np.argsort(-files.sizes.astype(np.int64), kind="stable")[:LARGEST + len(chosen)]
    largest = [int(index) for index in by_size if int(index) not in chosen][:LARGEST]
    costs: list[Cost] = []
    refused: tuple[Counter, Counter] = (Counter(), Counter())
    examples: list[str] = []
    sample_refused: set[str] = set()
    frames: dict[str, tuple[tuple[int, int], int] | BadImage | OSError] = {}
    for in_sample, indexes in ((True, sample), (False, largest)):
        for index in indexes:
            item = files[index]
            try:
                costs.append(original_cost(str(source), item.relpath, config, item.identity,
                                           frames if in_sample else None))
            except BadImage as exc:
                reason, detail, error = exc.reason, exc.detail, exc
            except OSError as exc:
                reason, detail, error = "unreadable", str(exc.strerror or exc), exc
            else:
                continue
            refused[0 if in_sample else 1][reason] += 1
            examples.append(f"{item.relpath}: {reason} ({detail})")
            if in_sample:
                sample_refused.add(item.relpath)
                frames.setdefault(item.relpath, error)  # its header read: refused after
    return HeaderSurvey(len(files), len(sample), len(largest), config.seed, tuple(costs),
                        dict(refused[0].most_common()), dict(refused[1].most_common()),
                        frozenset(sample_refused),
                        tuple(examples[:EXAMPLES_KEPT]), frames)


def original_cost(root: str, relpath: str, config: Config, identity=None,
                  frames: dict | None = None) -> Cost:
    """What converting one original takes, from its header, as a pack's worker checks it
    before decoding; raises BadImage where the worker would reject it, or OSError.  The
    header's (stored size, EXIF orientation) go into ``frames`` under ``relpath``."""
    image = config.image
    tiles = image.tiles if image.tiles.enabled else None
    with read_header(root, relpath, config, identity) as (header, data, size):
        stored, rotation = stored_size(header), orientation(header)
        if frames is not None:
            frames[relpath] = (stored, rotation)
        if stored[0] * stored[1] > image.max_pixels:
            raise BadImage("too_large", f"{stored[0]}x{stored[1]} is over image.max_pixels")
        upright = upright_size(*stored, rotation)
        samples = 1
        if tiles is not None:
            samples = tile_count(*scaled_size(*upright, tiles.scale), tiles)
            if samples > MAX_TILES:
                raise BadImage("too_large", f"{samples:,} tiles, over {MAX_TILES:,}")
        planned = layout(*upright, image, tiles)
        need = planned.need[::-1] if rotation in TRANSPOSING else planned.need
        extra = upright[0] * upright[1] * MASK_BYTES_PER_PIXEL \
            if config.source.annotations.has_masks else 0
        peak = budget_bytes(header, data, size, need, rotation,
                            Output(planned.geometry.size, planned.window), image) + extra
        if peak > image.max_decoded_mb * 2**20:
            raise BadImage("too_large", f"{peak / 2**20:,.0f} MiB to decode, over "
                           "image.max_decoded_mb")
        what = f"{stored[0]}x{stored[1]} {header.format} ({header.mode})"
    width, height = planned.window
    return Cost(relpath, peak, samples, samples * width * height, what)

"""The nightly report: one self-contained HTML page that says what a dataset holds and what
changed (``shardsmith report DATASET -o report.html``).

From top to bottom: the key numbers; the version history (``manifest.history``); the diff
against the previous version (``insight.diff``, or why there is none); the class x split
balance as an SVG chart; the rejects with thumbnails of their originals and their reasons; a
contact sheet of the new samples (the diff's added ones, else the newest by source time) with
their objects drawn; the near-duplicate clusters across splits that the new samples joined
(``insight.near_duplicates``, from the sample index's hashes: only pairs with a new sample
are checked); the timings of the last run (``manifest.run``).

One file: CSS inline, the chart inline SVG, pictures ``data:`` URIs; no script and no
reference to anything outside the page.  Every string from the dataset is escaped
(``page.text``).  The same dataset gives the same page, byte for byte (nothing in it is the
time it was rendered).

An ``s3://`` dataset (``storage.ObjectPath``) is read from its bucket: the manifest and sample
index there, each shard pictured from a temporary copy (``picks.read_each``), and for the
diff the manifest and the current version's changes file copied to a temporary folder
(``diff.diff_versions``) and compared there; the page names the URL.
"""

from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from ... import __version__
from ...atomic import check_output_file, write_bytes_atomic
from ...dataset.changes import history_counts
from ...dataset.manifest import Manifest, RejectEntry, SampleRecord, iter_sample_index
from ...door import Refused
from ...errors import ManifestError
from ...packing import nearhash
from ...storage import Location, is_url
from ...text import human_bytes, plural, printable
from ..census import packed_config
from ..diff import VersionDiff, diff_versions
from ..named_source import Originals, not_named
from ..near_duplicates import NearDuplicates, find
from . import page
from .pictures import reject_pictures, sample_pictures
from .sections import (
    class_name,
    diff_section,
    history_section,
    near_duplicates_section,
    orphans_section,
    rejects_section,
    samples_section,
    summary_section,
    timings_section,
)


@dataclass(frozen=True)
class ReportOptions:
    """How much the page shows: rejects and new samples pictured."""

    rejects_shown: int = 48
    samples_shown: int = 24
    originals: Originals | None = None  # where rejected originals are read (None: nowhere)


@dataclass(frozen=True)
class Report:
    """The rendered page and what it shows."""

    html: str
    reject_pictures: int
    rejects_shown: int
    samples_shown: int
    diff_note: str  # why there is no diff ("" when there is one)
    notes: tuple[str, ...]

    def save(self, path: Path) -> None:
        """Write the page atomically; OutputStateError when ``path`` is not a file to replace
        (a link, a FIFO, a device, a folder) or its folder is missing."""
        write_bytes_atomic(check_output_file(path), self.html.encode("utf-8"))

    def summary(self, where: str) -> str:
        """``report.html: 1.2 MB, 3 rejects (3 pictured), 24 samples``: what ``where`` got."""
        return (f"{printable(where)}: {human_bytes(len(self.html.encode()))}, "
                f"{plural(self.rejects_shown, 'reject')} ({self.reject_pictures:,} pictured), "
                f"{plural(self.samples_shown, 'sample')}"
                + (f"; no diff: {printable(self.diff_note)}" if self.diff_note else ""))


@dataclass(frozen=True)
class IndexFacts:
    """What one pass over the sample index gives the report."""

    counts: dict[tuple[int, str], int]
    chosen: list[SampleRecord]  # the new samples to picture
    newest: bool  # True: ``chosen`` are the newest by source time, not the diff's added


def load_diff(directory: Location) -> VersionDiff | str:
    """The diff of the last two versions, or why there is none (of a bucket:
    ``diff_versions`` copies the manifest and the changes file it reads)."""
    try:
        return diff_versions(directory)
    except (ManifestError, ValueError, Refused) as exc:  # a damaged changes file: a note
        return str(exc)


def render_report(directory: Location, manifest: Manifest,
                  options: ReportOptions = ReportOptions(),
                  diff: VersionDiff | str | None = None) -> Report:
    """The report page of the dataset in ``directory``; ``diff``: the diff of its last two
    versions or why there is none (default: ``load_diff``)."""
    if diff is None:
        diff = load_diff(directory)
    added = [entry["key"] for entry in diff.added if entry["key"] is not None] \
        if isinstance(diff, VersionDiff) else []  # an earlier release's line: no key
    facts = _index_facts(directory, manifest, added, options.samples_shown)
    rejects = _rejects_in_order(manifest.rejects, diff, options.rejects_shown)
    reject_shots, reject_note = reject_pictures(options.originals or not_named(manifest.source),
                                                rejects, packed_config(manifest).image)
    sample_shots, sample_note = sample_pictures(directory, manifest, facts.chosen)
    notes = tuple(note for note in (reject_note, sample_note) if note)
    body = [
        summary_section(directory, manifest, facts.counts),
        history_section(manifest, history_counts(directory, manifest)),
        diff_section(diff, manifest),
        page.section("balance", "Samples per class and split",
                     _balance_parts(manifest, facts.counts)),
        rejects_section(manifest, rejects, reject_shots, reject_note),
        orphans_section(manifest),
        samples_section(manifest, facts.chosen, sample_shots, facts.newest, sample_note),
        near_duplicates_section(_new_near_duplicates(directory, manifest, added)),
        timings_section(manifest),
        f'<footer class="muted">shardsmith {page.text(__version__)} report of version '
        f"{manifest.version} ({page.text(manifest.created)}); no script, no network: "
        "everything is in this file.</footer>",
    ]
    title = f"{directory.name or directory}: version {manifest.version}"
    return Report(page.page(title, body), sum(1 for shot in reject_shots if shot.uri),
                  len(rejects), len(facts.chosen), diff if isinstance(diff, str) else "", notes)


def _index_facts(directory: Path, manifest: Manifest, added: list[str],
                 count: int) -> IndexFacts:
    """Counts per (label, split), and the samples to picture: the first ``count`` of
    ``added`` found in the index, else the ``count`` newest by source time."""
    counts: Counter = Counter()
    wanted = set(added[:count])
    found: dict[str, SampleRecord] = {}
    newest: list[tuple[int, str, SampleRecord]] = []  # a min-heap of (mtime, key)
    for record in iter_sample_index(directory, manifest):
        counts[(record.label, record.split)] += 1
        if record.key in wanted:
            found[record.key] = record
        entry = (record.source_mtime_ns, record.key, record)
        if len(newest) < count:
            heapq.heappush(newest, entry)
        elif count and entry[:2] > newest[0][:2]:
            heapq.heapreplace(newest, entry)
    if found:
        return IndexFacts(dict(counts), [found[key] for key in added[:count] if key in found],
                          False)
    chosen = [record for _, _, record in sorted(newest, key=lambda e: (-e[0], e[1]))]
    return IndexFacts(dict(counts), chosen, True)


def _new_near_duplicates(directory: Location, manifest: Manifest,
                         added: list[str]) -> NearDuplicates | str:
    """The near-duplicate clusters holding a sample new in this version, from the hashes the
    sample index holds; or why not."""
    if manifest.near_hash != nearhash.CURRENT:
        return ("The sample index holds no near-duplicate hashes (a dataset of an older "
                "release, or output.near_hashes: false): the next pack adds them.")
    if is_url(directory):
        return ("Near-duplicates are checked on the stored samples: stage the dataset and "
                "report on the copy.")
    if not added:
        return "No sample is new in this version."
    return find(directory, touching=frozenset(added))


def _rejects_in_order(rejects: tuple[RejectEntry, ...], diff: VersionDiff | str,
                      count: int) -> list[RejectEntry]:
    """The first ``count`` rejects: those new in this version first, then by path."""
    new = {entry["path"] for entry in diff.rejects_new} if isinstance(diff, VersionDiff) \
        else set()
    return sorted(rejects, key=lambda reject: (reject.path not in new, reject.path))[:count]


def _balance_parts(manifest: Manifest, counts: dict[tuple[int, str], int]) -> list[str]:
    splits = list(dict.fromkeys([*manifest.splits, *(split for _, split in counts)]))
    labels = sorted({label for label, _ in counts} | set(range(len(manifest.classes))))
    rows = [(class_name(manifest, label), [counts.get((label, split), 0) for split in splits])
            for label in labels]
    if not rows:
        return [page.paragraph("No samples.", muted=True)]
    return [page.legend(splits), page.balance_chart(rows, splits)]


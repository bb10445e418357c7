"""A dataset version as a value: what a pack run changes, decided before any pixel is read.

``diff`` compares the previous version (its manifest and its sample records, streamed) with
this run's plan and returns a frozen ``Delta``:

* certain facts: new sources, removed ones, sources whose label or annotations changed
  (their samples leave; they are processed again), rejects kept or judged again, shards
  missing or damaged (their samples are packed again), shards that hold a leaving sample
  (rewritten), and the shard numbers this version starts from (they only grow: a name, once
  used, never stands for other content);
* re-annotated: with a previous version whose objects were derived by older annotation
  rules, every annotated source (``REANNOTATE``, ``Delta.reannotated_positions``): its pixels
  did not change, its objects and mask are derived again; a ``bad_annotation`` reject is
  judged again when its annotations, the class list or the rules changed; one whose file
  did not change and whose every sample is in an intact shard is ``COPY``: its JPEG bytes are
  copied from the previous shards (``RederiveItem``), only its objects and masks are new;
* candidates: sources whose size or mtime changed.  Only reading tells whether their content
  did: ``imaging.process`` compares the digest and returns ``Unchanged`` when it did not.
  ``resolve`` turns the execution's answer into an ``Outcome``: which candidates were only
  touched, which changed (their samples leave too, and their shards are rewritten).

A source decoded again (changed, relabelled, with no digest to compare, or with a sample in a
damaged shard) makes all its samples anew: every previous sample of it leaves, and every shard
holding one is rewritten.  An original cut into tiles has several samples, in any shards; when
one of them sends it to be decoded again after another was judged kept, ``diff`` reads the
records a second time for those few sources rather than hold a key per sample (docs/design.md,
invariant 5).

It is columnar: per plan position one byte of flags, and NumPy arrays of plan positions for
the work and the candidates, so the driver's memory stays a few bytes a file above the plan.
Its ``digest`` names it in the journal: a resumed run continues only the same Delta.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType

import numpy as np

from ..annotations.prepare import Prepared
from ..config import Config
from ..dataset.manifest import (
    ANNOTATION_RULES,
    Manifest,
    RejectEntry,
    SampleRecord,
    ShardEntry,
    shard_number,
)
from ..errors import OutputStateError
from .outputdir import configured_classes
from .plan import Plan, PlanItem
from .scan import ScanResult

# Flags per plan position.
WORK = 1  # processed by this run
NEW = 2  # not in the previous version
STALE = 4  # its previous samples leave (label or annotations changed, or no digest)
CANDIDATE = 8  # stat changed: processed with its previous digest, decoded only if it differs
REANNOTATE = 16  # unchanged, but its objects were derived by older annotation rules
COPY = 32  # re-annotated with its JPEG bytes copied from the previous version's shards

# Per plan position while ``diff`` reads the records: one seen, one kept so far.
SEEN, KEPT = 1, 2


@dataclass(frozen=True)
class Facts:
    """What ``diff`` judges by besides the two versions: the class list, the shards found
    missing or damaged, per table position the annotation digest (uint64; None without
    annotations), whether labels come from a file (a label can change without the bytes),
    and ``identity``, the run's config and sources fingerprints (part of the digest).

    ``classes_appended``: ``source.annotations.classes`` grew since the previous version (an
    id it did not know may be known now); ``older_rules``: the previous version's objects
    were derived by older annotation rules (``manifest.ANNOTATION_RULES``)."""

    classes: tuple[str, ...] = ()
    damaged: frozenset[str] = frozenset()
    annotation_digests: np.ndarray | None = None
    compare_labels: bool = False
    identity: str = ""
    classes_appended: bool = False
    older_rules: bool = False


@dataclass(frozen=True, eq=False)
class Job:
    """What a run packs, fixed before it writes: the config, the scan (its class list already
    merged with the previous version's), the annotations read up front, the plan, and the
    sources fingerprint.  ``started``: ``time.monotonic()`` when the run began."""

    config: Config
    source: Path
    output: Path
    scanned: ScanResult
    notes: Prepared
    plan: Plan
    sources_fingerprint: str
    started: float

    def facts(self, damaged: frozenset[str] = frozenset(),
              previous: Manifest | None = None) -> Facts:
        """The facts ``diff`` needs, with the previous version's ``damaged`` shards."""
        classes = self.config.source.annotations.classes
        appended = previous is not None and configured_classes(previous) != tuple(classes)
        older = previous is not None and previous.rules is not None \
            and previous.rules < ANNOTATION_RULES
        return Facts(self.scanned.classes, damaged, self.notes.digests,
                     self.config.source.labels == "file",
                     f"{self.config.fingerprint()}:{self.sources_fingerprint}",
                     appended, older)


@dataclass(frozen=True, eq=False)
class Delta:
    """What this version changes against ``previous`` (None: a first pack, all new)."""

    plan: Plan
    previous: Manifest | None = None
    flags: np.ndarray | None = None  # uint8 per plan position; None for a first pack
    work: np.ndarray | None = None  # int32 plan positions processed, ascending; None: all
    candidates: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    expected: tuple[str, ...] = ()  # the previous digest of each candidate
    # (plan position, number in ``shard_names``) of each previous sample of a candidate, and
    # its key: the samples that leave, and the shards rewritten, when it turns out changed
    candidate_samples: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.int32))
    candidate_keys: tuple[str, ...] = ()
    shard_names: tuple[str, ...] = ()
    # keys of the previous samples that certainly leave: their source is gone or changed, or
    # their shard is damaged (few: a key per changed file, as the shards hold them)
    leaving_keys: frozenset[str] = frozenset()
    stale_shards: frozenset[str] = frozenset()  # hold a sample that certainly leaves
    damaged: tuple[ShardEntry, ...] = ()
    kept_rejects: tuple[RejectEntry, ...] = ()
    removed: int = 0  # previous samples and rejects whose source is gone
    removed_originals: int = 0  # the originals among them: sources gone (tiles: once)
    repaired: int = 0  # samples of damaged shards, packed again
    changed: int = 0  # sources certainly changed (relabelled, a reject changed)
    reannotated: int = 0  # sources processed again only to derive their objects anew
    # (plan position, number in ``shard_names``) of each previous sample of a COPY source,
    # sorted by position, and its key: where its JPEG bytes are copied from
    copy_samples: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.int32))
    copy_keys: tuple[str, ...] = ()
    copy_digests: tuple[str, ...] = ()  # the previous source digest of each COPY sample
    next_numbers: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    digest: str = ""

    @property
    def version(self) -> int:
        """The previous version's number (0 before the first)."""
        return self.previous.version if self.previous is not None else 0

    @property
    def new(self) -> int:
        """Sources new in this version (all of them for a first pack)."""
        if self.flags is None:
            return len(self.plan)
        return int(np.count_nonzero(self.flags & NEW))

    def new_positions(self) -> np.ndarray:
        """Plan positions of the new sources (empty for a first pack: nothing to tell)."""
        if self.flags is None:
            return np.zeros(0, np.int32)
        return np.flatnonzero(self.flags & NEW).astype(np.int32)

    def reannotated_positions(self) -> np.ndarray:
        """Plan positions of the sources processed again only because their objects were
        derived by older annotation rules.  Their pixels did not change: those marked ``COPY``
        (``copied_positions``) keep their JPEG bytes, the others are decoded again (same
        pixels, so the same JPEG bytes: encoding is deterministic)."""
        if self.flags is None:
            return np.zeros(0, np.int32)
        return np.flatnonzero(self.flags & REANNOTATE).astype(np.int32)

    def copied_positions(self) -> np.ndarray:
        """Plan positions of the re-annotated sources whose JPEG bytes are copied: their file
        did not change and every sample of theirs is in an intact shard."""
        if self.flags is None:
            return np.zeros(0, np.int32)
        return np.flatnonzero(self.flags & COPY).astype(np.int32)

    def items(self) -> Sequence[PlanItem]:
        """The plan items this run processes, in plan order, made as they are used: a
        ``RederiveItem`` for a source whose JPEG bytes are copied."""
        if self.work is None:
            return self.plan
        return WorkItems(self.plan, self.work, self.candidates, self.expected,
                         _Copies(self.copy_samples, self.copy_keys, self.copy_digests,
                                 self.shard_names))

    def summary(self) -> str:
        """One line for ``pack --dry-run``: "2 new, 1 removed, up to 1 changed; 1 shard
        rewritten, 3 kept"."""
        if self.previous is None:
            return f"{self.new:,} new (a first pack)"
        changed = f"{self.changed + len(self.candidates):,} changed"
        if len(self.candidates):
            changed = f"up to {changed}"
        # originals, as the pack's summary counts them (a tiled original removed: one)
        parts = [f"{self.new:,} new", f"{self.removed_originals:,} removed", changed]
        if self.reannotated:
            copied = len(self.copied_positions())
            parts.append(f"{self.reannotated:,} re-annotated"
                         + (f" ({copied:,} with their JPEG bytes copied)" if copied else ""))
        if self.repaired:
            parts.append(f"{self.repaired:,} {_plural(self.repaired, 'sample')} repaired")
        rewritten = len(self.stale_shards)
        maybe = len(self._candidate_shards() - self.stale_shards)
        shards = f"{rewritten:,}" if not maybe else f"{rewritten:,} to {rewritten + maybe:,}"
        kept = len(self.previous.shards) - rewritten - len(self.damaged)
        line = f"{', '.join(parts)}; {shards} {_plural(rewritten + maybe, 'shard')} " \
               f"rewritten, {kept - maybe:,}{'' if not maybe else f' to {kept:,}'} kept"
        if self.damaged:
            line += f", {len(self.damaged):,} damaged"
        return line

    def _candidate_shards(self) -> frozenset[str]:
        return frozenset(self.shard_names[number]
                         for number in np.unique(self.candidate_samples[:, 1]).tolist())


@dataclass(frozen=True, slots=True)
class RederiveItem(PlanItem):
    """A source re-annotated with its JPEG bytes kept: ``previous`` holds (key, shard) of
    each of its samples in the previous version, ``source_digest`` the digest they record
    (its file did not change: it is not read again to hash it)."""

    previous: tuple[tuple[str, str], ...] = ()
    source_digest: str = ""


@dataclass(frozen=True)
class _Copies:
    """The previous samples of the COPY sources, by plan position (``Delta.copy_samples``)."""

    samples: np.ndarray
    keys: tuple[str, ...]
    digests: tuple[str, ...]
    shard_names: tuple[str, ...]

    def item(self, item: PlanItem, position: int) -> PlanItem:
        low = int(np.searchsorted(self.samples[:, 0], position, "left"))
        high = int(np.searchsorted(self.samples[:, 0], position, "right"))
        if low == high:
            return item
        previous = tuple((self.keys[at], self.shard_names[int(self.samples[at, 1])])
                         for at in range(low, high))
        return RederiveItem(item.source, item.split, item.expected_digest, item.group,
                            item.annotation, previous, self.digests[low])


NO_COPIES = _Copies(np.zeros((0, 2), np.int32), (), (), ())


class WorkItems(Sequence[PlanItem]):
    """The plan items at ``work`` (plan positions), candidates given their expected digest,
    sources whose JPEG bytes are copied made ``RederiveItem``s."""

    def __init__(self, plan: Plan, work: np.ndarray, candidates: np.ndarray,
                 expected: tuple[str, ...], copies: _Copies = NO_COPIES):
        self.plan, self.work = plan, work
        self.candidates, self.expected, self.copies = candidates, expected, copies

    def __len__(self) -> int:
        return len(self.work)

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return WorkItems(self.plan, self.work[index], self.candidates, self.expected,
                             self.copies)
        position = int(self.work[index])
        item = self.plan[position]
        at = int(np.searchsorted(self.candidates, position))
        if at < len(self.candidates) and int(self.candidates[at]) == position:
            return replace(item, expected_digest=self.expected[at])
        return self.copies.item(item, position)

    def __iter__(self) -> Iterator[PlanItem]:
        return (self[index] for index in range(len(self)))

    def mean_size(self) -> float:
        """The mean size of the originals (1.0 with none)."""
        if not len(self.work):
            return 1.0
        return float(self.plan.table.sizes[self.plan.order[self.work]].mean())


def diff(previous: Manifest | None, records: Iterable[SampleRecord], plan: Plan,
         facts: Facts) -> Delta:
    """What this run changes against ``previous``, whose sample records ``records`` streams
    (never kept).  Read once, and a second time only when a source with a sample judged kept
    is then sent to be decoded again by another one (a tile in a damaged shard): so
    ``records`` must be re-iterable, not an iterator (TypeError).  Pure: no file is touched.
    Raises OutputStateError when the class list does not begin with the previous one's
    (labels would change meaning).

    With ``facts.older_rules`` every annotated source is processed again (``REANNOTATE``),
    its previous samples leaving; a ``bad_annotation`` reject whose file did not change is
    judged again when its annotation digest changed, the class list grew, or the rules did
    (an unknown YOLO id may be known now; a fixed label file changes no image)."""
    if isinstance(records, Iterator):
        raise TypeError("diff may read the sample records again: pass an iterable, "
                        "not an iterator")
    if previous is None:
        return Delta(plan, digest=_digest(facts.identity, "", plan, None, None, (), ()))
    if tuple(facts.classes[: len(previous.classes)]) != tuple(previous.classes):
        raise OutputStateError("the class list of this version does not begin with the "
                               "previous one's; pass --overwrite to rebuild")
    judge = _Judge(previous, plan, facts)
    for record in records:
        judge.sample(record)
    for reject in previous.rejects:
        judge.reject(reject)
    judge.after_all(records)
    return judge.delta()


class _Judge:
    """``diff``'s working state while it reads the previous version: flags per plan position,
    and the few rows (candidates, copies, leaving keys) of the sources that changed."""

    def __init__(self, previous: Manifest, plan: Plan, facts: Facts):
        self.previous, self.plan, self.facts = previous, plan, facts
        self.table, self.plan_position = plan.table, plan.position_of()
        self.flags = np.zeros(len(plan), np.uint8)
        self.seen = np.zeros(len(plan), np.uint8)  # SEEN | KEPT
        self.expected: dict[int, str] = {}  # candidate plan position -> digest (the few)
        self.samples: list[tuple[int, int]] = []  # (plan position, shard number) of candidates
        self.sample_keys: list[str] = []
        self.copies: list[tuple[int, int]] = []  # (plan position, shard number), re-annotated
        self.copy_keys: list[str] = []
        self.copy_digests: list[str] = []
        self.no_copy = np.zeros(len(plan), np.bool_)  # a re-annotated source to be decoded
        self.leaving: set[str] = set()
        self.shard_numbers: dict[str, int] = {}
        self.stale_shards: set[str] = set()
        self.kept_rejects: list[RejectEntry] = []
        self.removed = self.repaired = self.changed = self.reannotated = 0
        self.removed_originals = 0
        self.last_removed: str | None = None  # an index holds an original's tiles together

    # -- one previous sample

    def sample(self, record: SampleRecord) -> None:
        number = self._position(record.path)
        if number is not None:
            self.seen[number] |= SEEN
        if record.shard in self.facts.damaged:
            self.leaving.add(record.key)
            self.repaired += 1
            if number is not None:
                self._decode_again(number)
                self.no_copy[number] = True  # its JPEG bytes are lost with the shard
        elif number is None:
            self._leaves(record)
            self.removed += 1
            if record.path != self.last_removed:
                self.last_removed = record.path
                self.removed_originals += 1
        else:
            self._present(record, number, int(self.plan.order[number]))

    def _present(self, record: SampleRecord, number: int, at: int) -> None:
        """A previous sample whose source is still in the tree (plan position ``number``,
        table row ``at``)."""
        same_stat = (record.source_size, record.source_mtime_ns) == (
            int(self.table.sizes[at]), int(self.table.mtimes[at]))
        if self._annotations_changed(record, at):
            self._certainly_changed(number)
            self._leaves(record)
        elif self.facts.older_rules and record.annotation_digest is not None:
            self._derive_again(number)
            self._leaves(record)
            if record.source_digest and same_stat:
                self.copies.append((number, self._shard_number(record.shard)))
                self.copy_keys.append(record.key)
                self.copy_digests.append(record.source_digest)
            else:  # its file changed since: its pixels are decoded
                self.no_copy[number] = True
        elif self._decoded_again(number):  # an earlier sample of its source sent it
            self._leaves(record)
        elif not same_stat:
            if record.source_digest:
                self.flags[number] |= WORK | CANDIDATE
                self.expected[number] = record.source_digest
                self.samples.append((number, self._shard_number(record.shard)))
                self.sample_keys.append(record.key)
                self.seen[number] |= KEPT
            else:  # nothing to compare its content with
                self._certainly_changed(number)
                self._leaves(record)
        else:
            self.seen[number] |= KEPT

    # -- one previous reject

    def reject(self, reject: RejectEntry) -> None:
        if reject.source_size is None:
            return  # found by the scan (a folder it could not list): the scan judges again
        number = self._position(reject.path)
        if number is None:
            self.removed += 1
            self.removed_originals += 1
            return
        self.seen[number] = True
        at = int(self.plan.order[number])
        if (reject.source_size, reject.source_mtime_ns) == (int(self.table.sizes[at]),
                                                            int(self.table.mtimes[at])) \
                and not self._judge_again(reject, at):
            self.kept_rejects.append(reject)
        else:
            self._decode_again(number)
            self.changed += 1

    def _judge_again(self, reject: RejectEntry, at: int) -> bool:
        if reject.reason != "bad_annotation":
            return False
        if self.facts.classes_appended or self.facts.older_rules:
            return True
        if self.facts.annotation_digests is None:
            return False
        try:
            return int(reject.annotation_digest or "", 16) != \
                int(self.facts.annotation_digests[at])
        except ValueError:  # none recorded (an older release), or not a digest
            return True

    # -- after every record and reject

    def after_all(self, records: Iterable[SampleRecord]) -> None:
        """Sources sent to be decoded again after one of their samples was judged kept (rare:
        read the records again for them); new sources; which re-annotated sources copy."""
        again = ((self.flags & (WORK | CANDIDATE)) == WORK) & ((self.seen & KEPT) != 0)
        if again.any():
            for record in records:
                number = self._position(record.path)
                if number is not None and again[number] \
                        and record.shard not in self.facts.damaged:
                    self._leaves(record)
        self.flags[self.seen == 0] |= WORK | NEW

    def _copied(self) -> tuple[np.ndarray, tuple[str, ...], tuple[str, ...]]:
        """The re-annotated samples whose JPEG bytes are copied, in plan order: only when
        nothing else sends their source to be decoded (it changed, a sample of it is in a
        damaged shard, or its samples disagree on its digest)."""
        rows = np.array(self.copies, np.int32).reshape(-1, 2)
        if not len(rows):
            return rows, (), ()
        digest_of: dict[int, str] = {}
        for (number, _), digest in zip(self.copies, self.copy_digests, strict=True):
            if digest_of.setdefault(number, digest) != digest:
                self.no_copy[number] = True
        copyable = (self.flags & (REANNOTATE | STALE | CANDIDATE | NEW)) == REANNOTATE
        copyable &= ~self.no_copy
        self.flags[copyable] |= COPY
        chosen = copyable[rows[:, 0]]
        order = np.argsort(rows[:, 0], kind="stable")
        order = order[chosen[order]].tolist()
        return (rows[order], tuple(self.copy_keys[at] for at in order),
                tuple(self.copy_digests[at] for at in order))

    def delta(self) -> Delta:
        copy_rows, copy_keys, copy_digests = self._copied()
        candidates = np.array(sorted(self.expected), np.int32)
        expected = tuple(self.expected[number] for number in candidates.tolist())
        rows = np.array(self.samples, np.int32).reshape(-1, 2)
        of_candidates = np.isin(rows[:, 0], candidates)
        facts, previous = self.facts, self.previous
        return Delta(
            plan=self.plan,
            previous=previous,
            flags=self.flags,
            work=np.flatnonzero(self.flags & WORK).astype(np.int32),
            candidates=candidates,
            expected=expected,
            candidate_samples=rows[of_candidates],
            candidate_keys=tuple(key for key, kept in zip(self.sample_keys,
                                                          of_candidates.tolist(), strict=True)
                                 if kept),
            shard_names=tuple(self.shard_numbers),
            leaving_keys=frozenset(self.leaving),
            stale_shards=frozenset(self.stale_shards),
            damaged=tuple(shard for shard in previous.shards if shard.name in facts.damaged),
            kept_rejects=tuple(self.kept_rejects),
            removed=self.removed,
            removed_originals=self.removed_originals,
            repaired=self.repaired,
            changed=self.changed,
            reannotated=self.reannotated,
            copy_samples=copy_rows,
            copy_keys=copy_keys,
            copy_digests=copy_digests,
            next_numbers=MappingProxyType(next_numbers(previous)),
            digest=_digest(facts.identity, previous.content_fingerprint or "", self.plan,
                           self.flags, candidates, expected, sorted(facts.damaged), copy_rows,
                           copy_keys + tuple(self.shard_numbers)),
        )

    # -- helpers

    def _position(self, relpath: str) -> int | None:
        index = self.table.index_of(relpath)
        return None if index is None else int(self.plan_position[index])

    def _shard_number(self, name: str) -> int:
        return self.shard_numbers.setdefault(name, len(self.shard_numbers))

    def _annotations_changed(self, record: SampleRecord, at: int) -> bool:
        if self.facts.compare_labels and record.label != int(self.table.labels[at]):
            return True
        if self.facts.annotation_digests is None:
            return False
        try:
            return int(record.annotation_digest or "", 16) != \
                int(self.facts.annotation_digests[at])
        except ValueError:
            return True

    def _decode_again(self, number: int) -> None:
        self.flags[number] = (int(self.flags[number]) | WORK) & ~CANDIDATE & 0xFF
        self.expected.pop(number, None)

    def _decoded_again(self, number: int) -> bool:
        return int(self.flags[number]) & (WORK | CANDIDATE) == WORK

    def _certainly_changed(self, number: int) -> None:  # its samples go; decoded again
        if not self.flags[number] & STALE:
            self.changed += 1
        self._decode_again(number)
        self.flags[number] |= STALE

    def _derive_again(self, number: int) -> None:  # same pixels, objects by current rules
        if not self.flags[number] & REANNOTATE:
            self.reannotated += 1
        self._decode_again(number)
        self.flags[number] |= REANNOTATE

    def _leaves(self, record: SampleRecord) -> None:
        self.leaving.add(record.key)
        self.stale_shards.add(record.shard)


def next_numbers(previous: Manifest) -> dict[str, int]:
    """The next shard number of each split: past every number the previous version used or
    reserved.  Numbers only grow: a name, once used, never stands for other content."""
    numbers: Counter = Counter()
    for shard in previous.shards:
        numbers[shard.split] = max(numbers[shard.split], shard_number(shard.name) + 1)
    for split, number in previous.next_shard_numbers.items():
        numbers[split] = max(numbers[split], number)
    return dict(numbers)


@dataclass(frozen=True, eq=False)
class Execution:
    """What ``execute`` did: where it stands (``state``, a ``journal.JournalState``), where
    it resumed, how many sources it found unchanged, the shard numbers it used, and the object
    classes it ended with (None without objects); of the re-annotated sources meant to keep
    their JPEG bytes, how many did and how many were decoded after all (this run's)."""

    state: object
    resumed_at: int
    unchanged: int
    numbers: Mapping[str, int]
    object_classes: tuple[str, ...] | None = None
    copied: int = 0  # re-annotated sources whose JPEG bytes were copied
    copy_decoded: int = 0  # re-annotated sources meant to be copied but decoded after all


@dataclass(frozen=True, eq=False)
class Outcome:
    """The Delta with its candidates resolved: the counts of the version's history, the keys
    of the previous samples that leave, the previous shards rewritten (they hold one) and
    those damaged (packed again), and the stat and digest of touched sources."""

    delta: Delta
    changes: Mapping[str, int]
    leaving_keys: frozenset[str]
    stale_shards: frozenset[str]
    damaged: frozenset[str]
    touched: Mapping[str, list]  # relpath -> [digest, size, mtime_ns]

def resolve(delta: Delta, rejects: Sequence[RejectEntry], sources: int,
            unchanged: Mapping[str, list]) -> Outcome:
    """The Delta once executed: ``rejects`` are this run's, ``sources`` the originals it
    packed, ``unchanged`` the candidates found with their previous content (relpath ->
    [digest, size, mtime_ns]).  A candidate not among them changed: its samples leave."""
    changes: Counter = Counter(removed=delta.removed, repaired=delta.repaired,
                               changed=delta.changed)
    if delta.reannotated:
        changes["reannotated"] = delta.reannotated
    if delta.flags is None:
        changes.update(added=sources, rejected=len(rejects))
        return Outcome(delta, MappingProxyType(dict(changes)), frozenset(), frozenset(),
                       frozenset(), MappingProxyType(dict(unchanged)))
    new = delta.flags & NEW
    # A source with samples before that is rejected now counts as rejected, not changed.
    rejected = changed_rejected = 0
    now_rejected: set[int] = set()
    if rejects:
        table, positions = delta.plan.table, delta.plan.position_of()
        for reject in rejects:
            index = table.index_of(reject.path)
            if index is None or positions[index] < 0:
                continue
            number = int(positions[index])
            if new[number]:
                rejected += 1
            elif delta.flags[number] & STALE:  # counted among the certain changes
                changed_rejected += 1
            else:
                now_rejected.add(number)
    changes.update(added=int(np.count_nonzero(new)) - rejected,
                   rejected=rejected + changed_rejected)
    changes["changed"] -= changed_rejected
    is_changed = np.zeros(len(delta.plan), np.bool_)
    for number in delta.candidates.tolist():
        relpath = delta.plan.table.relpaths[int(delta.plan.order[number])]
        if relpath in unchanged:
            changes["touched"] += 1
        else:
            changes["rejected" if number in now_rejected else "changed"] += 1
            is_changed[number] = True
    rows = delta.candidate_samples
    leaves = is_changed[rows[:, 0]]
    changed_shards = {delta.shard_names[shard] for shard in np.unique(rows[leaves, 1]).tolist()}
    changed_keys = (key for key, gone in zip(delta.candidate_keys, leaves.tolist(), strict=True)
                    if gone)
    return Outcome(delta, MappingProxyType(dict(changes)),
                   delta.leaving_keys.union(changed_keys), delta.stale_shards | changed_shards,
                   frozenset(shard.name for shard in delta.damaged),
                   MappingProxyType(dict(unchanged)))


def _digest(identity: str, base: str, plan: Plan, flags: np.ndarray | None,
            candidates: np.ndarray | None, expected: tuple[str, ...],
            damaged: Sequence[str] = (), copies: np.ndarray | None = None,
            copy_keys: tuple[str, ...] = ()) -> str:
    """The Delta's name: the run's identity, the version it builds on, and its decisions
    (which sources keep their JPEG bytes, and from which samples and shards, among them)."""
    hasher = hashlib.sha256()
    for text in (identity, base, str(len(plan)), *expected, "\0", *damaged):
        hasher.update(text.encode("utf-8", "surrogateescape") + b"\0")
    for array in (flags, candidates):
        hasher.update(b"-" if array is None else array.tobytes())
    if copies is not None and len(copies):  # absent before: a Delta without copies keeps
        hasher.update(b"copies\0" + copies.tobytes())  # the digest it had
        for key in copy_keys:
            hasher.update(key.encode("utf-8", "surrogateescape") + b"\0")
    return hasher.hexdigest()


def _plural(count: int, word: str) -> str:
    return word if count == 1 else f"{word}s"

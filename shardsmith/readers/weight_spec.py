"""Class weights for weighted sampling: a SPEC (or a mapping) read into ``ClassWeights``.

A weight SPEC is comma-separated ``CLASS=WEIGHT`` terms::

    scratch=10,dent=10          # scratch and dent 10 times as likely as any other class
    #3=5,*=0.5                  # class id 3 (classes[3]) 5, every other class 0.5

``CLASS`` is a class name, ``#N`` the class of id ``N`` (how a name holding a comma, or
starting with ``#``, is written), or ``*``: every class not named, and unlabelled samples
(default 1).  A weight is a finite number >= 0; a sample is drawn with probability its
class's weight over the sum of every sample's weight.  In a SPEC a weight is written in ASCII
decimal or float syntax (``10``, ``0.5``, ``2e-3``; no ``1_000``, no other digits); one that
is not zero but too small for a float (``1e-400``) is refused rather than read as 0.  In Python
a mapping works too (``{"scratch": 10, 3: 5, "*": 1}``: names, ids, ``"*"``).

A dataset with annotated objects (boxes, masks) is weighted by its defects' classes too:
``crack=10,*=1`` names the object class ``crack``.  Once a SPEC names an object class (or
``(none)``), a sample's weight is the largest weight among the classes of its objects (a class
not named weighs ``*``) and the image class it has, where the SPEC names that one; a sample
with no object (and no named image class) weighs ``(none)``, by default ``*``.  A name that is
both an image class and an object class is refused unless written ``image:NAME`` or
``object:NAME``; ``object:#K`` is the object class of id ``K`` (from 1, as in ``targets``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..errors import ConfigError
from ..text import shown

OTHERS = "*"
ID_DIGITS = 18  # a class id's digits, at most: far past any list of classes, and int() is cheap
NO_OBJECTS = "(none)"  # samples without objects (in a dataset with annotated objects)
IMAGE, OBJECT = "image:", "object:"  # a name qualified as an image or an object class
# float()'s syntax less what it also takes: "1_000", digits of other scripts, spaces within
# (inf and nan parse, to be refused as not finite)
_NUMBER = re.compile(r"[+-]?(?:(?P<mantissa>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
                     r"|inf|infinity|nan)", re.ASCII | re.IGNORECASE)


class WeightsError(ConfigError, ValueError):
    """A malformed weight SPEC or ``draws``: a ValueError in Python, one line and exit 2 from
    the command line."""


@dataclass(frozen=True)
class ClassWeights:
    """The weight of each class (``per_class[i]`` of ``classes[i]``) and of unlabelled
    samples (``others``, the ``*`` weight)."""

    per_class: tuple[float, ...]
    others: float = 1.0
    # By object class (a SPEC naming one, or "(none)"): per_object[k - 1] of object class id
    # k, the weight of samples without objects, and the image classes the SPEC named (in
    # this mode only those weigh beside a sample's objects).
    per_object: tuple[float, ...] | None = None
    no_objects: float = 1.0
    named_classes: tuple[int, ...] = ()


WeightSpec = str | Mapping[str | int, float] | ClassWeights


def class_weights(spec: WeightSpec, classes: Sequence[str],
                  object_classes: Sequence[str] = ()) -> ClassWeights:
    """The weights ``spec`` (a SPEC string, a mapping, or ``ClassWeights``) gives ``classes``
    and ``object_classes``; WeightsError naming what is wrong (an unknown class, a class named
    twice, a name of both kinds unqualified, a negative or non-finite weight, every weight
    zero)."""
    if isinstance(spec, ClassWeights):
        if len(spec.per_class) != len(classes):
            raise WeightsError(f"weights: {len(spec.per_class)} class weights for "
                               f"{len(classes)} classes")
        if spec.per_object is not None and len(spec.per_object) != len(object_classes):
            raise WeightsError(f"weights: {len(spec.per_object)} object class weights for "
                               f"{len(object_classes)} object classes")
        named_classes = set(spec.named_classes)
        terms = [(number, weight) for number, weight in enumerate(spec.per_class)
                 if spec.per_object is None or number in named_classes]
        terms += [(f"{OBJECT}#{number}", weight)
                  for number, weight in enumerate(spec.per_object or (), 1)]
        if spec.per_object is not None:
            terms.append((NO_OBJECTS, spec.no_objects))
        terms.append((OTHERS, spec.others))
    elif isinstance(spec, str):
        terms = _spec_terms(spec)
    elif isinstance(spec, Mapping):
        terms = list(spec.items())
    else:
        raise WeightsError(f"weights: expected a SPEC like 'scratch=10,*=1' or a mapping, "
                           f"got {type(spec).__name__}")
    if not terms:
        raise WeightsError("weights: no CLASS=WEIGHT term")
    names = _ClassNames(classes, object_classes)
    named: tuple[dict[int, float], dict[int, float]] = ({}, {})  # image, object classes
    others = no_objects = None
    for key, raw in terms:
        weight = _weight(key, raw)
        if key == OTHERS or key == NO_OBJECTS:
            if (others if key == OTHERS else no_objects) is not None:
                raise WeightsError(f"weights: {shown(key)} is given twice")
            if key == OTHERS:
                others = weight
            else:
                names.require_objects()
                no_objects = weight
            continue
        kind, number = names.find(key)
        if number in named[kind]:
            name = (classes, object_classes)[kind][number]
            raise WeightsError(f"weights: {('class', 'object class')[kind]} {shown(name)} is "
                               "given twice")
        named[kind][number] = weight
    others = 1.0 if others is None else others
    per_class = tuple(named[0].get(number, others) for number in range(len(classes)))
    if not named[1] and no_objects is None:  # by image class alone, as before objects
        if not any(per_class) and not others:
            raise WeightsError("weights: every weight is zero; nothing could be drawn")
        return ClassWeights(per_class, others)
    per_object = tuple(named[1].get(number, others) for number in range(len(object_classes)))
    no_objects = others if no_objects is None else no_objects
    if not any(named[0].values()) and not any(per_object) and not no_objects:
        raise WeightsError("weights: every weight is zero; nothing could be drawn")
    return ClassWeights(per_class, others, per_object, no_objects, tuple(sorted(named[0])))


def _spec_terms(spec: str) -> list[tuple[str | int, str]]:
    terms: list[tuple[str | int, str]] = []
    for term in spec.split(","):
        name, equals, weight = term.strip().rpartition("=")
        if not equals or not name.strip():
            raise WeightsError(f"weights: {shown(term.strip())} is not CLASS=WEIGHT (e.g. "
                               "'scratch=10,*=1')")
        name = name.strip()
        number = _id_of(name)
        terms.append((name if number is None else number, weight.strip()))
    return terms


def _weight(key: str | int, raw: object) -> float:
    where = f"weights: {shown(str(key))}"
    if isinstance(raw, bool):
        raise WeightsError(f"{where}: {raw!r} is not a number")
    if isinstance(raw, str):
        number = _NUMBER.fullmatch(raw.strip())
        if number is None:
            raise WeightsError(f"{where}: {shown(raw)} is not a number (ASCII digits: 10, "
                               "0.5, 2e-3)")
        nonzero = (number["mantissa"] or "1").strip("0.") != ""
    try:
        weight = float(raw)  # type: ignore[arg-type]
        if not isinstance(raw, str):
            nonzero = bool(raw != 0)  # type: ignore[operator]
    except OverflowError:  # an int (or Fraction) past the largest float
        raise WeightsError(f"{where}: {shown(str(raw)[:40])} is too large for a weight (at "
                           "most ~1.8e308)") from None
    except (TypeError, ValueError):
        raise WeightsError(f"{where}: {shown(str(raw))} is not a number") from None
    if weight == 0 and nonzero and math.isfinite(weight):
        raise WeightsError(f"{where}: {shown(str(raw)[:40])} is too small for a float "
                           "(it would be 0); the smallest is ~5e-324")
    if not math.isfinite(weight):
        raise WeightsError(f"{where}: the weight must be finite, got {raw}")
    if weight < 0:
        raise WeightsError(f"{where}: the weight must be >= 0, got {raw}")
    return weight


class _ClassNames:
    """Where a SPEC's name points: (0, image class number) or (1, object class number, from
    0), each name looked up in a dict (a SPEC of 50,000 terms over 50,000 classes took 19 s
    with a list search per term)."""

    def __init__(self, classes: Sequence[str], object_classes: Sequence[str]):
        self.classes, self.object_classes = classes, object_classes
        self.image = {}
        for number, name in enumerate(classes):
            self.image.setdefault(name, number)
        self.object = {}
        for number, name in enumerate(object_classes):
            self.object.setdefault(name, number)

    def require_objects(self) -> None:
        if not self.object_classes:
            raise WeightsError(f"weights: {NO_OBJECTS} weighs samples without objects; this "
                               "dataset has no object classes (packed without annotations)")

    def find(self, key: object) -> tuple[int, int]:
        if isinstance(key, bool) or not isinstance(key, str | int):
            raise WeightsError(f"weights: {key!r} is not a class name or id")
        if isinstance(key, int):
            return 0, self._image_id(key)
        if key.startswith(OBJECT):
            name = key[len(OBJECT):]
            number = _id_of(name)
            if number is not None:
                if not 1 <= number <= len(self.object_classes):
                    raise WeightsError(f"weights: object class id {number} is not one of 1 to "
                                       f"{len(self.object_classes)}")
                return 1, number - 1
            if name not in self.object:
                raise WeightsError(f"weights: {shown(name)} is not an object class of this "
                                   f"dataset (object classes: {_listed(self.object_classes)})")
            return 1, self.object[name]
        if key.startswith(IMAGE):
            name = key[len(IMAGE):]
            number = _id_of(name)
            if number is not None:
                return 0, self._image_id(number)
            if name not in self.image:
                raise WeightsError(f"weights: {shown(name)} is not an image class of this "
                                   f"dataset (classes: {_listed(self.classes)})")
            return 0, self.image[name]
        image, found = self.image.get(key), self.object.get(key)
        if image is not None and found is not None:
            raise WeightsError(f"weights: {shown(key)} is both an image class and an object "
                               f"class: write {shown(IMAGE + key)} or {shown(OBJECT + key)}")
        if image is not None:
            return 0, image
        if found is not None:
            return 1, found
        objects = f"; object classes: {_listed(self.object_classes)}" \
            if self.object_classes else ""
        raise WeightsError(f"weights: {shown(key)} is not a class of this dataset (classes: "
                           f"{_listed(self.classes)}{objects})")

    def _image_id(self, key: int) -> int:
        if not 0 <= key < len(self.classes):
            raise WeightsError(f"weights: class id {key} is not one of 0 to "
                               f"{len(self.classes) - 1}")
        return key


def _id_of(name: str) -> int | None:
    """N of a name ``#N`` (ASCII digits), else None; WeightsError for more digits than any
    class id has (Python refuses int() of more than 4,300 digits with a bare ValueError)."""
    digits = name[1:]
    if not (name.startswith("#") and digits.isdigit() and digits.isascii()):
        return None
    if len(digits.lstrip("0")) > ID_DIGITS:
        raise WeightsError(f"weights: {shown(name)} is not a class id (at most {ID_DIGITS} "
                           "digits)")
    return int(digits)


def _listed(names: Sequence[str]) -> str:
    shown_names = ", ".join(shown(name) for name in names[:20])
    return shown_names + (", ..." if len(names) > 20 else "")

"""Near-duplicates: the same part shot twice on one fixture, told from another part.

Pure functions on a sample's hash frame (``frame``: grey uint8, 256 px on the long side) and
its fixture's background (``fixture_median`` of the first images shot on that fixture: per
pixel the tightest run of an eighth of their greys, the plate without the parts' ghost):

* ``part_hashes``: two 64-bit hashes of the part, in integer arithmetic (the same bits on every
  CPU): the DCT hash of the image's gradient, clipped, in a window of 192 px centred on the
  centroid of the image less its fixture, and in one of 160 px centred on the part's mask;
  and the signature of both windows (the 63 lowest DCT coefficients of each, int8), which
  ranks the nearest of a hash: the hash keeps a coefficient's side of the median only.
* ``part_view`` and ``check``: a candidate pair whose parts look alike at a glance (their
  small thumbnails correlate) is registered (ECC affine on the grey around the second part,
  then made a similarity: a re-shot moves, turns and scales a part, never stretches it) and
  scored as the share of the parts' pixels that differ by more than ``CHECK_LEVEL`` grey
  levels from a 3x3 neighbourhood of the other (a 1 px registration error is no
  difference), but where both show the fixture or neither is its part's body, off it the
  same way (through a hole: the part moved over the fixture) and along either part's outline
  where the fixture has a feature (the outline's pixels mix part and fixture, and the fixture
  behind it moved); one spot of SPOT px that differs refuses the pair (a hole one part has
  and the other not). But two parts whose fine grain matches are of one surface: one part,
  whatever light and holes changed in up to SURFACE_DIFFER percent of their pixels.

The candidates of a hash are found by ``search``; the exhaustive search it is tested against,
and the plain clusters of the measurement, are in scripts/neardup_reference.py.

Why these, with the numbers: docs/know-your-data.md, "Near-duplicates: the measurement".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import cv2
import numpy as np

ALGORITHM = "part-edge-dct64"
VERSION = 4
# px of the 256 px image around the part: each hash's window (32 blocks of 6, of 5). Of two
# sizes, the two hashes err apart: re-shots among either's 8 nearest 0.886 -> 0.913, and
# among the 6 nearest 0.907 for 10% fewer pairs (measured: docs/know-your-data.md, "Windows")
WINDOWS = (192, 160)
VIEW = 192  # px the check compares: the largest part, turned and scaled by 1/0.9, fits
PART_LEVEL = 9  # grey levels off the fixture (5x5 mean) that make a pixel the part's
CHECK_LEVEL = 15.0  # grey levels a registered pixel may differ from its twin's neighbourhood
SHOW_LEVEL = 12  # grey levels off the fixture (3x3 mean) within which a pixel shows it
LIKE_FLOOR = 0.90  # thumbnails' correlation under which a pair is not registered: 99% of
#                    re-shots are over it, 35% of the other candidates (measured)
SPOT = 30  # px of one differing spot that refuse a pair: a hole of 6 px one part has
BODY_LEVEL = 40  # grey levels off a part's body (the median of its pixels) where a pixel is
#                   none of it: a hole, a boss, a bend
REGISTER_GROW = 12  # px around the second part ECC aligns over: 9 held 0.925 of fixture 0's
# re-shots under 0.16, 12 held 0.931, 16 0.919 (ECC over the whole view; more of the plate,
# which sits elsewhere in each view, pulls against the part)
OUTLINE = 2  # px either side of a part's outline where the fixture behind it may differ
FIXTURE_EDGE = 40  # gradient of the fixture's background where it has a feature (a tapped
#                    hole, a clamp's edge), grown by 2 px
# the registered scale, squared, of a re-shot: 0.9 to 1/0.9 squared is 0.81 to 1.23, and 5%
# for ECC (0.7 to 1.45 let 5 of 43 pairs of different parts through, and no more re-shots)
RESHOT_SCALE = (0.77, 1.30)
DEFAULT_DISTANCE = 14  # hash bits (the nearer of two): the measured curve is flat beyond it
# The threshold: with the ranked candidates, where the clusters' precision keeps a margin over
# 0.95 (recall / precision 0.905 / 0.958 at 0.16, 0.907 / 0.951 at 0.2, 0.909 / 0.933 at 0.3,
# pairs of one surface joining at each; docs/know-your-data.md, "One surface"): they hold more
# parts the check cannot tell apart
DEFAULT_THRESHOLD = 0.16  # percent of the parts' pixels that differ
DEFAULT_CAP = 5  # of each hash's RANKED nearest, those checked: the nearest by signature
# (re-shots among them 0.901 -> 0.952 for 6% fewer pairs than the 5 nearest by distance, on
# the 10,334 samples of fixture 0; RANKED 10: 0.925; docs/know-your-data.md, "Signatures")
RANKED = 20
SIGNATURE = 126  # bytes a sample: 63 coefficients of each hash's window, int8
DENSE_SIZE = 8  # originals over which a cluster is dense
RUN_SHARE = 8  # the fixture's background: the tightest run of 1/RUN_SHARE of its greys
EDGE_CLIP = 128  # gradient (Sobel |x| + |y|) at which an edge counts fully in the hash
CUT = 2  # px from the frame's border a part's mask reaches where the border cuts it
UNLIKE = 100.0  # the score of a pair the check cannot register
# One surface: a part's fine grain (scratches, brushing, the grain of a casting: the view less
# its 1 px blur) is its own, and a re-shot keeps it where light and holes move other pixels.
# Correlated over the flat pixels of both parts (the gradient of their 2 px blur under FLAT),
# re-shots among the candidates score 0.50 to 0.52 at the median, 0.26 to 0.38 at the 10th
# percentile; pairs of other parts scoring up to 5% at most 0.36, 0.18 to 0.20 at the 99th
# (fixtures 0 and 1 of the corpus). A pair of one surface whose parts differ in up to
# SURFACE_DIFFER percent of their pixels, a spot of SPOT px included, is one part: of the 629
# re-shots among fixtures 0 and 1's candidates, 578 -> 611 join, other parts 20 -> 20
# (docs/know-your-data.md, "One surface")
SURFACE_MATCH = 0.3
SURFACE_DIFFER = 2.0  # percent (5: 612 re-shots join, other parts 31)
FLAT = 20  # gradient (Sobel |x| + |y|) of the view blurred by 2 px under which a pixel is flat
SURFACE_PIXELS = 200  # flat pixels of both parts under which their surfaces say nothing

FRAME = 256  # px on the long side of the image hashed and checked
# px on the short side under which a frame gets no hash: 48 parts and 8 re-shots squeezed to
# 256 x h gave 12 clusters of different parts at h = 2, 4 and 8, none at 16 or 64.
MIN_SIDE = 16
_SCALE = 4096  # fixed point of the exposure ratio
_KERNEL3 = np.ones((3, 3), np.uint8)
_KERNEL5 = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (5, 5))
_KERNEL7 = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (7, 7))
_KERNEL9 = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (9, 9))
_GROW = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * REGISTER_GROW + 1,) * 2)
_OUTLINE_KERNEL = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * OUTLINE + 1,) * 2)
_ECC_CRITERIA = (cv2.TERM_CRITERIA_EPS | cv2.TERM_CRITERIA_COUNT, 30, 1e-4)
_INVERSE = cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP
_EDGE, _ZERO = cv2.BORDER_REPLICATE, cv2.BORDER_CONSTANT


def _dct_basis(size: int = 32, rows: int = 8) -> np.ndarray:
    k, n = np.mgrid[0:rows, 0:size]
    return np.round(np.cos(np.pi * (2 * n + 1) * k / (2 * size)) * 4096).astype(np.int64)


_DCT_BASIS = _dct_basis()


def frame(jpeg: bytes) -> np.ndarray:
    """The hash frame of a JPEG: grey, FRAME px on the long side (decoded at half scale where
    it is twice that or more, then ``INTER_AREA``; a smaller one is enlarged).  ValueError
    for bytes that do not decode, and for a frame under MIN_SIDE px on its short side (a
    strip shows no part)."""
    import simplejpeg

    height, width, _, _ = simplejpeg.decode_jpeg_header(jpeg)
    reduced = cv2.IMREAD_REDUCED_GRAYSCALE_2 if max(height, width) >= 2 * FRAME \
        else cv2.IMREAD_GRAYSCALE
    grey = cv2.imdecode(np.frombuffer(jpeg, np.uint8), reduced)
    if grey is None:
        raise ValueError("the JPEG does not decode")
    height, width = grey.shape
    if max(height, width) != FRAME:
        scale = FRAME / max(height, width)
        size = (max(1, round(width * scale)), max(1, round(height * scale)))
        grey = cv2.resize(grey, size, interpolation=cv2.INTER_AREA if scale < 1
                          else cv2.INTER_LINEAR)
    if min(grey.shape) < MIN_SIDE:
        raise ValueError(f"the image is under {MIN_SIDE} px on its short side at {FRAME} px")
    return grey


def fixture_median(greys: Sequence[np.ndarray]) -> np.ndarray:
    """The fixture without its parts, pixel-wise: the middle of the tightest run of an eighth
    of the sorted greys of its images (a mode; uint8). Every part sits at one pose, so a
    plain median holds a ghost of the parts there; the plate, seen in an eighth of the shots,
    is one tight run, and parts of every grey are not (measured: docs/know-your-data.md)."""
    stack = np.stack(list(greys), axis=-1)  # each pixel's greys side by side
    count = stack.shape[-1]
    # OpenCV sorts each pixel's row of greys 6x faster than NumPy (57 ms for 255 frames of
    # 256 x 192, against 363); sorted values are the same whoever sorts them
    stack = cv2.sort(stack.reshape(-1, count), cv2.SORT_EVERY_ROW | cv2.SORT_ASCENDING
                     ).reshape(stack.shape)
    run = max(1, count // RUN_SHARE)
    spans = stack[..., run - 1 :].astype(np.int16) - stack[..., : count - run + 1]
    start = np.argmin(spans, axis=-1)  # the first of equal spans: the same on every CPU
    return np.take_along_axis(stack, (start + run // 2)[..., None], -1)[..., 0]


def _less_fixture(grey: np.ndarray, median: np.ndarray) -> np.ndarray:
    """(grey - median x exposure) x 4096 in int32 (|values| < 255 x 255 x 4096 < 2**31); the
    exposure is the median of the pixel-wise ratios, which the part (under a third of the
    image) does not move."""
    image, reference = grey.astype(np.int32), median.astype(np.int32)
    ratios = (image * _SCALE // np.maximum(1, reference)).ravel()
    exposure = int(np.partition(ratios, ratios.size // 2)[ratios.size // 2])
    return image * _SCALE - reference * exposure


def _part_mask(residual: np.ndarray) -> np.ndarray:
    """uint8 0/1: where the 5x5 mean of |residual| is over PART_LEVEL, opened by 3x3.  The
    5x5 sums in float64 are exact (integers under 2**53), whatever order they are added in."""
    box = cv2.boxFilter(np.abs(residual).astype(np.float64), -1, (5, 5), normalize=False,
                        borderType=cv2.BORDER_CONSTANT)
    mask = (box > PART_LEVEL * 25 * _SCALE).astype(np.uint8)
    return cv2.morphologyEx(mask, cv2.MORPH_OPEN, _KERNEL3)


def _filled(mask: np.ndarray) -> np.ndarray:
    """The mask closed by 9x9 with what it encloses filled: the inside of a part of the
    plate's grey can match the fixture."""
    closed = cv2.morphologyEx(mask, cv2.MORPH_CLOSE, _KERNEL9)
    outside = np.pad(closed, 1)
    flood = np.zeros((outside.shape[0] + 2, outside.shape[1] + 2), np.uint8)
    cv2.floodFill(outside, flood, (0, 0), 1)
    return (closed | (1 - outside[1:-1, 1:-1])).astype(np.uint8)


def _centre(weight: np.ndarray) -> tuple[int, int]:
    """(y, x): the centroid of a non-negative integer image, in integer moments."""
    rows, columns = weight.sum(axis=1, dtype=np.int64), weight.sum(axis=0, dtype=np.int64)
    total = int(rows.sum())
    if not total:
        return weight.shape[0] // 2, weight.shape[1] // 2
    return (int(rows @ np.arange(len(rows), dtype=np.int64)) // total,
            int(columns @ np.arange(len(columns), dtype=np.int64)) // total)


def _window(image: np.ndarray, centre: tuple[int, int], size: int, border: int) -> np.ndarray:
    """The ``size`` x ``size`` window of ``image`` centred on ``centre``, beyond its edges
    ``border`` (cv2.BORDER_REPLICATE, or BORDER_CONSTANT: zeros)."""
    half = size // 2
    padded = cv2.copyMakeBorder(image, half, half, half, half, border, value=0)
    return np.ascontiguousarray(padded[centre[0] : centre[0] + size,
                                       centre[1] : centre[1] + size])


def _coefficients(image: np.ndarray) -> np.ndarray:
    """The 8x8 lowest DCT coefficients (int64, row by row) of an integer image's 32x32 block
    sums, in int64 throughout (|values| < 2**59)."""
    size = image.shape[0] // 32
    blocks = image[: 32 * size, : 32 * size].reshape(32, size, 32, size).sum(axis=(1, 3))
    blocks = blocks >> max(0, int(np.abs(blocks).max()).bit_length() - 24)
    return (_DCT_BASIS @ blocks @ _DCT_BASIS.T).ravel()


def _dct_hash(coefficients: np.ndarray) -> int:
    """64-bit DCT hash: each of the coefficients' bits "above their median"."""
    ordered = np.sort(coefficients)
    bits = 2 * coefficients > ordered[31] + ordered[32]
    return int(np.packbits(bits).view(">u8")[0])


def _signature(coefficients: np.ndarray) -> bytes:
    """The coefficients but the first (the window's mean), less their mean and scaled to
    -127..127 by the largest (int8 bytes, integer arithmetic): what ranks a hash's nearest
    (``search.ranked``), where the hash keeps only each coefficient's side of the median."""
    values = coefficients[1:] >> 16  # |values| < 2**43: their sum and 127 x them fit
    centred = values - values.sum() // len(values)
    largest = int(np.abs(centred).max())
    if not largest:  # a window without an edge
        return bytes(len(values))
    return ((127 * centred + largest // 2) // largest).astype(np.int8).tobytes()


def gradient(image: np.ndarray) -> np.ndarray:
    """|d/dx| + |d/dy| (int32) with integer 3x3 Sobel kernels, edges replicated: OpenCV's
    Sobel of a uint8 image into int16 is exact integer arithmetic."""
    if image.dtype != np.uint8:
        image = image.astype(np.uint8)
    border = cv2.BORDER_REPLICATE | cv2.BORDER_ISOLATED
    gx = cv2.Sobel(image, cv2.CV_16S, 1, 0, ksize=3, borderType=border)
    gy = cv2.Sobel(image, cv2.CV_16S, 0, 1, ksize=3, borderType=border)
    return np.abs(gx.astype(np.int32)) + np.abs(gy.astype(np.int32))


def part_hashes(grey: np.ndarray, median: np.ndarray) -> tuple[int, int, bytes]:
    """Two 64-bit hashes of the part in ``grey`` (uint8): the DCT hash of the image's gradient,
    clipped at EDGE_CLIP, in a window centred on the centroid of the image less its fixture's
    ``median``, then in one on the centre of the part's mask (WINDOWS); and the signature of
    both (SIGNATURE bytes, ``_signature``). Integer arithmetic from the pixels on, so every
    CPU gives the same bits (1.7 ms a frame; 2.9 ms in plain NumPy, the same bits)."""
    residual = _less_fixture(grey, median)
    centres = (_centre(np.abs(residual // _SCALE)), _centre(_filled(_part_mask(residual))))
    first, second = (_coefficients(np.minimum(gradient(_window(grey, centre, size, _EDGE)),
                                              EDGE_CLIP).astype(np.int64))
                     for centre, size in zip(centres, WINDOWS, strict=True))
    return _dct_hash(first), _dct_hash(second), _signature(first) + _signature(second)


def fixture_features(median: np.ndarray) -> np.ndarray:
    """Where a fixture's background has a feature (a tapped hole, a clamp's edge), uint8 0/1:
    its gradient over FIXTURE_EDGE, grown by 2 px."""
    return cv2.dilate((gradient(median) > FIXTURE_EDGE).astype(np.uint8), _KERNEL5)


def part_view(grey: np.ndarray, median: np.ndarray, whole: bool = False,
              features: np.ndarray | None = None) -> np.ndarray:
    """What the check compares: uint8 (4, VIEW, VIEW), the grey window around the part, the
    part's mask (0/1), where the image shows its fixture (0/1: the 3x3 mean of the image
    less its fixture within SHOW_LEVEL) and where the fixture has a feature
    (``fixture_features`` of ``median``, unless given: 0.5 ms of a view's 3).  ``whole``: a
    part the frame's border cuts has no mask (a tile's: the tiler cut it, and any part cut
    alike looks the same)."""
    residual = _less_fixture(grey, median)
    mask = _filled(_part_mask(residual))
    if whole and _cut(mask):
        mask[:] = 0
    centre = _centre(mask)
    near = cv2.boxFilter(np.abs(residual).astype(np.float64), -1, (3, 3), normalize=False,
                         borderType=cv2.BORDER_REPLICATE)
    shows = (near <= SHOW_LEVEL * 9 * _SCALE).astype(np.uint8)
    features = fixture_features(median) if features is None else features
    return np.stack([_window(grey, centre, VIEW, _EDGE), _window(mask, centre, VIEW, _ZERO),
                     _window(shows, centre, VIEW, _EDGE), _window(features, centre, VIEW, _EDGE)])


def _cut(mask: np.ndarray) -> bool:
    """Whether a part's mask reaches the frame's outer CUT px."""
    inner = mask[CUT:-CUT, CUT:-CUT]
    return int(inner.sum()) != int(mask.sum())


def _thumbnail(view: np.ndarray) -> np.ndarray:
    """The part's grey at a glance: 24 x 24, blurred, zero mean and unit norm."""
    part = cv2.GaussianBlur(view[0].astype(np.float32) * view[1], (0, 0), 2.0)
    small = cv2.resize(part, (24, 24), interpolation=cv2.INTER_AREA).ravel()
    small -= small.mean()
    norm = float(np.linalg.norm(small))
    return small / norm if norm else small


def _registration(grey_a: np.ndarray, mask_a: np.ndarray, grey_b: np.ndarray,
                  mask_b: np.ndarray) -> np.ndarray | None:
    """The similarity (2 x 3, float32) that takes the second view's part onto the first's
    (``cv2.warpAffine`` with WARP_INVERSE_MAP), or None where ECC fails or finds no re-shot's
    scale.

    ECC aligns the grey views themselves over the second part's mask grown by REGISTER_GROW
    px: a part near the plate's grey has a mask that a re-shot's light moves, and views cut
    out by their masks aligned those cuts rather than the parts (of fixture 0's 318 re-shots
    among the candidates, 284 scored under 0.16 so, 301 now)."""
    region = cv2.dilate(mask_b.astype(np.uint8), _GROW)
    # ECC at half size (a quarter of the pixels) and within the box of both parts grown: a
    # candidate pair's check costs 1.16 times the masked views' (over the whole view, 1.5
    # times in another run). A warp x_b = L x_a + t is L x_a' + t + L o - o in the box's
    # coordinates, o its corner
    x, y, width, height = cv2.boundingRect(region | cv2.dilate(mask_a.astype(np.uint8), _GROW))
    box = np.s_[y // 2 : (y + height + 1) // 2, x // 2 : (x + width + 1) // 2]
    small_a, small_b = (np.ascontiguousarray(cv2.resize(
        cv2.GaussianBlur(grey, (0, 0), 1.0), None, fx=0.5, fy=0.5,
        interpolation=cv2.INTER_AREA)[box]) for grey in (grey_a, grey_b))
    corner = np.array([x // 2, y // 2], np.float64)
    scale = float(np.sqrt(float(mask_b.sum()) / float(mask_a.sum())))
    about_centre = VIEW / 4 - scale * VIEW / 4  # scaled about the views' centre (half size)
    warp = np.hstack([np.eye(2) * scale, (about_centre + (scale - 1) * corner)[:, None]])
    try:
        _, warp = cv2.findTransformECC(small_a, small_b, warp.astype(np.float32),
                                       cv2.MOTION_AFFINE, _ECC_CRITERIA,
                                       np.ascontiguousarray(region[::2, ::2][box]), 3)
    except cv2.error:
        return None
    linear = warp[:, :2].astype(np.float64)
    shift = 2 * (warp[:, 2] - linear @ corner + corner)  # the view's coordinates, full size
    if not 0.7 < float(np.linalg.det(linear)) < 1.45:
        return None
    cos, sin = (linear[0, 0] + linear[1, 1]) / 2, (linear[1, 0] - linear[0, 1]) / 2
    if not RESHOT_SCALE[0] < cos * cos + sin * sin < RESHOT_SCALE[1]:
        return None
    similar = np.array([[cos, -sin], [sin, cos]])
    middle = np.array([VIEW / 2, VIEW / 2])
    shift = linear @ middle + shift - similar @ middle  # the part's centre stays put
    return np.hstack([similar, shift[:, None]]).astype(np.float32)


def _outline(*masks: np.ndarray) -> np.ndarray:
    """Where any of the masks' outlines is within OUTLINE px."""
    near = np.zeros(masks[0].shape, bool)
    for mask in masks:
        mask = mask.astype(np.uint8)
        near |= cv2.dilate(mask, _OUTLINE_KERNEL) != cv2.erode(mask, _OUTLINE_KERNEL)
    return near


class Checked(NamedTuple):
    """What ``check`` says of a pair: ``score``, the percent of the parts' pixels that differ
    (UNLIKE where it refuses the pair), and whether the parts are of ``one_surface`` (then
    they are one part, whatever the threshold: ``joined``)."""

    score: float
    one_surface: bool = False

    def joins(self, threshold: float = DEFAULT_THRESHOLD) -> bool:
        """Whether the pair joins a cluster: its score within ``threshold``, or one surface."""
        return self.one_surface or self.score <= threshold


CHECKS = np.dtype([("score", np.float64), ("one_surface", np.bool_)])  # arrays of Checked


def joined(checks: np.ndarray, threshold: float) -> np.ndarray:
    """Which pairs of an array of checks (CHECKS) join: a score within ``threshold``, or one
    surface."""
    return (checks["score"] <= threshold) | checks["one_surface"]


def check(first: np.ndarray, second: np.ndarray) -> Checked:
    """How unlike two part views are (``Checked``), in percent of the parts' pixels: ``second``
    registered onto ``first``, then the pixels of either part that differ by more than
    CHECK_LEVEL from the other's 3x3 neighbourhood after one gain, but where both show the
    fixture, where neither is its part's body (both off it the same way) and along either
    outline over a feature of the fixture, opened by 3x3. UNLIKE where the thumbnails correlate
    under LIKE_FLOOR, where the registration fails or is no re-shot's (its scale squared outside
    RESHOT_SCALE), where the registered part leaves the view, and where one spot of SPOT px
    differs; but a pair differing in up to SURFACE_DIFFER percent whose parts' fine grain
    correlates at SURFACE_MATCH or more (``_surface``) is of one surface."""
    grey_a, mask_a, shows_a, features_a = first.astype(np.float32)
    grey_b, mask_b, shows_b, features_b = second.astype(np.float32)
    area_a, area_b = float(mask_a.sum()), float(mask_b.sum())
    if not area_a or not area_b or not 0.7 < area_b / area_a < 1.45:
        return Checked(UNLIKE)  # a re-shot scales a part by 0.9 to 1/0.9: its area 0.81 to 1.23
    if float(_thumbnail(first) @ _thumbnail(second)) < LIKE_FLOOR:
        return Checked(UNLIKE)  # 0.6 ms a pair so refused; 3.8 ms one registered, compared
    warp = _registration(grey_a, mask_a, grey_b, mask_b)
    if warp is None:
        return Checked(UNLIKE)
    grey_a = cv2.GaussianBlur(grey_a, (0, 0), 1.0)
    moved = cv2.warpAffine(cv2.GaussianBlur(grey_b, (0, 0), 1.0), warp, (VIEW, VIEW),
                           flags=_INVERSE)
    moved_mask = cv2.warpAffine(mask_b, warp, (VIEW, VIEW), flags=_INVERSE) > 0.5
    moved_shows, moved_features = (cv2.warpAffine(channel, warp, (VIEW, VIEW), flags=_INVERSE,
                                                  borderMode=_EDGE) > 0.5
                                   for channel in (shows_b, features_b))
    if not moved_mask.any():
        return Checked(UNLIKE)
    union = (mask_a > 0) | moved_mask
    ours, theirs = grey_a[union], moved[union]
    moved *= float((ours * theirs).sum() / max(1e-6, float((theirs * theirs).sum())))
    high, low = cv2.dilate(moved, _KERNEL3), cv2.erode(moved, _KERNEL3)
    # a hole shows the fixture, which stays put while the part moves: what shows through it
    # is no difference (re-shots scoring under 0.5 of 841 candidates: 696 before, 754 after)
    differ = ((grey_a > high + CHECK_LEVEL) | (grey_a < low - CHECK_LEVEL)) & union \
        & ~((shows_a > 0) & moved_shows)
    # along an outline the pixel mixes part and fixture, and the fixture behind moved: over
    # a tapped hole or a clamp that is no difference (co-cluster recall 0.779 -> 0.798)
    differ &= ~(_outline(mask_a, moved_mask) & ((features_a > 0) | moved_features))
    # where neither pixel is its part's body, off it the same way, through a hole each shows
    # the plate at another place, which the fixture's background cannot say: under the part
    # it is the parts' ghost (0.804 / 0.950 -> 0.817 / 0.951, the threshold 0.5 -> 0.3). A
    # hole against a bright boss still differs; against a boss as dark, it does not
    off_a = grey_a - float(np.median(grey_a[mask_a > 0]))
    off_b = moved - float(np.median(moved[moved_mask]))
    differ &= ~(((off_a > BODY_LEVEL) & (off_b > BODY_LEVEL))
                | ((off_a < -BODY_LEVEL) & (off_b < -BODY_LEVEL)))
    differ = cv2.morphologyEx(differ.astype(np.uint8), cv2.MORPH_OPEN, _KERNEL3)
    score = 100.0 * float(differ.sum()) / float(union.sum())
    # the parts' own pixels: not where either shows the fixture (through a hole, the plate's
    # grain, the same in every shot of a pose). Where that is under half of what both cover,
    # the fixture's background did not hold (a part filling most of the frame sets the
    # exposure) and their surfaces say nothing: re-shots on the corpus hold 0.55 or more
    both = (mask_a > 0) & moved_mask
    own = both & (shows_a == 0) & ~moved_shows
    if score <= SURFACE_DIFFER and 2 * int(own.sum()) >= int(both.sum()) \
            and _surface(first[0], second[0], warp, own) >= SURFACE_MATCH:
        return Checked(score, True)  # light and what shows through a hole, not another part
    spots, _, stats, _ = cv2.connectedComponentsWithStats(differ, connectivity=8)
    if spots > 1 and int(stats[1:, cv2.CC_STAT_AREA].max()) >= SPOT:
        return Checked(UNLIKE)
    return Checked(score)


def _surface(first: np.ndarray, second: np.ndarray, warp: np.ndarray, own: np.ndarray
             ) -> float:
    """The correlation of two parts' fine grain (each grey view less its 1 px blur; the
    second registered by ``warp``) over the pixels 3 px inside ``own`` (where both views show
    their part) that are flat in both (the gradient of their 2 px blur under FLAT: an edge
    or a hole's rim is the part's shape, which other parts share); 0 over fewer than
    SURFACE_PIXELS."""
    greys = (first.astype(np.float32),
             cv2.warpAffine(second.astype(np.float32), warp, (VIEW, VIEW), flags=_INVERSE))
    flat = cv2.erode(own.astype(np.uint8), _KERNEL7) > 0
    for grey in greys:
        flat &= gradient(cv2.GaussianBlur(grey, (0, 0), 2.0)) < FLAT
    if int(flat.sum()) < SURFACE_PIXELS:
        return 0.0
    grain_a, grain_b = ((grey - cv2.GaussianBlur(grey, (0, 0), 1.0))[flat] for grey in greys)
    grain_a, grain_b = grain_a - grain_a.mean(), grain_b - grain_b.mean()
    size = float(np.sqrt(float(grain_a @ grain_a) * float(grain_b @ grain_b)))
    return float(grain_a @ grain_b) / size if size else 0.0

"""Knowing the data: ``inspection`` (classes x splits, duplicates, warnings), ``census``,
contact ``sheet``s, re-encoding ``quality``, and the seeded ``picks`` they share."""
